"""A training step captured in one CUDA graph (capture_step), replayed with
one host launch instead of one per kernel."""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch

from . import finite

class GraphedStep:
    """A step captured in a CUDA graph by capture_step()."""

    def __init__(self, graph: "torch.cuda.CUDAGraph", result: Any):
        self.graph = graph
        self.result = result

    def replay(self) -> Any:
        """Runs the step again on the data now in the tensors it was
        captured with and returns what the step returned (the same tensors,
        overwritten). Its finiteness flags are read as an eager step's are:
        by check_finite(), or without waiting at a later replay."""
        if finite.ENABLED:
            finite.poll_finite()
        self.graph.replay()
        finite.step_replayed()
        return self.result


def capture_step(step: Callable[[], Any], reset_grads: Iterable[torch.Tensor] = (),
                 warmup: int = 2) -> GraphedStep:
    """Captures a step that runs compiled modules on the GPU (for example
    ``lambda: block(h).backward(dy)``) in a CUDA graph, so that replaying it
    costs one host launch instead of one per kernel: small token counts are
    bound by the host otherwise.

    The step runs `warmup` times first on a side stream (that binds the
    kernels to this token count; a graph serves one shape). The gradients of
    `reset_grads` (the parameters, and inputs that require grad) are set to
    None before the capture, so that each replay writes them instead of
    adding to them. Replays read their inputs from the tensors the capture
    saw (copy new data into them) and overwrite outputs and gradients; keep
    the gradient tensors the capture made (``zero_grad(set_to_none=True)``
    after it would detach them from the graph).

    An optimizer that owns its gradient tensors (FP8AdamW's are views of its
    flat buffer, and it re-attaches any other tensor it finds) must keep
    them: pass no `reset_grads`, so the captured backward adds into them,
    and call ``optimizer.zero_grad(set_to_none=False)`` before each
    replay."""
    from ..optim import owns_grad

    if warmup < 1:
        raise ValueError(f"capture_step needs warmup >= 1 (the warm-up binds the "
                         f"kernels before the capture), got {warmup}")
    reset_grads = list(reset_grads)
    if any(owns_grad(t) for t in reset_grads):
        raise ValueError("capture_step: reset_grads holds parameters whose gradients an "
                         "FP8AdamW owns (views of its flat buffer; replays would write "
                         "tensors it no longer reads). Leave them out, so the captured "
                         "backward adds into them, and call "
                         "optimizer.zero_grad(set_to_none=False) before each replay")
    if not torch.cuda.is_available():
        raise RuntimeError("capture_step needs CUDA")
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError("capture_step is already capturing a step")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(side)
    finite.check_finite()
    for t in reset_grads:
        t.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = step()
    finite.capture_done()
    return GraphedStep(graph, result)


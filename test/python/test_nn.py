"""coat.nn.MLPBlock: the compiled block program under autograd, checked
against fp32 autograd of the same math, gradient by gradient.

FP8 tolerance: the relative L2 error of the block's branch output (y - h) and
of every gradient (dh - dy for the input, since the residual passes dy
through exactly) is at most 0.2. The forward passes through seven FP8
roundings (E4M3: per-tensor norm output, weights and SwiGLU product; 1x16
gate, up and SiLU), the backward through E5M2 gradients (two mantissa bits);
measured worst cases are 0.09 (output) and 0.12 (gradients) over random
seeds and token counts. A wiring error (gate and up swapped, a scale applied
twice) is far outside it: the test checks that too.

On CPU tensors the block runs its CPU twins (compiled here with coat-opt);
on CUDA tensors the compiled kernels of scripts/demo.sh's block
(build/demo/coat_mlp_h1024_f2816, found through $COAT_KERNELS).
"""

import os

import pytest

from conftest import captured_and_eager_steps, torch_or_skip

torch = torch_or_skip()

import coat.nn as cnn  # noqa: E402
from coat import _paths, artifacts, programs  # noqa: E402
from coat.executor import ProgramError, QTensor  # noqa: E402

TOL = 0.2
TINY = (64, 160)      # compiled for the CPU tests
DEMO = (1024, 2816)   # compiled by scripts/demo.sh (coat.programs config)


def cuda_block_or_skip():
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available")
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs a Hopper GPU (sm_90a)")
    try:
        artifacts.program(programs.MLPBlockConfig(*DEMO))
    except RuntimeError as e:
        pytest.skip(str(e))
    return DEMO


def reference(block, h, swap_gate_up=False):
    """fp32 autograd of the block's math from the same bf16 values."""
    hf = h.detach().float().requires_grad_()
    ws = [p.detach().float().requires_grad_() for p in (
        block.norm.weight, block.gate_proj.weight, block.up_proj.weight,
        block.down_proj.weight)]
    wn, wg, wu, wd = ws
    if swap_gate_up:
        wg, wu = wu, wg
    x = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + block.config.eps) * wn
    y = hf + (torch.nn.functional.silu(x @ wg.t()) * (x @ wu.t())) @ wd.t()
    return hf, ws, y


def program_node(fn):
    """The autograd node of the compiled program behind `fn`."""
    todo = [fn]
    while todo:
        f = todo.pop()
        if f is not None and hasattr(f, "kept"):
            return f
        todo += [g for g, _ in getattr(f, "next_functions", ())]
    raise AssertionError("no program node in the graph")


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def make_block(hidden, ffn, seed, device):
    torch.manual_seed(seed)
    block = cnn.MLPBlock(hidden, ffn, device=device)
    with torch.no_grad():
        block.norm.weight.add_(0.2 * torch.randn(hidden, device=device))
    return block


def check_against_reference(block, h, dy):
    y = block(h)
    y.backward(dy)
    hf, ws, yr = reference(block, h)
    yr.backward(dy.float())
    errs = {"output": rel(y.float() - h.float(), (yr - hf).detach()),
            "dh": rel(h.grad.float() - dy.float(), hf.grad - dy.float())}
    for name, p, w in zip(("norm", "gate", "up", "down"),
                          (block.norm.weight, block.gate_proj.weight,
                           block.up_proj.weight, block.down_proj.weight), ws):
        assert p.grad is not None and p.grad.dtype == p.dtype, name
        errs["d" + name] = rel(p.grad, w.grad)
    bad = {k: round(v, 4) for k, v in errs.items() if not v <= TOL}
    assert not bad, f"relative errors above {TOL}: {bad} (all: {errs})"
    # The tolerance tells wirings apart: the same check against a block with
    # gate and up swapped fails.
    _, _, ys = reference(block, h, swap_gate_up=True)
    assert rel(y.float() - h.float(), (ys - hf).detach()) > 2 * TOL


@pytest.mark.parametrize("seed,tokens", [(0, 16), (1, 33), (2, 100), (3, 1)])
def test_cpu_gradients_match_fp32_autograd(cpu_cache, seed, tokens):
    block = make_block(*TINY, seed, "cpu")
    h = torch.randn(tokens, TINY[0]).bfloat16().requires_grad_()
    check_against_reference(block, h, torch.randn(tokens, TINY[0]).bfloat16())


@pytest.mark.parametrize("tokens", [16, 300, 2048])
def test_cuda_gradients_match_fp32_autograd(tokens):
    hidden, ffn = cuda_block_or_skip()
    block = make_block(hidden, ffn, 7, "cuda")
    h = torch.randn(tokens, hidden, device="cuda").bfloat16().requires_grad_()
    check_against_reference(block, h, torch.randn(tokens, hidden, device="cuda").bfloat16())


@pytest.mark.parametrize("tokens", [16, 300])
def test_cuda_captured_step_replays_the_eager_step(tokens):
    """coat.nn.capture_step: a replay on new data gives what an eager step on
    that data gives (output, input and weight gradients), a second replay
    the same (gradients are written, not added), and the replay's
    finiteness flags are read by the step check."""
    hidden, ffn = cuda_block_or_skip()
    block = make_block(hidden, ffn, 7, "cuda")
    h = torch.randn(tokens, hidden, device="cuda").bfloat16().requires_grad_()
    dy = torch.randn(tokens, hidden, device="cuda").bfloat16()
    names, replays, eager, graphed = captured_and_eager_steps(block, block, h, dy, replays=2)
    for a, b in zip(*replays):
        assert torch.equal(a, b)
    for name, a, b in zip(names, replays[0], eager):
        assert rel(a, b) <= 1e-3, name
    cnn.check_finite()
    with torch.no_grad():
        h[1, 2] = float("inf")
    graphed.replay()
    with pytest.raises(cnn.NonFiniteError, match="MLPBlock"):
        cnn.check_finite()


def test_capture_step_rejects_what_it_cannot_capture():
    with pytest.raises(ValueError, match="warmup >= 1"):
        cnn.capture_step(lambda: None, warmup=0)
    # Gradients FP8AdamW owns: resetting them would leave the optimizer
    # stepping on stale gradients (the replays write other tensors).
    from coat.optim import FP8AdamW

    w = torch.nn.Parameter(torch.zeros(4, 16))
    FP8AdamW([w], kernels=[])
    with pytest.raises(ValueError, match="FP8AdamW owns"):
        cnn.capture_step(lambda: None, reset_grads=[w])
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="needs CUDA"):
            cnn.capture_step(lambda: None)


def test_one_compile_serves_every_token_count(cpu_cache):
    """Batch x sequence is the program's dynamic extent: leading dimensions
    of any size run on the same compiled program."""
    block = make_block(*TINY, 4, "cpu")
    prog = block.program
    for shape in [(2, 8), (3, 5), (40,)]:
        h = torch.randn(*shape, TINY[0]).bfloat16()
        assert block(h).shape == h.shape
    assert block.program is prog


def test_saved_activations_are_fp8(cpu_cache):
    """What the forward keeps for the backward is what the compiler's plan
    says, and the token-sized activations among it are FP8 (1x16 input of
    the norm and the SiLU/product, per-tensor transposes), not bf16."""
    block = make_block(*TINY, 5, "cpu")
    prog = block.program
    inputs = set(prog.input_ids())
    activations = [v for v in prog.saved if v not in inputs]
    assert activations, "the plan saves nothing"
    for v in activations:
        t = prog.values[v]
        if -1 in t.shape and len(t.shape) == 2:
            assert t.kind == "qtensor" and t.dtype in ("e4m3", "e5m2"), (v, t)
    # The forward holds exactly those values for the backward.
    h = torch.randn(32, TINY[0]).bfloat16().requires_grad_()
    y = block(h)
    kept = program_node(y.grad_fn).kept
    assert set(kept) == set(prog.saved)
    assert all(isinstance(kept[v], QTensor) for v in activations
               if prog.values[v].kind == "qtensor")


def test_silu_is_folded_into_the_products(cpu_cache):
    """The backward reads the gate and up, which the forward keeps anyway;
    silu(gate) is derived in registers by both products (coat-fuse-silu,
    after coat-recompute-activations derived it again for the backward), so
    no SiLU kernel runs, nothing of it is kept, and the backward's product
    writes the gate's gradient itself (no silu_grad)."""
    prog = make_block(*TINY, 9, "cpu").program
    assert not [s for s in prog.steps if "silu" in s.spec]
    forward = next(s for s in prog.steps if s.spec.endswith("_swiglu"))
    backward = next(s for s in prog.steps if s.spec.endswith("_swiglu_grad"))
    assert (forward.phase, backward.phase) == ("forward", "backward")
    assert backward.operands[:2] == forward.operands
    assert all(v in prog.saved for v in forward.operands)


def test_recomputation_changes_no_bit(cpu_cache, tmp_path, monkeypatch):
    """The block compiled with coat-recompute-activations keeps less (the
    norm's output and the SwiGLU product are derived again from the 1x16
    input, gate and up) and computes the same bits: output and every
    gradient equal to the block compiled without the pass. With every
    weight copy derived again too (weight-copies-min-bytes=0; the tiny
    block's copies are under the default bound, so it keeps them), the
    transposed FP8 weights are not kept either, and the bits are the same.
    Without coat-fuse-silu the SiLU and its gradient run as kernels of
    their own (two more launches each way) and the bits are the same too."""
    from coat import toolchain

    cfg = programs.MLPBlockConfig(hidden=TINY[0], ffn=TINY[1], eps=1e-5)
    dirs = {}
    recompute = "-coat-recompute-activations"
    assert recompute in toolchain.PROGRAM_PASSES
    for name, passes in (("with", toolchain.PROGRAM_PASSES),
                         ("without", tuple(p for p in toolchain.PROGRAM_PASSES
                                           if p != recompute)),
                         ("weights", tuple(p + "=weight-copies-min-bytes=0" if p == recompute
                                           else p for p in toolchain.PROGRAM_PASSES)),
                         ("unfused", tuple(p for p in toolchain.PROGRAM_PASSES
                                           if p != "-coat-fuse-silu"))):
        monkeypatch.setattr(toolchain, "PROGRAM_PASSES", passes)
        d = tmp_path / name
        d.mkdir()
        src = d / f"{cfg.name}.mlir"
        src.write_text(cfg.text())
        toolchain.Toolchain().compile_program(src, d)
        dirs[name] = str(d)
    results = {}
    for name, d in dirs.items():
        torch.manual_seed(3)
        block = cnn.MLPBlock(*TINY, kernels=d)
        with torch.no_grad():
            block.norm.weight.add_(0.2 * torch.randn(TINY[0]))
        h = torch.randn(40, TINY[0]).bfloat16().requires_grad_()
        y = block(h)
        y.backward(torch.randn(40, TINY[0]).bfloat16())
        results[name] = (block.program, [y, h.grad] + [p.grad for p in block.parameters()])
    (with_prog, got), (without_prog, want) = results["with"], results["without"]
    weights_prog, got_weights = results["weights"]
    assert len(with_prog.saved) < len(without_prog.saved)

    def kept(prog):
        """(kind, shape) of each saved value but the weights (parameters
        are there in the backward anyway)."""
        weights = {vid for vid, kind, _ in prog.inputs if kind == "weight"}
        return sorted((prog.values[v].kind, prog.values[v].shape)
                      for v in prog.saved if v not in weights)

    # The weights variant keeps the same activations (dynamic token extent)
    # and, instead of the FP8 weight copies (static shapes), only their
    # per-tensor scales (rank 0).
    def activations(k):
        return [e for e in k if -1 in e[1]]

    assert activations(kept(weights_prog)) == activations(kept(with_prog))
    assert any(e[1] and -1 not in e[1] for e in kept(with_prog))
    assert all(e == ("tensor", ()) for e in kept(weights_prog) if -1 not in e[1])
    backward_steps = {n: sum(s.phase == "backward" for s in prog.steps)
                      for n, prog in (("with", with_prog), ("without", without_prog),
                                      ("weights", weights_prog))}
    assert backward_steps["weights"] > backward_steps["with"] > backward_steps["without"]
    unfused_prog, got_unfused = results["unfused"]
    ops = {n: [s.spec.rsplit("_k", 1)[1].split("_", 1)[1] for s in prog.steps]
           for n, prog in (("with", with_prog), ("unfused", unfused_prog))}
    assert ops["unfused"].count("silu") == 2 and ops["unfused"].count("silu_grad") == 1
    assert not any("silu" in o for o in ops["with"])
    assert len(ops["unfused"]) == len(ops["with"]) + 3
    for a, b, c, d in zip(got, want, got_weights, got_unfused):
        assert torch.equal(a, b) and torch.equal(c, b) and torch.equal(d, b)


def _weights_variant(tmp_path, monkeypatch):
    """The tiny block's program compiled with every weight copy derived
    again in the backward (weight-copies-min-bytes=0), in its own folder."""
    from coat import toolchain

    recompute = "-coat-recompute-activations"
    monkeypatch.setattr(toolchain, "PROGRAM_PASSES", tuple(
        p + "=weight-copies-min-bytes=0" if p == recompute else p
        for p in toolchain.PROGRAM_PASSES))
    cfg = programs.MLPBlockConfig(hidden=TINY[0], ffn=TINY[1], eps=1e-5)
    src = tmp_path / f"{cfg.name}.mlir"
    src.write_text(cfg.text())
    toolchain.Toolchain().compile_program(src, tmp_path)
    return str(tmp_path)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_weight_read_in_the_backward_is_not_copied_until_then(cpu_cache, tmp_path,
                                                                monkeypatch, dtype):
    """A program that derives a weight's FP8 copy again in the backward
    reads the weight there. With f32 master weights the forward's bf16 copy
    of each is not kept for that (two bytes a parameter until the
    backward): the call keeps how to make it and makes it again. bf16
    parameters are passed as they are and kept by reference. The gradients
    are those of the copy kept."""
    kernels = _weights_variant(tmp_path, monkeypatch)
    torch.manual_seed(5)
    block = cnn.MLPBlock(*TINY, kernels=kernels, dtype=dtype)
    h = torch.randn(40, TINY[0]).bfloat16().requires_grad_()
    dy = torch.randn(40, TINY[0]).bfloat16()
    y = block(h)
    kept = program_node(y.grad_fn).kept
    params = list(block.parameters())
    weights = [x for x in kept.values() if isinstance(x, torch.Tensor)
               and x.dim() and -1 not in tuple(x.shape) and tuple(x.shape) in
               {tuple(p.shape) for p in params}]
    derived = [x for x in kept.values() if not isinstance(x, torch.Tensor)
               and hasattr(x, "again")]
    if dtype == torch.float32:
        assert len(derived) == len(params) and not weights
    else:
        assert not derived and all(any(w is p for p in params) for w in weights)
        assert len(weights) == len(params)
    y.backward(dy)
    got = [h.grad] + [p.grad for p in params]

    # The same call with each copy made up front and kept: the same bits.
    h2 = h.detach().clone().requires_grad_()
    ws = [p.detach().to(torch.bfloat16).contiguous().requires_grad_() for p in params]
    (y2,) = block.run_program(0, "reference", h2, *ws)
    assert not any(hasattr(x, "again") for x in program_node(y2.grad_fn).kept.values())
    y2.backward(dy)
    want = [h2.grad] + [w.grad for w in ws]
    assert torch.equal(y, y2)
    for a, b in zip(got, want):
        assert torch.equal(a.to(torch.bfloat16), b)


def test_a_weight_changed_before_the_backward_is_an_error(cpu_cache, tmp_path, monkeypatch):
    """The backward would derive another copy from a weight changed in
    place after the forward: refused, naming the block, not a silently
    different gradient."""
    block = cnn.MLPBlock(*TINY, kernels=_weights_variant(tmp_path, monkeypatch))
    y = block(torch.randn(40, TINY[0]).bfloat16())
    with torch.no_grad():
        block.up_proj.weight.mul_(2)
    with pytest.raises(RuntimeError, match="modified in place between the forward"):
        y.backward(torch.randn(40, TINY[0]).bfloat16())


def test_a_transposed_weight_is_derived_and_not_kept():
    """program_weight(transposed=True): [in, out] parameters (transformers'
    Conv1D) give the [out, in] bf16 matrix a program takes, concatenated
    along out; the copy records how to make it again, refuses a parameter
    changed in place, and its gradient lands in each parameter in the
    parameter's own [in, out] shape."""
    from coat.nn._autograd import program_weight

    torch.manual_seed(0)
    a = torch.randn(8, 24, requires_grad=True)
    b = torch.randn(8, 16, requires_grad=True)
    w = program_weight(a, b, transposed=True)
    assert w.shape == (40, 8) and w.dtype == torch.bfloat16 and w.is_contiguous()
    assert torch.equal(w, torch.cat([a, b], dim=1).t().bfloat16())
    again = w._coat_derivation.again("w")
    assert torch.equal(again, w) and again.is_contiguous() and again.grad_fn is None
    g = torch.randn(40, 8).bfloat16()
    w.backward(g)
    assert a.grad.shape == a.shape and b.grad.shape == b.shape
    assert torch.equal(a.grad, g[:24].t().float()) and torch.equal(b.grad, g[24:].t().float())
    # A bf16 parameter is copied too (its transpose is not the parameter).
    c = torch.randn(8, 16).bfloat16()
    assert torch.equal(program_weight(c, transposed=True), c.t())
    with torch.no_grad():
        a.mul_(2)
    with pytest.raises(RuntimeError, match="modified in place between the forward"):
        w._coat_derivation.again("w")
    with pytest.raises(ValueError, match=r"takes \[in, out\] matrices"):
        program_weight(torch.zeros(8), transposed=True)


def test_transposed_weights_run_the_program_like_their_copies(cpu_cache, tmp_path,
                                                               monkeypatch):
    """The block's program with its projections given as [in, out]
    parameters (Conv1D's layout): the call keeps how to make each
    transposed copy, not the copy, and computes the same bits as with the
    [out, in] parameters; each [in, out] parameter's gradient is the
    transpose of the [out, in] one's."""
    from coat.nn._autograd import program_weight

    kernels = _weights_variant(tmp_path, monkeypatch)
    torch.manual_seed(6)
    block = cnn.MLPBlock(*TINY, kernels=kernels, dtype=torch.float32)
    h = torch.randn(40, TINY[0]).bfloat16()
    dy = torch.randn(40, TINY[0]).bfloat16()
    norm, *projections = list(block.parameters())
    y = block(h)
    y.backward(dy)
    conv = [p.detach().t().contiguous().requires_grad_() for p in projections]
    ws = [program_weight(p, transposed=True) for p in conv]
    (y2,) = block.run_program(0, "conv1d", h, program_weight(norm), *ws)
    kept = program_node(y2.grad_fn).kept
    derived = [x for x in kept.values() if hasattr(x, "again")]
    assert sum(getattr(x, "transposed", False) for x in derived) == len(conv)
    assert not any(isinstance(x, torch.Tensor) and any(x is w for w in ws)
                   for x in kept.values())
    y2.backward(dy)
    assert torch.equal(y, y2)
    for p, c in zip(projections, conv):
        assert c.grad.shape == c.shape and torch.equal(c.grad, p.grad.t())


def test_runs_hold_a_value_only_until_its_last_reader(cpu_cache, monkeypatch):
    """Under autograd the executor drops each value from the run's
    environment after the last step that reads it (drop_dead): after the
    forward only the outputs and the saved values are left, after the
    backward only the outputs, so the backward frees the saved values and
    its own temporaries as it goes. Without it every value stays."""
    block = make_block(*TINY, 10, "cpu")
    prog = block.program
    left, run = {}, prog.run

    def recording_run(env, phase=None, tokens=None, **options):
        out = run(env, phase, tokens, **options)
        left[phase] = set(out)
        return out

    monkeypatch.setattr(prog, "run", recording_run)
    h = torch.randn(24, TINY[0]).bfloat16().requires_grad_()
    block(h).backward(torch.randn(24, TINY[0]).bfloat16())
    outputs = {v for v, _, _ in prog.outputs}
    computed = {r for s in prog.steps for r in s.results}
    assert left["forward"] <= outputs | set(prog.saved)
    assert left["backward"] <= outputs
    assert computed - left["forward"] - left["backward"], "nothing was dropped"
    assert h.grad is not None and torch.isfinite(h.grad.float()).all()
    # A plain run keeps everything (the block's input, then its weights).
    ids = [v for v in prog.input_ids() if v not in prog.input_ids("gradient")]
    tensors = [h.detach()] + [p.detach().bfloat16().contiguous() for p in
                              (block.norm.weight, block.gate_proj.weight,
                               block.up_proj.weight, block.down_proj.weight)]
    env = run(dict(zip(ids, tensors)), "forward")
    assert {r for s in prog.steps if s.phase == "forward" for r in s.results} <= set(env)


def test_a_run_zeroes_its_workspaces_with_one_buffer(cpu_cache, monkeypatch):
    """The workspaces a run's kernels need zeroed are disjoint, aligned
    slices of one buffer zeroed once a run, not one allocation each; the
    block's numbers are those of a workspace per call."""
    from coat import executor

    block = make_block(*TINY, 12, "cpu")
    prog = block.program
    h = torch.randn(40, TINY[0]).bfloat16().requires_grad_()
    dy = torch.randn(40, TINY[0]).bfloat16()

    def step():
        x = h.detach().clone().requires_grad_()
        y = block(x)
        y.backward(dy)
        out = [y, x.grad] + [p.grad for p in block.parameters()]
        block.zero_grad()
        return out

    buffers, workspaces, zeros = [], [], executor._zeros
    real_bytes, real_step = executor._zero_bytes, prog._run_step

    def counting_bytes(n, device):
        buffers.append(real_bytes(n, device))
        return buffers[-1]

    def recording_step(index, st, env, tokens, streams, flags=None, into=None, scratch=None):
        if scratch:
            workspaces.append((st.phase, scratch))
        return real_step(index, st, env, tokens, streams, flags, into, scratch)

    monkeypatch.setattr(executor, "_zero_bytes", counting_bytes)
    monkeypatch.setattr(executor, "_zeros", lambda *a: pytest.fail("a workspace of its own"))
    monkeypatch.setattr(prog, "_run_step", recording_step)
    got = step()
    phases = {phase for phase, _ in workspaces}
    assert workspaces and len(buffers) == len(phases)  # one buffer a run that has any
    for buf in buffers:
        lo, hi = buf.data_ptr(), buf.data_ptr() + buf.numel()
        mine = [w for _, ws in workspaces for w in ws if lo <= w.data_ptr() < hi]
        assert mine
        spans = sorted((w.data_ptr(), w.data_ptr() + w.numel() * w.element_size())
                       for w in mine)
        assert all(a % 64 == 0 for a, _ in spans)
        assert all(e <= b for (_, e), (b, _) in zip(spans, spans[1:]))  # disjoint
    monkeypatch.setattr(executor, "_zeros", zeros)
    monkeypatch.setattr(executor, "_zero_bytes", real_bytes)
    monkeypatch.setattr(prog, "_run_step", lambda index, st, env, tokens, streams, flags=None,
                        into=None, scratch=None: real_step(index, st, env, tokens, streams,
                                                           flags, into, None))
    for a, b in zip(got, step()):
        assert torch.equal(a, b)


def test_every_backward_operand_is_saved_or_computed_in_the_backward(cpu_cache):
    prog = make_block(*TINY, 6, "cpu").program
    available = set(prog.saved) | set(prog.input_ids("gradient"))
    for step in prog.steps:
        if step.phase == "backward":
            missing = [v for v in step.operands if v not in available]
            assert not missing, f"{step.spec} reads {missing}, neither saved nor computed"
            available |= set(step.results)
        else:
            assert not set(step.operands) & set(prog.input_ids("gradient")), step.spec


def test_bad_inputs_name_the_module(cpu_cache):
    block = make_block(*TINY, 8, "cpu")
    with pytest.raises(ValueError, match="MLPBlock: input has 32 features"):
        block(torch.randn(4, 32).bfloat16())
    with pytest.raises(ValueError, match="MLPBlock: input dtype torch.float16"):
        block(torch.randn(4, TINY[0]).half())
    with pytest.raises(ValueError, match="MLPBlock"):
        cnn.MLPBlock(TINY[0], 100)  # not a multiple of the group size


def test_non_finite_output_is_reported_at_the_step(cpu_cache):
    block = make_block(*TINY, 9, "cpu")
    h = torch.randn(16, TINY[0]).bfloat16()
    h[3, 5] = float("inf")
    with pytest.raises(cnn.NonFiniteError, match="MLPBlock forward output"):
        block(h)


def test_kernels_flag_what_the_program_returns(cpu_cache, monkeypatch):
    """The forward output and every gradient (GEMM, pointwise and norm
    epilogues) are flagged by the kernels that write them (coat.finite_flag):
    no torch reduction checks them, and a NaN or an infinity they store is
    reported by the flag."""
    from coat.nn import _autograd

    block = make_block(*TINY, 12, "cpu")
    prog = block.program
    flagged = {prog.outputs[i][0] for i in prog.flagged}
    returned = {prog.outputs[i][0] for i in _autograd.returned_outputs(prog)}
    assert returned <= flagged
    weights = [v for v, role, _ in prog.inputs if role == "weight"]
    grads = {g: v for v, phase, g in prog.outputs if phase == "backward" and g is not None}
    position = {v: i for i, (v, _, _) in enumerate(prog.inputs)}
    # W_gate, W_up, W_down come out of wgrad GEMMs.
    assert sum(grads[position[w]] in flagged for w in weights) >= 3
    checked = []
    monkeypatch.setattr(_autograd, "_check_finite", lambda x, what, phase: checked.append(what))
    h = torch.randn(16, TINY[0]).bfloat16().requires_grad_()
    block(h).backward(torch.randn(16, TINY[0]).bfloat16())
    assert checked == [], checked  # every returned value has its kernel's flag
    with torch.no_grad():
        h[3, 5] = float("nan")
    with pytest.raises(cnn.NonFiniteError, match="MLPBlock forward output"):
        block(h)


def test_non_finite_gradient_is_reported_by_its_kernel(cpu_cache):
    block = make_block(*TINY, 13, "cpu")
    h = torch.randn(16, TINY[0]).bfloat16().requires_grad_()
    dy = torch.randn(16, TINY[0]).bfloat16()
    dy[2, 7] = float("inf")
    y = block(h)
    with pytest.raises(cnn.NonFiniteError, match="MLPBlock gradient of input"):
        y.backward(dy)


def test_cuda_non_finite_gradient_is_reported_by_the_step_check():
    hidden, ffn = cuda_block_or_skip()
    block = make_block(hidden, ffn, 14, "cuda")
    cnn.check_finite()
    h = torch.randn(64, hidden, device="cuda").bfloat16().requires_grad_()
    dy = torch.randn(64, hidden, device="cuda").bfloat16()
    dy[7, 9] = float("nan")
    block(h).backward(dy)
    with pytest.raises(cnn.NonFiniteError, match="MLPBlock gradient of input"):
        cnn.check_finite()
    cnn.check_finite()  # the flags were consumed
    block(h).backward(torch.randn_like(dy))
    cnn.check_finite()  # a finite step leaves them clear


class _StandInEvent:
    """torch.cuda.Event for the flag buffer of a CPU test: the "GPU" has
    finished the copy when ``done`` says so; waiting finishes it."""

    done = True

    def record(self):
        pass

    def query(self):
        return _StandInEvent.done

    def synchronize(self):
        _StandInEvent.done = True


def test_step_flags_poll_reads_only_finished_copies(monkeypatch):
    """The poll's bookkeeping (the GPU test below runs it on a GPU): a copy
    not yet finished is left alone and the words keep what is flagged
    meanwhile; a finished one is read, reported once and replaced; check()
    waits for the pending copy and reads the words as well."""
    from coat.nn import finite

    monkeypatch.setattr(finite.torch.cuda, "Event", _StandInEvent)
    flags = finite._StepFlags(torch.device("cpu"))
    a = flags.words("site a", ["a"])
    b = flags.words("site b", ["b"])
    flags.poll()  # nothing flagged
    a[0] = 1
    _StandInEvent.done = False
    flags.poll()  # the last copy is not finished: nothing is read or copied
    assert int(a[0]) == 1
    _StandInEvent.done = True
    flags.poll()  # reads the clean copy, copies (and clears) a's flag
    assert int(a[0]) == 0
    b[0] = 1
    with pytest.raises(cnn.NonFiniteError, match="^a: "):
        flags.poll()  # a's copy is read; b's flag is copied behind it
    with pytest.raises(cnn.NonFiniteError, match="^b: "):
        flags.poll()
    flags.poll()
    a[0] = 1
    _StandInEvent.done = False
    with pytest.raises(cnn.NonFiniteError, match="^a: "):
        flags.check()  # waits for the pending copy, then reads the words
    assert int(a[0]) == 0 and flags.pending is None
    flags.check()


def test_cuda_step_flags_are_read_without_waiting():
    """A step's first forward polls the flags: it copies them behind the
    queued work and reads the copy only once the GPU has made it, so a busy
    GPU delays the report instead of stalling the host; check_finite() waits
    and reads everything; a later poll reads the finished copy."""
    hidden, ffn = cuda_block_or_skip()
    block = make_block(hidden, ffn, 15, "cuda")
    cnn.check_finite()
    h = torch.randn(32, hidden, device="cuda").bfloat16()
    h[3, 5] = float("nan")
    block(h)
    torch.cuda._sleep(200_000_000)  # keeps the GPU busy for about 0.1 s
    cnn.poll_finite()  # starts the copy behind the sleep
    cnn.poll_finite()  # the copy is not made yet: no wait, no report
    with pytest.raises(cnn.NonFiniteError, match="MLPBlock forward output"):
        cnn.check_finite()
    cnn.check_finite()  # consumed
    block(h)
    cnn.poll_finite()
    torch.cuda.synchronize()
    with pytest.raises(cnn.NonFiniteError, match="MLPBlock forward output"):
        cnn.poll_finite()
    cnn.poll_finite()
    torch.cuda.synchronize()
    cnn.poll_finite()  # a finite interval reports nothing


def test_missing_kernels_name_the_command(monkeypatch, tmp_path):
    monkeypatch.setenv("COAT_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setenv("COAT_KERNELS", str(tmp_path))
    monkeypatch.setattr(_paths, "find_coat_opt", lambda: None)
    monkeypatch.setattr(_paths, "build_dirs", lambda: [])
    with pytest.raises(RuntimeError, match="scripts/compile_model.py"):
        artifacts.program(programs.MLPBlockConfig(48, 96))


def test_plan_without_bindings_is_rejected(cpu_cache, tmp_path):
    """A manifest whose kernels carry no bindings (an older coat-opt) cannot
    run a program: a clear error, not a wrong launch."""
    import json
    import shutil

    prog = make_block(*TINY, 10, "cpu").program
    src = prog.module.directory
    for f in os.listdir(src):
        shutil.copy(os.path.join(src, f), tmp_path / f)
    doc = json.loads((tmp_path / "manifest.json").read_text())
    for k in doc["kernels"]:
        for a in k["args"]:
            a.pop("bind", None)
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    from coat.executor import load_programs

    with pytest.raises(ProgramError, match="has no binding"):
        load_programs(str(tmp_path))


def test_cuda_non_finite_output_is_reported_by_the_step_check():
    """On the GPU the flags are read once a step: check_finite() (or the next
    step's first forward) raises, naming the module."""
    hidden, ffn = cuda_block_or_skip()
    block = make_block(hidden, ffn, 11, "cuda")
    cnn.check_finite()  # nothing pending from earlier tests
    h = torch.randn(32, hidden, device="cuda").bfloat16()
    h[3, 5] = float("inf")
    block(h)
    with pytest.raises(cnn.NonFiniteError, match="MLPBlock forward output"):
        cnn.check_finite()
    cnn.check_finite()  # the flags were consumed

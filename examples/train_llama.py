#!/usr/bin/env python3
"""Trains a Llama-style decoder (coat.llama: RMSNorm, RoPE, grouped-query
attention, SwiGLU) on byte-level tokens of the Python standard library's
sources, one of three ways:

  bf16     torch autocast (bf16) + torch.optim.AdamW(fused=True)
  coat     coat.convert(model) + coat.optim.FP8AdamW: every decoder layer runs
           the compiled COAT programs (FP8 GEMMs, 1x16 FP8 activations through
           the norms, SiLU and the product, FP8 saved activations), FP8
           optimizer states with dynamic range expansion
  torchao  torchao's float8 training (dynamic per-tensor scaling) on every
           Linear but the LM head, torch.compile'd, fused AdamW

  python examples/train_llama.py --mode coat --config 100m --steps 1000
  python examples/train_llama.py --mode coat --config 100m --steps 1000 --graph
  python examples/train_llama.py --mode bf16 --compile --config 100m --steps 60 \
      --eval-every 0 --profile 10 --log run.json
  python examples/train_llama.py --mode coat --config tiny --steps 2 --device cpu

Every mode clips the global gradient norm to CLIP_NORM before the step. In
coat mode FP8AdamW.clip_grad_norm_ computes the norm and its step's kernel
multiplies each gradient by the clipping factor as it loads it (torch's
clip_grad_norm_ would rewrite every gradient first).

--graph (bf16 and coat, on CUDA) replays each step's forward and backward
from one CUDA graph (coat.nn.capture_step) instead of launching every
kernel from Python. The backward adds into the gradients the optimizer
owns (zeroed in place before each replay); the clipping and the optimizer
step stay eager, so the learning-rate schedule applies as before.

--step-in-backward (coat) steps each FP8AdamW bucket inside the backward as
soon as its gradients are complete and frees them (coat.optim's
step_in_backward): gradients of the whole model never exist at once. Global
gradient clipping needs every gradient before the first update, so this
mode clips each bucket's gradient to the same norm instead (FP8AdamW's
bucket_max_norm; the record says `clip`). --bucket-mb sets FP8AdamW's bucket
size (MiB of gradient, `none`: one bucket per parameter group and dtype);
--persistent-grads keeps FP8AdamW's gradient buffers for the whole run, as
before they became lazy (one bucket per group and dtype).

--param-dtype bf16 keeps the parameters in bf16 (no f32 master weights; the
optimizers update bf16 parameters, FP8AdamW rounding them to nearest), the
setting of the 7B-shape memory comparison; bf16-sr the same with the
parameters rounded stochastically (FP8AdamW's stochastic_params; torchao and
BF16 with --torchao-optim adamw8bit, its bf16_stochastic_round; torch's
fused AdamW has no such rounding, so those modes refuse it without):

  python examples/train_llama.py --mode coat --config 7b --param-dtype bf16 \
      --batch 4 --seq 2048 --steps 8 --eval-every 0 --warmup-timing 3 \
      --log-every 1 --step-in-backward

--recompute-attention-inputs (coat) has each converted layer's attention
input program make q, k and v again in the backward instead of attention's
autograd keeping them (coat.nn.DecoderLayer's recompute_attention_inputs;
not applied under --compile). Its kernels: scripts/compile_model.py with
--recompute-attention-inputs.

--reuse-attention-output (coat) has each converted layer's attention
output program read attention's output, which SDPA keeps for its own
backward, instead of keeping an FP8 copy of it (coat.nn.DecoderLayer's
reuse_attention_output: one byte a value less between the forward and the
backward; not with --keep-gemm-operands). Its kernels: the `_kc` programs
that scripts/compile_model.py --heads compiles.

--keep-gemm-operands (coat) has the converted layers' programs keep the
per-tensor FP8 operands of their backward GEMMs from the forward instead of
deriving them again in the backward: more memory, fewer backward kernels
(coat.convert's keep_gemm_operands). Its kernels: scripts/compile_model.py
with --keep-gemm-operands.

--torchao-optim adamw8bit gives the torchao and BF16 modes torchao's
AdamW8bit instead of torch's fused AdamW (the 7B shape's baselines: BF16's
fused AdamW does not fit one 80 GB GPU there).

--compile (bf16 and coat; torchao is always compiled) runs the model under
torch.compile (--compile-mode reduce-overhead: its CUDA graphs, a new
graph step at each training step, the loss copied out of the graph's
memory). A compile that fails is reported, not hidden: the traceback
goes to stderr, the record (--log) holds `error` (phase "compile", the
exception's type and message) and the exit status is 3. A run out of GPU
memory is reported the same way: phase "memory", the peak allocated until
then, exit status 4 (bench/train_compare.py --batches finds the largest
batch that fits).

--profile N profiles the last N steps with torch.profiler (or the N before
an evaluation that would fall inside them) and stores bench/step_profile.py's
summary in the record under `profile`: GPU time per step by category (our
kernels by family, torch GEMMs, attention, torch element-wise by aten op,
Triton, optimizer, ...), GPU-busy time (the union of the kernels' intervals)
against wall time, kernels per step. The step time is that of the steps
between --warmup-timing and the profiled ones. The profiler records the CPU
ops too (to know which aten op launched a kernel), which slows the host: the
profiled wall time is above the step time, and `busy_share_of_step` compares
the busy time with the unprofiled step time. --profile-trace PATH keeps the
Chrome trace (.gz: gzipped). On a CPU device the CPU ops are the activities.
Our kernels' launches in the profiled steps are counted too (coat.traffic:
bytes and GEMM FLOPs per kernel), and the summary's `traffic` divides them
by those kernels' GPU time, against the copy bandwidth measured at the end
of the run (`copy_tbps`) and the FP8 peak: how close each family of our
kernels came to its ceiling inside a step.

On CUDA the record also holds `memory`: allocated bytes at one step
(--memory-step) between steps, after the forward, after the backward,
after the optimizer step, and that step's peak. With --step-in-backward
"after the backward" is after the optimizer step too (it ran inside the
backward).

Same seed, same data order for every mode. Prints a progress line with the
loss and tokens/s, and writes a JSON record of the run (loss curves, held-out
loss, peak memory, forward-retained memory per layer, step time) to --log.
bench/train_compare.py runs the modes side by side and plots them.

Kernels: coat mode needs the compiled programs of the config's layer
(scripts/compile_model.py, where LLVM is; found through $COAT_KERNELS or
compiled into the cache when coat-opt is at hand) and FP8AdamW's kernel
(scripts/demo.sh's build/demo).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import sysconfig
import tempfile
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))

from coat.llama import LlamaConfig, LlamaForCausalLM  # noqa: E402

#: Model shapes. 100m: the side-by-side training run; tinyllama: the 1.1B
#: TinyLlama layout (memory and step time); 7b: the Llama-2-7B layout (memory
#: at scale: one GPU holds it with --param-dtype bf16); tiny: CPU smoke runs.
CONFIGS = {
    "tiny": LlamaConfig(vocab=256, hidden=64, ffn=160, layers=2, heads=4, kv_heads=2),
    "100m": LlamaConfig(vocab=256, hidden=1024, ffn=2816, layers=8, heads=16, kv_heads=16),
    "tinyllama": LlamaConfig(vocab=32000, hidden=2048, ffn=5632, layers=22, heads=32,
                             kv_heads=4),
    "7b": LlamaConfig(vocab=32000, hidden=4096, ffn=11008, layers=32, heads=32, kv_heads=32),
}

#: Configs built directly on the device: initialising 6.7B f32 parameters on
#: the CPU takes minutes. (Their initial weights then come from the device's
#: generator, seeded by --seed as well.)
BUILD_ON_DEVICE = {"7b"}

#: Global gradient-norm clipping of every mode (per bucket with --step-in-backward).
CLIP_NORM = 1.0

#: The dtype the model is built in. bf16-master: an f32 model that FP8AdamW
#: stores in bf16, its f32 masters starting at the f32 initialisation
#: (param_dtype); the optimizer runs on bf16 parameters from then on (coat).
#: bf16-sr: bf16 parameters rounded stochastically by their optimizer
#: (FP8AdamW's stochastic_params; torchao's AdamW8bit bf16_stochastic_round).
PARAM_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "bf16-master": torch.float32,
                "bf16-sr": torch.bfloat16}


def corpus(root: str | None = None, held_out_every: int = 50):
    """Bytes of every .py file under the standard library (sorted paths),
    split by file: a file whose path hash falls in 1/held_out_every of the
    range is held out. Returns (train, held_out) uint8 tensors."""
    root = root or sysconfig.get_paths()["stdlib"]
    train, held = [], []
    for path in sorted(Path(root).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if "site-packages" in rel or "dist-packages" in rel:
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        h = int(hashlib.sha1(rel.encode()).hexdigest()[:8], 16)
        (held if h % held_out_every == 0 else train).append(data)
    if not train or not held:
        raise RuntimeError(f"no Python sources under {root}")
    as_tensor = lambda parts: torch.frombuffer(bytearray(b"\n".join(parts)), dtype=torch.uint8)
    return as_tensor(train), as_tensor(held)


def batches(data: torch.Tensor, batch: int, seq: int, gen: torch.Generator):
    starts = torch.randint(0, data.numel() - seq - 1, (batch,), generator=gen)
    x = torch.stack([data[s:s + seq + 1] for s in starts.tolist()]).long()
    return x[:, :-1], x[:, 1:]


def lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


#: The exit status of a run whose torch.compile failed.
COMPILE_FAILED = 3
#: Exit status of a run that ran out of GPU memory (its record says where).
OUT_OF_MEMORY = 4


class CompileError(RuntimeError):
    """torch.compile cannot run here (or failed: see compile_error())."""


def clip_gradients(model, opt):
    """Global gradient-norm clipping to CLIP_NORM. FP8AdamW takes it into
    its next step (its kernels multiply each gradient by the factor as they
    load it); other optimizers get torch's, which rewrites the gradients."""
    from coat.optim import FP8AdamW

    if isinstance(opt, FP8AdamW):
        return opt.clip_grad_norm_(CLIP_NORM)
    return torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)


def compile_error(exc: BaseException) -> bool:
    """Whether exc (or an exception it was raised from) is a CompileError or
    one of Dynamo's (Unsupported, BackendCompilerFailed, which wraps
    Inductor's, TorchRuntimeError, ...). A run-time error of the compiled
    model (out of memory, a NaN) is not."""
    try:
        from torch._dynamo.exc import TorchDynamoException
        kinds = (CompileError, TorchDynamoException)
    except ImportError:
        kinds = (CompileError,)
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, kinds):
            return True
        exc = exc.__cause__
    return False


def out_of_memory(exc: BaseException) -> bool:
    """Whether exc (or an exception it was raised from, or while handling) is
    the CUDA allocator's out-of-memory error, also where torch.compile
    wrapped it."""
    kind = getattr(torch.cuda, "OutOfMemoryError", None)
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if (kind is not None and isinstance(exc, kind)) or "CUDA out of memory" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


#: torch.compile's modes --compile-mode takes: reduce-overhead replays the
#: compiled forward and backward from CUDA graphs (a host-bound step).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs")


def compiled(model, mode: str = "default"):
    if not hasattr(torch, "compile"):
        raise CompileError(f"torch.compile needs torch 2.0 or later (this is {torch.__version__})")
    return torch.compile(model) if mode == "default" else torch.compile(model, mode=mode)


def bucket_mb(text: str):
    """--bucket-mb: MiB of gradient per FP8AdamW bucket, `none` (one bucket
    per parameter group and dtype) or `default` (FP8AdamW's)."""
    if text.lower() in ("none", "default"):
        return None if text.lower() == "none" else "default"
    v = float(text)
    if not v > 0:
        raise argparse.ArgumentTypeError(f"--bucket-mb must be positive or none, got {text}")
    return v


def torchao_adamw8bit():
    """torchao's AdamW8bit (torchao.optim, or the prototype module of older
    releases)."""
    try:
        from torchao.optim import AdamW8bit
    except ImportError:
        from torchao.prototype.low_bit_optim import AdamW8bit
    return AdamW8bit


def build(mode: str, cfg: LlamaConfig, device: str, lr: float, kernels: str | None,
          compile: bool = False, *, param_dtype: str = "f32", step_in_backward: bool = False,
          bucket: float | None | str = "default", graph: bool = False,
          torchao_optim: str = "adamw", on_device: bool = False,
          persistent_grads: bool = False, fused_loss: bool = True,
          recompute_attention_inputs: bool = False, keep_gemm_operands: bool = False,
          compile_mode: str = "default", reuse_attention_output: bool = False):
    if param_dtype == "bf16-master" and mode != "coat":
        raise SystemExit("--param-dtype bf16-master is FP8AdamW's master_weights (mode coat)")
    stochastic = param_dtype == "bf16-sr"
    if stochastic and mode != "coat" and torchao_optim != "adamw8bit":
        raise SystemExit("--param-dtype bf16-sr needs an optimizer that rounds stochastically: "
                         "FP8AdamW (mode coat) or torchao's AdamW8bit (modes torchao and bf16 "
                         "with --torchao-optim adamw8bit)")
    if on_device and hasattr(torch.device, "__enter__"):  # torch >= 2.0
        with torch.device(device):
            model = LlamaForCausalLM(cfg)
    else:
        model = LlamaForCausalLM(cfg)
    model = model.to(device=device, dtype=PARAM_DTYPES[param_dtype])
    if device.startswith("cuda"):
        torch.cuda.empty_cache()  # the f32 initialisation of a bf16 model
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}]
    autocast = False
    if mode == "bf16":
        if torchao_optim == "adamw8bit":
            opt = torchao_adamw8bit()(groups, lr=lr, betas=(0.9, 0.95),
                                      **({"bf16_stochastic_round": True} if stochastic else {}))
        else:
            fused = {"fused": True} if device.startswith("cuda") else {}
            opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), **fused)
        autocast = True
    elif mode == "coat":
        import coat

        coat.convert(model, kernels=kernels, fused_loss=fused_loss,
                     keep_gemm_operands=keep_gemm_operands)
        for layer in model.modules():
            if isinstance(layer, coat.nn.DecoderLayer):
                if recompute_attention_inputs:
                    layer.recompute_attention_inputs = True
                if reuse_attention_output:
                    layer.reuse_attention_output = True
        options = {} if bucket == "default" else {"bucket_mb": bucket}
        if step_in_backward:
            options.update(step_in_backward=True, bucket_max_norm=CLIP_NORM)
        if graph or persistent_grads:
            # A CUDA graph accumulates into fixed addresses: keep the buffers.
            options["persistent_grads"] = True
        if param_dtype == "bf16-master":
            options.update(master_weights=True, param_dtype=torch.bfloat16)
        opt = coat.optim.FP8AdamW(groups, lr=lr, betas=(0.9, 0.95), stochastic_params=stochastic,
                                  **options)
        if param_dtype == "bf16-master" and device.startswith("cuda"):
            torch.cuda.empty_cache()  # the f32 parameters the optimizer replaced
        autocast = True  # the embedding, final norm and LM head (kept high precision)
    elif mode == "torchao":
        from torchao.float8 import convert_to_float8_training

        convert_to_float8_training(model, module_filter_fn=lambda m, fqn: fqn != "lm_head")
        if torchao_optim == "adamw8bit":
            opt = torchao_adamw8bit()(groups, lr=lr, betas=(0.9, 0.95),
                                      **({"bf16_stochastic_round": True} if stochastic else {}))
        else:
            opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), fused=True)
        model = compiled(model, compile_mode)
        autocast = True
    else:
        raise ValueError(f"unknown mode {mode!r}")
    if compile and mode != "torchao":
        # Lazily: Dynamo and Inductor run at the first forward (and the
        # first evaluation), where compile_error() recognises a failure.
        model = compiled(model, compile_mode)
    return model, opt, autocast


class _Graphed:
    """A captured forward + backward and the input tensors it reads."""

    def __init__(self, step, x, y):
        self.step, self.x, self.y = step, x, y


def graphed_forward_backward(model, data, args, autocast) -> _Graphed:
    if args.mode == "torchao" or not args.device.startswith("cuda"):
        raise SystemExit("--graph needs --device cuda and mode bf16 or coat "
                         "(torchao's compiled model is not captured)")
    from coat.nn import capture_step

    # Warm-up and capture data; the run's own batches come from its generator.
    x, y = batches(data, args.batch, args.seq, torch.Generator().manual_seed(args.seed + 1))
    x, y = x.to(args.device), y.to(args.device)

    def forward_backward():
        # No autocast cache: a capture must not keep casts made outside it.
        with torch.autocast("cuda", torch.bfloat16, enabled=autocast, cache_enabled=False):
            loss = model(x, y)
        loss.backward()
        return loss.detach()

    # No reset_grads: the gradients stay the tensors the optimizer reads.
    step = capture_step(forward_backward)
    return _Graphed(step, x, y)


def evaluate(model, held, batch, seq, autocast, device, n_batches) -> float:
    gen = torch.Generator().manual_seed(1234)  # the same held-out windows every time
    total = 0.0
    with torch.no_grad(), torch.autocast(device.split(":")[0], torch.bfloat16,
                                         enabled=autocast):
        for _ in range(n_batches):
            x, y = batches(held, batch, seq, gen)
            total += float(model(x.to(device), y.to(device)))
    return total / n_batches


def profile_window(args) -> tuple[int, int] | None:
    """The steps [first, end) that --profile N profiles: the last N, or, where
    an evaluation would fall inside them, the N before it (an evaluation
    right after the last profiled step runs once the profiler has stopped).
    Only steps before the window are timed: Kineto leaves CUPTI attached
    after a trace unless TEARDOWN_CUPTI=1, which may slow the steps after."""
    n = args.profile
    if not n:
        return None
    if n < 0:
        raise SystemExit("--profile N needs N >= 1")
    first = args.steps - n
    if args.eval_every:
        if args.eval_every <= n:
            raise SystemExit(f"--profile {n} needs --eval-every 0 or above {n} "
                             "(no evaluation inside the profiled steps)")
        for i in range(first, args.steps - 1):
            if (i + 1) % args.eval_every == 0:
                first = i + 1 - n
                break
    if first < args.warmup_timing:
        raise SystemExit(f"--profile {n} profiles steps {first}..{first + n - 1}, inside the "
                         f"timing warm-up (--warmup-timing {args.warmup_timing}): needs more "
                         "--steps")
    return first, first + n


class StepProfiler:
    """torch.profiler over consecutive steps, summarised by
    bench/step_profile.py. On CUDA it records the kernels (CUDA activity)
    and the CPU ops, which tell what aten op launched each kernel; shapes
    are not recorded. On a CPU device the CPU ops are the activities."""

    def __init__(self, device: str, first: int, steps: int, trace: str | None = None):
        self.cuda = device.startswith("cuda")
        self.first, self.steps, self.trace = first, steps, trace

    def _sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def start(self):
        from torch.profiler import ProfilerActivity, profile

        from coat.traffic import count_traffic

        activities = [ProfilerActivity.CPU]
        if self.cuda:
            activities.append(ProfilerActivity.CUDA)
        self.prof = profile(activities=activities, record_shapes=False)
        self._sync()
        self.counting = count_traffic()
        self.traffic = self.counting.__enter__()
        self.prof.start()
        self.t0 = time.perf_counter()

    def stop(self) -> dict:
        self._sync()
        wall = time.perf_counter() - self.t0
        self.prof.stop()
        self.counting.__exit__(None, None, None)
        sys.path.insert(0, str(ROOT / "bench"))
        import step_profile

        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            self.prof.export_chrome_trace(path)
            trace = step_profile.load_trace(path)
            if self.trace:
                os.makedirs(os.path.dirname(os.path.abspath(self.trace)), exist_ok=True)
                if self.trace.endswith(".gz"):
                    import gzip

                    with open(path, "rb") as fin, gzip.open(self.trace, "wb") as fout:
                        shutil.copyfileobj(fin, fout)
                else:
                    shutil.copyfile(path, self.trace)
        device = "cuda" if self.cuda else "cpu"
        acts = step_profile.activities_from_trace(trace, device)
        summary = step_profile.summarize(acts, self.steps, wall_ms=wall * 1e3 / self.steps,
                                         traffic=(self.traffic.per_step(self.steps) or None)
                                         if self.cuda else None)
        summary.update(first_step=self.first, activity=device,
                       profiler="kineto" if isinstance(trace, dict) else "legacy")
        if self.trace:
            summary["trace"] = self.trace
        if self.cuda and not acts:
            summary["warning"] = "the trace holds no GPU activity (is CUPTI available?)"
        return summary


class MemoryView:
    """Allocated CUDA memory at the points of one step and that step's peak.
    Resetting the peak statistics for the step keeps the peak before it in
    peak_before (the run's peak is the larger)."""

    def __init__(self):
        self.points: dict = {}
        self.peak_before = 0

    def begin(self, step: int):
        torch.cuda.synchronize()
        self.peak_before = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        self.points = {"step": step}
        self.mark("between_steps")

    def mark(self, point: str) -> int:
        torch.cuda.synchronize()
        self.points[point + "_bytes"] = torch.cuda.memory_allocated()
        return self.points[point + "_bytes"]

    def end(self) -> dict:
        self.mark("after_optimizer")
        self.points["step_peak_bytes"] = torch.cuda.max_memory_allocated()
        return self.points


def train(args) -> dict:
    cfg = CONFIGS[args.config]
    torch.manual_seed(args.seed)
    device = args.device
    cuda = device.startswith("cuda")
    if args.graph and args.compile:
        raise SystemExit("--graph and --compile do not go together (capture_step replays "
                         "eager launches)")
    if args.step_in_backward and args.mode != "coat":
        raise SystemExit("--step-in-backward is FP8AdamW's (mode coat)")
    if args.step_in_backward and args.graph:
        raise SystemExit("--step-in-backward and --graph do not go together (a replay runs "
                         "no Python, so no step in its backward)")
    if args.bucket_mb != "default" and args.mode != "coat":
        raise SystemExit("--bucket-mb is FP8AdamW's (mode coat)")
    if args.persistent_grads and args.mode != "coat":
        raise SystemExit("--persistent-grads is FP8AdamW's (mode coat)")
    if args.persistent_grads and args.step_in_backward:
        raise SystemExit("--persistent-grads and --step-in-backward do not go together "
                         "(stepping in the backward frees each bucket's gradient)")
    if args.torchao_optim != "adamw" and args.mode == "coat":
        raise SystemExit("--torchao-optim is for modes torchao and bf16")
    if args.recompute_attention_inputs and args.mode != "coat":
        raise SystemExit("--recompute-attention-inputs is coat.nn.DecoderLayer's (mode coat)")
    if args.keep_gemm_operands and args.mode != "coat":
        raise SystemExit("--keep-gemm-operands is coat.convert's (mode coat)")
    if args.reuse_attention_output and args.mode != "coat":
        raise SystemExit("--reuse-attention-output is coat.nn.DecoderLayer's (mode coat)")
    if args.reuse_attention_output and args.keep_gemm_operands:
        raise SystemExit("--reuse-attention-output and --keep-gemm-operands do not go "
                         "together (the latter keeps the FP8 copy the former drops)")
    window = profile_window(args)
    timing = True  # until the profiled steps begin
    train_data, held = corpus(args.data)
    model, opt, autocast = build(args.mode, cfg, device, args.lr, args.kernels, args.compile,
                                 param_dtype=args.param_dtype,
                                 step_in_backward=args.step_in_backward,
                                 bucket=args.bucket_mb, graph=args.graph,
                                 torchao_optim=args.torchao_optim,
                                 on_device=args.config in BUILD_ON_DEVICE,
                                 persistent_grads=args.persistent_grads,
                                 fused_loss=not args.unfused_loss,
                                 recompute_attention_inputs=args.recompute_attention_inputs,
                                 keep_gemm_operands=args.keep_gemm_operands,
                                 compile_mode=args.compile_mode,
                                 reuse_attention_output=args.reuse_attention_output)
    params = sum(p.numel() for p in model.parameters())
    gen = torch.Generator().manual_seed(args.seed)
    tokens_per_step = args.batch * args.seq
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    record = {"mode": args.mode, "config": args.config, "params": params,
              "layers": cfg.layers, "hidden": cfg.hidden, "batch": args.batch,
              "seq": args.seq, "steps": args.steps, "lr": args.lr, "seed": args.seed,
              "device": torch.cuda.get_device_name() if cuda else "cpu",
              "torch": torch.__version__, "train_loss": [], "held_out": []}
    print(f"{args.mode}: {args.config} ({params / 1e6:.1f}M parameters), "
          f"{tokens_per_step} tokens/step, {args.steps} steps on {record['device']}",
          flush=True)
    record["graph"] = args.graph
    record["compile"] = args.compile or args.mode == "torchao"
    # CUDA graph trees replay into the outputs of the last replay: a step
    # begins a new one, and the loss is copied out before the next.
    graph_trees = record["compile"] and args.compile_mode == "reduce-overhead"
    if record["compile"]:
        record["compile_mode"] = args.compile_mode
    record["param_dtype"] = args.param_dtype
    record["step_in_backward"] = args.step_in_backward
    record["recompute_attention_inputs"] = args.recompute_attention_inputs
    record["keep_gemm_operands"] = args.keep_gemm_operands
    record["reuse_attention_output"] = args.reuse_attention_output
    record["clip"] = f"{'per-bucket' if args.step_in_backward else 'global'} {CLIP_NORM}"
    if args.mode == "coat":
        record["bucket_mb"] = opt.bucket_mb
        record["optimizer_buckets"] = len(opt.buckets)
        record["persistent_grads"] = opt.persistent_grads
        record["loss"] = model.coat_report.loss
    if args.mode != "coat":
        record["torchao_optim"] = args.torchao_optim
    graphed = graphed_forward_backward(model, train_data, args, autocast) if args.graph else None
    profiler = memory = None
    step_times, pending, t_mark, steps_since = [], [], time.perf_counter(), 0
    for step in range(args.steps):
        if step == args.warmup_timing and timing:
            # Time from here: a log interval that began in the warm-up (the
            # first, compiling steps) must not count.
            if cuda:
                torch.cuda.synchronize()
            t_mark, steps_since = time.perf_counter(), 0
        if window and step == window[0]:
            if cuda:
                torch.cuda.synchronize()
            if steps_since and step - 1 >= args.warmup_timing:  # the steps since the last log
                step_times.append((time.perf_counter() - t_mark) / steps_since)
            timing = False
            profiler = StepProfiler(device, step, window[1] - window[0], args.profile_trace)
            profiler.start()
        for g in opt.param_groups:
            lr = lr_at(step, args.steps, args.lr, args.warmup)
            if isinstance(g["lr"], torch.Tensor):  # torchao's AdamW8bit keeps lr a tensor
                g["lr"].fill_(lr)
            else:
                g["lr"] = lr
        x, y = batches(train_data, args.batch, args.seq, gen)
        measure = cuda and step == args.memory_step
        if measure:
            memory = MemoryView()
        if graphed:
            # The captured backward adds into the gradient tensors the
            # optimizer reads (FP8AdamW's are views of its flat buffer): zero
            # them in place, copy the batch into the captured inputs, replay.
            if measure:
                memory.begin(step)
            opt.zero_grad(set_to_none=False)
            graphed.x.copy_(x, non_blocking=True)
            graphed.y.copy_(y, non_blocking=True)
            loss = graphed.step.replay().clone()
            if measure:
                memory.mark("after_backward")
        else:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            if measure:
                memory.begin(step)
            if graph_trees:
                torch.compiler.cudagraph_mark_step_begin()
            with torch.autocast(device.split(":")[0], torch.bfloat16, enabled=autocast):
                loss = model(x, y)
            if measure:
                record["forward_retained_bytes"] = (memory.mark("after_forward")
                                                    - memory.points["between_steps_bytes"])
            loss.backward()
            if measure:
                memory.mark("after_backward")
        if not args.step_in_backward:
            # (Stepping in the backward, FP8AdamW clipped each bucket to
            # CLIP_NORM before its launch; the gradients are gone by now.)
            clip_gradients(model, opt)
        opt.step()  # in-backward: the buckets the backward did not step, if any
        if measure:
            record["memory"] = memory.end()
        if not graphed:
            opt.zero_grad(set_to_none=True)
        if graph_trees and args.mode == "coat":
            # A replayed CUDA graph runs none of coat.nn's Python, so its
            # finiteness flags are read here (without waiting for the GPU).
            from coat.nn import poll_finite
            poll_finite()
        pending.append(loss.detach().clone() if graph_trees else loss.detach())
        steps_since += 1
        last = step == args.steps - 1
        if (step + 1) % args.log_every == 0 or last:
            losses = torch.stack(pending).float().cpu().tolist()  # waits for the GPU
            now = time.perf_counter()
            if timing and step >= args.warmup_timing:
                step_times.append((now - t_mark) / steps_since)
            t_mark, steps_since = now, 0
            record["train_loss"] += losses
            pending = []
            if not all(math.isfinite(v) for v in losses):
                raise FloatingPointError(f"{args.mode}: non-finite loss at step {step}")
            tps = tokens_per_step / (step_times[-1] if step_times else float("nan"))
            bar = "#" * int(30 * (step + 1) / args.steps)
            print(f"\r[{bar:<30}] step {step + 1}/{args.steps} loss {losses[-1]:.4f} "
                  f"{tps:,.0f} tok/s", end="\n" if last else "", flush=True)
        if profiler and step == window[1] - 1:
            try:
                record["profile"] = profiler.stop()
            except Exception as e:  # noqa: BLE001 - the run's other results still stand
                traceback.print_exc()
                record["profile_error"] = f"{type(e).__name__}: {e}"[:500]
            profiler = None
        if args.eval_every and ((step + 1) % args.eval_every == 0 or last):
            ev = evaluate(model, held, args.batch, args.seq, autocast, device, args.eval_batches)
            record["held_out"].append((step + 1, ev))
            if not last:
                print(f"\n  held-out loss {ev:.4f}", flush=True)
    if cuda:
        record["peak_memory_bytes"] = max(torch.cuda.max_memory_allocated(),
                                          memory.peak_before if memory else 0)
        if record.get("profile", {}).get("traffic"):
            # The ceiling of the memory-bound kernels, measured after the peak
            # was read (its buffers do not count).
            sys.path.insert(0, str(ROOT / "bench"))
            from _timing import copy_bandwidth

            record["profile"]["copy_tbps"] = copy_bandwidth(256 << 20) / 1e12
    if step_times:
        st = sorted(step_times)
        record["step_time_s"] = st[len(st) // 2]
        record["tokens_per_s"] = tokens_per_step / record["step_time_s"]
    elif window:
        print(f"{args.mode}: no step between the timing warm-up and the profiled steps was "
              "timed (raise --steps)", flush=True)
    if "profile" in record and "step_time_s" in record:
        record["profile"]["busy_share_of_step"] = (record["profile"]["busy_ms"]
                                                   / (record["step_time_s"] * 1e3))
    if "forward_retained_bytes" in record:
        u = tokens_per_step * cfg.hidden * 2  # COAT's unit: one bf16 B x S x H tensor
        record["forward_retained_per_layer_U"] = record["forward_retained_bytes"] / cfg.layers / u
    if record["compile"]:
        record.update(compile_stats())
    if record["held_out"]:
        record["final_held_out"] = record["held_out"][-1][1]
    tail = record["train_loss"][-min(50, len(record["train_loss"])):]
    record["final_train_loss"] = sum(tail) / len(tail)
    print(f"{args.mode}: train loss {record['final_train_loss']:.4f}"
          + (f", held-out {record['final_held_out']:.4f}" if record["held_out"] else "")
          + (f", peak {record['peak_memory_bytes'] / 2**30:.2f} GiB" if cuda else "")
          + (f", {record['step_time_s'] * 1e3:.1f} ms/step" if step_times else ""), flush=True)
    if "profile" in record:
        sys.path.insert(0, str(ROOT / "bench"))
        import step_profile

        print(step_profile.format_summary(record["profile"]), flush=True)
    return record


def compile_stats() -> dict:
    """Dynamo's graph breaks (count and the commonest reasons) and the
    graphs it compiled, where this torch keeps them."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return {}
    breaks = counters.get("graph_break", {})
    top = sorted(breaks.items(), key=lambda kv: -kv[1])[:5]
    return {"compile_graph_breaks": sum(breaks.values()),
            "compile_graph_break_reasons": [[str(k)[:200], v] for k, v in top],
            "compile_unique_graphs": counters.get("stats", {}).get("unique_graphs")}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("bf16", "coat", "torchao"), default="coat")
    ap.add_argument("--config", choices=sorted(CONFIGS), default="100m")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--data", default=None, help="a folder of .py files (default: the stdlib)")
    ap.add_argument("--kernels", default=None, help="folder of compiled layer programs")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-batches", type=int, default=8)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--warmup-timing", type=int, default=20,
                    help="steps left out of the step time (compilation, caches)")
    ap.add_argument("--memory-step", type=int, default=3,
                    help="the step whose forward is measured (memory kept for backward)")
    ap.add_argument("--graph", action="store_true",
                    help="replay each step's forward and backward from a CUDA graph")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the model (bf16, coat; torchao always is)")
    ap.add_argument("--compile-mode", choices=COMPILE_MODES, default="default",
                    help="torch.compile's mode for compiled runs (eager runs ignore it, so "
                         "bench/train_compare.py can pass it to every mode)")
    ap.add_argument("--param-dtype", choices=sorted(PARAM_DTYPES), default="f32",
                    help="parameter dtype (bf16: no f32 master weights; bf16-master: FP8AdamW "
                         "keeps them, mode coat)")
    ap.add_argument("--step-in-backward", action="store_true",
                    help="coat: step each FP8AdamW bucket inside the backward (per-bucket "
                         "clipping)")
    ap.add_argument("--bucket-mb", type=bucket_mb, default="default", metavar="MB",
                    help="coat: FP8AdamW bucket size in MiB of gradient, or none "
                         "(default: FP8AdamW's)")
    ap.add_argument("--unfused-loss", action="store_true",
                    help="coat: the LM head, then F.cross_entropy of the fp32 logits, instead "
                         "of coat.nn.linear_cross_entropy (coat.convert(fused_loss=False))")
    ap.add_argument("--persistent-grads", action="store_true",
                    help="coat: FP8AdamW's gradient buffers allocated once and kept (as "
                         "before they became lazy)")
    ap.add_argument("--recompute-attention-inputs", action="store_true",
                    help="coat: q, k and v made again in the backward by the attention input "
                         "program instead of kept (eager only)")
    ap.add_argument("--reuse-attention-output", action="store_true",
                    help="coat: the attention output program reads attention's kept output in "
                         "its backward instead of keeping an FP8 copy")
    ap.add_argument("--keep-gemm-operands", action="store_true",
                    help="coat: the programs keep their backward GEMMs' FP8 operands from the "
                         "forward instead of deriving them again (more memory, fewer backward "
                         "kernels; coat.convert(keep_gemm_operands=True))")
    ap.add_argument("--torchao-optim", choices=("adamw", "adamw8bit"), default="adamw",
                    help="torchao and bf16: torch's fused AdamW or torchao's AdamW8bit")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="profile the last N steps (record: `profile`)")
    ap.add_argument("--profile-trace", default=None, metavar="PATH",
                    help="keep the profiled steps' Chrome trace here (.gz: gzipped)")
    ap.add_argument("--log", default=None, help="write the run's JSON record here")
    return ap.parse_args(argv)


def write_record(record: dict, path: str | None) -> None:
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(record, f)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        record = train(args)
    except Exception as e:  # noqa: BLE001 - only out of memory and compile failures here
        # Out of memory first: torch.compile wraps a run-time error too.
        phase = "memory" if out_of_memory(e) else "compile" if compile_error(e) else None
        if phase is None:
            raise
        traceback.print_exc()
        message = str(e).strip().splitlines()[0] if str(e).strip() else ""
        record = {"mode": args.mode, "config": args.config, "batch": args.batch,
                  "seq": args.seq, "steps": args.steps, "seed": args.seed,
                  "graph": args.graph, "compile": args.compile or args.mode == "torchao",
                  "torch": torch.__version__,
                  "param_dtype": args.param_dtype, "step_in_backward": args.step_in_backward,
                  "error": {"phase": phase, "type": type(e).__name__,
                            "message": message[:500]}}
        if phase == "memory":
            record["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
        write_record(record, args.log)
        what = "out of memory" if phase == "memory" else "torch.compile failed"
        print(f"{args.mode}: {what}: {type(e).__name__}: {message[:300]}", file=sys.stderr,
              flush=True)
        return OUT_OF_MEMORY if phase == "memory" else COMPILE_FAILED
    write_record(record, args.log)
    return 0


if __name__ == "__main__":
    sys.exit(main())

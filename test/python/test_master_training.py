"""bf16 parameters with FP8AdamW's f32 masters train a converted model as f32
parameters do. coat.llama's model is converted (its layers run the compiled
programs, which read a bf16 parameter itself rather than a copy), once with
f32 parameters and once with bf16 parameters + masters, from the same
bf16-representable weights, and trained in lock step on the same batches
with global clipping. test_optim_master.py checks the optimizer alone, bit
for bit; this checks what the model reads after each step:

- the trained bf16 model computes, bit for bit, the loss that a model
  converted afresh from its current parameters computes (the step writes
  the bf16 parameters in place without moving their version counters, so
  anything a converted layer kept from an earlier step would show);
- the two runs' losses agree within LOSS_TOL plus LOSS_TOL_REL of how far
  the f32 loss has fallen by then. They are not bit-equal: the f32 model
  keeps its embedding output and final norm in f32, the bf16 one rounds
  them, so the gradients differ in the last bits and Adam's first,
  sign-like steps flip where a gradient is near 0; FP8's per-tensor scales
  then carry the difference on, and where the loss falls fast a run a
  fraction of a step behind differs by that fraction of the fall. Measured
  on the CPU twins (tiny config, arithmetic token sequences, lr 1e-3,
  clipping at 1.0, 2026-12-07): within 7.3e-4 over 8 steps while the loss
  drops by 0.14; on one H100 (hidden 1024, 2026-12-07) within 0.0065 for
  six steps, then 0.045 while the loss fell by about 0.5 a step.
- at an lr whose updates are below half a bf16 ulp of most weights, the
  masters' run falls as far as the f32 run (within SMALL_LR_TOL of its
  fall) while bf16 parameters without masters, which round such updates
  away, fall less than half as far: the control that shows the check can
  fail. At lr 1e-3 the two are alike (on the CPU twins within 1.7e-3 of
  the f32 loss as well), so the loss gap alone would not tell them apart.
  CPU twins, lr 3e-5, 12 steps, loss on a held-out batch (2026-12-07):
  f32 fell 0.0122, masters 0.0123, plain bf16 0.0038."""

import copy

import pytest

from conftest import torch_or_skip

torch = torch_or_skip()

import coat  # noqa: E402
from coat import llama  # noqa: E402
from coat.optim import FP8AdamW  # noqa: E402
from test_convert import CUDA_CFG, TINY, cuda_or_skip  # noqa: E402
from test_optim_master import MODULES as MASTER_KERNELS  # noqa: E402

STEPS, LR, CLIP = 8, 1e-3, 1.0
#: Loss difference allowed at any step: LOSS_TOL plus LOSS_TOL_REL of the
#: f32 loss's fall so far (see the module's docstring).
LOSS_TOL, LOSS_TOL_REL = 5e-3, 0.05
#: The small-lr comparison: its lr and steps, and how far the masters' fall
#: may be from the f32 run's (relative).
SMALL_LR, SMALL_LR_STEPS, SMALL_LR_TOL = 3e-5, 12, 0.1


def kernels_or_skip(cfg, device):
    if not MASTER_KERNELS:
        pytest.skip("no compiled adamw_step kernels with a master copy: run scripts/demo.sh")
    if device == "cuda":
        cuda_or_skip(cfg)


def sequences(gen, batch, seq, vocab):
    """Arithmetic token sequences (start and stride per row): learnable in a
    few steps, so a run that lags shows."""
    start = torch.randint(0, vocab, (batch, 1), generator=gen)
    stride = torch.randint(1, 8, (batch, 1), generator=gen)
    x = (start + stride * torch.arange(seq + 1)) % vocab
    return x[:, :-1], x[:, 1:]


def lockstep(cfg, device, batch, seq, variants=((torch.bfloat16, True),), lr=LR,
             steps=STEPS, check_reads=True, held_out=False):
    """Per step, the loss of the f32 run and of each variant (bf16 with
    masters, or without: its updates rounded into the bf16 parameters).
    ``held_out``: instead, each run's loss on one held-out batch before and
    after the steps (a training loss is of another batch every step, too
    noisy to measure small progress by)."""
    torch.manual_seed(0)
    base = llama.LlamaForCausalLM(cfg)
    with torch.no_grad():  # masters start equal to the f32 parameters
        for p in base.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    runs = []
    for dtype, master in ((torch.float32, False),) + tuple(variants):
        model = copy.deepcopy(base).to(device=device, dtype=dtype)
        coat.convert(model)
        opt = FP8AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1,
                       master_weights=master, kernels=MASTER_KERNELS)
        runs.append((model, opt, master))
    gen = torch.Generator().manual_seed(1)
    test_x, test_y = (t.to(device) for t in sequences(torch.Generator().manual_seed(2),
                                                      batch, seq, cfg.vocab))

    def held_out_losses():
        with torch.no_grad(), torch.autocast(device, torch.bfloat16):
            return [model(test_x, test_y).item() for model, _, _ in runs]

    before = held_out_losses() if held_out else None
    losses = []
    for _ in range(steps):
        x, y = (t.to(device) for t in sequences(gen, batch, seq, cfg.vocab))
        row = []
        for model, opt, master in runs:
            if check_reads and master:
                assert_reads_current_weights(base, model, x, y)
            with torch.autocast(device, torch.bfloat16):
                loss = model(x, y)
            loss.backward()
            opt.clip_grad_norm_(CLIP)
            opt.step()
            opt.zero_grad(set_to_none=True)
            row.append(loss.item())
        losses.append(row)
    return [before, held_out_losses()] if held_out else losses


def assert_reads_current_weights(base, model, x, y):
    """``model``'s loss on (x, y) is that of a model converted afresh from its
    parameters."""
    fresh = copy.deepcopy(base).to(device=x.device, dtype=torch.bfloat16)
    coat.convert(fresh)
    fresh.load_state_dict(model.state_dict())
    with torch.no_grad(), torch.autocast(x.device.type, torch.bfloat16):
        got, want = model(x, y), fresh(x, y)
    assert torch.equal(got, want), (got.item(), want.item())


def check(losses):
    f32, masters = zip(*losses)
    assert f32[-1] < f32[0] - 0.05, f"the f32 run did not learn: {f32}"
    for i, (a, b) in enumerate(losses):
        allowed = LOSS_TOL + LOSS_TOL_REL * (f32[0] - min(f32[:i + 1]))
        assert abs(a - b) <= allowed, (i, list(zip(f32, masters)))


def check_small_lr(losses):
    before, after = losses
    fell = [b - a for b, a in zip(before, after)]
    assert fell[0] > 0, f"the f32 run did not learn: {losses}"
    assert abs(fell[1] - fell[0]) <= SMALL_LR_TOL * fell[0], (fell, losses)
    assert fell[2] < 0.5 * fell[0], ("bf16 without masters learnt as fast: the comparison "
                                     "cannot tell masters from none", fell, losses)


def test_masters_train_as_f32_on_the_cpu(cpu_cache):
    kernels_or_skip(TINY, "cpu")
    check(lockstep(TINY, "cpu", batch=4, seq=64))


def test_masters_keep_sub_ulp_updates_on_the_cpu(cpu_cache):
    kernels_or_skip(TINY, "cpu")
    check_small_lr(lockstep(TINY, "cpu", 4, 64, ((torch.bfloat16, True), (torch.bfloat16, False)),
                            lr=SMALL_LR, steps=SMALL_LR_STEPS, check_reads=False,
                            held_out=True))


def test_masters_train_as_f32_on_the_gpu():
    kernels_or_skip(CUDA_CFG, "cuda")
    check(lockstep(CUDA_CFG, "cuda", batch=8, seq=256))


def test_masters_keep_sub_ulp_updates_on_the_gpu():
    kernels_or_skip(CUDA_CFG, "cuda")
    check_small_lr(lockstep(CUDA_CFG, "cuda", 8, 256,
                            ((torch.bfloat16, True), (torch.bfloat16, False)),
                            lr=SMALL_LR, steps=SMALL_LR_STEPS, check_reads=False,
                            held_out=True))

"""An independent emulation of FP8 training's GEMM numerics in plain torch,
for judging a converted model's gradients against what the format allows.

Every ``torch.nn.Linear`` (and transformers' ``Conv1D``) under the given
modules computes its GEMMs from per-tensor-scaled FP8 operands, as COAT's
linear layers (and torchao's float8 recipe) do: the input and the weight in
E4M3 in the forward, the output gradient in E5M2 in the backward (scale =
absmax / the format's max, round to nearest even, saturating), products in
f32, results in bf16. Nothing else is quantized, so the emulation is the
least perturbation a model with per-tensor FP8 GEMMs has: where its
gradients already lose cosine similarity against bf16 (a softmax near
uniform at random initialisation makes the attention's q and k gradients a
small difference of large terms), such a model cannot be expected to do
better."""

import torch

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def quantize(t: torch.Tensor, fmt: torch.dtype) -> torch.Tensor:
    """t rounded through per-tensor-scaled ``fmt``, back in f32."""
    t = t.detach().float()
    scale = t.abs().amax().clamp_min(1e-12) / torch.finfo(fmt).max
    return (t / scale).to(fmt).float() * scale


class _FP8Matmul(torch.autograd.Function):
    """x @ w.T from FP8 operands (x [..., in], w [out, in])."""

    @staticmethod
    def forward(ctx, x, w):
        xq, wq = quantize(x, E4M3), quantize(w, E4M3)
        ctx.save_for_backward(xq, wq)
        ctx.dtypes = x.dtype, w.dtype
        return (xq @ wq.t()).to(torch.bfloat16)

    @staticmethod
    def backward(ctx, g):
        xq, wq = ctx.saved_tensors
        gq = quantize(g, E5M2)
        dx = (gq @ wq).to(torch.bfloat16).to(ctx.dtypes[0])
        dw = gq.reshape(-1, gq.shape[-1]).t() @ xq.reshape(-1, xq.shape[-1])
        return dx, dw.to(torch.bfloat16).to(ctx.dtypes[1])


def _linear(mod):
    def forward(x):
        y = _FP8Matmul.apply(x, mod.weight)
        return y if mod.bias is None else y + mod.bias.to(y.dtype)
    return forward


def _conv1d(mod):  # transformers' Conv1D: weight [in, out]
    def forward(x):
        y = _FP8Matmul.apply(x, mod.weight.t())
        return y + mod.bias.to(y.dtype)
    return forward


def emulate_fp8_linears(modules) -> int:
    """Switches every Linear / Conv1D inside ``modules`` to FP8 GEMMs (on
    the instances); returns how many."""
    n = 0
    for root in modules:
        for m in root.modules():
            if isinstance(m, torch.nn.Linear):
                m.forward = _linear(m)
            elif type(m).__name__ == "Conv1D" and hasattr(m, "nf"):
                m.forward = _conv1d(m)
            else:
                continue
            n += 1
    return n

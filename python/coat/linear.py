"""FP8 GEMMs from PyTorch with the calling convention of ``torch._scaled_mm``.

``scaled_mm(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16)``
computes ``(a @ b) * scale_a * scale_b (+ bias)`` with a compiled
``coat.linear`` kernel (``coat-lower-linear``): ``a`` is M x K row-major FP8,
``b`` is K x N FP8 in column-major layout (``b.t()`` contiguous, i.e. both
operands K-major, as Hopper's wgmma and ``torch._scaled_mm`` need), the scales
are one-element f32 tensors. The kernel is picked from a compiled module by
the operand formats, output dtype and bias, so one module of kernel specs
(e.g. examples/linear/fp8_linear.mlir compiled by ``coat.compile``) serves
forward (E4M3 x E4M3) and backward (E5M2 x E4M3) GEMMs alike.
"""

from __future__ import annotations

from . import artifacts
from .runtime import Kernel

_FORMATS = {"float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
_OUT = {"bfloat16": "bf16", "float32": "f32"}


def _format(t, what: str) -> str:
    name = str(t.dtype).replace("torch.", "")
    if name not in _FORMATS:
        raise ValueError(f"scaled_mm: {what} must be float8_e4m3fn or float8_e5m2, "
                         f"got {t.dtype}")
    return _FORMATS[name]


def reads_more_than_a_gemm(config) -> bool:
    """Whether a GEMM kernel's epilogue reads inputs beyond the operands,
    their scales and a bias (an addend, coat-fuse-linear-sum; rotary
    tables, coat-fuse-rope): it computes something other than a (biased)
    matrix product, so it does not stand in for one."""
    return bool(config.get("addend")) or "rope_head_dim" in config


def find_kernel(a_format: str, b_format: str, out: str, bias,
                module=None) -> Kernel:
    """The compiled per-tensor GEMM for these formats; ValueError if none.
    ``bias``: False, True (any bias dtype) or the bias's dtype ("f32",
    "bf16"); a bf16 bias also takes a kernel with an f32 bias (the caller
    widens it, exactly)."""
    bias_dtypes = {"bf16": ("bf16", "f32")}.get(bias, (bias,)) if isinstance(bias, str) else None
    seen, found = [], {}
    for mod in artifacts.modules(None if module is None else [module]):
        for k in mod.kernels.values():
            c = k.spec.config
            if k.spec.op != "linear" or c.get("scaling") != "per_tensor":
                continue
            # torch._scaled_mm's scales are f32; model programs' GEMMs read
            # their operands' bf16 scales.
            if any(a.name in ("a_scale", "b_scale") and a.dtype != "f32" for a in k.spec.args):
                continue
            if reads_more_than_a_gemm(c):
                continue
            kb = next((a.dtype for a in k.spec.args if a.name == "bias"), None)
            seen.append(f"{c.get('a')}x{c.get('b')}->{c.get('out')}"
                        f"{f'+bias({kb})' if kb else ''}")
            if (c.get("a"), c.get("b"), c.get("out"), bool(c.get("bias"))) != (
                    a_format, b_format, out, bool(bias)):
                continue
            if bias_dtypes is None:
                return k
            if kb in bias_dtypes:
                found.setdefault(kb, k)
    for dtype in bias_dtypes or ():
        if dtype in found:
            return found[dtype]
    raise ValueError(
        f"scaled_mm: no compiled GEMM for {a_format} x {b_format} -> {out}"
        f"{f' with bias ({bias})' if isinstance(bias, str) else ' with bias' if bias else ''}"
        f"; compiled: {sorted(set(seen)) or 'none'} "
        "(compile a coat.linear kernel spec with these types)")


def scaled_mm(a, b, scale_a, scale_b, bias=None, out_dtype=None, *, module=None):
    """``torch._scaled_mm`` with per-tensor scales, on a coat kernel."""
    import torch

    out_dtype = out_dtype or torch.bfloat16
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"scaled_mm: a and b must be 2-D, got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    m, k = a.shape
    k2, n = b.shape
    if k != k2:
        raise ValueError(f"scaled_mm: inner dimensions differ: a is {m}x{k}, b is {k2}x{n}")
    if not a.is_contiguous():
        raise ValueError("scaled_mm: a must be row-major (contiguous)")
    if not b.t().is_contiguous():
        raise ValueError("scaled_mm: b must be column-major (b.t() contiguous), as for "
                         "torch._scaled_mm")
    if k % 16:
        raise ValueError(f"scaled_mm: K = {k} must be a multiple of 16 (TMA row pitch)")
    fa, fb = _format(a, "a"), _format(b, "b")
    out_name = _OUT.get(str(out_dtype).replace("torch.", ""))
    if out_name is None:
        raise ValueError(f"scaled_mm: out_dtype must be bfloat16 or float32, got {out_dtype}")
    for s, what in ((scale_a, "scale_a"), (scale_b, "scale_b")):
        if s.numel() != 1 or s.dtype != torch.float32:
            raise ValueError(f"scaled_mm: {what} must be a one-element float32 tensor "
                             f"(per-tensor scaling), got {tuple(s.shape)} {s.dtype}")
    bias_dtype = None
    if bias is not None:
        if bias.dim() != 1 or bias.numel() != n:
            raise ValueError(f"scaled_mm: bias must be 1-D of length {n}")
        bias_dtype = _OUT.get(str(bias.dtype).replace("torch.", ""))
        if bias_dtype is None:
            raise ValueError(f"scaled_mm: bias must be bfloat16 or float32, got {bias.dtype}")
    kern = find_kernel(fa, fb, out_name, bias_dtype or False, module)
    out = torch.empty((m, n), dtype=out_dtype, device=a.device)
    args = dict(a=a, b=b.t(), out=out, a_scale=scale_a.reshape(1),
                b_scale=scale_b.reshape(1), m=m, n=n, k=k)
    if bias is not None:
        want = next(x.dtype for x in kern.spec.args if x.name == "bias")
        args["bias"] = (bias.float() if want == "f32" else bias).contiguous()
    kern.launch(**args)
    return out

"""Model programs in the coat dialect, generated from a model config.

A program holds one block's forward and backward as tensor-level coat ops,
before granularity resolution: every point where a high-precision tensor
enters FP8 is a ``coat.quantize_auto`` and the compiler's passes decide the
format, granularity and scaling (``coat-mixed-granularity``,
``coat-group-scaling``), then cut the program into kernels
(``coat-outline-kernels``). The token count (batch x sequence) is the
dynamic extent ``?``: one compiled program serves every batch shape.

Inputs carry their roles (``coat.weight``, ``coat.gradient``) and gradients
say what they are the gradient of (``coat.grad_of``), so the launch plan that
``coat-export-programs`` writes tells an executor which backward output
belongs to which input.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Extent of the token dimension in generated programs (run-time).
TOKENS = "?"


@dataclass(frozen=True)
class MLPBlockConfig:
    """A Llama MLP block: RMSNorm, gate/up projections, SiLU, SwiGLU
    product, down projection, residual add (COAT.md §3.5, §3.6)."""

    hidden: int
    ffn: int
    eps: float = 1e-5
    group_size: int = 16

    def check(self) -> None:
        g = self.group_size
        for name, v in (("hidden", self.hidden), ("ffn", self.ffn)):
            if v <= 0 or v % g:
                raise ValueError(f"MLPBlockConfig: {name} = {v} must be a positive "
                                 f"multiple of the group size {g}")

    @property
    def name(self) -> str:
        return f"coat_mlp_h{self.hidden}_f{self.ffn}"


def mlp_block(cfg: MLPBlockConfig) -> str:
    """The MLIR text of the block's program ``@<cfg.name>``.

    Arguments: the residual stream h (T x H bf16), the RMSNorm weight, W_gate
    and W_up (F x H), W_down (H x F), and the incoming gradient of the new
    stream. Results: the new stream and its 1x16 E4M3 copy (forward), then
    the gradient of h and its per-tensor E5M2 copy, and the gradients of the
    four weights (backward)."""
    cfg.check()
    T, H, F = TOKENS, cfg.hidden, cfg.ffn

    def t(*dims, dtype="bf16"):
        return "tensor<" + "x".join(str(d) for d in dims) + f"x{dtype}>"

    def u(*dims):
        return "!coat.unresolved<" + "x".join(str(d) for d in dims) + "xbf16>"

    def q(*dims, fmt="f8E4M3FN", scaling="per_tensor"):
        return ("!coat.qtensor<" + "x".join(str(d) for d in dims) +
                f"x{fmt}, {scaling}, scale = bf16>")

    g = f"per_group<{cfg.group_size}>"
    return f"""\
func.func @{cfg.name}(
    %h: {t(T, H)},
    %w_norm: {t(H)} {{coat.weight}},
    %w_gate: {t(F, H)} {{coat.weight}},
    %w_up: {t(F, H)} {{coat.weight}},
    %w_down: {t(H, F)} {{coat.weight}},
    %dout: {t(T, H)} {{coat.gradient, coat.grad_of = 0 : i64}})
    -> ({t(T, H)}, {q(T, H, scaling=g)},
        {t(T, H)} {{coat.grad_of = 0 : i64}}, {q(T, H, fmt="f8E5M2")},
        {t(H)} {{coat.grad_of = 1 : i64}}, {t(F, H)} {{coat.grad_of = 2 : i64}},
        {t(F, H)} {{coat.grad_of = 3 : i64}}, {t(H, F)} {{coat.grad_of = 4 : i64}}) {{
  %h_q = coat.quantize_auto %h : {t(T, H)} -> {u(T, H)}
  %ln, %rstd, %ln_t = coat.rmsnorm %h_q, %w_norm eps = {cfg.eps:e}
      : {u(T, H)}, {t(H)} -> {q(T, H)}, {t(T, dtype="f32")}, {q(H, T)}
  %wg_q = coat.quantize_auto %w_gate : {t(F, H)} -> {u(F, H)}
  %wu_q = coat.quantize_auto %w_up : {t(F, H)} -> {u(F, H)}
  %wd_q = coat.quantize_auto %w_down : {t(H, F)} -> {u(H, F)}
  %gate = coat.linear forward %ln, %wg_q : {q(T, H)}, {u(F, H)} -> {t(T, F)}
  %up = coat.linear forward %ln, %wu_q : {q(T, H)}, {u(F, H)} -> {t(T, F)}
  %gate_q = coat.quantize_auto %gate : {t(T, F)} -> {u(T, F)}
  %up_q = coat.quantize_auto %up : {t(T, F)} -> {u(T, F)}
  %act = coat.silu %gate_q : {u(T, F)} -> {q(T, F, scaling=g)}
  %m, %m_t = coat.swiglu_mul %act, %up_q : {q(T, F, scaling=g)}, {u(T, F)}
      -> {q(T, F)}, {q(F, T)}
  %down = coat.linear forward %m, %wd_q : {q(T, F)}, {u(H, F)} -> {t(T, H)}
  %h_out, %h_out_q = coat.residual_add %h, %down : {t(T, H)}, {t(T, H)}
      -> {t(T, H)}, {q(T, H, scaling=g)}

  %dout_q = coat.quantize_auto %dout : {t(T, H)} -> {u(T, H)}
  %dout_t = coat.transpose %dout_q : {u(T, H)} -> {u(H, T)}
  %wd_t = coat.transpose %wd_q : {u(H, F)} -> {u(F, H)}
  %dm = coat.linear dgrad %dout_q, %wd_t : {u(T, H)}, {u(F, H)} -> {t(T, F)}
  %dw_down = coat.linear wgrad %dout_t, %m_t : {u(H, T)}, {q(F, T)} -> {t(H, F)}
  %dact, %dup = coat.swiglu_mul_grad %act, %up_q, %dm
      : {q(T, F, scaling=g)}, {u(T, F)}, {t(T, F)} -> {t(T, F)}, {t(T, F)}
  %dgate = coat.silu_grad %gate_q, %dact : {u(T, F)}, {t(T, F)} -> {t(T, F)}
  %dgate_q = coat.quantize_auto %dgate : {t(T, F)} -> {u(T, F)}
  %dgate_t = coat.transpose %dgate_q : {u(T, F)} -> {u(F, T)}
  %dup_q = coat.quantize_auto %dup : {t(T, F)} -> {u(T, F)}
  %dup_t = coat.transpose %dup_q : {u(T, F)} -> {u(F, T)}
  %wg_t = coat.transpose %wg_q : {u(F, H)} -> {u(H, F)}
  %wu_t = coat.transpose %wu_q : {u(F, H)} -> {u(H, F)}
  %dx_gate = coat.linear dgrad %dgate_q, %wg_t : {u(T, F)}, {u(H, F)} -> {t(T, H)}
  %dw_gate = coat.linear wgrad %dgate_t, %ln_t : {u(F, T)}, {q(H, T)} -> {t(F, H)}
  %dx_up = coat.linear dgrad %dup_q, %wu_t : {u(T, F)}, {u(H, F)} -> {t(T, H)}
  %dw_up = coat.linear wgrad %dup_t, %ln_t : {u(F, T)}, {q(H, T)} -> {t(F, H)}
  %dln = coat.residual_add_grad %dx_gate, %dx_up : {t(T, H)}, {t(T, H)} -> {t(T, H)}
  %dx_norm, %dw_norm = coat.rmsnorm_grad %h_q, %w_norm, %rstd, %dln
      : {u(T, H)}, {t(H)}, {t(T, dtype="f32")}, {t(T, H)} -> {t(T, H)}, {t(H)}
  %dh, %dh_q = coat.residual_add_grad %dout, %dx_norm : {t(T, H)}, {t(T, H)}
      -> {t(T, H)}, {q(T, H, fmt="f8E5M2")}
  return %h_out, %h_out_q, %dh, %dh_q, %dw_norm, %dw_gate, %dw_up, %dw_down
      : {t(T, H)}, {q(T, H, scaling=g)}, {t(T, H)}, {q(T, H, fmt="f8E5M2")},
        {t(H)}, {t(F, H)}, {t(F, H)}, {t(H, F)}
}}
"""

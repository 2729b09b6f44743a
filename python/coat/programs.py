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
``coat-compile-artifact`` writes tells an executor which backward output
belongs to which input.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Extent of the token dimension in generated programs (run-time).
TOKENS = "?"


def _check_features(what: str, group: int, **dims) -> None:
    for name, v in dims.items():
        if v <= 0 or v % group:
            raise ValueError(f"{what}: {name} = {v} must be a positive multiple of the "
                             f"group size {group}")


def _t(*dims, dtype="bf16"):
    return "tensor<" + "x".join(str(d) for d in dims) + f"x{dtype}>"


def _u(*dims):
    return "!coat.unresolved<" + "x".join(str(d) for d in dims) + "xbf16>"


def _q(*dims, fmt="f8E4M3FN", scaling="per_tensor"):
    return ("!coat.qtensor<" + "x".join(str(d) for d in dims) +
            f"x{fmt}, {scaling}, scale = bf16>")


#: The program attribute that keeps the backward GEMMs' per-tensor FP8
#: operands from the forward (coat-recompute-activations).
KEEP_GEMM_OPERANDS_ATTR = "coat.keep_gemm_operands"


def _function_attrs(keep_gemm_operands: bool) -> str:
    """The ``attributes {...}`` of a program's function: none by default, so
    the text (and the compiled artifact's key) of a program without the
    choice is what it was before the choice existed."""
    return f" attributes {{{KEEP_GEMM_OPERANDS_ATTR} = true}}" if keep_gemm_operands else ""


class _Bias:
    """The text a linear layer's optional bias adds to a program: the
    argument ``name`` ([out] bf16, a weight) right after the layer's weight,
    the ``bias`` operand of its forward GEMM, the gradient ``d<name>``
    (``coat.bias_grad`` of the layer's output gradient ``dy``: [T, out]) and
    its result, the gradient of argument ``grad_of``. Without a bias every
    piece is empty, so the program is the bias-free one byte for byte."""

    def __init__(self, on: bool, name: str, dy: str, tokens, out: int, grad_of: int,
                 indent: str = "    "):
        grad = "%d" + name[1:]
        self.arg = f"\n{indent}{name}: {_t(out)} {{coat.weight}}," if on else ""
        self.operand = f" bias {name}" if on else ""
        self.type = f", {_t(out)}" if on else ""
        self.grad = (f"\n  {grad} = coat.bias_grad {dy} : {_t(tokens, out)} -> {_t(out)}"
                     if on else "")
        self.result = f", {_t(out)} {{coat.grad_of = {grad_of} : i64}}" if on else ""
        self.returned = f", {grad}" if on else ""


#: GELU's forms as torch names them (``approximate``): exact (erf), tanh.
GELU_APPROXIMATIONS = ("none", "tanh")

#: What a pre-norm's options are called in errors and names.
_NORMS = ("rmsnorm", "layernorm")


def _check_norm(what: str, norm: str, affine: bool) -> None:
    if norm not in _NORMS:
        raise ValueError(f"{what}: norm {norm!r} is not rmsnorm or layernorm")
    if not affine and norm != "layernorm":
        raise ValueError(f"{what}: norm_affine=False needs norm='layernorm' (coat.rmsnorm "
                         "takes a weight)")


def _norm_tag(norm: str, affine: bool) -> str:
    """The part of a program name that tells its norm: none for RMSNorm
    (the names programs had before LayerNorm was possible), ``ln`` for a
    LayerNorm with weight and bias, ``ln_noaffine`` for one without (OLMo)."""
    if norm == "rmsnorm":
        return ""
    return "ln" if affine else "ln_noaffine"


class _PreNorm:
    """The text of the norm a block applies to its input ``x`` (an
    unresolved [T, H] FP8 value) before its first GEMMs: the forward line
    giving ``%ln`` (per-tensor FP8), its transpose ``%ln_t`` and the
    statistics, the backward line giving ``dx`` from ``%dln``, and the
    norm's weight arguments and their gradients (in argument order).

    ``rmsnorm``: weight ``%w_norm``. ``layernorm``: weight ``%w_norm`` and
    bias ``%b_norm``; with ``affine=False`` neither (OLMo's LayerNorm, which
    has no parameters: the program takes no norm argument and returns no
    norm gradient)."""

    def __init__(self, norm: str, affine: bool, x: str, dx: str, eps: float, T, H: int):
        t, u, q = _t, _u, _q
        f32 = t(T, dtype="f32")
        if norm == "rmsnorm":
            self.weights = [("%w_norm", t(H))]
            self.grads = ["%dw_norm"]
            self.fwd = f"""\
  %ln, %rstd, %ln_t = coat.rmsnorm {x}, %w_norm eps = {eps:e}
      : {u(T, H)}, {t(H)} -> {q(T, H)}, {f32}, {q(H, T)}"""
            self.bwd = f"""\
  {dx}, %dw_norm = coat.rmsnorm_grad {x}, %w_norm, %rstd, %dln
      : {u(T, H)}, {t(H)}, {f32}, {t(T, H)} -> {t(T, H)}, {t(H)}"""
        elif affine:
            self.weights = [("%w_norm", t(H)), ("%b_norm", t(H))]
            self.grads = ["%dw_norm", "%db_norm"]
            self.fwd = f"""\
  %ln, %mean, %rstd, %ln_t = coat.layernorm {x} weight %w_norm bias %b_norm eps = {eps:e}
      : {u(T, H)}, {t(H)}, {t(H)} -> {q(T, H)}, {f32}, {f32}, {q(H, T)}"""
            self.bwd = f"""\
  {dx}, %dw_norm, %db_norm = coat.layernorm_grad {x}, %mean, %rstd, %dln weight %w_norm
      : {u(T, H)}, {f32}, {f32}, {t(T, H)}, {t(H)} -> {t(T, H)}, {t(H)}, {t(H)}"""
        else:
            self.weights, self.grads = [], []
            self.fwd = f"""\
  %ln, %mean, %rstd, %ln_t = coat.layernorm {x} eps = {eps:e}
      : {u(T, H)} -> {q(T, H)}, {f32}, {f32}, {q(H, T)}"""
            self.bwd = f"""\
  {dx} = coat.layernorm_grad {x}, %mean, %rstd, %dln
      : {u(T, H)}, {f32}, {f32}, {t(T, H)} -> {t(T, H)}"""
        self.types = [ty for _, ty in self.weights]
        #: the weight arguments, each on a line of its own after the last
        self.args = "".join(f"\n    {n}: {ty} {{coat.weight}}," for n, ty in self.weights)


@dataclass(frozen=True)
class MLPBlockConfig:
    """A Llama MLP block: RMSNorm, gate/up projections, SiLU, SwiGLU
    product, down projection, residual add (COAT.md §3.5, §3.6).

    ``norm="layernorm"``: a LayerNorm in place of the RMSNorm, with weight
    and bias, or with ``norm_affine=False`` without either (OLMo's
    LayerNorm: the program then takes no norm argument).

    ``keep_gemm_operands``: the backward's GEMMs read the per-tensor FP8
    operands the forward made (the norm output's and the SwiGLU product's
    transposed copies), kept for them, instead of deriving them again from
    the 1x16 values (``coat.keep_gemm_operands`` on the program: more memory
    between the forward and the backward, fewer kernels in the backward;
    silu(gate) is still derived again). The name ends in ``_kg``."""

    hidden: int
    ffn: int
    eps: float = 1e-5
    group_size: int = 16
    norm: str = "rmsnorm"
    norm_affine: bool = True
    keep_gemm_operands: bool = False

    def check(self) -> None:
        _check_features("MLPBlockConfig", self.group_size, hidden=self.hidden, ffn=self.ffn)
        _check_norm("MLPBlockConfig", self.norm, self.norm_affine)

    @property
    def name(self) -> str:
        # RMSNorm keeps the names programs had before the norm was a choice.
        norm = _norm_tag(self.norm, self.norm_affine)
        return (f"coat_mlp{'_' + norm if norm else ''}_h{self.hidden}_f{self.ffn}"
                f"{'_kg' if self.keep_gemm_operands else ''}")

    def text(self) -> str:
        return mlp_block(self)


@dataclass(frozen=True)
class NormLinearConfig:
    """RMSNorm (``norm="rmsnorm"``, weight) or LayerNorm (``norm="layernorm"``,
    weight and bias; with ``norm_affine=False`` neither, OLMo's) then one
    projection: an attention block's input side,
    with q, k and v as one GEMM over their stacked weights (``out`` rows; the
    GEMM does not care how q, k and v rows are ordered, so GPT-NeoX's fused
    per-head weight is taken as it is). ``bias``: the projection adds a bias
    (Qwen2's and GPT-NeoX's q/k/v biases).

    With ``rope_head_dim`` d (and ``rope_heads``, the q and k heads: heads +
    kv_heads) the program also applies the rotary embedding to the first
    ``rope_heads`` heads of d columns of its output (``coat.rope``, HF
    layout), from tables it takes as two more inputs, and its backward takes
    the gradient of the rotated output through ``coat.rope_grad``. The
    rotation reads the GEMM's output once and writes q and k over it; v is
    not touched.

    ``recompute_output``: the projection is marked ``coat.recompute``: the
    caller may drop it after the forward and ask the program for it again
    in the backward (``coat-recompute-activations`` appends the recomputed
    copy as a last result, in the manifest's ``recompute`` phase; the
    backward keeps the norm input's 1x16 copy anyway and W is a weight, so
    nothing more is kept for it). The name ends in ``_rc``.

    ``keep_gemm_operands``: the wgrad reads the norm output's transposed
    per-tensor FP8 copy the forward made, kept for it, instead of the
    backward deriving it again from the 1x16 input (``coat.keep_gemm_operands``
    on the program, :class:`MLPBlockConfig`'s). The name ends in ``_kg``
    (after ``_rc``)."""

    hidden: int
    out: int
    eps: float = 1e-5
    group_size: int = 16
    bias: bool = False
    rope_head_dim: int = 0
    rope_heads: int = 0
    norm: str = "rmsnorm"
    norm_affine: bool = True
    recompute_output: bool = False
    keep_gemm_operands: bool = False

    @property
    def rope(self) -> bool:
        return bool(self.rope_head_dim or self.rope_heads)

    def check(self) -> None:
        _check_features("NormLinearConfig", self.group_size, hidden=self.hidden, out=self.out)
        _check_norm("NormLinearConfig", self.norm, self.norm_affine)
        if not self.rope:
            return
        d, n = self.rope_head_dim, self.rope_heads
        if d <= 0 or d % 2 or n <= 0:
            raise ValueError(f"NormLinearConfig: rope_head_dim = {d} must be positive and "
                             f"even, rope_heads = {n} positive")
        if self.out % d or n * d > self.out:
            raise ValueError(f"NormLinearConfig: {n} rotated heads of {d} columns do not fit "
                             f"in whole heads of the {self.out} output columns")
        # The backward's 1xG maxima are fused into the rotation's kernel,
        # whose lanes keep a group inside half a head.
        if (d // 2) % self.group_size:
            raise ValueError(f"NormLinearConfig: rope_head_dim / 2 = {d // 2} must be a "
                             f"multiple of the group size {self.group_size}")

    @property
    def name(self) -> str:
        rope = f"_rope{self.rope_heads}x{self.rope_head_dim}" if self.rope else ""
        # RMSNorm keeps the names programs had before LayerNorm was possible.
        norm = _norm_tag(self.norm, self.norm_affine)
        norm = "_" + norm if norm else ""
        return (f"coat_norm_linear{norm}_h{self.hidden}_o{self.out}"
                f"{'_b' if self.bias else ''}{rope}{'_rc' if self.recompute_output else ''}"
                f"{'_kg' if self.keep_gemm_operands else ''}")

    def text(self) -> str:
        """Arguments: the stream h, the norm weight (and with LayerNorm its
        bias; neither without affine parameters), W (out x hidden), with
        ``bias`` the bias (out), with RoPE the tables cos and sin ([tokens,
        rope_head_dim] f32: one row per token, no gradient), then the
        gradient of the (rotated) projection. Results: the projection
        (forward; q and k rotated with RoPE), the gradient of h through the
        norm, the norm's weight (and bias) gradients, W's and the bias's
        gradients."""
        self.check()
        T, H, O = TOKENS, self.hidden, self.out
        norm = _PreNorm(self.norm, self.norm_affine, "%h_q", "%dh", self.eps, T, H)
        # W and its bias come after the norm's arguments.
        w_at = 1 + len(norm.weights)
        norm_results = "".join(f"\n        {ty} {{coat.grad_of = {i + 1} : i64}},"
                               for i, ty in enumerate(norm.types))
        norm_grads = "".join(f", {g}" for g in norm.grads)
        norm_types = "".join(f", {ty}" for ty in norm.types)
        tables = rotate = rotate_back = ""
        y, dy = "%y", "%dy"
        if self.rope:
            n, tab = self.rope_heads, _t(T, self.rope_head_dim, dtype="f32")
            tables = f"""
    %cos: {tab},
    %sin: {tab},"""
            rotate = f"""
  %y_rot = coat.rope %y, %cos, %sin rotated_heads = {n}
      : {_t(T, O)}, {tab}, {tab} -> {_t(T, O)}"""
            rotate_back = f"""
  %dy_unrot = coat.rope_grad %dy, %cos, %sin rotated_heads = {n}
      : {_t(T, O)}, {tab}, {tab} -> {_t(T, O)}"""
            y, dy = "%y_rot", "%dy_unrot"
        # The bias is added before the rotation: its gradient is of the
        # unrotated output.
        b = _Bias(self.bias, "%b", dy, T, O, grad_of=w_at + 1)
        recompute = " {coat.recompute}" if self.recompute_output else ""
        return f"""\
func.func @{self.name}(
    %h: {_t(T, H)},{norm.args}
    %w: {_t(O, H)} {{coat.weight}},{b.arg}{tables}
    %dy: {_t(T, O)} {{coat.gradient, coat.grad_of = 0 : i64}})
    -> ({_t(T, O)}{recompute}, {_t(T, H)} {{coat.grad_of = 0 : i64}},{norm_results} {_t(O, H)} {{coat.grad_of = {w_at} : i64}}{b.result}){_function_attrs(self.keep_gemm_operands)} {{
  %h_q = coat.quantize_auto %h : {_t(T, H)} -> {_u(T, H)}
{norm.fwd}
  %w_q = coat.quantize_auto %w : {_t(O, H)} -> {_u(O, H)}
  %y = coat.linear forward %ln, %w_q{b.operand} : {_q(T, H)}, {_u(O, H)}{b.type} -> {_t(T, O)}{rotate}
{rotate_back}
  %dy_q = coat.quantize_auto {dy} : {_t(T, O)} -> {_u(T, O)}
  %dy_t = coat.transpose %dy_q : {_u(T, O)} -> {_u(O, T)}
  %w_t = coat.transpose %w_q : {_u(O, H)} -> {_u(H, O)}
  %dln = coat.linear dgrad %dy_q, %w_t : {_u(T, O)}, {_u(H, O)} -> {_t(T, H)}
  %dw = coat.linear wgrad %dy_t, %ln_t : {_u(O, T)}, {_q(H, T)} -> {_t(O, H)}{b.grad}
{norm.bwd}
  return {y}, %dh{norm_grads}, %dw{b.returned} : {_t(T, O)}, {_t(T, H)}{norm_types}, {_t(O, H)}{b.type}
}}
"""


@dataclass(frozen=True)
class LinearResidualConfig:
    """One projection added to the residual stream: an attention block's
    output side (``h + W_o a``, ``+ b`` with ``bias``).

    ``input_kept_by_caller``: the caller keeps ``a`` for its own backward
    anyway (PyTorch's attention saves its output), so ``a`` is marked
    ``coat.kept_by_caller``: the backward reads it and quantizes the wgrad's
    transposed FP8 copy again instead of keeping it (one byte an element
    less between the forward and the backward, one more quantization of
    ``a`` in the backward; the same bits). Names end in ``_kc``."""

    inner: int
    hidden: int
    group_size: int = 16
    bias: bool = False
    input_kept_by_caller: bool = False

    def check(self) -> None:
        _check_features("LinearResidualConfig", self.group_size, inner=self.inner,
                        hidden=self.hidden)

    @property
    def name(self) -> str:
        return (f"coat_linear_residual_i{self.inner}_h{self.hidden}{'_b' if self.bias else ''}"
                f"{'_kc' if self.input_kept_by_caller else ''}")

    def text(self) -> str:
        """Arguments: the stream h, the projection's input a, W (hidden x
        inner), with ``bias`` the bias (hidden), the gradient of the new
        stream. Results: the new stream (forward), the gradients of h (the
        incoming one: the residual passes it through), of a, of W and of
        the bias."""
        self.check()
        T, H, I = TOKENS, self.hidden, self.inner
        g = f"per_group<{self.group_size}>"
        b = _Bias(self.bias, "%b", "%dout", T, H, grad_of=3)
        return f"""\
func.func @{self.name}(
    %h: {_t(T, H)},
    %a: {_t(T, I)}{" {coat.kept_by_caller}" if self.input_kept_by_caller else ""},
    %w: {_t(H, I)} {{coat.weight}},{b.arg}
    %dout: {_t(T, H)} {{coat.gradient, coat.grad_of = 0 : i64}})
    -> ({_t(T, H)},
        {_t(T, H)} {{coat.grad_of = 0 : i64}}, {_t(T, I)} {{coat.grad_of = 1 : i64}},
        {_t(H, I)} {{coat.grad_of = 2 : i64}}{b.result}) {{
  %a_q = coat.quantize_auto %a : {_t(T, I)} -> {_u(T, I)}
  %a_t = coat.transpose %a_q : {_u(T, I)} -> {_u(I, T)}
  %w_q = coat.quantize_auto %w : {_t(H, I)} -> {_u(H, I)}
  %o = coat.linear forward %a_q, %w_q{b.operand} : {_u(T, I)}, {_u(H, I)}{b.type} -> {_t(T, H)}
  %h_out = coat.residual_add %h, %o : {_t(T, H)}, {_t(T, H)}
      -> {_t(T, H)}

  %dout_q = coat.quantize_auto %dout : {_t(T, H)} -> {_u(T, H)}
  %dout_t = coat.transpose %dout_q : {_u(T, H)} -> {_u(H, T)}
  %w_t = coat.transpose %w_q : {_u(H, I)} -> {_u(I, H)}
  %da = coat.linear dgrad %dout_q, %w_t : {_u(T, H)}, {_u(I, H)} -> {_t(T, I)}
  %dw = coat.linear wgrad %dout_t, %a_t : {_u(H, T)}, {_u(I, T)} -> {_t(H, I)}{b.grad}
  return %h_out, %dout, %da, %dw{b.returned}
      : {_t(T, H)}, {_t(T, H)}, {_t(T, I)}, {_t(H, I)}{b.type}
}}
"""


def _swiglu(T, H, F, g: str, x: str, x_type: str, x_t: str, x_t_type: str, dy: str,
            dy_t: str):
    """The lines of a SwiGLU MLP between its input and its output (both
    [T, H]) that the gated MLP programs share: (forward from the weights'
    quantization to ``%down``, backward from ``%wd_t`` to ``%dw_up``). ``x``
    (of ``x_type``) feeds the gate and up GEMMs and ``x_t`` their wgrads;
    ``dy``/``dy_t`` are the FP8 gradient of ``%down`` and its transpose."""
    t, u, q = _t, _u, _q
    fwd = f"""\
  %wg_q = coat.quantize_auto %w_gate : {t(F, H)} -> {u(F, H)}
  %wu_q = coat.quantize_auto %w_up : {t(F, H)} -> {u(F, H)}
  %wd_q = coat.quantize_auto %w_down : {t(H, F)} -> {u(H, F)}
  %gate = coat.linear forward {x}, %wg_q : {x_type}, {u(F, H)} -> {t(T, F)}
  %up = coat.linear forward {x}, %wu_q : {x_type}, {u(F, H)} -> {t(T, F)}
  %gate_q = coat.quantize_auto %gate : {t(T, F)} -> {u(T, F)}
  %up_q = coat.quantize_auto %up : {t(T, F)} -> {u(T, F)}
  %act = coat.silu %gate_q : {u(T, F)} -> {q(T, F, scaling=g)}
  %m, %m_t = coat.swiglu_mul %act, %up_q : {q(T, F, scaling=g)}, {u(T, F)}
      -> {q(T, F)}, {q(F, T)}
  %down = coat.linear forward %m, %wd_q : {q(T, F)}, {u(H, F)} -> {t(T, H)}
"""
    bwd = f"""\
  %wd_t = coat.transpose %wd_q : {u(H, F)} -> {u(F, H)}
  %dm = coat.linear dgrad {dy}, %wd_t : {u(T, H)}, {u(F, H)} -> {t(T, F)}
  %dw_down = coat.linear wgrad {dy_t}, %m_t : {u(H, T)}, {q(F, T)} -> {t(H, F)}
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
  %dw_gate = coat.linear wgrad %dgate_t, {x_t} : {u(F, T)}, {x_t_type} -> {t(F, H)}
  %dx_up = coat.linear dgrad %dup_q, %wu_t : {u(T, F)}, {u(H, F)} -> {t(T, H)}
  %dw_up = coat.linear wgrad %dup_t, {x_t} : {u(F, T)}, {x_t_type} -> {t(F, H)}
"""
    return fwd, bwd


def mlp_block(cfg: MLPBlockConfig) -> str:
    """The MLIR text of the block's program ``@<cfg.name>``.

    Arguments: the residual stream h (T x H bf16), the norm's weight (and
    with an affine LayerNorm its bias; nothing without affine parameters),
    W_gate and W_up (F x H), W_down (H x F), and the incoming gradient of the
    new stream. Results: the new stream (forward), then the gradient of h
    and the gradients of the norm's parameters and of the three weights
    (backward). (The stream's FP8 copies, COAT's 1x16 E4M3 one and the
    gradient's per-tensor E5M2 one, are not results: no caller reads them
    yet, and the next program quantizes what it reads itself.)"""
    cfg.check()
    T, H, F = TOKENS, cfg.hidden, cfg.ffn

    t, u, q = _t, _u, _q

    g = f"per_group<{cfg.group_size}>"
    norm = _PreNorm(cfg.norm, cfg.norm_affine, "%h_q", "%dx_norm", cfg.eps, T, H)
    fwd, bwd = _swiglu(T, H, F, g, "%ln", q(T, H), "%ln_t", q(H, T), "%dout_q", "%dout_t")
    # The gradients of every weight argument, two to a line.
    weights = norm.weights + [("%w_gate", t(F, H)), ("%w_up", t(F, H)), ("%w_down", t(H, F))]
    grads = [f"{ty} {{coat.grad_of = {i + 1} : i64}}" for i, (_, ty) in enumerate(weights)]
    grad_results = ",\n        ".join(", ".join(grads[i:i + 2])
                                       for i in range(0, len(grads), 2))
    returned = ", ".join(norm.grads + ["%dw_gate", "%dw_up", "%dw_down"])
    types = ", ".join(ty for _, ty in weights)
    return f"""\
func.func @{cfg.name}(
    %h: {t(T, H)},{norm.args}
    %w_gate: {t(F, H)} {{coat.weight}},
    %w_up: {t(F, H)} {{coat.weight}},
    %w_down: {t(H, F)} {{coat.weight}},
    %dout: {t(T, H)} {{coat.gradient, coat.grad_of = 0 : i64}})
    -> ({t(T, H)},
        {t(T, H)} {{coat.grad_of = 0 : i64}},
        {grad_results}){_function_attrs(cfg.keep_gemm_operands)} {{
  %h_q = coat.quantize_auto %h : {t(T, H)} -> {u(T, H)}
{norm.fwd}
{fwd}  %h_out = coat.residual_add %h, %down : {t(T, H)}, {t(T, H)}
      -> {t(T, H)}

  %dout_q = coat.quantize_auto %dout : {t(T, H)} -> {u(T, H)}
  %dout_t = coat.transpose %dout_q : {u(T, H)} -> {u(H, T)}
{bwd}  %dln = coat.residual_add_grad %dx_gate, %dx_up : {t(T, H)}, {t(T, H)} -> {t(T, H)}
{norm.bwd}
  %dh = coat.residual_add_grad %dout, %dx_norm : {t(T, H)}, {t(T, H)}
      -> {t(T, H)}
  return %h_out, %dh, {returned}
      : {t(T, H)}, {t(T, H)},
        {types}
}}
"""


@dataclass(frozen=True)
class GeluMLPConfig:
    """A non-gated MLP block (GPT-NeoX, GPT-2): LayerNorm (weight and bias,
    ``norm="layernorm"``) or RMSNorm (weight), the up projection, GELU, the
    down projection, residual add; with ``bias`` both projections add a
    bias. ``approximate`` is GELU's form as torch names it: "none", exact
    (erf; GPT-NeoX's "gelu"), or "tanh" (GPT-2's "gelu_new"), the
    ``approximate`` of coat.gelu and coat.gelu_grad; programs of the tanh
    form are named ``..._tanh``. The up projection's output is quantized 1x16 in its GEMM's
    epilogue, after the bias (the GELU reads it), and the GELU writes the
    per-tensor copy the down projection reads (COAT.md §3.5).

    ``residual="input"``: the MLP's input h is the stream its output is
    added to (``h + mlp(norm(h))``). ``residual="separate"``: the stream h
    and the norm's input x are two arguments (``h + mlp(norm(x))``), as in
    GPT-NeoX's parallel residual, where x is the layer's input and h = x +
    attention(x); each gets its own gradient.

    ``keep_gemm_operands``: the wgrads read the norm output's and the
    GELU's transposed per-tensor FP8 copies the forward made, kept for them,
    instead of the backward deriving them again (:class:`MLPBlockConfig`'s).
    The name ends in ``_kg``."""

    hidden: int
    ffn: int
    norm: str = "layernorm"
    bias: bool = True
    eps: float = 1e-5
    group_size: int = 16
    residual: str = "input"
    approximate: str = "none"
    keep_gemm_operands: bool = False

    def check(self) -> None:
        _check_features("GeluMLPConfig", self.group_size, hidden=self.hidden, ffn=self.ffn)
        if self.norm not in ("layernorm", "rmsnorm"):
            raise ValueError(f"GeluMLPConfig: norm {self.norm!r} is not layernorm or rmsnorm")
        if self.residual not in ("input", "separate"):
            raise ValueError(f"GeluMLPConfig: residual {self.residual!r} is not input or "
                             "separate")
        if self.approximate not in GELU_APPROXIMATIONS:
            raise ValueError(f"GeluMLPConfig: approximate {self.approximate!r} is not "
                             f"{' or '.join(GELU_APPROXIMATIONS)}")

    @property
    def name(self) -> str:
        norm = "ln" if self.norm == "layernorm" else "rms"
        # residual="input" and the exact GELU keep the names programs had
        # before those options.
        sep = "_separate_residual" if self.residual == "separate" else ""
        form = "_tanh" if self.approximate == "tanh" else ""
        return (f"coat_gelu_mlp_{norm}_h{self.hidden}_f{self.ffn}"
                f"{'_b' if self.bias else ''}{sep}{form}"
                f"{'_kg' if self.keep_gemm_operands else ''}")

    def text(self) -> str:
        """Arguments: the residual stream h (T x H bf16), with
        ``residual="separate"`` the norm's input x (T x H bf16), the norm
        weight (and LayerNorm bias), W_up (F x H) (and its bias, F), W_down
        (H x F) (and its bias, H), the incoming gradient of the new stream.
        Results: the new stream (forward), then the gradient of h
        (separate: the gradient of h, which the residual passes through, and
        of x), and the gradient of every weight and bias in argument order
        (backward)."""
        self.check()
        T, H, F = TOKENS, self.hidden, self.ffn
        t, u, q = _t, _u, _q
        g = f"per_group<{self.group_size}>"
        separate = self.residual == "separate"
        # The exact form is the ops' default: its text is the one programs
        # had before the option.
        form = ' {approximate = "tanh"}' if self.approximate == "tanh" else ""
        # What the norm reads: h itself, or x.
        x = "%x" if separate else "%h"
        # Arguments after h (and x): the norm's, then each projection's
        # weight and bias; every one of them gets a gradient, in that order.
        first = 2 if separate else 1
        pre = _PreNorm(self.norm, True, f"{x}_q", "%dx_norm", self.eps, T, H)
        norm, norm_grad, norm_grads = pre.fwd, pre.bwd, pre.grads
        weights = list(pre.weights)
        up_at = len(weights) + first
        weights.append(("%w_up", t(F, H)))
        down_at = up_at + 1 + self.bias
        b_up = _Bias(self.bias, "%b_up", "%dup", T, F, grad_of=up_at + 1)
        b_down = _Bias(self.bias, "%b_down", "%dout", T, H, grad_of=down_at + 1)
        args = "".join(f"\n    {n}: {ty} {{coat.weight}}," for n, ty in weights)
        grads = [(n, ty, i + first) for i, (n, ty) in enumerate(weights[:-1])]
        grad_results = "".join(f",\n        {ty} {{coat.grad_of = {i} : i64}}"
                               for _, ty, i in grads)
        returned = ", ".join(norm_grads)
        types = ", ".join(ty for _, ty, _ in grads)
        if separate:
            # The residual passes dout through to h; x's gradient is the
            # norm's alone here (autograd adds the attention's to it).
            x_arg = f"\n    %x: {t(T, H)},"
            stream_grads = f", {t(T, H)} {{coat.grad_of = 1 : i64}}"
            residual_grad = ""
            returned_stream = "%dout, %dx_norm"
            stream_types = f"{t(T, H)}, {t(T, H)}"
        else:
            x_arg = ""
            stream_grads = ""
            residual_grad = f"""
  %dh = coat.residual_add_grad %dout, %dx_norm : {t(T, H)}, {t(T, H)}
      -> {t(T, H)}"""
            returned_stream = "%dh"
            stream_types = f"{t(T, H)}"
        return f"""\
func.func @{self.name}(
    %h: {t(T, H)},{x_arg}{args}{b_up.arg}
    %w_down: {t(H, F)} {{coat.weight}},{b_down.arg}
    %dout: {t(T, H)} {{coat.gradient, coat.grad_of = 0 : i64}})
    -> ({t(T, H)},
        {t(T, H)} {{coat.grad_of = 0 : i64}}{stream_grads}{grad_results},
        {t(F, H)} {{coat.grad_of = {up_at} : i64}}{b_up.result},
        {t(H, F)} {{coat.grad_of = {down_at} : i64}}{b_down.result}){_function_attrs(self.keep_gemm_operands)} {{
  {x}_q = coat.quantize_auto {x} : {t(T, H)} -> {u(T, H)}
{norm}
  %wu_q = coat.quantize_auto %w_up : {t(F, H)} -> {u(F, H)}
  %wd_q = coat.quantize_auto %w_down : {t(H, F)} -> {u(H, F)}
  %up = coat.linear forward %ln, %wu_q{b_up.operand} : {q(T, H)}, {u(F, H)}{b_up.type} -> {t(T, F)}
  %up_q = coat.quantize_auto %up : {t(T, F)} -> {u(T, F)}
  %act, %act_t = coat.gelu %up_q{form} : {u(T, F)} -> {q(T, F)}, {q(F, T)}
  %down = coat.linear forward %act, %wd_q{b_down.operand} : {q(T, F)}, {u(H, F)}{b_down.type} -> {t(T, H)}
  %h_out = coat.residual_add %h, %down : {t(T, H)}, {t(T, H)}
      -> {t(T, H)}

  %dout_q = coat.quantize_auto %dout : {t(T, H)} -> {u(T, H)}
  %dout_t = coat.transpose %dout_q : {u(T, H)} -> {u(H, T)}
  %wd_t = coat.transpose %wd_q : {u(H, F)} -> {u(F, H)}
  %dact = coat.linear dgrad %dout_q, %wd_t : {u(T, H)}, {u(F, H)} -> {t(T, F)}
  %dw_down = coat.linear wgrad %dout_t, %act_t : {u(H, T)}, {q(F, T)} -> {t(H, F)}{b_down.grad}
  %dup = coat.gelu_grad %up_q, %dact{form} : {u(T, F)}, {t(T, F)} -> {t(T, F)}
  %dup_q = coat.quantize_auto %dup : {t(T, F)} -> {u(T, F)}
  %dup_t = coat.transpose %dup_q : {u(T, F)} -> {u(F, T)}
  %wu_t = coat.transpose %wu_q : {u(F, H)} -> {u(H, F)}
  %dln = coat.linear dgrad %dup_q, %wu_t : {u(T, F)}, {u(H, F)} -> {t(T, H)}
  %dw_up = coat.linear wgrad %dup_t, %ln_t : {u(F, T)}, {q(H, T)} -> {t(F, H)}{b_up.grad}
{norm_grad}{residual_grad}
  return %h_out, {returned_stream}, {returned}, %dw_up{b_up.returned}, %dw_down{b_down.returned}
      : {t(T, H)}, {stream_types},
        {types}, {t(F, H)}{b_up.type}, {t(H, F)}{b_down.type}
}}
"""


@dataclass(frozen=True)
class LinearConfig:
    """``y = x W^T`` (``+ b`` with ``bias``): per-tensor E4M3 operands
    forward, E5M2 output gradient, dgrad and wgrad as FP8 GEMMs; the input
    is kept for the backward as its FP8 transpose only. The bias is added
    in the GEMM's epilogue and its gradient summed in the kernel that reads
    dy for its scale (coat.bias_grad)."""

    inner: int
    out: int
    group_size: int = 16
    bias: bool = False

    def check(self) -> None:
        _check_features("LinearConfig", self.group_size, inner=self.inner, out=self.out)

    @property
    def name(self) -> str:
        return f"coat_linear_i{self.inner}_o{self.out}{'_b' if self.bias else ''}"

    def text(self) -> str:
        """Arguments: x (T x inner), W (out x inner), with ``bias`` the bias
        (out), the gradient of y. Results: y (forward), the gradients of x,
        W and the bias (backward)."""
        self.check()
        T, I, O = TOKENS, self.inner, self.out
        b = _Bias(self.bias, "%b", "%dy", T, O, grad_of=2)
        return f"""\
func.func @{self.name}(
    %x: {_t(T, I)},
    %w: {_t(O, I)} {{coat.weight}},{b.arg}
    %dy: {_t(T, O)} {{coat.gradient, coat.grad_of = 0 : i64}})
    -> ({_t(T, O)}, {_t(T, I)} {{coat.grad_of = 0 : i64}},
        {_t(O, I)} {{coat.grad_of = 1 : i64}}{b.result}) {{
  %x_q = coat.quantize_auto %x : {_t(T, I)} -> {_u(T, I)}
  %x_t = coat.transpose %x_q : {_u(T, I)} -> {_u(I, T)}
  %w_q = coat.quantize_auto %w : {_t(O, I)} -> {_u(O, I)}
  %y = coat.linear forward %x_q, %w_q{b.operand} : {_u(T, I)}, {_u(O, I)}{b.type} -> {_t(T, O)}

  %dy_q = coat.quantize_auto %dy : {_t(T, O)} -> {_u(T, O)}
  %dy_t = coat.transpose %dy_q : {_u(T, O)} -> {_u(O, T)}
  %w_t = coat.transpose %w_q : {_u(O, I)} -> {_u(I, O)}
  %dx = coat.linear dgrad %dy_q, %w_t : {_u(T, O)}, {_u(I, O)} -> {_t(T, I)}
  %dw = coat.linear wgrad %dy_t, %x_t : {_u(O, T)}, {_u(I, T)} -> {_t(O, I)}{b.grad}
  return %y, %dx, %dw{b.returned} : {_t(T, O)}, {_t(T, I)}, {_t(O, I)}{b.type}
}}
"""


@dataclass(frozen=True)
class NormConfig:
    """RMSNorm (``kind="rmsnorm"``, with weight) or LayerNorm
    (``kind="layernorm"``, with weight and optionally bias) of the 1x16 FP8
    copy of the input, bf16 out; the backward reads that FP8 copy and the
    per-row statistics, nothing in bf16."""

    hidden: int
    kind: str = "rmsnorm"
    bias: bool = False
    eps: float = 1e-5
    group_size: int = 16

    def check(self) -> None:
        _check_features("NormConfig", self.group_size, hidden=self.hidden)
        if self.kind not in ("rmsnorm", "layernorm"):
            raise ValueError(f"NormConfig: kind {self.kind!r} is not rmsnorm or layernorm")
        if self.bias and self.kind != "layernorm":
            raise ValueError("NormConfig: only layernorm takes a bias")

    @property
    def name(self) -> str:
        return f"coat_{self.kind}{'_b' if self.bias else ''}_h{self.hidden}"

    def text(self) -> str:
        """Arguments: x (T x hidden), the weight (and bias), the gradient of
        y. Results: y (forward), the gradients of x, the weight (and bias)."""
        self.check()
        T, H = TOKENS, self.hidden
        xq = _u(T, H)  # the passes pick its format: 1x16 E4M3, as a norm input
        nb = 3 if self.bias else 2
        args = [f"%x: {_t(T, H)}", f"%w: {_t(H)} {{coat.weight}}"]
        if self.bias:
            args.append(f"%b: {_t(H)} {{coat.weight}}")
        args.append(f"%dy: {_t(T, H)} {{coat.gradient, coat.grad_of = 0 : i64}}")
        results = [_t(T, H)] + [f"{_t(T, H) if i == 0 else _t(H)} {{coat.grad_of = {i} : i64}}"
                                for i in range(nb)]
        grads = ["%dx", "%dw"] + (["%db"] if self.bias else [])
        if self.kind == "rmsnorm":
            body = f"""\
  %y, %rstd = coat.rmsnorm %x_q, %w eps = {self.eps:e}
      : {xq}, {_t(H)} -> {_t(T, H)}, {_t(T, dtype="f32")}
  %dx, %dw = coat.rmsnorm_grad %x_q, %w, %rstd, %dy
      : {xq}, {_t(H)}, {_t(T, dtype="f32")}, {_t(T, H)} -> {_t(T, H)}, {_t(H)}"""
        else:
            bias = " bias %b" if self.bias else ""
            wtypes = f"{_t(H)}" + (f", {_t(H)}" if self.bias else "")
            body = f"""\
  %y, %mean, %rstd = coat.layernorm %x_q weight %w{bias} eps = {self.eps:e}
      : {xq}, {wtypes} -> {_t(T, H)}, {_t(T, dtype="f32")}, {_t(T, dtype="f32")}
  {", ".join(grads)} = coat.layernorm_grad %x_q, %mean, %rstd, %dy weight %w
      : {xq}, {_t(T, dtype="f32")}, {_t(T, dtype="f32")}, {_t(T, H)}, {_t(H)}
      -> {", ".join([_t(T, H)] + [_t(H)] * (nb - 1))}"""
        return f"""\
func.func @{self.name}(
    {(","  + chr(10) + "    ").join(args)})
    -> ({", ".join(results)}) {{
  %x_q = coat.quantize_auto %x : {_t(T, H)} -> {xq}
{body}
  return %y, {", ".join(grads)} : {", ".join(r.split(" {")[0] for r in results)}
}}
"""


def rope_fits(hidden: int, out: int, head_dim: int, rope_heads: int,
              group_size: int = 16) -> bool:
    """Whether an attention-input program of these shapes can rotate q and
    k itself (:class:`NormLinearConfig`'s checks: whole heads, head_dim / 2
    a multiple of the group size). Where it cannot, the attention core
    rotates them in PyTorch."""
    try:
        NormLinearConfig(hidden, out, rope_head_dim=head_dim, rope_heads=rope_heads,
                         group_size=group_size).check()
    except ValueError:
        return False
    return True


def decoder_layer_configs(hidden: int, ffn: int, heads: int, kv_heads: int,
                          eps: float = 1e-5, rope="auto", recompute_output: bool = False,
                          keep_gemm_operands: bool = False,
                          reuse_attention_output: bool = False):
    """The three programs of a Llama decoder layer (coat.nn.DecoderLayer):
    RMSNorm + q/k/v projection, o-projection + residual, MLP block. With
    ``rope`` the first also rotates q and k (:class:`NormLinearConfig`'s
    ``rope_head_dim``), so attention takes them as they come: "auto" (the
    default) wherever the head size allows (:func:`rope_fits`), True always
    (an error where it cannot), False never. ``recompute_output``: the first
    can give its q/k/v projection again in the backward
    (:class:`NormLinearConfig`'s ``recompute_output``).
    ``keep_gemm_operands``: the first and the last keep their backward
    GEMMs' per-tensor FP8 operands from the forward instead of deriving them
    again (:class:`MLPBlockConfig`'s). ``reuse_attention_output``: the second
    reads attention's output, which attention keeps anyway, in its backward
    instead of keeping an FP8 copy of it (:class:`LinearResidualConfig`'s
    ``input_kept_by_caller``); not with ``keep_gemm_operands``, which keeps
    every backward GEMM operand."""
    if heads <= 0 or kv_heads <= 0 or hidden % heads or heads % kv_heads:
        raise ValueError(f"decoder layer: hidden {hidden}, heads {heads}, kv_heads "
                         f"{kv_heads}: heads must divide hidden and kv_heads divide heads")
    d = hidden // heads
    out = (heads + 2 * kv_heads) * d
    if rope == "auto":
        rope = rope_fits(hidden, out, d, heads + kv_heads)
    rotary = dict(rope_head_dim=d, rope_heads=heads + kv_heads) if rope else {}
    keep = dict(keep_gemm_operands=keep_gemm_operands)
    return (NormLinearConfig(hidden, out, eps, recompute_output=recompute_output, **rotary,
                             **keep),
            LinearResidualConfig(heads * d, hidden, input_kept_by_caller=bool(
                reuse_attention_output and not keep_gemm_operands)),
            MLPBlockConfig(hidden, ffn, eps, **keep))


@dataclass(frozen=True)
class LinearNormResidualConfig:
    """One projection, normalised, added to the residual stream
    (``h + rmsnorm(W a)``): the attention output of a block that normalises
    after each sublayer (OLMo2)."""

    inner: int
    hidden: int
    eps: float = 1e-5
    group_size: int = 16

    def check(self) -> None:
        _check_features("LinearNormResidualConfig", self.group_size, inner=self.inner,
                        hidden=self.hidden)

    @property
    def name(self) -> str:
        return f"coat_linear_norm_residual_i{self.inner}_h{self.hidden}"

    def text(self) -> str:
        """Arguments: the stream h, the projection's input a, W (hidden x
        inner), the norm weight, the gradient of the new stream. Results:
        the new stream (forward), the gradients of h, a, W and the norm
        weight."""
        self.check()
        T, H, I = TOKENS, self.hidden, self.inner
        g = f"per_group<{self.group_size}>"
        f32 = _t(T, dtype="f32")
        return f"""\
func.func @{self.name}(
    %h: {_t(T, H)},
    %a: {_t(T, I)},
    %w: {_t(H, I)} {{coat.weight}},
    %w_norm: {_t(H)} {{coat.weight}},
    %dout: {_t(T, H)} {{coat.gradient, coat.grad_of = 0 : i64}})
    -> ({_t(T, H)},
        {_t(T, H)} {{coat.grad_of = 0 : i64}}, {_t(T, I)} {{coat.grad_of = 1 : i64}},
        {_t(H, I)} {{coat.grad_of = 2 : i64}}, {_t(H)} {{coat.grad_of = 3 : i64}}) {{
  %a_q = coat.quantize_auto %a : {_t(T, I)} -> {_u(T, I)}
  %a_t = coat.transpose %a_q : {_u(T, I)} -> {_u(I, T)}
  %w_q = coat.quantize_auto %w : {_t(H, I)} -> {_u(H, I)}
  %o = coat.linear forward %a_q, %w_q : {_u(T, I)}, {_u(H, I)} -> {_t(T, H)}
  %o_q = coat.quantize_auto %o : {_t(T, H)} -> {_u(T, H)}
  %n, %rstd = coat.rmsnorm %o_q, %w_norm eps = {self.eps:e}
      : {_u(T, H)}, {_t(H)} -> {_t(T, H)}, {f32}
  %h_out = coat.residual_add %h, %n : {_t(T, H)}, {_t(T, H)}
      -> {_t(T, H)}

  %do, %dw_norm = coat.rmsnorm_grad %o_q, %w_norm, %rstd, %dout
      : {_u(T, H)}, {_t(H)}, {f32}, {_t(T, H)} -> {_t(T, H)}, {_t(H)}
  %do_q = coat.quantize_auto %do : {_t(T, H)} -> {_u(T, H)}
  %do_t = coat.transpose %do_q : {_u(T, H)} -> {_u(H, T)}
  %w_t = coat.transpose %w_q : {_u(H, I)} -> {_u(I, H)}
  %da = coat.linear dgrad %do_q, %w_t : {_u(T, H)}, {_u(I, H)} -> {_t(T, I)}
  %dw = coat.linear wgrad %do_t, %a_t : {_u(H, T)}, {_u(I, T)} -> {_t(H, I)}
  return %h_out, %dout, %da, %dw, %dw_norm
      : {_t(T, H)}, {_t(T, H)}, {_t(T, I)}, {_t(H, I)}, {_t(H)}
}}
"""


@dataclass(frozen=True)
class PostNormMLPConfig:
    """A SwiGLU MLP normalised after it (``h + rmsnorm(W_down(silu(W_gate h)
    * W_up h))``): the MLP of a block that normalises after each sublayer
    (OLMo2).

    ``keep_gemm_operands``: the down projection's wgrad reads the SwiGLU
    product's transposed per-tensor FP8 copy the forward made, kept for it,
    instead of the backward deriving it again (:class:`MLPBlockConfig`'s).
    The name ends in ``_kg``."""

    hidden: int
    ffn: int
    eps: float = 1e-5
    group_size: int = 16
    keep_gemm_operands: bool = False

    def check(self) -> None:
        _check_features("PostNormMLPConfig", self.group_size, hidden=self.hidden,
                        ffn=self.ffn)

    @property
    def name(self) -> str:
        return (f"coat_postnorm_mlp_h{self.hidden}_f{self.ffn}"
                f"{'_kg' if self.keep_gemm_operands else ''}")

    def text(self) -> str:
        """Arguments: the stream h, W_gate and W_up (F x H), W_down (H x F),
        the norm weight, the gradient of the new stream. Results: the new
        stream (forward), the gradients of h and of the four weights."""
        self.check()
        T, H, F = TOKENS, self.hidden, self.ffn
        t, u, q = _t, _u, _q
        g = f"per_group<{self.group_size}>"
        f32 = t(T, dtype="f32")
        fwd, bwd = _swiglu(T, H, F, g, "%h_q", u(T, H), "%h_t", u(H, T), "%ddown_q",
                           "%ddown_t")
        return f"""\
func.func @{self.name}(
    %h: {t(T, H)},
    %w_gate: {t(F, H)} {{coat.weight}},
    %w_up: {t(F, H)} {{coat.weight}},
    %w_down: {t(H, F)} {{coat.weight}},
    %w_norm: {t(H)} {{coat.weight}},
    %dout: {t(T, H)} {{coat.gradient, coat.grad_of = 0 : i64}})
    -> ({t(T, H)}, {t(T, H)} {{coat.grad_of = 0 : i64}},
        {t(F, H)} {{coat.grad_of = 1 : i64}}, {t(F, H)} {{coat.grad_of = 2 : i64}},
        {t(H, F)} {{coat.grad_of = 3 : i64}}, {t(H)} {{coat.grad_of = 4 : i64}}){_function_attrs(self.keep_gemm_operands)} {{
  %h_q = coat.quantize_auto %h : {t(T, H)} -> {u(T, H)}
  %h_t = coat.transpose %h_q : {u(T, H)} -> {u(H, T)}
{fwd}  %down_q = coat.quantize_auto %down : {t(T, H)} -> {u(T, H)}
  %n, %rstd = coat.rmsnorm %down_q, %w_norm eps = {self.eps:e}
      : {u(T, H)}, {t(H)} -> {t(T, H)}, {f32}
  %h_out = coat.residual_add %h, %n : {t(T, H)}, {t(T, H)}
      -> {t(T, H)}

  %ddown, %dw_norm = coat.rmsnorm_grad %down_q, %w_norm, %rstd, %dout
      : {u(T, H)}, {t(H)}, {f32}, {t(T, H)} -> {t(T, H)}, {t(H)}
  %ddown_q = coat.quantize_auto %ddown : {t(T, H)} -> {u(T, H)}
  %ddown_t = coat.transpose %ddown_q : {u(T, H)} -> {u(H, T)}
{bwd}  %dx = coat.residual_add_grad %dx_gate, %dx_up : {t(T, H)}, {t(T, H)} -> {t(T, H)}
  %dh = coat.residual_add_grad %dout, %dx : {t(T, H)}, {t(T, H)} -> {t(T, H)}
  return %h_out, %dh, %dw_gate, %dw_up, %dw_down, %dw_norm
      : {t(T, H)}, {t(T, H)}, {t(F, H)}, {t(F, H)}, {t(H, F)}, {t(H)}
}}
"""


@dataclass(frozen=True)
class CrossEntropyConfig:
    """Softmax cross-entropy of bf16 logits ``[T, vocab]`` with int64 class
    targets (``coat.cross_entropy``): one forward call that returns the
    per-token f32 loss (0 for ``ignore_index``) and writes the unscaled
    gradient ``softmax - onehot`` over the logits, which the program takes
    as a ``coat.writable`` input (the caller gives that buffer up). Both
    results are flagged for NaN/infinity (a target outside [0, vocab) that
    is not ``ignore_index`` gives NaN). One op makes one kernel call, so
    the function says it is a program (``coat.program``) rather than a
    kernel spec."""

    vocab: int
    ignore_index: int = -100

    def check(self) -> None:
        if self.vocab < 1:
            raise ValueError(f"CrossEntropyConfig: vocab = {self.vocab} must be positive")

    @property
    def name(self) -> str:
        ignore = "" if self.ignore_index == -100 else (
            f"_ig{self.ignore_index}" if self.ignore_index >= 0 else f"_igm{-self.ignore_index}")
        return f"coat_cross_entropy_v{self.vocab}{ignore}"

    def text(self) -> str:
        """Arguments: the logits (given up: the gradient overwrites them),
        the targets. Results: the loss per token, the gradient of the
        logits."""
        self.check()
        T, V = TOKENS, self.vocab
        ignore = "" if self.ignore_index == -100 else f" ignore_index = {self.ignore_index}"
        return f"""\
func.func @{self.name}(
    %logits: {_t(T, V)} {{coat.writable}},
    %targets: {_t(T, dtype="i64")})
    -> ({_t(T, dtype="f32")}, {_t(T, V)}) attributes {{coat.program}} {{
  %loss, %dlogits = coat.cross_entropy %logits, %targets{ignore}
      : {_t(T, V)}, {_t(T, dtype="i64")} -> {_t(T, dtype="f32")}, {_t(T, V)}
  return %loss, %dlogits : {_t(T, dtype="f32")}, {_t(T, V)}
}}
"""

"""The attention-input program with rotary embeddings
(coat.programs.NormLinearConfig with rope_head_dim): RMSNorm, the q|k|v GEMM
and RoPE of q and k in one program, and its backward through rope_grad.

Three checks, on the CPU twins here (compiled with coat-opt) and on the GPU
where CUDA and the compiled demo programs are there:

- bit for bit: the program's output is the same program without RoPE
  followed by the library's rotation (f32, one rounding to bf16), and its
  gradients are that program's gradients of the library's rope_grad of the
  incoming gradient. The rotation adds no error of its own and changes no
  FP8 decision.
- against an independent fp32 torch computation (rmsnorm -> matmul ->
  rotate_half RoPE, autograd) within FP8 tolerance: relative L2 error at
  most 0.12 for the output and every gradient (measured on the CPU twins:
  0.04-0.07; the per-tensor E4M3 norm output and weights, the E5M2
  incoming gradient), while a rotation the wrong way is off by 0.6 or more.
- structure: the q|k|v GEMM rotates q and k in its epilogue
  (coat-fuse-rope: no rope kernel, the projection is written once), and the
  backward reads the incoming gradient once, in the rope_grad kernel that
  also writes its 1x16 maxima.
"""

import numpy as np
import pytest

from conftest import torch_or_skip

torch = torch_or_skip()

import coat.nn as cnn  # noqa: E402
from coat import artifacts, programs, reference as ref  # noqa: E402
from coat.executor import ProgramError  # noqa: E402

TOL = 0.12
# (hidden, heads, kv_heads): head_dim 64 with as many k/v heads as q heads,
# head_dim 32 with grouped queries.
CPU_LAYERS = [(128, 2, 2), (128, 4, 2)]
DEMO = (1024, 2816, 16, 16)  # compiled by scripts/demo.sh (MODEL_BLOCKS)


def configs(hidden, heads, kv_heads, ffn=256):
    rope = programs.decoder_layer_configs(hidden, ffn, heads, kv_heads, rope=True)[0]
    plain = programs.decoder_layer_configs(hidden, ffn, heads, kv_heads, rope=False)[0]
    return rope, plain


def inputs(cfg, tokens, seed, device, pad_to=16):
    """h, w_norm, w (bf16), cos, sin ([rows, d] f32 of real angles), dy;
    rows padded to a multiple of 16 with zero tokens, as coat.nn pads them."""
    g = torch.Generator().manual_seed(seed)
    rows = -(-tokens // pad_to) * pad_to
    d = cfg.rope_head_dim
    h = torch.zeros(rows, cfg.hidden)
    h[:tokens] = torch.randn(tokens, cfg.hidden, generator=g)
    w_norm = 1 + 0.2 * torch.randn(cfg.hidden, generator=g)
    w = torch.randn(cfg.out, cfg.hidden, generator=g) * cfg.hidden ** -0.5
    pos = torch.arange(rows).float()
    inv = 1.0 / 10000.0 ** (torch.arange(0, d, 2).float() / d)
    ang = torch.outer(pos, inv)
    ang = torch.cat([ang, ang], dim=-1)
    dy = torch.zeros(rows, cfg.out)
    dy[:tokens] = torch.randn(tokens, cfg.out, generator=g)
    bf = torch.bfloat16
    return [t.to(device) for t in (h.to(bf), w_norm.to(bf), w.to(bf), ang.cos(), ang.sin(),
                                   dy.to(bf))]


def run(program, h, w_norm, w, *tables, dy):
    """(output, dh, dw_norm, dw) of a program under autograd."""
    h, w_norm, w = (t.clone().requires_grad_() for t in (h, w_norm, w))
    (y,) = cnn._RunProgram.apply(program, program.name, h, w_norm, w, *tables)
    y.backward(dy)
    return [y.detach(), h.grad, w_norm.grad, w.grad]


def torch_reference(cfg, h, w_norm, w, cos, sin, dy, sign=1.0):
    """fp32 autograd of rmsnorm -> matmul -> RoPE (Hugging Face's
    rotate_half) from the same bf16 values; `sign` = -1 rotates the wrong
    way."""
    hf, wn, wf = (t.detach().float().requires_grad_() for t in (h, w_norm, w))
    x = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + cfg.eps) * wn
    y = x @ wf.t()
    d, n = cfg.rope_head_dim, cfg.rope_heads
    qk = y[:, : n * d].reshape(y.shape[0], n, d)
    rot = torch.cat([-qk[..., d // 2:], qk[..., : d // 2]], dim=-1)
    qk = qk * cos[:, None, :] + sign * rot * sin[:, None, :]
    y = torch.cat([qk.reshape(y.shape[0], n * d), y[:, n * d:]], dim=1)
    y.backward(dy.float())
    return [y.detach(), hf.grad, wn.grad, wf.grad]


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def check_bitwise(rope_cfg, rope_prog, plain_prog, tokens, seed, device):
    h, w_norm, w, cos, sin, dy = inputs(rope_cfg, tokens, seed, device)
    got = run(rope_prog, h, w_norm, w, cos, sin, dy=dy)
    n = rope_cfg.rope_heads
    c, s = cos.cpu().numpy(), sin.cpu().numpy()
    # The incoming gradient as the projection sees it: the library's
    # rope_grad, rounded to bf16 once (what the program's kernel writes).
    dy_unrot = torch.from_numpy(ref.bf16_round(ref.rope_bwd(dy.float().cpu().numpy(), c, s, n)))
    plain = run(plain_prog, h, w_norm, w, dy=dy_unrot.to(device).bfloat16())
    want_y = ref.bf16_round(ref.rope_fwd(plain[0].float().cpu().numpy(), c, s, n))
    assert np.array_equal(got[0].float().cpu().numpy().view(np.uint32), want_y.view(np.uint32))
    for name, a, b in zip(("dh", "dw_norm", "dw"), got[1:], plain[1:]):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("layer", CPU_LAYERS, ids=lambda l: "h%d_q%d_kv%d" % l)
@pytest.mark.parametrize("tokens", [16, 33])
def test_cpu_rope_program_is_the_projection_then_the_library_rotation(cpu_cache, layer, tokens):
    rope_cfg, plain_cfg = configs(*layer)
    check_bitwise(rope_cfg, artifacts.program(rope_cfg), artifacts.program(plain_cfg),
                  tokens, seed=tokens, device="cpu")


@pytest.mark.parametrize("layer", CPU_LAYERS, ids=lambda l: "h%d_q%d_kv%d" % l)
@pytest.mark.parametrize("seed,tokens", [(0, 16), (1, 33), (2, 100)])
def test_cpu_rope_program_matches_fp32_torch(cpu_cache, layer, seed, tokens):
    cfg, _ = configs(*layer)
    prog = artifacts.program(cfg)
    h, w_norm, w, cos, sin, dy = inputs(cfg, tokens, seed, "cpu")
    got = run(prog, h, w_norm, w, cos, sin, dy=dy)
    want = torch_reference(cfg, h, w_norm, w, cos, sin, dy)
    errs = {name: rel(a, b) for name, a, b in zip(("y", "dh", "dw_norm", "dw"), got, want)}
    assert all(e <= TOL for e in errs.values()), errs
    # The tolerance tells rotations apart: the opposite one fails it.
    wrong = torch_reference(cfg, h, w_norm, w, cos, sin, dy, sign=-1.0)
    assert rel(got[0], wrong[0]) > 3 * TOL
    assert rel(got[1], wrong[1]) > 3 * TOL


def test_rotation_is_in_the_gemm_epilogue_and_the_gradient_is_read_once(cpu_cache):
    cfg, plain_cfg = configs(*CPU_LAYERS[1])
    prog = artifacts.program(cfg)
    # coat-fuse-rope: the q|k|v GEMM rotates its result in its epilogue, so
    # no kernel of the forward reads the projection back to rotate it.
    assert not [s for s in prog.steps if any(k.spec.op == "rope" for k in s.kernels)]
    (gemm_step,) = [s for s in prog.steps if s.spec.endswith("_linear_forward_rope")]
    (grad_step,) = [s for s in prog.steps if s.spec.endswith("_rope_grad")]
    (kernel,) = gemm_step.kernels
    assert kernel.spec.op == "linear"
    assert kernel.config["rope_rotated_heads"] == cfg.rope_heads
    assert kernel.config["rope_head_dim"] == cfg.rope_head_dim
    assert [a.name for a in kernel.spec.memrefs if a.name in ("cos", "sin")] == ["cos", "sin"]
    # The forward's output is the GEMM's result, the program's only output.
    h, w_norm, w, cos, sin, _ = inputs(cfg, 32, 0, "cpu")
    env = prog.run(dict(zip(cnn.forward_inputs(prog), (h, w_norm, w, cos, sin))), "forward")
    assert gemm_step.results[0] in [v for v, _, _ in prog.outputs]
    assert env[gemm_step.results[0]].shape == (32, cfg.out)
    # The incoming gradient is read by rope_grad alone, which also writes
    # the 1x16 maxima of what it computes (group scaling), then a scale
    # kernel reduces them: the program without RoPE reads the gradient in
    # one scale kernel instead (the maxima of an argument and their
    # reduction in one kernel), so the backward launches one kernel more and
    # reads the gradient as often.
    (dy,) = prog.input_ids("gradient")
    assert [s.spec for s in prog.steps if dy in s.operands] == [grad_step.spec]
    assert [a.name for a in grad_step.kernels[0].spec.memrefs][-1].endswith("_absmax")
    plain = artifacts.program(plain_cfg)
    (plain_dy,) = plain.input_ids("gradient")
    assert [s.spec.rsplit("_k", 1)[1].split("_", 1)[1] for s in plain.steps
            if plain_dy in s.operands] == ["absmax_scale", "quantize_per_tensor_transpose"]

    def count(p, phase):
        return sum(len(s.kernels) for s in p.steps if s.phase == phase)

    assert count(prog, "backward") == count(plain, "backward") + 1
    assert count(prog, "forward") == count(plain, "forward")


def test_tables_take_no_gradient_and_must_be_f32(cpu_cache):
    cfg, _ = configs(*CPU_LAYERS[0])
    prog = artifacts.program(cfg)
    h, w_norm, w, cos, sin, dy = inputs(cfg, 16, 0, "cpu")
    cos_r, sin_r = cos.clone().requires_grad_(), sin.clone().requires_grad_()
    (y,) = cnn._RunProgram.apply(prog, "rope", h, w_norm, w, cos_r, sin_r)
    y.backward(dy)
    assert cos_r.grad is None and sin_r.grad is None
    with pytest.raises(ProgramError, match="input 3 is torch.bfloat16, the program takes f32"):
        cnn._RunProgram.apply(prog, "rope", h, w_norm, w, cos.bfloat16(), sin.bfloat16())


def test_config_rules_and_default_where_the_head_size_allows():
    plain = programs.decoder_layer_configs(1024, 2816, 16, 16, rope=False)
    assert not plain[0].rope and plain[0].name == "coat_norm_linear_h1024_o3072"
    # "auto": d = 64 (d/2 a multiple of 16) rotates in the program, d = 80
    # (hidden 1280, 16 heads) leaves it to the attention core.
    assert programs.decoder_layer_configs(1024, 2816, 16, 16)[0].rope
    assert not programs.decoder_layer_configs(1280, 2816, 16, 16)[0].rope
    with pytest.raises(ValueError, match="rope_head_dim / 2 = 40"):
        programs.decoder_layer_configs(1280, 2816, 16, 16, rope=True)[0].check()
    assert "coat.rope" not in plain[0].text()
    rope = programs.decoder_layer_configs(4096, 11008, 32, 8, rope=True)[0]
    assert (rope.rope_head_dim, rope.rope_heads, rope.out) == (128, 40, 6144)
    assert rope.name == "coat_norm_linear_h4096_o6144_rope40x128"
    text = rope.text()
    assert "%cos: tensor<?x128xf32>" in text and "rotated_heads = 40" in text
    assert text.index("%cos") < text.index("%sin") < text.index("%dy")
    for bad, why in [(dict(rope_head_dim=63, rope_heads=1), "even"),
                     (dict(rope_head_dim=64, rope_heads=49), "whole heads"),
                     (dict(rope_head_dim=16, rope_heads=4), "multiple of the group size"),
                     (dict(rope_head_dim=64), "positive")]:
        with pytest.raises(ValueError, match=why):
            programs.NormLinearConfig(1024, 3072, **bad).check()


def cuda_programs_or_skip():
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available")
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs a Hopper GPU (sm_90a)")
    rope_cfg, plain_cfg = configs(*DEMO[:1], *DEMO[2:], ffn=DEMO[1])
    try:
        return rope_cfg, artifacts.program(rope_cfg), artifacts.program(plain_cfg)
    except RuntimeError as e:
        pytest.skip(str(e))


@pytest.mark.parametrize("tokens", [16, 300, 2048])
def test_cuda_rope_program_is_the_projection_then_the_library_rotation(tokens):
    rope_cfg, rope_prog, plain_prog = cuda_programs_or_skip()
    check_bitwise(rope_cfg, rope_prog, plain_prog, tokens, seed=tokens, device="cuda")


@pytest.mark.parametrize("tokens", [16, 300])
def test_cuda_rope_program_matches_fp32_torch(tokens):
    cfg, prog, _ = cuda_programs_or_skip()
    h, w_norm, w, cos, sin, dy = inputs(cfg, tokens, 7, "cuda")
    got = run(prog, h, w_norm, w, cos, sin, dy=dy)
    want = torch_reference(cfg, h, w_norm, w, cos, sin, dy)
    errs = {name: rel(a, b) for name, a, b in zip(("y", "dh", "dw_norm", "dw"), got, want)}
    assert all(e <= TOL for e in errs.values()), errs


def test_rope_rows_are_made_once_per_tables():
    """Every layer of a forward passes the same tables: their rows are made
    once and shared, and made again when a table or the shape changes."""
    from coat import llama

    lcfg = llama.LlamaConfig(hidden=64, heads=2, kv_heads=2)
    cos, sin = llama.rope_tables(lcfg, 9, "cpu")
    first = llama.rope_rows(cos, sin, 2, 32)
    again = llama.rope_rows(cos, sin, 2, 32)
    assert all(a is b for a, b in zip(first, again))
    assert llama.rope_rows(cos, sin, 2, 48)[0].shape[0] == 48
    assert llama.rope_rows(cos, sin.clone(), 2, 32)[1] is not first[1]
    sin.mul_(2)
    changed = llama.rope_rows(cos, sin, 2, 32)
    assert changed[1] is not first[1] and torch.equal(changed[1][:9], sin)


def test_cpu_rotated_projection_feeds_attention_without_tables(cpu_cache):
    """The attention input as a decoder layer would take it from the program
    with RoPE: tables from coat.llama.rope_rows (one row per token, padded),
    q and k into attention_core without tables. The attention output is the
    one of the program without RoPE and attention_core's own rotation (also
    f32 math, one rounding), bit for bit."""
    from coat import llama

    hidden, heads, kv_heads = CPU_LAYERS[1]
    rope_cfg, plain_cfg = configs(hidden, heads, kv_heads)
    batch, seq, rows = 2, 9, 32
    lcfg = llama.LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads)
    cos, sin = llama.rope_tables(lcfg, seq, "cpu")
    cos_rows, sin_rows = llama.rope_rows(cos, sin, batch, rows)
    assert cos_rows.shape == (rows, lcfg.head_dim) and cos_rows.dtype == torch.float32
    assert torch.equal(cos_rows[seq:2 * seq], cos) and not cos_rows[2 * seq:].any()
    h, w_norm, w, *_ = inputs(rope_cfg, batch * seq, 3, "cpu")
    (rotated,) = cnn._RunProgram.apply(artifacts.program(rope_cfg), "rope", h, w_norm, w,
                                       cos_rows, sin_rows)
    (plain,) = cnn._RunProgram.apply(artifacts.program(plain_cfg), "plain", h, w_norm, w)
    d = lcfg.head_dim
    sizes = [heads * d, kv_heads * d, kv_heads * d]
    q, k, v = rotated[:batch * seq].view(batch, seq, -1).split(sizes, dim=-1)
    a = llama.attention_core(q, k, v, None, None, heads, kv_heads)
    q, k, v = plain[:batch * seq].view(batch, seq, -1).split(sizes, dim=-1)
    b = llama.attention_core(q, k, v, cos, sin, heads, kv_heads)
    assert torch.equal(a, b)

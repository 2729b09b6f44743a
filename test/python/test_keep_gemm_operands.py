"""The backward GEMMs' FP8 operands kept from the forward instead of derived
again (``coat.keep_gemm_operands`` on a program: coat.programs'
``keep_gemm_operands``, coat.nn.DecoderLayer's and coat.convert's).

- The configs: the ``_kg`` variants carry the attribute (and only they: the
  default text, hence its compiled artifact, is unchanged).
- The programs (CPU twins): forward output and every gradient bit for bit
  those of the default program; the plan saves the per-tensor FP8 operands
  of the wgrads as well (the norm output's transposed copy, and in the MLP
  the SwiGLU product's), and the backward makes fewer calls (in the MLP
  only silu(gate) is still derived again). With ``recompute_output`` too,
  the recompute phase gives the projection again as before.
- The layer: loss and gradients bit for bit those of the default layer.

The CPU tests compile programs of a small layer with coat-opt into a
temporary cache and run their CPU twins. The CUDA test runs the demo-size
layer (hidden 1024, 16 heads), whose programs scripts/demo.sh compiles
(compile_examples.py's MODEL_BLOCKS), and checks that its forward leaves
at least the kept operands' bytes more allocated.
"""

import collections
import dataclasses

import pytest

from conftest import torch_or_skip

torch = torch_or_skip()

import coat.nn as cnn  # noqa: E402
from coat import artifacts, llama, programs  # noqa: E402
from test_recompute_attention_inputs import (build_layer, cuda_layer_or_skip,  # noqa: E402
                                             forward_kept_bytes, layer_step, program_inputs,
                                             step_inputs)

# (hidden, ffn, heads, kv_heads): RoPE in the attention-input program.
LAYER = (128, 256, 4, 2)
CUDA_LAYER = (1024, 2816, 16, 16)
ATTR = "attributes {coat.keep_gemm_operands = true}"


def variants(cfg):
    return cfg, dataclasses.replace(cfg, keep_gemm_operands=True)


def test_configs_name_the_variant_and_carry_the_attribute():
    plain = programs.decoder_layer_configs(*LAYER)
    kg = programs.decoder_layer_configs(*LAYER, keep_gemm_operands=True)
    for p, k in zip(plain[::2], kg[::2]):
        assert k.name == p.name + "_kg" and k.keep_gemm_operands
        assert ATTR in k.text() and "keep_gemm_operands" not in p.text()
        # The attribute sits on the function, right before its body.
        assert k.text().count(ATTR) == 1 and ") " + ATTR + " {\n" in k.text()
    assert kg[1] == plain[1]
    both = programs.decoder_layer_configs(*LAYER, recompute_output=True,
                                          keep_gemm_operands=True)[0]
    assert both.name == plain[0].name + "_rc_kg"
    assert both.recompute_output and ATTR in both.text()


def signature(program, vid):
    t = program.values[vid]
    return (t.kind, t.shape, t.dtype, t.scaling)


def saved_signatures(program):
    return collections.Counter(signature(program, v) for v in program.saved)


def calls(program, phase):
    return sum(len(s.kernels) for s in program.steps if s.phase == phase)


def specs(program, phase):
    """The kernel specs a phase calls, without the program's name."""
    return [s.spec[len(program.name):] for s in program.steps if s.phase == phase]


def per_tensor_fp8(*shape):
    return ("qtensor", shape, "e4m3", "per_tensor")


@pytest.mark.parametrize("which", ["mlp", "norm_linear"])
def test_cpu_plan_keeps_the_wgrad_operands_and_derives_less(cpu_cache, which):
    """The _kg plan saves the default plan's values (by type) and the
    per-tensor FP8 wgrad operands, [features, tokens]; the norm's rstd
    stays too (the norm no longer runs again), but not the bf16 per-tensor
    scales the default keeps to derive those operands again. Its backward
    makes fewer calls and its forward the same ones."""
    hidden, ffn = LAYER[:2]
    cfg = programs.decoder_layer_configs(*LAYER)[0 if which == "norm_linear" else 2]
    plain_cfg, kg_cfg = variants(cfg)
    plain, kg = artifacts.program(plain_cfg), artifacts.program(kg_cfg)
    more = saved_signatures(kg)
    more.subtract(saved_signatures(plain))
    want = {per_tensor_fp8(hidden, -1): 1, ("tensor", (-1,), "f32", ""): 1,
            ("tensor", (), "bf16", ""): -1}
    if which == "mlp":
        want[per_tensor_fp8(ffn, -1)] = 1
        want[("tensor", (), "bf16", "")] = -2
    assert {k: n for k, n in more.items() if n} == want
    # The same forward calls; where the default derives a transposed copy
    # again, its forward quantize writes only the row-major codes, and the
    # _kg one both layouts.
    fwd_kg, fwd_plain = specs(kg, "forward"), specs(plain, "forward")
    assert len(fwd_kg) == len(fwd_plain)
    differ = [(a, b) for a, b in zip(fwd_kg, fwd_plain) if a != b]
    assert differ and all(a == b + "_transpose" and b.endswith("_quantize_per_tensor")
                          for a, b in differ), differ
    # The default derives the norm output's transposed copy again (norm,
    # quantize+transpose with the kept scale), and in the MLP the SwiGLU
    # product's too.
    assert len(specs(plain, "backward")) - len(specs(kg, "backward")) == \
        (4 if which == "mlp" else 2)
    assert calls(kg, "backward") < calls(plain, "backward")
    # What the default derives again runs in the forward too; the _kg
    # backward calls no forward kernel (the MLP's silu(gate) is derived
    # inside its SwiGLU backward: coat-fuse-silu).
    forward_specs = {s.spec for s in kg.steps if s.phase == "forward"}
    again = [s.spec for s in kg.steps if s.phase == "backward" and s.spec in forward_specs]
    assert again == []


def mlp_inputs(cfg, tokens, seed):
    g = torch.Generator().manual_seed(seed)
    rows = -(-tokens // 16) * 16
    H, F = cfg.hidden, cfg.ffn
    h = torch.zeros(rows, H)
    h[:tokens] = torch.randn(tokens, H, generator=g)
    w_norm = 1 + 0.2 * torch.randn(H, generator=g)
    ws = [torch.randn(F, H, generator=g) * H ** -0.5,
          torch.randn(F, H, generator=g) * H ** -0.5,
          torch.randn(H, F, generator=g) * F ** -0.5]
    dy = torch.zeros(rows, H)
    dy[:tokens] = torch.randn(tokens, H, generator=g)
    bf = torch.bfloat16
    return [t.to(bf) for t in (h, w_norm, *ws)], [], dy.to(bf)


def norm_linear_inputs(cfg, tokens, seed):
    forward, tables, dy = program_inputs(cfg, tokens, seed)
    return list(forward), list(tables), dy


def run_program(program, weights, tables, dy, recompute=False):
    """[output, then the gradient of each weight input] under autograd;
    with ``recompute`` the recomputed output too, asked for before the
    backward."""
    leaves = [t.clone().requires_grad_() for t in weights]
    (y,) = cnn._RunProgram.apply(program, program.name, *leaves, *tables)
    again = cnn.recomputed_output(y.grad_fn, 0) if recompute else None
    y.backward(dy)
    return [y.detach()] + [t.grad for t in leaves], again


@pytest.mark.parametrize("tokens", [16, 33])
@pytest.mark.parametrize("which", ["mlp", "norm_linear", "norm_linear_rc"])
def test_cpu_program_changes_no_bit(cpu_cache, which, tokens):
    """Forward output and gradients of the _kg program are those of the
    default program bit for bit (the kept operands are the bits the
    backward derived again); with recompute_output, the recomputed
    projection is the forward's."""
    index = 2 if which == "mlp" else 0
    cfg = programs.decoder_layer_configs(*LAYER, recompute_output=which.endswith("_rc"))[index]
    plain_cfg, kg_cfg = variants(cfg)
    plain, kg = artifacts.program(plain_cfg), artifacts.program(kg_cfg)
    make = mlp_inputs if which == "mlp" else norm_linear_inputs
    weights, tables, dy = make(cfg, tokens, seed=tokens)
    rc = cfg.recompute_output if which != "mlp" else False
    want, want_again = run_program(plain, weights, tables, dy, recompute=rc)
    got, got_again = run_program(kg, weights, tables, dy, recompute=rc)
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        assert torch.equal(a.view(torch.int16), b.view(torch.int16)), i
    if rc:
        assert torch.equal(got_again.view(torch.int16), got[0].view(torch.int16))
        assert torch.equal(want_again.view(torch.int16), want[0].view(torch.int16))


def random_inputs(program, tokens, seed):
    """Random forward inputs of ``program`` (bf16 or f32 as it takes them,
    rows past ``tokens`` zero) and a random gradient of its first output."""
    g = torch.Generator().manual_seed(seed)
    rows = -(-tokens // 16) * 16

    def tensor(vid):
        t = program.values[vid]
        shape = t.shape_for(rows)
        x = torch.randn(*shape, generator=g) * (shape[-1] ** -0.5 if len(shape) == 2 else 1)
        if t.shape[0] < 0:
            x[tokens:] = 0
        return x.to(torch.bfloat16 if t.dtype == "bf16" else torch.float32)

    inputs = [tensor(v) for v in cnn.forward_inputs(program)]
    grad = next(v for v, role, _ in program.inputs if role == "gradient")
    return inputs, tensor(grad)


@pytest.mark.parametrize("cfg", [
    programs.GeluMLPConfig(64, 160, bias=True),
    programs.GeluMLPConfig(64, 160, bias=True, residual="separate", approximate="tanh"),
    programs.PostNormMLPConfig(64, 160),
    programs.NormLinearConfig(64, 192, bias=True, norm="layernorm"),
    programs.MLPBlockConfig(64, 160, norm="layernorm", norm_affine=False),
], ids=lambda c: c.name)
def test_cpu_other_programs_change_no_bit_and_derive_less(cpu_cache, cfg):
    """The other programs that take the option (GELU and post-norm MLPs,
    LayerNorm pre-norms): the same bits, more saved (the default keeps only
    the per-tensor scales of what it derives again), fewer backward calls."""
    plain_cfg, kg_cfg = variants(cfg)
    plain, kg = artifacts.program(plain_cfg), artifacts.program(kg_cfg)

    def token_sized(program):
        return [v for v in program.saved if tuple(program.values[v].shape) != ()]
    assert len(token_sized(kg)) > len(token_sized(plain))
    assert len(specs(kg, "backward")) < len(specs(plain, "backward"))
    # The same forward calls; where the default derives a transposed copy
    # again, its forward quantize writes only the row-major codes, and the
    # _kg one both layouts.
    fwd_kg, fwd_plain = specs(kg, "forward"), specs(plain, "forward")
    assert len(fwd_kg) == len(fwd_plain)
    differ = [(a, b) for a, b in zip(fwd_kg, fwd_plain) if a != b]
    assert differ and all(a == b + "_transpose" and b.endswith("_quantize_per_tensor")
                          for a, b in differ), differ
    inputs, dy = random_inputs(plain, 33, seed=3)
    bf16 = [x.dtype == torch.bfloat16 for x in inputs]
    results = []
    for program in (plain, kg):
        leaves = [x.clone().requires_grad_(b) for x, b in zip(inputs, bf16)]
        y = cnn._RunProgram.apply(program, program.name, *leaves)[0]
        y.backward(dy)
        results.append([y.detach()] + [x.grad for x, b in zip(leaves, bf16) if b])
    for i, (a, b) in enumerate(zip(*results)):
        assert a is not None and torch.equal(a.view(torch.int16), b.view(torch.int16)), i


def make_layer(keep, seed=0, device="cpu", layer=LAYER, **options):
    return build_layer(seed, device, layer, keep_gemm_operands=keep, **options)


@pytest.mark.parametrize("recompute", [False, True])
def test_cpu_layer_option_changes_no_bit(cpu_cache, recompute):
    x, cos, sin, dy = step_inputs(LAYER)
    plain = make_layer(False, recompute_attention_inputs=recompute)
    kg = make_layer(True, recompute_attention_inputs=recompute)
    assert kg.keep_gemm_operands and not plain.keep_gemm_operands
    assert "keep_gemm_operands=True" in repr(kg)
    assert [c.name.endswith("_kg") for c in kg.configs] == [True, False, True]
    assert kg.configs[0].recompute_output == recompute
    want = layer_step(plain, x, cos, sin, dy)
    got = layer_step(kg, x, cos, sin, dy)
    for i, (a, c) in enumerate(zip(got, want)):
        assert torch.equal(a, c), i


def test_cpu_option_can_be_set_on_a_layer(cpu_cache):
    m = make_layer(False)
    names = [c.name for c in m.configs]
    before = m.programs
    m.keep_gemm_operands = True
    assert [c.name for c in m.configs] == [names[0] + "_kg", names[1], names[2] + "_kg"]
    assert [p.name for p in m.programs] == [c.name for c in m.configs]
    assert m.programs is not before
    m.recompute_attention_inputs = True  # the two options combine
    assert m.configs[0].name == names[0] + "_rc_kg"
    m.keep_gemm_operands = False
    m.recompute_attention_inputs = False
    assert [c.name for c in m.configs] == names


def test_cpu_convert_takes_the_choice_and_reports_it(cpu_cache):
    cfg = llama.LlamaConfig(vocab=64, hidden=LAYER[0], ffn=LAYER[1], layers=2,
                            heads=LAYER[2], kv_heads=LAYER[3])
    for keep in (False, True):
        model = llama.LlamaForCausalLM(cfg)
        import coat

        coat.convert(model, fused_loss=False, keep_gemm_operands=keep)
        layers = [m for m in model.modules() if isinstance(m, cnn.DecoderLayer)]
        assert len(layers) == 2 and all(m.keep_gemm_operands == keep for m in layers)
        line = [ln for ln in str(model.coat_report).splitlines()
                if "backward GEMM operands" in ln]
        assert len(line) == 1 and f"keep_gemm_operands={keep}" in line[0]


@pytest.mark.parametrize("recompute", [False, True])
def test_cuda_layer_option_changes_no_bit_and_keeps_the_operands(recompute):
    """The demo-size layer with the option (and with
    recompute_attention_inputs or without, on both): loss and gradients bit
    for bit those of the default layer; its forward leaves at least the kept
    FP8 operands allocated on top (the two norm outputs' [hidden, tokens]
    and the SwiGLU product's [ffn, tokens] transposed codes), and its
    backward makes fewer kernel calls."""
    cuda_layer_or_skip(keep_gemm_operands=True)
    hidden, ffn, _, _ = CUDA_LAYER
    x, cos, sin, dy = step_inputs(CUDA_LAYER, seq=512, device="cuda")
    b, s = x.shape[:2]
    options = dict(device="cuda", layer=CUDA_LAYER, recompute_attention_inputs=recompute)
    plain, kg = make_layer(False, **options), make_layer(True, **options)
    want = layer_step(plain, x, cos, sin, dy)
    got = layer_step(kg, x, cos, sin, dy)
    for i, (a, c) in enumerate(zip(got, want)):
        assert torch.equal(a, c), i
    for p, k in zip(plain.programs[::2], kg.programs[::2]):
        assert calls(k, "backward") < calls(p, "backward")

    tokens = b * s
    operand_bytes = tokens * (2 * hidden + ffn)
    kept = {name: forward_kept_bytes(m, x, cos, sin, dy)
            for name, m in (("plain", plain), ("kg", kg))}
    assert kept["kg"] - kept["plain"] >= operand_bytes

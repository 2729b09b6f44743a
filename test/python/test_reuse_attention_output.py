"""The attention output program reading attention's kept output instead of
keeping an FP8 copy of it (``coat.kept_by_caller`` on its input:
coat.programs.LinearResidualConfig's ``input_kept_by_caller``,
coat.nn.DecoderLayer's ``reuse_attention_output``).

- The program: forward output and every gradient are those of the program
  without the mark, bit for bit; what it keeps is the input itself (the
  caller's tensor, no copy) and a scale instead of the FP8 transposed copy;
  its backward quantizes the copy again, with the forward's scale.
- The layer: loss and gradients bit for bit those of the layer without the
  option; attention (a stand-in keeping its output, as SDPA's kernels do)
  and the program keep the same tensor. An attention that keeps no output
  gets a warning, once.

CPU tests: programs of a small layer compiled with coat-opt into a
temporary cache, run on their CPU twins. The GPU suite runs the demo-size
layer's programs (scripts/compile_examples.py's MODEL_BLOCKS) with SDPA.
"""

import dataclasses
import warnings

import pytest

from conftest import torch_or_skip

torch = torch_or_skip()

import coat.nn as cnn  # noqa: E402
import test_recompute_attention_inputs as recompute  # noqa: E402
from coat import artifacts, llama, programs  # noqa: E402
from coat.nn import decoder  # noqa: E402
from test_recompute_attention_inputs import (CUDA_LAYER, LAYER, build_layer,  # noqa: E402
                                             cuda_layer_or_skip, forward_kept_bytes,
                                             layer_step, step_inputs)


def output_configs(hidden=128, inner=128):
    plain = programs.LinearResidualConfig(inner, hidden)
    return plain, dataclasses.replace(plain, input_kept_by_caller=True)


def test_config_marks_the_attention_output_and_names_the_variant():
    plain, kc = output_configs()
    assert kc.name == plain.name + "_kc"
    assert "coat.kept_by_caller" not in plain.text()
    args = kc.text().split(") ->")[0]
    assert args.count("{coat.kept_by_caller}") == 1
    assert "%a: tensor<?x128xbf16> {coat.kept_by_caller}" in args
    configs = programs.decoder_layer_configs(*LAYER, reuse_attention_output=True)
    assert configs[1].input_kept_by_caller
    assert configs[::2] == programs.decoder_layer_configs(*LAYER)[::2]
    # Keeping every backward GEMM operand keeps this one too.
    kept = programs.decoder_layer_configs(*LAYER, reuse_attention_output=True,
                                          keep_gemm_operands=True)
    assert not kept[1].input_kept_by_caller


def program_inputs(cfg, tokens, seed):
    g = torch.Generator().manual_seed(seed)
    rows = -(-tokens // 16) * 16
    bf = torch.bfloat16

    def rand(*shape, scale=1.0):
        x = torch.zeros(rows, *shape[1:]) if shape[0] == rows else torch.zeros(*shape)
        n = tokens if shape[0] == rows else shape[0]
        x[:n] = torch.randn(n, *shape[1:], generator=g) * scale
        return x.to(bf)

    h = rand(rows, cfg.hidden)
    a = rand(rows, cfg.inner)
    w = rand(cfg.hidden, cfg.inner, scale=cfg.inner ** -0.5)
    dy = rand(rows, cfg.hidden)
    return (h, a, w), dy


def run_program(program, inputs, dy):
    """(output, dh, da, dw) under autograd, and the autograd node."""
    leaves = [t.clone().requires_grad_() for t in inputs]
    (y,) = cnn._RunProgram.apply(program, program.name, *leaves)
    node = y.grad_fn
    y.backward(dy)
    return [y.detach()] + [t.grad for t in leaves], node


@pytest.mark.parametrize("tokens", [16, 40])
def test_cpu_program_gives_the_same_bits(cpu_cache, tokens):
    plain_cfg, kc_cfg = output_configs()
    plain, kc = artifacts.program(plain_cfg), artifacts.program(kc_cfg)
    inputs, dy = program_inputs(kc_cfg, tokens, seed=tokens)
    want, _ = run_program(plain, inputs, dy)
    got, node = run_program(kc, inputs, dy)
    for name, x, y in zip(("output", "dh", "da", "dw"), got, want):
        assert torch.equal(x, y), name


def test_cpu_program_keeps_the_input_instead_of_a_copy(cpu_cache):
    plain_cfg, kc_cfg = output_configs()
    plain, kc = artifacts.program(plain_cfg), artifacts.program(kc_cfg)
    a_id = kc.input_ids()[1]
    kinds = lambda p: sorted((p.values[v].kind, p.values[v].shape, p.values[v].dtype)
                             for v in p.saved if v != a_id or p is plain)
    # The plain program keeps the FP8 transposed copy of a; the variant
    # keeps a itself and its scale (rank 0) instead. (Both keep the small
    # weight's transposed copy.)
    assert a_id in kc.saved and a_id not in plain.saved
    copy = ("qtensor", (plain_cfg.inner, -1), "e4m3")
    assert copy in kinds(plain) and copy not in kinds(kc)
    assert sorted(set(kinds(kc)) - set(kinds(plain))) == [("tensor", (), "bf16")]
    assert kc.values[a_id].shape == (-1, kc_cfg.inner)
    # One quantize more in the backward (the copy made again), none less in
    # the forward.
    calls = lambda p, phase: sum(len(s.kernels) for s in p.steps if s.phase == phase)
    assert calls(kc, "backward") == calls(plain, "backward") + 1
    assert calls(kc, "forward") == calls(plain, "forward")
    # What it keeps is the caller's tensor itself, not a copy of it.
    inputs, _ = program_inputs(kc_cfg, 32, seed=3)
    env = dict(zip(cnn.forward_inputs(kc), inputs))
    kc.run(env, "forward", drop_dead=True)
    assert env[a_id] is inputs[1]


class _KeepingAttention(recompute._KeepingAttention):
    """Causal attention that keeps its inputs and output for its backward,
    its output laid out as SDPA's fused kernels lay theirs: [batch, seq,
    heads, head size] in memory, so the layer's [tokens, heads x head size]
    view of it is no copy."""

    @staticmethod
    def forward(ctx, q, k, v):
        out = recompute._REAL_SDPA(q, k, v).transpose(1, 2).contiguous().transpose(1, 2)
        ctx.save_for_backward(q, k, v, out)
        return out


def assert_same_step(plain, ao, x, cos, sin, dy):
    """The layer with reuse_attention_output (``ao``) gives the plain
    layer's output and gradients bit for bit, warning nothing."""
    want = layer_step(plain, x, cos, sin, dy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = layer_step(ao, x, cos, sin, dy)
    for i, (a, c) in enumerate(zip(got, want)):
        assert torch.equal(a, c), i


def test_cpu_layer_option_changes_no_bit_and_shares_the_output(cpu_cache, monkeypatch):
    monkeypatch.setattr(llama, "_sdpa", _KeepingAttention.apply)
    shared = []
    real_run = cnn.DecoderLayer.run_program

    def run(self, index, what, *inputs):
        if index == 1:
            shared.append(decoder._saved_by_producer(inputs[1]))
        return real_run(self, index, what, *inputs)

    monkeypatch.setattr(cnn.DecoderLayer, "run_program", run)
    x, cos, sin, dy = step_inputs()
    plain, ao = build_layer(), build_layer(reuse_attention_output=True)
    assert ao.configs[1].name.endswith("_kc") and "reuse_attention_output=True" in repr(ao)
    assert_same_step(plain, ao, x, cos, sin, dy)
    # Attention's node keeps the very storage the program reads.
    assert shared == [True, True]


def test_cpu_attention_keeping_no_output_is_warned_once(cpu_cache):
    # torch 1.13's math attention on the CPU keeps no output of its own.
    x, cos, sin, dy = step_inputs()
    ao = build_layer(reuse_attention_output=True)
    with pytest.warns(UserWarning, match="does not keep its output"):
        layer_step(ao, x, cos, sin, dy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer_step(ao, x, cos, sin, dy)


def test_cpu_option_follows_keep_gemm_operands(cpu_cache):
    m = build_layer()
    name = m.configs[1].name
    m.reuse_attention_output = True
    assert m.configs[1].name == name + "_kc" and m.reuse_attention_output
    m.keep_gemm_operands = True  # keeps the copy: the option waits
    assert m.configs[1].name == name and not m.reuse_attention_output
    m.keep_gemm_operands = False
    assert m.configs[1].name == name + "_kc"
    m.reuse_attention_output = False
    assert m.configs[1].name == name


def test_cuda_sdpa_keeps_the_output_the_program_reads():
    """On the GPU, SDPA's node keeps the attention output the program reads
    (no warning), and the option changes no bit of the step; the forward
    leaves less allocated for the backward (the FP8 copy it no longer keeps:
    one byte a value)."""
    cuda_layer_or_skip(reuse_attention_output=True)
    x, cos, sin, dy = step_inputs(CUDA_LAYER, seq=256, batch=2, device="cuda")
    plain = build_layer(device="cuda", layer=CUDA_LAYER)
    ao = build_layer(device="cuda", layer=CUDA_LAYER, reuse_attention_output=True)
    assert_same_step(plain, ao, x, cos, sin, dy)

    # One FP8 byte a value of the attention output (the scales, a few
    # hundred bytes a block either way, aside).
    tokens, inner = x.shape[0] * x.shape[1], CUDA_LAYER[0]
    saved = (forward_kept_bytes(plain, x, cos, sin, dy)
             - forward_kept_bytes(ao, x, cos, sin, dy))
    assert saved >= tokens * inner - 4096, saved

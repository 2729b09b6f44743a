"""The attention input made again in the backward instead of kept (a
program result marked ``coat.recompute``: coat.programs.NormLinearConfig's
``recompute_output``, coat.nn.DecoderLayer's ``recompute_attention_inputs``).

- The program: forward output and every gradient are those of the same
  program without the mark, bit for bit; the ``recompute`` phase gives the
  forward output's bits again, from the values the forward keeps anyway
  (no activation more), and the backward afterwards still consumes them.
- The layer: loss and gradients bit for bit those of the layer without the
  option, while attention's autograd keeps no tensor that shares the q/k/v
  projection's storage (a saved-tensor hook packs such a tensor as its view
  and unpacking makes the projection again, once per layer and backward),
  so the projection is freed after the forward.

The CPU tests compile programs of a small layer (head size 32, RoPE in the
program) with coat-opt into a temporary cache and run their CPU twins; the
attention there keeps its inputs as given, as SDPA's flash kernels do (torch
1.13 on the CPU has no fused SDPA: its float math keeps copies). The CUDA
tests run the demo-size layer (hidden 1024, 16 heads), whose programs
scripts/demo.sh compiles (compile_examples.py's MODEL_BLOCKS), with torch's
SDPA.
"""

import dataclasses
import gc
import weakref

import pytest

from conftest import torch_or_skip

torch = torch_or_skip()

import coat.nn as cnn  # noqa: E402
from coat import artifacts, llama, programs  # noqa: E402
from coat.nn import _autograd, decoder  # noqa: E402

# (hidden, ffn, heads, kv_heads): head size 32, so the program rotates q
# and k and attention gets views of its output; grouped queries.
LAYER = (128, 256, 4, 2)
CUDA_LAYER = (1024, 2816, 16, 16)


def attention_configs(hidden, ffn, heads, kv_heads):
    plain = programs.decoder_layer_configs(hidden, ffn, heads, kv_heads)[0]
    return plain, dataclasses.replace(plain, recompute_output=True)


def test_config_marks_the_projection_and_names_the_variant():
    plain, rc = attention_configs(*LAYER)
    assert plain.rope and not plain.recompute_output
    assert rc.name == plain.name + "_rc"
    assert "coat.recompute" not in plain.text()
    text = rc.text()
    # The projection (result 0) carries the mark, no gradient does.
    results = text[text.index("-> ("):text.index(") {")]
    assert results.count("{coat.recompute}") == 1
    assert results.index("{coat.recompute}") < results.index("coat.grad_of")
    configs = programs.decoder_layer_configs(*LAYER, recompute_output=True)
    assert configs[0] == rc
    assert configs[1:] == programs.decoder_layer_configs(*LAYER)[1:]


def program_inputs(cfg, tokens, seed):
    g = torch.Generator().manual_seed(seed)
    rows = -(-tokens // 16) * 16
    d = cfg.rope_head_dim
    h = torch.zeros(rows, cfg.hidden)
    h[:tokens] = torch.randn(tokens, cfg.hidden, generator=g)
    w_norm = 1 + 0.2 * torch.randn(cfg.hidden, generator=g)
    w = torch.randn(cfg.out, cfg.hidden, generator=g) * cfg.hidden ** -0.5
    inv = 1.0 / 10000.0 ** (torch.arange(0, d, 2).float() / d)
    ang = torch.outer(torch.arange(rows).float(), inv)
    ang = torch.cat([ang, ang], dim=-1)
    dy = torch.zeros(rows, cfg.out)
    dy[:tokens] = torch.randn(tokens, cfg.out, generator=g)
    bf = torch.bfloat16
    return (h.to(bf), w_norm.to(bf), w.to(bf)), (ang.cos(), ang.sin()), dy.to(bf)


def run_program(program, weights, tables, dy, recompute=False):
    """(output, dh, dw_norm, dw) under autograd; with ``recompute`` the
    recomputed output too, asked for before the backward."""
    leaves = [t.clone().requires_grad_() for t in weights]
    (y,) = cnn._RunProgram.apply(program, program.name, *leaves, *tables)
    again = None
    if recompute:
        again = cnn.recomputed_output(y.grad_fn, 0)
        # Asked again while held: the same tensor, not a second run.
        assert cnn.recomputed_output(y.grad_fn, 0) is again
    node = y.grad_fn
    y.backward(dy)
    assert node.kept is None  # the backward consumed what the forward kept
    return [y.detach()] + [t.grad for t in leaves], again, node


@pytest.mark.parametrize("tokens", [16, 33])
def test_cpu_program_recomputes_its_output_bit_for_bit(cpu_cache, tokens):
    plain_cfg, rc_cfg = attention_configs(*LAYER)
    plain, rc = artifacts.program(plain_cfg), artifacts.program(rc_cfg)
    weights, tables, dy = program_inputs(rc_cfg, tokens, seed=tokens)
    want, _, _ = run_program(plain, weights, tables, dy)
    got, again, node = run_program(rc, weights, tables, dy, recompute=True)
    for name, a, b in zip(("output", "dh", "dw_norm", "dw"), got, want):
        assert torch.equal(a, b), name
    assert again.data_ptr() != got[0].data_ptr()
    assert torch.equal(again.view(torch.int16), got[0].view(torch.int16))
    # After the backward the values it is made from are gone.
    with pytest.raises(RuntimeError, match="its backward already ran"):
        cnn.recomputed_output(node, 0)


def test_cpu_recompute_phase_keeps_nothing_more(cpu_cache):
    """The recompute phase reads what the forward keeps anyway (and the
    weights, parameters that are there anyway, and the weight copy's
    per-tensor scale, two bytes); it computes the projection with one GEMM,
    the forward's kernel; no call runs twice in a phase."""
    plain_cfg, rc_cfg = attention_configs(*LAYER)
    plain, rc = artifacts.program(plain_cfg), artifacts.program(rc_cfg)
    assert rc.recomputed == {0: len(rc.outputs) - 1}
    vid, phase, grad_of = rc.outputs[-1]
    assert (phase, grad_of) == ("recompute", None)
    assert rc.values[vid] == rc.values[rc.outputs[0][0]]
    weight_ids = set(rc.input_ids("weight"))
    extra = set(rc.saved) - set(plain.saved)
    assert all(v in weight_ids or tuple(rc.values[v].shape) == () for v in extra), extra
    assert sum(tuple(rc.values[v].shape) == () for v in extra) == 1
    assert not plain.recomputed
    steps = {p: [s for s in rc.steps if s.phase == p] for p in ("forward", "recompute")}
    gemms = {p: [s.spec for s in ss if "_linear_forward" in s.spec]
             for p, ss in steps.items()}
    assert len(gemms["recompute"]) == 1 and gemms["recompute"] == gemms["forward"]
    # The forward and the backward are the plain program's calls.
    for p in ("forward", "backward"):
        assert (sum(len(s.kernels) for s in rc.steps if s.phase == p)
                == sum(len(s.kernels) for s in plain.steps if s.phase == p))
    for p in ("forward", "recompute", "backward"):
        calls = [(s.spec, s.operands) for s in rc.steps if s.phase == p]
        assert len(calls) == len(set(calls)), p
    # Any number of times, for any token count: from the kept values alone.
    weights, tables, _ = program_inputs(rc_cfg, 40, seed=1)
    env = dict(zip(cnn.forward_inputs(rc), (*weights, *tables)))
    rc.run(env, "forward", drop_dead=True)
    kept = {v: env[v] for v in rc.saved}
    for _ in range(2):
        again = cnn.run_recompute(rc, kept, 48, 0)
        assert torch.equal(again, env[rc.outputs[0][0]])
    assert set(kept) == set(rc.saved)


class _KeepingAttention(torch.autograd.Function):
    """Causal attention that keeps its inputs as given for the backward, as
    SDPA's flash and memory-efficient kernels do, with its output."""

    @staticmethod
    def forward(ctx, q, k, v):
        out = _REAL_SDPA(q, k, v)
        ctx.save_for_backward(q, k, v, out)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, _ = ctx.saved_tensors
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            out = _REAL_SDPA(*leaves)
            return torch.autograd.grad(out, leaves, dout)


_REAL_SDPA = llama._sdpa


def build_layer(seed=0, device="cpu", layer=LAYER, **options):
    """A bf16 coat.nn.DecoderLayer of ``layer``'s shape with ``options``,
    its norm weights moved off 1 so that they matter."""
    torch.manual_seed(seed)
    m = cnn.DecoderLayer(*layer, device=device, dtype=torch.bfloat16, **options)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 1:
                p.add_(0.2 * torch.randn_like(p))
    return m


def make_layer(option, seed=0, device="cpu", layer=LAYER):
    return build_layer(seed, device, layer, recompute_attention_inputs=option)


def step_inputs(layer=LAYER, seq=24, device="cpu", batch=2):
    """A layer step's inputs: x, the rotary tables and the output's
    gradient, for a layer of shape ``layer``."""
    hidden, _, heads, kv_heads = layer
    cfg = llama.LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads)
    cos, sin = llama.rope_tables(cfg, seq, device)
    x = torch.randn(batch, seq, hidden, device=device).bfloat16()
    dy = torch.randn(batch, seq, hidden, device=device).bfloat16()
    return x, cos, sin, dy


def layer_step(m, x, cos, sin, dy):
    xc = x.clone().requires_grad_()
    y = m(xc, cos, sin)
    y.backward(dy)
    return [y.detach(), xc.grad] + [p.grad for p in m.parameters()]


def forward_kept_bytes(m, x, cos, sin, dy):
    """The CUDA memory a forward of ``m`` leaves allocated for its backward
    (then runs the backward)."""
    xc = x.clone().requires_grad_()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    y = m(xc, cos, sin)
    torch.cuda.synchronize()
    kept = torch.cuda.memory_allocated() - before
    y.backward(dy)
    return kept


def watch(monkeypatch, keep_sdpa=True):
    """Counts recompute runs, records what the hooks pack, and keeps a
    weak reference to each attention-input output (program 0's)."""
    seen = {"recomputes": 0, "packed": [], "qkv": []}
    if keep_sdpa:
        monkeypatch.setattr(llama, "_sdpa", _KeepingAttention.apply)
    real_recompute = _autograd.run_recompute

    def counting(*args, **kwargs):
        seen["recomputes"] += 1
        return real_recompute(*args, **kwargs)

    monkeypatch.setattr(_autograd, "run_recompute", counting)
    real_pack = decoder._RecomputedInputs.pack

    def recording(self, t):
        out = real_pack(self, t)
        seen["packed"].append((decoder._storage_ptr(t) == self.ptr, type(out).__name__))
        return out

    monkeypatch.setattr(decoder._RecomputedInputs, "pack", recording)
    real_run = cnn.DecoderLayer.run_program

    def run(self, index, what, *inputs):
        outs = real_run(self, index, what, *inputs)
        if index == 0:
            seen["qkv"].append(weakref.ref(outs[0]))
        return outs

    monkeypatch.setattr(cnn.DecoderLayer, "run_program", run)
    return seen


def test_cpu_layer_option_changes_no_bit_and_keeps_no_projection(cpu_cache, monkeypatch):
    seen = watch(monkeypatch)
    x, cos, sin, dy = step_inputs()
    plain, rc = make_layer(False), make_layer(True)
    assert rc.rope_in_program and rc.configs[0].name.endswith("_rc")
    assert "recompute_attention_inputs=True" in repr(rc)
    want = layer_step(plain, x, cos, sin, dy)
    assert seen["recomputes"] == 0 and not seen["packed"]
    # Without the option attention keeps views of the projection: it lives
    # until the backward.
    xc = x.clone().requires_grad_()
    y = plain(xc, cos, sin)
    gc.collect()
    assert seen["qkv"][-1]() is not None
    del y
    got = layer_step(rc, x, cos, sin, dy)
    for i, (a, c) in enumerate(zip(got, want)):
        assert torch.equal(a, c), i
    assert seen["recomputes"] == 1
    # q, k and v went in as views; the output (and only it) was kept.
    assert sorted(seen["packed"]) == [(False, "Tensor")] + [(True, "_SavedView")] * 3
    # The projection is gone after the forward, then made again once.
    seen["packed"].clear()
    xc = x.clone().requires_grad_()
    y = rc(xc, cos, sin)
    gc.collect()
    assert seen["qkv"][-1]() is None
    y.backward(dy)
    assert seen["recomputes"] == 2


def test_cpu_option_can_be_set_on_a_converted_layer(cpu_cache):
    m = make_layer(False)
    name = m.configs[0].name
    programs_before = m.programs
    m.recompute_attention_inputs = True
    assert m.configs[0].name == name + "_rc" and m.configs[0].recompute_output
    assert m.programs[0].name == name + "_rc" and m.programs is not programs_before
    assert [p.name for p in m.programs[1:]] == [p.name for p in programs_before[1:]]
    m.recompute_attention_inputs = False
    assert m.configs[0].name == name


def test_cpu_no_grad_forward_takes_no_hooks(cpu_cache, monkeypatch):
    seen = watch(monkeypatch)
    cfg = llama.LlamaConfig(hidden=LAYER[0], heads=LAYER[2], kv_heads=LAYER[3])
    cos, sin = llama.rope_tables(cfg, 16, "cpu")
    m = make_layer(True)
    with torch.no_grad():
        y = m(torch.randn(1, 16, LAYER[0]).bfloat16(), cos, sin)
    assert y.shape == (1, 16, LAYER[0]) and not seen["packed"]


def cuda_layer_or_skip(**options):
    """Skips unless a Hopper GPU and the CUDA layer's programs are there,
    with and without recompute_output (and ``options``, e.g.
    keep_gemm_operands=True: both settings)."""
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available")
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs a Hopper GPU (sm_90a)")
    variants = [{}]
    for name, value in options.items():
        variants = [{**v, name: x} for v in variants for x in (False, value)]
    try:
        for extra in variants:
            for recompute in (False, True):
                for c in programs.decoder_layer_configs(*CUDA_LAYER, recompute_output=recompute,
                                                        **extra):
                    artifacts.program(c)
    except RuntimeError as e:
        pytest.skip(str(e))


def test_cuda_layer_option_changes_no_bit_and_frees_the_projection(monkeypatch):
    """torch's SDPA (whichever kernel it picks) gets the same q, k and v in
    its backward: loss and gradients are bit for bit those of the layer
    without the option, and the forward leaves the projection's bytes
    less allocated."""
    cuda_layer_or_skip()
    seen = watch(monkeypatch, keep_sdpa=False)
    hidden, _, heads, kv_heads = CUDA_LAYER
    x, cos, sin, dy = step_inputs(CUDA_LAYER, seq=512, device="cuda")
    b, s = x.shape[:2]
    plain = make_layer(False, device="cuda", layer=CUDA_LAYER)
    rc = make_layer(True, device="cuda", layer=CUDA_LAYER)
    want = layer_step(plain, x, cos, sin, dy)
    got = layer_step(rc, x, cos, sin, dy)
    for i, (a, c) in enumerate(zip(got, want)):
        assert torch.equal(a, c), i
    assert seen["recomputes"] == 1
    assert all(kind == "_SavedView" for shared, kind in seen["packed"] if shared)
    assert any(shared for shared, _ in seen["packed"])

    qkv_bytes = b * s * (heads + 2 * kv_heads) * (hidden // heads) * 2
    kept = {name: forward_kept_bytes(m, x, cos, sin, dy)
            for name, m in (("plain", plain), ("rc", rc))}
    assert seen["qkv"][-1]() is None
    assert kept["plain"] - kept["rc"] >= qkv_bytes

"""Weight gradients written by the program's kernels straight into
FP8AdamW's gradient buffer (``FP8AdamW.grad_destination``, the executor's
``into``): a converted layer's GEMM weight gradients land in their slots
with no copy, bit for bit the gradients of the usual way; everything that
cannot take them (torch.autograd.grad, ``backward(inputs=)``, a second
micro-batch, other dtypes, parameters out of order) takes the usual way.
The fused q|k|v weight of parameters adjacent in the optimizer's buffer is
read over that memory, not copied.

CPU tests: the layer's programs compiled with coat-opt into a temporary
cache, run on their CPU twins; no optimizer kernel runs (FP8AdamW's
bookkeeping only), except in the stepping test.
"""

import pytest

from conftest import torch_or_skip

torch = torch_or_skip()

from coat import artifacts
from coat.optim import _grads as _optim_grads  # noqa: E402
from coat.executor import ProgramError  # noqa: E402
from coat.nn import _autograd  # noqa: E402
from coat.optim import FP8AdamW  # noqa: E402
from test_recompute_attention_inputs import (CUDA_LAYER, build_layer,  # noqa: E402
                                             cuda_layer_or_skip, layer_step, step_inputs)

#: The layer's parameters whose gradient a program computes with a GEMM
#: (the norms' weight gradients are column sums, written the same way).
GEMM_WEIGHTS = ("self_attn.q_proj.weight", "self_attn.k_proj.weight",
                "self_attn.v_proj.weight", "self_attn.o_proj.weight", "mlp.gate_proj.weight",
                "mlp.up_proj.weight", "mlp.down_proj.weight")


def slot_of(opt, p):
    return opt._slot_of(p)


def in_slot(opt, p) -> bool:
    """Whether p.grad is the view of its slot of the bucket's live buffer."""
    b, i = slot_of(opt, p)
    return b.views_buffer(i)


def count_copies(monkeypatch):
    copies = []
    real = _optim_grads.GradBufferMixin._copy_grad_in

    def counting(self, b, i, g, buf):
        copies.append(i)
        return real(self, b, i, g, buf)

    monkeypatch.setattr(_optim_grads.GradBufferMixin, "_copy_grad_in", counting)
    return copies


@pytest.fixture(scope="module")
def inputs():
    torch.manual_seed(3)
    return step_inputs()


def test_gradients_land_in_their_slots_with_the_same_bits(cpu_cache, inputs, monkeypatch):
    plain = build_layer()
    want = layer_step(plain, *inputs)
    layer = build_layer()
    opt = FP8AdamW(layer.parameters(), kernels=[])
    copies = count_copies(monkeypatch)
    got = layer_step(layer, *inputs)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    names = dict(layer.named_parameters())
    for name in names:
        assert in_slot(opt, names[name]), name
    # q, k and v are adjacent in the optimizer's flat buffer: the program
    # read them as one matrix over that memory, not a concatenated copy.
    at = layer.self_attn
    w = _autograd.program_weight(at.q_proj.weight, at.k_proj.weight, at.v_proj.weight)
    assert w.data_ptr() == at.q_proj.weight.data_ptr() and w._coat_rows_of
    assert torch.equal(w, torch.cat([at.q_proj.weight, at.k_proj.weight, at.v_proj.weight]))
    w = _autograd.program_weight(at.k_proj.weight, at.q_proj.weight)  # not in order: a copy
    assert w.data_ptr() != at.k_proj.weight.data_ptr()
    # Only the norms' weights (their program takes them as they are too,
    # but their gradient is not one of these) may have been copied.
    b, _ = slot_of(opt, names[GEMM_WEIGHTS[0]])
    copied = {n for n, p in names.items() for i in copies if b.params[i] is p}
    assert not copied & set(GEMM_WEIGHTS), copied
    assert not b.lent and b.holder is None  # the views hold the buffer, as usual
    # The buffer goes with the gradients (a lazy bucket).
    opt.zero_grad()
    assert b.grad is None


def test_a_second_micro_batch_accumulates_as_usual(cpu_cache, inputs):
    plain = build_layer()
    layer = build_layer()
    opt = FP8AdamW(layer.parameters(), kernels=[])
    x, cos, sin, dy = inputs
    for m in (plain, layer):
        layer_step(m, x, cos, sin, dy)
        layer_step(m, x, cos, sin, 0.5 * dy)
    for (name, p), q in zip(layer.named_parameters(), plain.parameters()):
        assert torch.equal(p.grad, q.grad), name
        assert in_slot(opt, p), name


def test_autograd_grad_and_backward_inputs_leave_grad_alone(cpu_cache, inputs):
    layer = build_layer()
    opt = FP8AdamW(layer.parameters(), kernels=[])
    plain = build_layer()
    want = layer_step(plain, *inputs)
    x, cos, sin, dy = inputs
    params = list(layer.parameters())
    y = layer(x.clone(), cos, sin)
    gs = torch.autograd.grad(y, params, dy)
    for g, w in zip(gs, want[2:]):
        assert torch.equal(g, w)
    assert all(p.grad is None for p in params)
    b, _ = slot_of(opt, params[0])
    assert b.grad is None and not b.lent
    # Only the o projection's gradient asked for: the others stay None.
    o = layer.self_attn.o_proj.weight
    layer(x.clone(), cos, sin).backward(dy, inputs=[o])
    assert torch.equal(o.grad, want[2 + [p is o for p in params].index(True)])
    assert all(p.grad is None for p in params if p is not o)
    assert in_slot(opt, o)


def test_parameters_out_of_order_or_of_another_dtype_take_the_usual_way(cpu_cache, inputs,
                                                                       monkeypatch):
    layer = build_layer()
    at = layer.self_attn
    qkv = (at.q_proj.weight, at.k_proj.weight, at.v_proj.weight)
    # k before q: the fused q|k|v weight's rows are not in their slots' order.
    opt = FP8AdamW([at.k_proj.weight, at.q_proj.weight, at.v_proj.weight], kernels=[])
    b, _ = slot_of(opt, at.q_proj.weight)
    k_shape = tuple(at.k_proj.weight.shape)
    # Outside a backward the engine runs nothing: no slot is lent.
    assert opt.grad_destination([at.k_proj.weight], k_shape, torch.bfloat16) is None
    assert not b.lent
    copies = count_copies(monkeypatch)
    lent = []
    real = FP8AdamW.grad_destination

    def recording(self, params, shape, dtype):
        # Inside the backward: another dtype, or rows in another order, get none.
        assert real(self, params[:1], tuple(params[0].shape), torch.float32) is None
        got = real(self, params, shape, dtype)
        lent.append((list(params), got is not None))
        return got

    monkeypatch.setattr(FP8AdamW, "grad_destination", recording)
    plain = build_layer()
    want = layer_step(plain, *inputs)
    got = layer_step(layer, *inputs)
    for a, w in zip(got, want):
        assert torch.equal(a, w)
    assert [ok for params, ok in lent if len(params) == 3] == [False]
    assert sorted(copies) == [0, 1, 2]  # all three copied into their slots
    for p in qkv:
        assert in_slot(opt, p)


def test_the_executor_writes_into_a_given_buffer_or_refuses_it(cpu_cache):
    layer = build_layer()
    program = layer.programs[2]  # the MLP
    grads = [(v, g) for v, phase, g in program.outputs if phase == "backward" and g is not None]
    weight_grads = [v for v, g in grads if program.inputs[g][1] == "weight"]
    vid = weight_grads[-1]
    shape = program.values[vid].shape_for(0)
    h = torch.randn(48, 128).bfloat16()
    ws = [p.detach() for p in (layer.post_attention_layernorm.weight,
                                layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight,
                                layer.mlp.down_proj.weight)]
    _, kept, tokens = _autograd.run_forward(program, "mlp", [h, *ws])
    with pytest.raises(ProgramError, match="the buffer given for it"):
        _autograd.run_backward(program, "mlp", dict(kept), [torch.randn(48, 128).bfloat16()],
                               tokens, h.device,
                               into={vid: torch.empty(shape, dtype=torch.float32)})
    _, kept, tokens = _autograd.run_forward(program, "mlp", [h, *ws])
    dest = torch.full(shape, 7.0, dtype=torch.bfloat16)
    g = torch.randn(48, 128).bfloat16()
    out = _autograd.run_backward(program, "mlp", dict(kept), [g], tokens, h.device,
                                 into={vid: dest})
    _, kept, _ = _autograd.run_forward(program, "mlp", [h, *ws])
    ref = _autograd.run_backward(program, "mlp", dict(kept), [g], tokens, h.device)
    position = _autograd.forward_inputs(program).index(
        program.inputs[dict(grads)[vid]][0])
    assert out[position] is dest and torch.equal(dest, ref[position])


ADAMW = [m for m in artifacts.modules() if m.find(op="adamw_step")]


@pytest.mark.skipif(not ADAMW, reason="no compiled adamw_step kernels: run scripts/demo.sh "
                                      "(writes build/demo) or set COAT_KERNELS")
@pytest.mark.parametrize("in_backward", [False, True], ids=["step", "step_in_backward"])
def test_steps_on_gradients_written_in_place_are_those_of_copied_ones(cpu_cache, inputs,
                                                                      in_backward):
    """Three steps of the layer: the optimizer fed in place (stepping after
    the backward, or in it, bucket by bucket) and the one fed copies end
    with the same parameters, bit for bit."""
    x, cos, sin, dy = inputs
    layers, opts = [], []
    for lend in (True, False):
        layer = build_layer()
        opt = FP8AdamW(layer.parameters(), lr=1e-2, kernels=ADAMW, bucket_mb=0.05,
                       step_in_backward=in_backward and lend)
        if not lend:
            opt.grad_destination = lambda *args: None
        layers.append(layer)
        opts.append(opt)
    for t in range(3):
        for layer, opt in zip(layers, opts):
            opt.zero_grad()
            layer_step(layer, x, cos, sin, dy * (t + 1))
            opt.step()
    assert len(opts[0].buckets) > 2
    for (name, p), q in zip(layers[0].named_parameters(), layers[1].parameters()):
        assert torch.equal(p, q), name
    assert not torch.equal(layers[0].mlp.up_proj.weight, build_layer().mlp.up_proj.weight)


def test_on_the_gpu_gradients_land_in_their_slots_with_the_same_bits(monkeypatch):
    """The demo-size layer's compiled kernels: the same as on the CPU."""
    cuda_layer_or_skip()
    torch.manual_seed(4)
    x, cos, sin, dy = step_inputs(CUDA_LAYER, seq=64, device="cuda")
    want = layer_step(build_layer(device="cuda", layer=CUDA_LAYER), x, cos, sin, dy)
    layer = build_layer(device="cuda", layer=CUDA_LAYER)
    opt = FP8AdamW(layer.parameters(), kernels=[])
    copies = count_copies(monkeypatch)
    got = layer_step(layer, x, cos, sin, dy)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    names = dict(layer.named_parameters())
    assert all(in_slot(opt, p) for p in names.values())
    b, _ = slot_of(opt, names[GEMM_WEIGHTS[0]])
    assert not {n for n, p in names.items() for i in copies if b.params[i] is p} & \
        set(GEMM_WEIGHTS)

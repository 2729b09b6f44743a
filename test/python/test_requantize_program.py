"""examples/granularity/both_consumers.mlir run as a program: a tensor read by
a linear layer and by a SiLU gets a 1x16 copy and a per-tensor copy
requantized from it. coat-outline-kernels cuts the requantize into a scale
kernel over the group scales and one kernel that dequantizes and quantizes;
this checks what the executor gets from them, through the manifest's
bindings, against the reference library (CPU twins in CI, the GPU kernels
where CUDA is available)."""


import numpy as np
import pytest

from coat import artifacts, reference as ref

if not ref.is_available():
    pytest.skip("libcoat_reference.so is not built", allow_module_level=True)
torch = pytest.importorskip("torch")

from coat.executor import QTensor, load_programs  # noqa: E402
from coat.traffic import count_traffic  # noqa: E402
from kernel_io import DEVICES, activation, assert_codes_equal, hp_values  # noqa: E402


def both_consumers_program():
    for mod in artifacts.modules():
        progs = load_programs(mod)
        if "both_consumers" in progs:
            return progs["both_consumers"]
    pytest.skip("examples/granularity not compiled (ctest's compile-examples makes it)")


def bf16_tensor(x, device):
    bits = ref.bf16_encode(x).view(np.int16)
    return torch.from_numpy(bits).to(device).view(torch.bfloat16)


def host(a):
    a = a.cpu()
    if a.dtype == torch.bfloat16:
        return hp_values(a, "bf16")
    return a.view(torch.uint8).numpy() if a.element_size() == 1 else a.numpy()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", ["random", "zeros", "wide", "equal"])
def test_per_tensor_copy_is_requantized_from_the_group_copy(device, case):
    prog = both_consumers_program()
    steps = {s.spec.split("_k", 1)[1].split("_", 1)[1]: s for s in prog.steps}
    assert {"quantize_per_group", "max_of_group_scales", "requantize_per_tensor"} <= set(steps), \
        sorted(steps)
    rng = np.random.default_rng(7)
    x = activation(rng, (256, 512), case, bf16=True)
    w = ref.bf16_round(rng.standard_normal((1024, 512)).astype(np.float32))
    x_id, w_id = prog.input_ids()
    env = prog.run({x_id: bf16_tensor(x, device), w_id: bf16_tensor(w, device)})

    grouped = env[steps["quantize_per_group"].results[0]]
    codes, scales = host(grouped.codes), host(grouped.scale)
    want_codes, want_scales = ref.quantize_per_group(x, 16, "e4m3", bf16_scale=True)
    assert_codes_equal(codes.reshape(-1), want_codes.reshape(-1), "e4m3", "1x16 codes")
    np.testing.assert_array_equal(scales.reshape(-1), want_scales.reshape(-1))

    # COAT's group scaling: the per-tensor scale is the largest group scale.
    s = env[steps["max_of_group_scales"].results[0]]
    top = np.fmax.reduce(want_scales.reshape(-1), initial=np.float32(0))
    assert host(s).reshape(-1)[0] == top

    per_tensor = env[steps["requantize_per_tensor"].results[0]]
    assert isinstance(per_tensor, QTensor)
    assert host(per_tensor.scale).reshape(-1)[0] == top
    values = ref.dequantize(want_codes, want_scales, "per_group", "e4m3", group_size=16)
    assert_codes_equal(host(per_tensor.codes).reshape(-1),
                       ref.quantize_with_scale(values, top, "e4m3").reshape(-1), "e4m3",
                       "per-tensor codes")


@pytest.mark.parametrize("device", DEVICES)
def test_traffic_counts_each_launch_with_its_buffers_and_gemm_flops(device):
    prog = both_consumers_program()
    T, H, O, G = 256, 512, 1024, 16
    rng = np.random.default_rng(3)
    x = bf16_tensor(rng.standard_normal((T, H)).astype(np.float32), device)
    w = bf16_tensor(rng.standard_normal((O, H)).astype(np.float32), device)
    x_id, w_id = prog.input_ids()
    kernel = {s.spec.split("_k", 1)[1].split("_", 1)[1]: s.spec for s in prog.steps}
    quantize, gemm = kernel["quantize_per_group"], kernel["linear_forward"]

    def run():
        prog.run({x_id: x, w_id: w})

    with count_traffic() as first:  # the run that makes the plans
        run()
    with count_traffic() as outer:
        run()
        with count_traffic() as inner:  # replayed launches; its own count
            run()
        run()
    run()  # counted by nobody
    assert set(first.kernels) == {s.spec for s in prog.steps}
    # x's 1x16 copy: x in bf16, its codes, a bf16 scale per group.
    assert first.kernels[quantize] == ["quantize", 1, T * H * 2 + T * H + T * H // G * 2, 0]
    # The GEMM: FP8 x and W, the bf16 output, two bf16 scales, a flag word.
    assert first.kernels[gemm] == ["linear", 1, T * H + O * H + T * O * 2 + 2 + 2 + 4,
                                   2 * T * O * H]
    assert inner.kernels == first.kernels
    assert {k: v[1:] for k, v in outer.kernels.items()} == \
        {k: [2 * n for n in v[1:]] for k, v in first.kernels.items()}
    per_step = outer.per_step(2)
    assert per_step[gemm] == {"op": "linear", "launches": 1.0, "bytes": first.kernels[gemm][2],
                              "flop": 2 * T * O * H}

    # A launch outside the programs (what FP8AdamW makes) counts too.
    k = prog.module.kernels[quantize]
    codes = torch.empty((T, H), dtype=torch.uint8, device=device)
    scale = torch.empty(T * H // G, dtype=torch.bfloat16, device=device)
    with count_traffic() as direct:
        k.launch(input=x.reshape(-1), codes=codes.reshape(-1), scale=scale, rows=T, cols=H)
    assert direct.kernels == {quantize: first.kernels[quantize]}


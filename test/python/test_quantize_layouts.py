"""A per-tensor quantize kernel writes the layouts its program reads.

coat-recompute-activations moves the backward's reads of a transposed FP8
copy (the wgrad's activations, the dgrad's weights) to a copy derived again
there. coat-outline-kernels then makes no transposed copy in the forward
(nobody reads it) and, in the backward, a kernel that writes only q^T
(`quantize_transposed_only`): the row-major codes of that copy have no
reader either.

- The CPU twin of the transposed-only kernel, compiled here, against the
  reference library bit for bit on random and adversarial inputs and on
  shapes with partial tiles; its q^T is also that of the kernel writing
  both layouts. (test_activation_kernel_numerics.py runs the example
  kernels of this kind on the GPU too.)
- The MLP block's launch plan: every result of a quantize call is read by
  a later call, saved or returned.
"""

import numpy as np
import pytest

import coat
from coat import reference as ref

if not ref.is_available():
    pytest.skip("libcoat_reference.so is not built", allow_module_level=True)

from kernel_io import (CASES, activation, assert_codes_equal, empty,  # noqa: E402
                       hp_array)

SPECS = """
func.func @t_only_bf16_e4m3(%x: tensor<?x?xbf16>, %s: tensor<bf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16> {
  %q = coat.quantize %x scale %s : tensor<?x?xbf16>, tensor<bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  %t = coat.transpose %q : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  return %t : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
}

func.func @t_only_f32_e5m2(%x: tensor<?x?xf32>, %s: tensor<f32>) -> !coat.qtensor<?x?xf8E5M2, per_tensor> {
  %q = coat.quantize %x scale %s : tensor<?x?xf32>, tensor<f32> -> !coat.qtensor<?x?xf8E5M2, per_tensor>
  %t = coat.transpose %q : !coat.qtensor<?x?xf8E5M2, per_tensor> -> !coat.qtensor<?x?xf8E5M2, per_tensor>
  return %t : !coat.qtensor<?x?xf8E5M2, per_tensor>
}

func.func @both_bf16_e4m3(%x: tensor<?x?xbf16>, %s: tensor<bf16>) -> (!coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>) {
  %q = coat.quantize %x scale %s : tensor<?x?xbf16>, tensor<bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  %t = coat.transpose %q : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  return %q, %t : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
}
"""

# Single rows and columns, columns that are no multiple of 16 (no vector
# path), partial 64x64 tiles, whole ones.
SHAPES = [(1, 1), (1, 16), (3, 48), (17, 3), (130, 1), (129, 131), (257, 80), (64, 64),
          (256, 384)]


def toolchain_or_skip():
    from coat import toolchain
    from coat.compiler import CompileError
    try:
        return toolchain.Toolchain()
    except CompileError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    tools = toolchain_or_skip()
    out = tmp_path_factory.mktemp("transposed_only")
    src = out / "specs.mlir"
    src.write_text(SPECS)
    tools.compile_file(src, out, gpu=False)
    return coat.load(out).kernels


def test_transposed_only_kernel_has_no_row_major_codes(kernels):
    k = kernels["t_only_bf16_e4m3"]
    assert k.spec.op == "quantize_transposed_only"
    assert [a.name for a in k.spec.memrefs] == ["input", "scale", "codes_t"]
    assert kernels["both_bf16_e4m3"].spec.op == "quantize_transpose"


def given_scale(x, fmt, bf16_scale):
    """COAT's per-tensor scale of `x` (two-stage, as group scaling derives
    it), the reference's quantization with it, and the scale's dtype."""
    cols = x.shape[1]
    s = ref.two_stage_tensor_scale(x, 16 if cols % 16 == 0 else 1, fmt, bf16_scale=bf16_scale)
    return s, ref.quantize_with_scale(x, s, fmt)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", ["t_only_bf16_e4m3", "t_only_f32_e5m2"])
def test_transposed_only_cpu_twin_matches_the_library(kernels, name, case):
    kernel = kernels[name]
    cfg = kernel.config
    fmt, in_dtype = cfg["format"], cfg["input"]
    for i, (rows, cols) in enumerate(SHAPES):
        x = activation(np.random.default_rng(100 * i + CASES.index(case)), (rows, cols), case,
                       in_dtype == "bf16")
        s, want = given_scale(x, fmt, cfg["scale"] == "bf16")
        codes_t = empty((cols, rows), fmt, "cpu")
        kernel.launch(input=hp_array(x, in_dtype, "cpu"),
                      scale=hp_array(np.array([s], np.float32), cfg["scale"], "cpu"),
                      codes_t=codes_t, rows=rows, cols=cols)
        try:
            assert_codes_equal(codes_t, want.reshape(rows, cols).T, fmt, "transposed codes")
        except AssertionError as e:
            raise AssertionError(f"shape {rows}x{cols}: {e}") from None


@pytest.mark.parametrize("case", ["random", "nonfinite", "denormal", "wide"])
def test_transposed_only_matches_the_kernel_writing_both_layouts(kernels, case):
    only, both = kernels["t_only_bf16_e4m3"], kernels["both_bf16_e4m3"]
    for i, (rows, cols) in enumerate(SHAPES):
        x = activation(np.random.default_rng(i), (rows, cols), case, bf16=True)
        s, _ = given_scale(x, "e4m3", bf16_scale=True)
        scale = hp_array(np.array([s], np.float32), "bf16", "cpu")
        got = empty((cols, rows), "e4m3", "cpu")
        only.launch(input=hp_array(x, "bf16", "cpu"), scale=scale, codes_t=got,
                    rows=rows, cols=cols)
        want = empty((cols, rows), "e4m3", "cpu")
        both.launch(input=hp_array(x, "bf16", "cpu"), scale=scale,
                    codes=empty((rows, cols), "e4m3", "cpu"), codes_t=want,
                    rows=rows, cols=cols)
        np.testing.assert_array_equal(got, want, err_msg=f"shape {rows}x{cols}")


@pytest.fixture(scope="module")
def mlp_program(tmp_path_factory):
    """The small MLP block with every weight copy derived again in the
    backward (weight-copies-min-bytes=0, as 1.1B-size weights are by
    default), compiled for the CPU."""
    from coat import programs, toolchain
    from coat.executor import load_programs

    tools = toolchain_or_skip()
    recompute = "-coat-recompute-activations"
    passes = tuple(p + "=weight-copies-min-bytes=0" if p == recompute else p
                   for p in toolchain.PROGRAM_PASSES)
    cfg = programs.MLPBlockConfig(hidden=64, ffn=160, eps=1e-5)
    out = tmp_path_factory.mktemp("mlp_layouts")
    src = out / f"{cfg.name}.mlir"
    src.write_text(cfg.text())
    mp = pytest.MonkeyPatch()
    mp.setattr(toolchain, "PROGRAM_PASSES", passes)
    try:
        tools.compile_program(src, out, gpu=False)
    finally:
        mp.undo()
    return load_programs(coat.load(out))[cfg.name]


def test_quantize_calls_write_only_what_is_read(mlp_program):
    prog = mlp_program
    returned = {v for v, _, _ in prog.outputs}
    unread = []
    for i, step in enumerate(prog.steps):
        if "_quantize_" not in step.spec:
            continue
        later = {v for s in prog.steps[i + 1:] for v in s.operands}
        unread += [(step.spec, step.phase, v) for v in step.results
                   if v not in later and v not in prog.saved and v not in returned]
    assert not unread
    kinds = {(s.phase, s.spec.split("_quantize_per_tensor", 1)[1]) for s in prog.steps
             if "_quantize_per_tensor" in s.spec}
    # The backward's copies of the norm output, the SwiGLU product and the
    # three weights feed only transposed reads; the forward's transposed
    # copies of them are not made.
    assert ("backward", "_transposed_only") in kinds
    assert ("forward", "_transposed_only") not in kinds
    transposes = [s for s in prog.steps if s.spec.endswith("_quantize_per_tensor_transpose")]
    assert all(s.phase == "backward" for s in transposes)

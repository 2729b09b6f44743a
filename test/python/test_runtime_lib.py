"""The C ABI of libcoat_runtime.so (coat_runtime.h) through ctypes. Loading
the library needs the CUDA driver (libcuda.so.1): skipped where it is absent;
launching needs a GPU: skipped without one."""

import ctypes
import os

import pytest

import coat
from coat import runtime

from conftest import FIXTURES


def runtime_lib():
    try:
        return runtime._RuntimeLib.get()
    except runtime.RuntimeError_ as e:
        pytest.skip(f"libcoat_runtime.so not loadable here: {str(e)[:200]}")


def open_fixture(rt, tmp_path):
    import shutil

    shutil.copy(os.path.join(FIXTURES, "small_manifest.json"), tmp_path / "manifest.json")
    (tmp_path / "fixture.ptx").write_text("// fixture: not a real module\n")
    return rt.open(str(tmp_path / "manifest.json"))


def test_open_reports_missing_and_malformed_manifests(tmp_path):
    rt = runtime_lib()
    with pytest.raises(runtime.RuntimeError_, match="COAT_RT_ERR_IO: cannot open"):
        rt.open(str(tmp_path / "none.json"))
    (tmp_path / "manifest.json").write_text('{"format": "coat-manifest", "version": 7, "kernels": []}')
    with pytest.raises(runtime.RuntimeError_, match="COAT_RT_ERR_MANIFEST: .*unsupported manifest version 7"):
        rt.open(str(tmp_path / "manifest.json"))


def test_check_launch_validates_arguments(tmp_path):
    rt = runtime_lib()
    h = open_fixture(rt, tmp_path)
    try:
        assert rt.lib.coat_rt_num_kernels(h) == 1
        assert rt.lib.coat_rt_kernel_name(h, 0) == b"fixture_axpy_group_sum"
        rt.check_launch(h, "fixture_axpy_group_sum", 8, [16, 32, 48, 64], [8, 1.5])
        with pytest.raises(runtime.RuntimeError_, match="COAT_RT_ERR_ARGUMENTS: .*expected 4 buffer"):
            rt.check_launch(h, "fixture_axpy_group_sum", 8, [16, 32], [8, 1.5])
        with pytest.raises(runtime.RuntimeError_, match="'codes' \\(0x34\\) is not 16-byte aligned"):
            rt.check_launch(h, "fixture_axpy_group_sum", 8, [16, 32, 52, 64], [8, 1.5])
        with pytest.raises(runtime.RuntimeError_, match="COAT_RT_ERR_NOT_FOUND: no kernel named 'x'"):
            rt.check_launch(h, "x", 8, [], [])
    finally:
        rt.lib.coat_rt_close(h)


def test_resident_blocks_reports_bad_arguments(tmp_path):
    """Without a GPU image or a kernel of that name the query fails with the
    status and names the kernel; a null result pointer is refused."""
    rt = runtime_lib()
    h = open_fixture(rt, tmp_path)
    try:
        with pytest.raises(runtime.RuntimeError_, match="COAT_RT_ERR_NOT_FOUND: no kernel named 'x'"):
            rt.resident_blocks(h, "x")
        err = ctypes.create_string_buffer(256)
        assert rt.lib.coat_rt_resident_blocks(h, b"fixture_axpy_group_sum", None, err, 256) == 1
        assert b"null out_blocks" in err.value
    finally:
        rt.lib.coat_rt_close(h)


def test_gpu_launch_of_the_fixture_fails_cleanly(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    mod = coat.load(str(tmp_path)) if False else None  # noqa: F841
    rt = runtime_lib()
    h = open_fixture(rt, tmp_path)
    try:
        x = torch.zeros(8, device="cuda")
        # The fixture's PTX is not a module: the error must come back, not abort.
        with pytest.raises(runtime.RuntimeError_, match="COAT_RT_ERR_CUDA"):
            rt.launch(h, "fixture_axpy_group_sum", 8, [x.data_ptr()] * 4, [8, 1.0],
                      torch.cuda.current_stream().cuda_stream)
    finally:
        rt.lib.coat_rt_close(h)


def test_bound_launch_rebinds_buffers_and_checks_them():
    """Kernel.prepared (the executor's replay path) binds the launch at its
    first call (coat_rt_bind_launch) and then only writes addresses
    (coat_rt_launch_bound): results equal Kernel.launch's for new buffers
    each call, and a misaligned or missing buffer is refused."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from kernel_io import compiled_kernels

    kernels = [k for k in compiled_kernels(("quantize",), cpu_twin=False)
               if k.spec.cubin and k.config.get("input") == "bf16"
               and k.spec.group_size == 16]
    if not kernels:
        pytest.skip("no compiled 1x16 bf16 quantize kernel")
    k = kernels[0]
    rows, cols = 37, 160

    def buffers(seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        x = torch.randn(rows, cols, device="cuda", generator=g).bfloat16()
        return dict(input=x, codes=torch.empty(rows, cols, dtype=torch.uint8, device="cuda"),
                    scale=torch.empty(rows, cols // 16, dtype=torch.bfloat16, device="cuda"))

    first = buffers(0)
    n, kind, _, bufs, scalars = k.bind(**first, rows=rows, cols=cols)
    run = k.prepared(n, scalars, kind)
    stream = torch.cuda.current_stream().cuda_stream
    for seed in (0, 1, 2):
        got = buffers(seed)
        run([got[a.name] for a in k.spec.memrefs], stream)
        want = buffers(seed)
        k.launch(**want, rows=rows, cols=cols)
        torch.cuda.synchronize()
        for name in ("codes", "scale"):
            assert torch.equal(got[name].view(torch.uint8 if name == "codes" else torch.int16),
                               want[name].view(torch.uint8 if name == "codes" else torch.int16)), \
                (seed, name)
    bad = buffers(3)
    shifted = torch.empty(rows * cols + 1, dtype=torch.uint8, device="cuda")[1:]
    bad["codes"] = shifted.view(rows, cols)
    with pytest.raises(runtime.RuntimeError_, match="buffer 1 is null or not 16-byte aligned"):
        run([bad[a.name] for a in k.spec.memrefs], stream)
    with pytest.raises(runtime.RuntimeError_, match="expected 3 buffers, got 2"):
        run([first["input"], first["codes"]], stream)

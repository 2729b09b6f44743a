"""Manifest parsing and launch-argument validation against the hand-written
fixture manifest (fixtures/small_manifest.json)."""

import copy
import json
import os

import numpy as np
import pytest

import coat
from coat.manifest import ManifestError, parse_manifest

from conftest import FIXTURES


def fixture_doc():
    with open(os.path.join(FIXTURES, "small_manifest.json")) as f:
        return json.load(f)


def test_parses_fixture_kernel_fields():
    m = parse_manifest(fixture_doc(), directory="/d")
    k = m.kernel("fixture_axpy_group_sum")
    assert k.block == (128, 1, 1) and k.elements_per_block == 1024
    assert k.group_size == 4
    assert k.cubin == "/d/fixture.cubin" and k.cpu_symbol == "fixture_axpy_group_sum"
    assert [a.name for a in k.memrefs] == ["x", "y", "codes", "sums"]
    assert [a.name for a in k.scalars] == ["n", "alpha"]
    assert k.grid(1025) == 2


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(format="other"), 'expected "coat-manifest"'),
    (lambda d: d.update(version=2), "unsupported manifest version 2"),
    (lambda d: d["kernels"][0]["args"][0].update(dtype="f64"),
     "kernels[0].args[0] ('x'): unknown memref dtype 'f64'"),
    (lambda d: d["kernels"][0]["args"][0].update(extent="rows"),
     'expected "n", "groups" or an integer'),
    (lambda d: d["kernels"][0]["config"].pop("group_size"), "config.group_size is missing"),
    (lambda d: d["kernels"][0]["launch"].pop("elements_per_block"),
     "missing required field 'elements_per_block'"),
    (lambda d: d["kernels"][0]["launch"].update(block=[2048]), "more than 1024 threads"),
    (lambda d: d["kernels"].append(copy.deepcopy(d["kernels"][0])), "duplicate kernel name"),
    (lambda d: d["kernels"][0]["args"][5].update(dtype="bf16"), "unsupported scalar dtype"),
])
def test_rejects_malformed_manifest(mutate, message):
    doc = fixture_doc()
    mutate(doc)
    with pytest.raises(ManifestError, match=None) as e:
        parse_manifest(doc)
    assert message in str(e.value)


def test_load_reports_json_errors(tmp_path):
    (tmp_path / "manifest.json").write_text('{"format": "coat-manifest",\n "version": 1 "x"}')
    with pytest.raises(ManifestError, match="line 2"):
        coat.load(str(tmp_path))
    with pytest.raises(ManifestError, match="cannot read manifest"):
        coat.load(str(tmp_path / "nope"))


def test_cpu_only_kernel_without_launch_rule_and_bindings():
    doc = block_quantize_doc()
    rec = doc["kernels"][0]
    del rec["launch"]
    rec["config"]["group_size"] = 32
    rec["args"][0]["bind"] = "%arg0"
    rec["args"][1]["bind"] = ["%0", "%1"]
    k = parse_manifest(doc, directory="/d").kernel("qb")
    assert k.block == (1, 1, 1) and k.elements_per_block == 32
    assert k.cpu_object == "/d/qb.o" and k.cubin is None
    assert k.args[0].bind == ("%arg0",) and k.args[1].bind == ("%0", "%1")
    assert k.args[2].bind == () and k.config["scaling"] == "per_block"
    rec["gpu"] = {"cubin": "qb.cubin"}  # GPU code needs the launch rule
    with pytest.raises(ManifestError, match="missing required field 'launch'"):
        parse_manifest(doc)
    del rec["gpu"]
    rec["args"][0]["bind"] = [1]
    with pytest.raises(ManifestError, match=r"\('input'\)\.bind: expected a string or a list"):
        parse_manifest(doc)


def test_rejects_malformed_formats_section():
    doc = fixture_doc()
    doc["formats"]["e4m3"]["max_finite"] = "448"
    with pytest.raises(ManifestError, match="formats.e4m3.max_finite: expected number"):
        parse_manifest(doc)


def test_missing_reader_library_is_reported(monkeypatch):
    from coat import manifest

    monkeypatch.setattr(manifest, "_lib", None)
    monkeypatch.setenv("COAT_MANIFEST_LIB", "/nonexistent/libcoat_manifest.so")
    with pytest.raises(manifest.ManifestLibraryNotFound, match="COAT_MANIFEST_LIB"):
        parse_manifest(fixture_doc())


def test_fp8_facts_come_from_the_manifest_formats_section():
    doc = fixture_doc()
    doc["formats"]["e4m3"]["max_finite"] = 240.0  # pretend: the manifest is the source
    m = parse_manifest(doc)
    assert m.fp8["e4m3"].max_finite == 240.0
    assert m.fp8["e5m2"].max_finite == 57344.0  # not listed: fallback mirror


@pytest.fixture
def kernel():
    return coat.Module(parse_manifest(fixture_doc(), directory="/d"))["fixture_axpy_group_sum"]


def arrays(n=10):
    return dict(x=np.ones(n, np.float32), y=np.zeros(n, np.float32),
                codes=np.zeros(n, np.uint8), sums=np.zeros(-(-n // 4), np.float32))


def test_bind_infers_n_and_orders_arguments(kernel):
    n, kind, dev, bufs, scalars = kernel.bind(alpha=2, **arrays(10))
    assert (n, kind) == (10, "cpu")
    assert scalars == [10, 2.0]
    a = arrays(10)
    args = kernel.cpu_arguments(10, [a["x"], a["y"], a["codes"], a["sums"]], [10, 2.0])
    assert args[:5] == [a["x"].ctypes.data, a["x"].ctypes.data, 0, 10, 1]
    assert args[15:] == [a["sums"].ctypes.data, a["sums"].ctypes.data, 0, 3, 1, 10, 2.0]


@pytest.mark.parametrize("change, message", [
    (dict(x=np.ones(10, np.float64)), "argument 'x': dtype float64 does not match"),
    (dict(sums=np.zeros(4, np.float32)), "argument 'sums': has 4 elements, expected 3"),
    (dict(y=np.zeros(20, np.float32)[::2]), "argument 'y': array is not contiguous"),
    (dict(codes=[0] * 10), "argument 'codes': expected a torch tensor or numpy array"),
    (dict(alpha="fast"), "scalar argument 'alpha' (f32): expected a number"),
    # Integers travel to the launch as doubles: exact up to 2^53 only.
    (dict(n=2 ** 53 + 2), "scalar argument 'n' (i64): 9007199254740994 out of range"),
    (dict(bogus=1), "unknown argument(s) bogus"),
])
def test_bind_rejects_bad_arguments_naming_them(kernel, change, message):
    kw = dict(arrays(10), alpha=1.0)
    kw.update(change)
    with pytest.raises(ValueError) as e:
        kernel.bind(**kw)
    assert message in str(e.value)


def test_bind_takes_integers_up_to_2_53(kernel):
    # 2^53 itself is in range (it fails later, on the buffer sizes).
    with pytest.raises(ValueError, match="argument 'x': has 10 elements"):
        kernel.bind(alpha=1.0, n=2 ** 53, **arrays(10))


def test_bind_rejects_missing_and_misaligned(kernel):
    kw = arrays(10)
    with pytest.raises(ValueError, match="missing argument"):
        kernel.bind(**kw)
    raw = np.zeros(11 * 4 + 64, np.uint8)
    base = (-raw.ctypes.data) % 16 + 4  # 4 bytes past a 16-byte boundary
    kw["x"] = raw[base:base + 40].view(np.float32)
    with pytest.raises(ValueError, match="argument 'x': data pointer .* not 16-byte aligned"):
        kernel.bind(alpha=1.0, **kw)
    with pytest.raises(ValueError, match="argument 'x': has 10 elements, expected 9"):
        kernel.bind(alpha=1.0, n=9, **arrays(10))


def test_cpu_launch_through_the_twin_fixture(fixture_module_dir):
    mod = coat.load(str(fixture_module_dir))
    a = arrays(10)
    a["x"][:] = np.arange(10, dtype=np.float32)
    mod.fixture_axpy_group_sum.launch(alpha=2.0, **a)
    assert os.path.isfile(fixture_module_dir / "fixture.cpu.so")  # linked on demand
    np.testing.assert_array_equal(a["y"], 2.0 * np.arange(10, dtype=np.float32))
    np.testing.assert_array_equal(a["codes"], np.arange(10))
    np.testing.assert_array_equal(a["sums"], [12.0, 44.0, 34.0])


def test_cpu_launch_with_torch_tensors(fixture_module_dir):
    torch = pytest.importorskip("torch")
    from coat import _dtypes

    mod = coat.load(str(fixture_module_dir))
    x = torch.arange(8, dtype=torch.float32)
    y = torch.ones(8)
    codes = torch.zeros(8, dtype=_dtypes.torch_code_dtype("e4m3"))
    sums = torch.zeros(2)
    mod["fixture_axpy_group_sum"].launch(x=x, y=y, codes=codes, sums=sums, alpha=0.5)
    assert torch.equal(y, 0.5 * torch.arange(8, dtype=torch.float32) + 1)
    assert torch.equal(_dtypes.codes_as_uint8(codes), torch.arange(8, dtype=torch.uint8))
    with pytest.raises(ValueError, match="argument 'x': dtype torch.float64"):
        mod["fixture_axpy_group_sum"].launch(x=x.double(), y=y, codes=codes, sums=sums, alpha=1)


def gemm_doc(persistent=True):
    """A persistent GEMM record with a 1x16 quantized output (the layout
    coat-lower-linear writes)."""
    launch = {"block": [384], "grid_tiles": [["m", 128], ["n", 256]], "shared_bytes": 1024}
    if persistent is not None:
        launch["persistent"] = persistent
    doc = fixture_doc()
    doc["kernels"] = [{
        "name": "gemm_q16", "op": "linear", "gpu": {"cubin": "g.cubin"},
        "config": {"kind": "forward", "out": "e4m3", "group_size": 16},
        "launch": launch,
        "args": [
            {"name": "a", "kind": "tensormap", "dtype": "e4m3", "dims": ["k", "m"],
             "box": [128, 128], "swizzle": "128b"},
            {"name": "b", "kind": "tensormap", "dtype": "e4m3", "dims": ["k", "n"],
             "box": [128, 256], "swizzle": "128b"},
            {"name": "out", "kind": "memref", "dtype": "e4m3", "extent": "m*n"},
            {"name": "out_scale", "kind": "memref", "dtype": "bf16", "extent": "m*groups"},
            {"name": "m", "kind": "scalar", "dtype": "i64"},
            {"name": "n", "kind": "scalar", "dtype": "i64"},
            {"name": "k", "kind": "scalar", "dtype": "i64"},
        ]}]
    return doc


def test_persistent_grid_counts_tiles_and_groups_extent():
    k = parse_manifest(gemm_doc(), directory="/d").kernel("gemm_q16")
    assert k.persistent
    # 3 x 1 tiles, flattened (the runtime caps this at the SM count)
    assert k.grid(200, {"m": 300, "n": 200, "k": 64}) == (3, 1, 1)
    scale = next(a for a in k.args if a.name == "out_scale")
    assert scale.extent_for(200, {"m": 300, "n": 200}) == 300 * 13
    plain = parse_manifest(gemm_doc(persistent=None)).kernel("gemm_q16")
    assert not plain.persistent and plain.grid(200, {"m": 300, "n": 200}) == (3, 1, 1)


def test_block_scaled_gemm_scale_extents():
    """Block-scaled GEMMs size their f32 scale matrices with the scalars
    n_blocks and k_blocks (docs/manifest.md): [m, k_blocks], [n_blocks, k_blocks]."""
    doc = gemm_doc()
    rec = doc["kernels"][0]
    rec["config"] = {"kind": "forward", "out": "bf16", "scaling": "block"}
    rec["args"] = [a for a in rec["args"] if a["name"] != "out_scale"]
    rec["args"][2] = {"name": "out", "kind": "memref", "dtype": "bf16", "extent": "m*n"}
    rec["args"][3:3] = [
        {"name": "a_scale", "kind": "memref", "dtype": "f32", "extent": "m*k_blocks"},
        {"name": "b_scale", "kind": "memref", "dtype": "f32", "extent": "n_blocks*k_blocks"}]
    rec["args"] += [{"name": "n_blocks", "kind": "scalar", "dtype": "i64"},
                    {"name": "k_blocks", "kind": "scalar", "dtype": "i64"}]
    k = parse_manifest(doc, directory="/d").kernel("gemm_q16")
    scalars = {"m": 300, "n": 200, "k": 1040, "n_blocks": 2, "k_blocks": 9}
    ext = {a.name: a.extent_for(200, scalars) for a in k.args
           if a.kind == "memref"}
    assert ext == {"out": 300 * 200, "a_scale": 300 * 9, "b_scale": 2 * 9}


@pytest.mark.parametrize("change, message", [
    (lambda d: d["kernels"][0]["launch"].update(persistent="yes"), "expected true or false"),
    (lambda d: d["kernels"][0]["launch"].pop("grid_tiles") and
     d["kernels"][0]["launch"].update(elements_per_block=16), "launch.persistent: needs grid_tiles"),
    (lambda d: d["kernels"][0]["launch"].update(grid_tiles=[], elements_per_block=16),
     "launch.grid_tiles: expected 1 to 3"),
    (lambda d: d["kernels"][0]["config"].pop("group_size"), "config.group_size is missing"),
])
def test_rejects_bad_persistent_gemm_records(change, message):
    doc = gemm_doc()
    change(doc)
    with pytest.raises(ManifestError) as e:
        parse_manifest(doc)
    assert message in str(e.value)


def block_quantize_doc(extent="rows/128*cols/128"):
    doc = fixture_doc()
    doc["kernels"] = [{
        "name": "qb", "op": "quantize", "cpu": {"object": "qb.o", "symbol": "qb"},
        "config": {"scaling": "per_block", "block": 128},
        "launch": {"block": [256], "elements_per_block": 16384},
        "args": [
            {"name": "input", "kind": "memref", "dtype": "bf16", "extent": "n"},
            {"name": "codes", "kind": "memref", "dtype": "e4m3", "extent": "n"},
            {"name": "scale", "kind": "memref", "dtype": "f32", "extent": extent},
            {"name": "rows", "kind": "scalar", "dtype": "i64"},
            {"name": "cols", "kind": "scalar", "dtype": "i64"},
        ]}]
    return doc


def test_block_scale_extent_divides_scalars_rounding_up():
    k = parse_manifest(block_quantize_doc(), directory="/d").kernel("qb")
    scale = next(a for a in k.args if a.name == "scale")
    assert scale.extent_for(257 * 129, {"rows": 257, "cols": 129}) == 3 * 2
    assert scale.extent_for(256 * 128, {"rows": 256, "cols": 128}) == 2 * 1
    assert scale.extent_for(0, {"rows": 0, "cols": 128}) == 0


@pytest.mark.parametrize("extent", ["rows/0*cols/128", "rows/x", "groups/128", "depth/128"])
def test_rejects_bad_block_scale_extents(extent):
    with pytest.raises(ManifestError, match="extent"):
        parse_manifest(block_quantize_doc(extent))


def program_doc():
    with open(os.path.join(FIXTURES, "program_manifest.json")) as f:
        return json.load(f)


def test_programs_come_normalized_from_the_reader():
    m = parse_manifest(program_doc())
    (p,) = m.programs
    assert [s["kernels"] for s in p["steps"]] == [
        ["p_k0_quantize"], ["p_k1_norm_grad", "p_k1_norm_grad_reduce"]]
    assert p["inputs"][1] == {"value": 1, "role": "gradient", "grad_of": None}
    assert m.kernel("p_k1_norm_grad_reduce").config == {"of": "p_k1_norm_grad"}


def recompute_doc():
    """The fixture program with its forward's 1x16 copy (value 2) as output
    0, made again by a recompute call (value 5) from the saved input."""
    doc = program_doc()
    p = doc["programs"][0]
    p["values"].append(dict(p["values"][2]))
    p["steps"].insert(1, {"spec": "p_k0_quantize", "phase": "recompute", "operands": [0],
                          "results": [5]})
    p["outputs"] = ([{"value": 2, "phase": "forward"}] + p["outputs"]
                    + [{"value": 5, "phase": "recompute", "recompute_of": 0}])
    p["saved"] = [2, 0]
    return doc


def test_recompute_phase_comes_normalized_from_the_reader():
    (p,) = parse_manifest(recompute_doc()).programs
    assert [s["phase"] for s in p["steps"]] == ["forward", "recompute", "backward"]
    assert [o["recompute_of"] for o in p["outputs"]] == [None, None, None, 0]
    assert p["outputs"][3]["phase"] == "recompute"
    doc = recompute_doc()
    doc["programs"][0]["saved"] = [2]
    with pytest.raises(ManifestError, match="the recompute phase reads value 0, which the "
                                            "forward does not save"):
        parse_manifest(doc)


def test_plans_come_from_the_reader():
    m = parse_manifest(program_doc())
    plan = m.reader.plan("p", 1, 100, resident=lambda name: 2)
    assert plan["scratch"] == [{"extent": 4 * 64, "dtype": "f32"}]  # 2 CTAs x 2 rows
    row, reduce = plan["launches"]
    assert (row["n"], row["scalars"]) == (6400, [100, 64, 4])
    assert row["buffers"][:2] == [["value", 2, "codes"], ["value", 2, "scale"]]
    assert (reduce["n"], reduce["scalars"]) == (64, [64, 4])
    assert plan["results"] == [{"value": 3, "buffers": [["alloc", 0, ""]]},
                               {"value": 4, "buffers": [["alloc", 1, ""]]}]
    assert parse_manifest(program_doc()).reader.plan("p", 1, 100)["launches"][0][
        "scalars"][2] == 100  # the CPU twins: 256 teams of 2 rows, at most rows


def edit(doc, path, value):
    *keys, last = path
    for k in keys:
        doc = doc[k]
    doc[last] = value


@pytest.mark.parametrize("path, value, where, why", [
    (("programs", 0, "steps", 1, "spec"), "p_k9",
     "programs[0] ('p').steps[1] ('p_k9')", "no kernel 'p_k9' in the manifest"),
    (("kernels", 0, "args", 3, "bind"), "rows(in0",
     "programs[0] ('p').steps[0] ('p_k0_quantize')",
     "argument 'rows' binds 'rows(in0', not an extent expression"),
    (("kernels", 1, "args", 2, "bind"), "in1.scale",
     "programs[0] ('p').steps[1] ('p_k1_norm_grad')",
     "binds in1.scale, but value 1 is a tensor (it has no parts)"),
    (("programs", 0, "saved"), [],
     "programs[0] ('p').steps[1] ('p_k1_norm_grad')",
     "the backward reads value 2, which the forward does not save"),
    (("kernels", 1, "config", "max_cols"), 32,
     "programs[0] ('p').steps[1] ('p_k1_norm_grad')", "exceeds the kernel's max_cols = 32"),
])
def test_load_refuses_a_program_it_cannot_follow(tmp_path, path, value, where, why):
    """A hand-edited plan is refused when the manifest is read, with the
    file, the entry and the reason: never at the first launch."""
    from coat.executor import ProgramError, load_programs

    doc = program_doc()
    edit(doc, path, value)
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(ProgramError) as e:
        load_programs(str(tmp_path))
    assert isinstance(e.value, ManifestError)
    assert str(e.value).startswith(f"{tmp_path / 'manifest.json'}: manifest: {where}: ")
    assert why in str(e.value)


def test_load_refuses_truncated_and_stale_manifests(tmp_path):
    text = json.dumps(program_doc())
    path = tmp_path / "manifest.json"
    path.write_text(text[: len(text) // 2])
    with pytest.raises(ManifestError, match=f"^{path}: manifest: JSON parse error at line 1"):
        coat.load(str(tmp_path))
    doc = program_doc()
    doc["version"] = 0
    path.write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match=f"^{path}: manifest: top level.version: "
                                            "expected an integer >= 1"):
        coat.load(str(tmp_path))


def test_every_compiled_manifest_loads_whole():
    """The compiled modules found (scripts/demo.sh's, $COAT_KERNELS) pass the
    reader's checks, programs included, and every call plans."""
    from coat import artifacts

    dirs = [d for d in artifacts.search_path()
            if os.path.isfile(os.path.join(d, "manifest.json"))]
    if not dirs:
        pytest.skip("no compiled modules (scripts/demo.sh makes them)")
    for d in dirs:
        m = coat.load_manifest(d)
        for p in m.programs:
            for i in range(len(p["steps"])):
                assert m.reader.plan(p["name"], i, 33)["launches"]

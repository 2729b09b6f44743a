"""The pure-Python parts of the benchmarks, without a GPU: the statistics and
ideal arithmetic of bench/_timing.py, its result records, bench/summary.py's
table, and each benchmark's own table printer on made-up rows."""

import argparse
import importlib
import json
import os
import sys

import pytest

from conftest import REPO

BENCH = os.path.join(REPO, "bench")
sys.path.insert(0, BENCH)

import _timing  # noqa: E402
import summary  # noqa: E402
from _timing import Timing  # noqa: E402


def test_percentile_interpolates_between_ranks():
    xs = [4.0, 1.0, 3.0, 2.0]
    assert _timing.percentile(xs, 0) == 1.0
    assert _timing.percentile(xs, 50) == 2.5
    assert _timing.percentile(xs, 90) == pytest.approx(3.7)
    assert _timing.percentile(xs, 100) == 4.0
    assert _timing.percentile([7.0], 90) == 7.0
    with pytest.raises(ValueError):
        _timing.percentile([], 50)


def test_timing_statistics():
    t = Timing((1.0, 1.2, 1.1, 5.0, 1.05))
    assert t.median == 1.1
    assert t.min == 1.0
    assert t.p90 == pytest.approx(1.2 + 0.6 * 3.8)
    assert t.spread == pytest.approx((t.p90 - 1.0) / 1.1)


def test_measure_on_the_host_counts_warmup_and_repeats():
    calls = []
    t = _timing.measure(lambda: calls.append(1), warmup=2, repeats=4, inner=3, cuda=False)
    assert len(calls) == 2 + 4 * 3
    assert len(t.samples) == 4 and t.inner == 3 and not t.graph
    assert all(s >= 0 for s in t.samples)
    with pytest.raises(ValueError):
        _timing.measure(lambda: None, repeats=0, cuda=False)


def test_ideal_arithmetic():
    # 1 GB at 1 TB/s takes 1 ms: a kernel taking 2 ms is at 50% of it.
    assert _timing.ideal_ms(1e9, 1e12) == pytest.approx(1.0)
    assert _timing.pct_of_copy(1e9, 2.0, 1e12) == pytest.approx(50.0)
    # 1e12 FLOP in 1 ms is 1000 TFLOP/s, half of a 2000 TFLOP/s peak.
    assert _timing.tflops(1e12, 1.0) == pytest.approx(1000.0)
    assert _timing.pct_of_peak(1e12, 1.0, 2000.0) == pytest.approx(50.0)
    assert _timing.ratio(3.0, 2.0) == 1.5
    assert _timing.ratio(None, 2.0) is None


def test_record_appends_one_json_line_per_row(tmp_path, monkeypatch):
    path = tmp_path / "results.jsonl"
    monkeypatch.setenv(_timing.RESULTS_ENV, str(path))
    r = _timing.record("norms", "rmsnorm_k", "16384x4096", Timing((2.0, 1.0, 3.0)),
                       pct_ideal=80.0, ideal=_timing.copy_ideal(4.25e12),
                       anchor="torch.compile", anchor_timing=Timing((4.0, 4.0)),
                       device="test gpu", extra=float("nan"))
    assert r["ms"] == 2.0 and r["ms_min"] == 1.0 and r["ratio"] == 2.0
    assert r["extra"] is None  # NaN is not JSON
    _timing.record("scales", "k", "n", Timing((1.0,)), device="test gpu")
    lines = path.read_text().splitlines()
    assert [json.loads(line)["family"] for line in lines] == ["norms", "scales"]
    last = json.loads(lines[1])
    assert last["anchor"] is None and last["ratio"] is None and last["pct_ideal"] is None
    monkeypatch.delenv(_timing.RESULTS_ENV)
    _timing.record("norms", "k", "n", Timing((1.0,)), device="test gpu")
    assert len(path.read_text().splitlines()) == 2


def _records():
    return [
        dict(family="optimizer", kernel="adamw_e4m3", shape="537M params", ms=3.265,
             ms_min=3.26, ms_p90=3.3, pct_ideal=63.4, ideal="bytes at copy 4.25 TB/s",
             anchor="torch AdamW fused", anchor_ms=4.391, ratio=4.391 / 3.265, device="H200"),
        dict(family="activations", kernel="quantize_1x16", shape="8192x8192", ms=0.0671,
             ms_min=0.067, ms_p90=0.068, pct_ideal=73.1, ideal="bytes at copy 4.25 TB/s",
             anchor="torch.compile", anchor_ms=None, ratio=None, device="H200"),
        dict(family="block", kernel="MLPBlock", shape="4096 tokens", ms=4.071, ms_min=4.0,
             ms_p90=4.1, pct_ideal=None, anchor="BF16 eager autograd", anchor_ms=2.352,
             ratio=2.352 / 4.071, device="H200"),
    ]


def test_summary_table_sorted_by_family_with_dashes_for_missing_figures():
    lines = summary.table(_records())
    assert lines[0] == "device: H200"
    assert "% ideal, optimizer: bytes at copy 4.25 TB/s" in lines
    head = next(i for i, l in enumerate(lines) if l.startswith("| family"))
    cols = [c.strip() for c in lines[head].strip("|").split("|")]
    assert cols == list(summary.COLUMNS)
    rows = [[c.strip() for c in l.strip("|").split("|")] for l in lines[head + 2:]]
    assert [r[0] for r in rows] == ["activations", "block", "optimizer"]
    act, block, opt = rows
    assert act[3] == "0.06710" and act[7] == "-" and act[8] == "-"
    assert block[5] == "-" and block[8] == "0.58x"
    assert opt[3] == "3.265" and opt[4] == "1.2%" and opt[5] == "63.4" and opt[8] == "1.34x"
    assert len({len(l) for l in lines[head:]}) == 1  # one width for every row


def test_fmt_ms_keeps_four_significant_digits():
    assert summary.fmt_ms(13.217) == "13.22"
    assert summary.fmt_ms(0.00612) == "0.006120"
    assert summary.fmt_ms(1234.5) == "1234"
    assert summary.fmt_ms(None) == "-"


def test_summary_main_reads_a_results_file(tmp_path, capsys):
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in _records()) + "\n{\"family\": \"cut")
    assert summary.main([str(path)]) == 0
    out, err = capsys.readouterr()
    assert "3 rows" in out and "| optimizer" in out
    assert "not a JSON record" in err
    assert summary.main([str(tmp_path / "none.jsonl")]) == 0
    assert "no benchmark recorded a row" in capsys.readouterr().out


# Each benchmark's own table printer, on rows shaped as its main() makes them.

def _bench(name):
    pytest.importorskip("torch", reason="the benchmarks import torch")
    return importlib.import_module(name)


def test_kernel_benchmark_tables_print_with_and_without_an_anchor(capsys):
    act = _bench("bench_activations")
    base = dict(kernel="k", op="quantize", shape="8192x8192", bytes=2e8, ideal_ms=0.05,
                coat_ms=0.06, coat_pct=83.3, graph=True)
    act.print_table([dict(base, torch_ms=0.07, torch_pct=71.4, speedup=1.17),
                     dict(base, torch_ms=None, torch_pct=None, speedup=None, graph=False)],
                    4.25e12)
    flow = _bench("bench_flow")
    base = dict(kernel="silu", op="silu", shape="8192x8192", bytes=2e8, ideal_ms=0.05,
                coat_us=60.0, coat_gbs=3300.0, coat_pct=83.3, datasheet_pct=70.0, graph=True)
    flow.print_table([dict(base, torch_us=70.0, torch_pct=71.4, speedup=1.17),
                      dict(base, torch_us=None, torch_pct=None, speedup=None)], 4.25e12)
    norms = _bench("bench_norms")
    base = dict(kernel="rmsnorm", op="rmsnorm", shape="16384x4096", bytes=2e8, ideal_ms=0.05,
                coat_ms=0.06, coat_pct=83.3, coat_gbs=3300.0, graph=True)
    norms.print_table([dict(base, torch_ms=0.07, torch_pct=71.4, speedup=1.17),
                       dict(base, torch_ms=None, torch_pct=None, speedup=None)], 4.25e12)
    scales = _bench("bench_scales")
    scales.print_header()
    scales.print_row("4096x4096/16", 4096 * 256, 0.006, 70.0, 0.007)
    bias = _bench("bench_bias_grad")
    bias.print_header()
    bias.print_row("bias grad", "4096x4096", 0.03, 80.0, 0.035)
    out = capsys.readouterr().out.splitlines()
    # three tables, the scales row and the bias-gradient row
    assert sum("1.17x" in line for line in out) == 5
    rows = [line for line in out if line.startswith(("k ", "silu ", "rmsnorm "))]
    assert [line.endswith("(no graph)") for line in rows] == [False, True] + [False] * 4
    # A row without its anchor prints dashes for the anchor's columns.
    assert [line.replace("  (no graph)", "").split()[-3:] for line in rows[1::2]] == [
        ["-", "-", "-"]] * 3


def test_rope_table_prints_with_and_without_anchors(capsys):
    rope = _bench("bench_rope")
    base = dict(kernel="coat_rope_d64", op="rope", tokens=4096, bytes=2e7, coat_us=9.0,
                coat_pct=80.0)
    rope.print_table([dict(base, eager_us=90.0, eager_speedup=10.0, compile_us=18.0,
                           compile_speedup=2.0),
                      dict(base, eager_us=None, eager_speedup=None, compile_us=None,
                           compile_speedup=None)], 4.25e12)
    rows = [line.split() for line in capsys.readouterr().out.splitlines()
            if line.startswith("coat_rope_d64 ")]
    assert rows[0][-4:] == ["90.0", "10.00x", "18.0", "2.00x"]
    assert rows[1][-4:] == ["-", "-", "-", "-"]


def test_optimizer_gemm_block_fsdp_tables_print(capsys):
    opt = _bench("bench_optimizer")
    nan = float("nan")
    opt.print_table({"gpu": "H200", "params": 537_000_000},
                    [("torch.optim.AdamW(fused=True), fp32", 4.4, 28.0, 3.4, 80.0, 1.0),
                     ("FP8AdamW, Llama-1B shapes", 6.9, nan, nan, nan, 1.38)], 4.25e12, 0.0775)
    lin = _bench("bench_linear")
    lin.print_block_table([("4096x4096x4096", "128x128 s4", 900.0, None, None, "1e-03", "n/a"),
                           ("8192x8192x8192", "128x128 s4", 950.0, 1250.0, 0.76, "1e-03",
                            "1e-03")], "H200")
    row = ("4096x4096x4096", "128x256 s4 wg2 ws", 1150.0, 1300.0, 0.885, "1e-03", 1.734)
    lin.print_per_tensor_tables([row], [row], "H200")
    block = _bench("bench_block")
    block.print_header(argparse.Namespace(hidden=1024, ffn=2816), 41, "H200")
    block.print_row(4096, 3.48, 2.0, 237.0, 480.0)
    fsdp = _bench("bench_fsdp")
    rows = [dict(optimizer=n, params_local=536e6, state_bytes=s, alloc_bytes=s, step_ms=ms)
            for n, s, ms in (("torch AdamW fused", 4.3e9, 7.5), ("FP8AdamW shared", 1.2e9, 3.9))]
    fsdp.print_table(rows, 1, "H200", "2.11", argparse.Namespace(hidden=2048, layers=8))
    out = capsys.readouterr().out
    assert "1.38" in out and "n/a" in out and "0.885" in out and "0.57x" in out
    assert "1.734" in out
    assert "0.52x" in out and "     nan" in out


def test_stochastic_overhead_pairs_each_kernel_with_its_twin_from_the_same_directory():
    opt = _bench("bench_optimizer")
    rtn = {"param": "bf16", "stochastic_param": False, "stochastic_moments": False}
    sr = dict(rtn, stochastic_param=True)
    out = {"kernels": [dict(name="rtn", dir="base", ms=2.0, config=rtn),
                       dict(name="rtn", dir="variant", ms=1.6, config=rtn),
                       dict(name="sr", dir="variant", ms=1.7, config=sr),
                       dict(name="sr", dir="other", ms=1.7, config=sr)]}
    found = opt.stochastic_overheads(out)
    # The variant's kernel against the variant's twin, not the base's; a
    # directory without a twin gives no pair.
    assert [(o["name"], o["twin_ms"]) for o in found] == [("sr", 1.6)]
    assert found[0]["extra"] == pytest.approx(1.7 / 1.6 - 1)


def test_linear_bench_shapes_parse_and_refuse_bad_ones():
    lin = _bench("bench_linear")
    assert lin.parse_shapes(["1024x2816x16384"]) == [(1024, 2816, 16384)]
    assert lin.parse_shapes(["wgrad", "8x16x32"]) == lin.WGRAD_SHAPES + [(8, 16, 32)]
    for bad in ("1024x2816", "0x16x16", "ax16x16"):
        with pytest.raises(ValueError, match="MxNxK"):
            lin.parse_shapes([bad])


def test_linear_bench_times_a_configuration_once_unless_per_folder():
    lin = _bench("bench_linear")

    class Spec:
        def __init__(self, name, **config):
            self.name, self.op = name, "linear"
            self.config = {**dict(kind="forward", a="e4m3", b="e4m3", bias=False,
                                  scaling="per_tensor", out="bf16", tile=[128, 256, 128],
                                  stages=4, warpgroups=2, warp_specialized=True,
                                  epilogue="staged"), **config}

    class Module:
        def __init__(self, *specs):
            self.manifest = type("Manifest", (), {"kernels": list(specs)})()
            self.kernels = {s.name: "kernel " + s.name for s in specs}

        def __getitem__(self, name):
            return self.kernels[name]

    before = Module(Spec("fwd"), Spec("fwd_q16", out="e4m3"), Spec("dgrad", kind="dgrad"),
                    Spec("fwd_bias", bias=True), Spec("blk", scaling="block"))
    after = Module(Spec("fwd"), Spec("fwd_q16", out="e4m3"),
                   Spec("narrow", tile=[128, 128, 128]))
    folders = [("build/old-linear", before), ("build/demo/fp8_linear/", after)]
    gemms, quantized, blocked = lin.forward_gemms(folders)
    assert [k for _, k in gemms] == ["kernel fwd", "kernel narrow"]
    assert [t for t, _ in quantized] == ["128x256 s4 wg2 ws staged q16"]
    assert [k for _, k in blocked] == ["kernel blk"]
    gemms, quantized, _ = lin.forward_gemms(folders, per_folder=True)
    assert [t for t, _ in gemms] == ["old-linear: 128x256 s4 wg2 ws staged",
                                     "fp8_linear: 128x256 s4 wg2 ws staged",
                                     "fp8_linear: 128x128 s4 wg2 ws staged"]
    assert [k for _, k in quantized] == ["kernel fwd_q16", "kernel fwd_q16"]

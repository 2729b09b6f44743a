"""bench/profile_kernels.py: targets are checked before any GPU work, and the
summary reads Nsight Compute's raw CSV (header, then units, then one row per
kernel) with its units, whatever ncu printed before it."""

import os
import sys

import pytest

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "bench"))
import profile_kernels as pk  # noqa: E402


def test_targets_parse_and_bad_ones_are_refused():
    assert pk.parse_target("norms:rmsnorm_bwd_h11008:16384x11008") == (
        "norms", "rmsnorm_bwd_h11008", (16384, 11008))
    assert pk.parse_target("adamw:k:268435456") == ("adamw", "k", (268435456,))
    for bad in ("norms:k", "a:b:c:d", "a::8x8", "a:b:8xq", "a:b:0x8", "a:b:1x2x3x4"):
        with pytest.raises(ValueError):
            pk.parse_target(bad)
    for t in pk.DEFAULT_TARGETS:
        pk.parse_target(t)


def _csv(rows):
    stall = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
    cols = ["ID", "Kernel Name"] + list(pk.METRICS.values()) + [
        stall.format(s) for s in ("long_scoreboard", "barrier", "wait", "math_pipe_throttle")]
    units = ["", "", "usecond", "Mbyte", "Gbyte", "%", "%", "%", "%", "%", "register/thread",
             "%", "", "", "", ""]
    assert len(units) == len(cols)
    q = lambda xs: ",".join(f'"{x}"' for x in xs)  # noqa: E731
    return "\n".join(["==PROF== Disconnected from process 1", q(cols), q(units)]
                     + [q(r) for r in rows]) + "\n"


def test_summary_converts_units_and_ranks_stalls(tmp_path, capsys):
    report = tmp_path / "raw.csv"
    report.write_text(_csv([
        ["0", "rmsnorm_bwd_h11008", "250.5", "500", "0.25", "80.1", "40.2", "30.0", "45.5",
         "50", "107", "12.5", "9.5", "0.5", "1.5", "3.0"],
        ["1", "rmsnorm_bwd_h11008_reduce", "5", "1,000", "0", "10", "5", "3", "20", "100",
         "30", "90", "0", "0", "0", "0"]]))
    launched = tmp_path / "launched.txt"
    launched.write_text("norms:rmsnorm_bwd_h11008:16384x11008: bytes 700000000\n")
    out = pk.summarize(str(report), str(launched))
    first, reduce = out
    assert first["us"] == pytest.approx(250.5)
    assert first["dram_gb"] == pytest.approx(0.5 + 0.25)  # 500 MB read + 0.25 GB written
    assert first["need_gb"] == pytest.approx(0.7)
    assert first["tbps"] == pytest.approx(0.75e9 / 250.5e-6 / 1e12)
    assert first["stalls"] == "long_scoreboard 9.5, math_pipe_throttle 3.0, wait 1.5"
    assert reduce["need_gb"] is None and reduce["dram_gb"] == pytest.approx(1.0)
    assert "rmsnorm_bwd_h11008_reduce" in capsys.readouterr().out


def test_a_report_without_kernels_is_an_error(tmp_path):
    report = tmp_path / "raw.csv"
    report.write_text(_csv([]))
    with pytest.raises(SystemExit, match="profiled no kernel"):
        pk.summarize(str(report))
    report.write_text("==PROF== nothing\n")
    with pytest.raises(ValueError, match="no ncu raw CSV header"):
        pk.summarize(str(report))


def test_summary_of_a_real_h100_report(tmp_path):
    # Columns and units as `ncu --import R --csv --page raw` wrote them for
    # rmsnorm_bwd_h11008 and its _reduce on an H100 (2026-12-05), cut to the
    # metrics the summary reads: a wrong metric name shows as a missing value.
    report = os.path.join(REPO, "test", "python", "fixtures", "ncu_raw_h100.csv")
    launched = tmp_path / "launched.txt"
    launched.write_text("norms:rmsnorm_bwd_h11008:16384x11008: bytes 924429312\n")
    row, reduce = pk.summarize(report, str(launched))
    assert row["kernel"] == "rmsnorm_bwd_h11008" and reduce["kernel"].endswith("_reduce")
    assert row["us"] == pytest.approx(361.0, abs=0.1)
    assert row["dram_gb"] == pytest.approx(0.914, abs=0.001)
    assert row["need_gb"] == pytest.approx(0.924, abs=0.001)
    assert row["dram_pct"] == pytest.approx(75.5, abs=0.1)
    assert row["regs"] == 107 and row["occ_max"] == 25
    assert None not in (row["sm_pct"], row["issue"], row["occ"], row["l2"])
    assert row["stalls"].startswith("long_scoreboard")

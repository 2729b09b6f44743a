#!/usr/bin/env python3
"""What bounds a kernel, from Nsight Compute's hardware counters.

  scripts/gpu_check.sh --profile-only DEMO_DIR    (COAT_PROFILE_TARGETS,
                                                   COAT_PROFILE_DIR)

runs `launch` under `ncu`, then `summarize` on its report. A target is
MODULE:KERNEL:SHAPE, MODULE the folder name of one of the --kernels folders
(`scripts/demo.sh` output), KERNEL a kernel of its manifest and SHAPE
`ROWSxCOLS` (norms, activations), `N` parameters (optimizer) or `MxNxK`
(GEMMs with a bf16 result); without targets, DEFAULT_TARGETS: the kernels of
issue #12 that are short of their goal, with kernels at their ceiling
beside them for comparison.

`launch` sets each target up as its benchmark does (bench/bench_*.py) and
launches it once inside an NVTX range `coat-profile`, which is all that
ncu profiles (`--nvtx-include coat-profile/`); a GEMM's range also holds
its anchor (cuBLASLt's per-tensor `_scaled_mm`, torch's blockwise one for
block-scaled operands), so the two are profiled side by side. A norm
backward with a weight is its two or three launches. `summarize` prints one row per profiled kernel of the report:
time, DRAM bytes against the bytes the target must move (on the row of the
target's kernel, for all of its launches), DRAM and SM throughput as % of
peak, issue activity, achieved and theoretical occupancy, registers, L2 hit
rate and the three largest warp stall reasons (warps stalled per issued
instruction).
"""

import argparse
import csv
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))
sys.path.insert(0, str(HERE))

RANGE = "coat-profile"

DEFAULT_TARGETS = [
    # Norm backwards: LayerNorm+w+b at 11008 columns (separate column sums),
    # RMSNorm at 11008, the prefetching LayerNorm+w at 8192.
    "norms:layernorm_wb_bwd_h11008:16384x11008",
    "norms:rmsnorm_bwd_h11008:16384x11008",
    "norms:layernorm_w_bwd_h8192:16384x8192",
    # Tile quantizers (bf16), and a flat one near its ceiling.
    "quantize:coat_quantize_t_bf16_e4m3_sbf16:8192x8192",
    "quantize:coat_quantize_b128_bf16_e4m3_sf32:8192x8192",
    "quantize:coat_quantize_tb128_bf16_e4m3_sf32:8192x8192",
    "quantize:coat_quantize_bf16_e4m3_g16_sbf16:8192x8192",
    # The AdamW step: bf16 parameters, and f32 (at 92-94% of copy).
    "adamw:coat_adamw_bf16_e4m3x_e4m3x_g128:268435456",
    "adamw:coat_adamw_f32_e4m3x_e4m3x_g128:268435456",
    # The block-scaled GEMM beside torch's blockwise _scaled_mm, and the
    # per-tensor one at 4096³ (its one shape below 0.95x) beside cuBLASLt.
    "fp8_linear:coat_fp8_linear_block_fwd:8192x8192x8192",
    "fp8_linear:coat_fp8_linear_fwd:4096x4096x4096",
]

# The summary's columns: key -> raw metric name (the sections and
# --metrics that scripts/gpu_check.sh --profile asks ncu for).
METRICS = {
    "time": "gpu__time_duration.sum",
    "dram_read": "dram__bytes_read.sum",
    "dram_write": "dram__bytes_write.sum",
    "dram_pct": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "issue_pct": "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "occ": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "occ_max": "sm__maximum_warps_per_active_cycle_pct",
    "regs": "launch__registers_per_thread",
    "l2_hit": "lts__t_sector_hit_rate.pct",
}
STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")


def parse_target(text):
    parts = text.split(":")
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"target {text!r} is not MODULE:KERNEL:SHAPE")
    module, kernel, shape = parts
    try:
        dims = tuple(int(v) for v in shape.split("x"))
    except ValueError:
        raise ValueError(f"target {text!r}: shape {shape!r} is not integers joined by x") from None
    if not 1 <= len(dims) <= 3 or min(dims) < 1:
        raise ValueError(f"target {text!r}: shape {shape!r} needs 1 to 3 positive extents")
    return module, kernel, dims


def setup(kernel, dims):
    """(launch thunk, bytes the kernel must move or None) as the family's
    benchmark sets it up."""
    op = kernel.spec.op
    if op in ("rmsnorm", "layernorm", "rmsnorm_grad", "layernorm_grad"):
        import bench_norms
        rows, cols = dims
        launch, _, nbytes = bench_norms.setup(kernel, rows, cols, None)
        return launch, nbytes
    if op in ("quantize", "quantize_transpose", "quantize_transposed_only", "dequantize",
              "absmax", "requantize"):
        import bench_activations
        rows, cols = dims
        bufs, nbytes = bench_activations.buffers(kernel, rows, cols)
        return (lambda: kernel.launch(rows=rows, cols=cols, **bufs)), nbytes
    if op == "adamw_step":
        import bench_optimizer
        (n,) = dims
        bufs = bench_optimizer.kernel_buffers(kernel.spec, n)
        seed = {"seed": 1234} if any(a.name == "seed" for a in kernel.spec.args) else {}
        nbytes = bench_optimizer.kernel_bytes_per_param(kernel.spec) * n
        return (lambda: kernel.launch(step=1.0, **bench_optimizer.HP, **bufs, **seed)), nbytes
    if op == "linear" and kernel.config.get("scaling") == "block":
        import bench_linear
        ops = bench_linear.block_operands(*dims)
        anchor, _ = bench_linear.torch_blockwise(*ops[:4])

        def launch():
            bench_linear.launch_block(kernel, *ops)
            if anchor is not None:
                anchor()
        return launch, None
    if op == "linear" and kernel.config.get("out") == "bf16" and \
            kernel.config.get("kind") == "forward" and not kernel.config.get("bias"):
        import torch

        import bench_linear
        m, n, k = dims
        x8 = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        w8 = (torch.randn(n, k, device="cuda") * 0.1).to(torch.float8_e4m3fn)
        sx, sw = torch.tensor([0.5], device="cuda"), torch.tensor([0.25], device="cuda")
        out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        scales = bench_linear.scale_args(kernel, sx, sw)

        def launch():
            kernel.launch(n=n, a=x8, b=w8, out=out, m=m, k=k, **scales)
            torch._scaled_mm(x8, w8.t(), scale_a=sx.reshape(()), scale_b=sw.reshape(()),
                             out_dtype=torch.bfloat16)
        return launch, None
    raise ValueError(f"{kernel.name}: no profiling setup for op {op!r}")


def launch_targets(dirs, targets, record):
    import torch

    import coat
    if not torch.cuda.is_available():
        sys.exit("profiling needs a CUDA device")
    folders = {Path(d).name: Path(d) for d in dirs}
    lines = []
    for text in targets:
        module, name, dims = parse_target(text)
        if module not in folders:
            sys.exit(f"{text}: no kernel folder named {module} among --kernels")
        mod = coat.load(folders[module])
        if name not in mod.kernels:
            sys.exit(f"{text}: no kernel {name} in {folders[module]}")
        launch, nbytes = setup(mod[name], dims)
        launch()  # loads the module outside the profiled range
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(RANGE)
        launch()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        lines.append(f"{text}: bytes {nbytes:.0f}" if nbytes else f"{text}: bytes -")
        print(lines[-1], flush=True)
        del launch
        torch.cuda.empty_cache()
    if record:
        Path(record).write_text("\n".join(lines) + "\n")


def number(text):
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def to_unit(value, unit, scale):
    """value in `unit` converted by `scale` ({unit: factor}); None unknown."""
    if value is None or unit not in scale:
        return None
    return value * scale[unit]


NS = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6,
      "s": 1e9, "second": 1e9}
BYTES = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6,
         "GB": 1e9, "B": 1.0}


def read_raw_csv(text):
    """(rows as dicts, units by column) of `ncu --import R --csv --page raw`
    output; ncu's own lines before the header (==PROF== ...) are skipped."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no ncu raw CSV header (a line starting with \"ID\")")
    reader = csv.reader(lines[start:])
    header = next(reader)
    units = dict(zip(header, next(reader, [])))
    return [dict(zip(header, r)) for r in reader if len(r) == len(header)], units


def report_csv(path):
    """The raw CSV of an ncu report (.ncu-rep, through `ncu --import`) or of
    a file that already holds it."""
    if str(path).endswith(".ncu-rep"):
        r = subprocess.run(["ncu", "--import", str(path), "--csv", "--page", "raw"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"ncu --import {path} failed: {r.stderr.strip()[:400]}")
        return r.stdout
    return Path(path).read_text()


def summarize(path, launched=None):
    rows, units = read_raw_csv(report_csv(path))
    if not rows:
        sys.exit(f"{path}: ncu profiled no kernel (none ran inside the {RANGE} range?)")
    needed = {}
    if launched:
        for ln in Path(launched).read_text().splitlines():
            m = re.match(r"^(\S+): bytes (\S+)$", ln)
            if m:
                needed[m.group(1).split(":")[1]] = number(m.group(2))
    out = []
    for r in rows:
        name = r.get("Kernel Name", "?")
        get = lambda key: number(r.get(METRICS[key]))  # noqa: E731
        ns = to_unit(get("time"), units.get(METRICS["time"]), NS)
        rd = to_unit(get("dram_read"), units.get(METRICS["dram_read"]), BYTES)
        wr = to_unit(get("dram_write"), units.get(METRICS["dram_write"]), BYTES)
        dram = rd + wr if rd is not None and wr is not None else None
        stalls = sorted(((number(v) or 0.0, STALL.match(k).group(1)) for k, v in r.items()
                         if STALL.match(k)), reverse=True)[:3]
        ideal = needed.get(name)
        out.append(dict(
            kernel=name[:44], us=ns / 1e3 if ns else None,
            dram_gb=dram / 1e9 if dram is not None else None,
            need_gb=ideal / 1e9 if ideal else None,
            tbps=dram / ns / 1e3 if dram is not None and ns else None,
            dram_pct=get("dram_pct"), sm_pct=get("sm_pct"), issue=get("issue_pct"),
            occ=get("occ"), occ_max=get("occ_max"), regs=get("regs"), l2=get("l2_hit"),
            stalls=", ".join(f"{s} {v:.1f}" for v, s in stalls)))
    def fmt(v, spec):  # a missing value as "-" in the column's width
        width = re.sub(r"\D*(\d+).*", r"\1", spec)
        return format(v, spec) if v is not None else format("-", ">" + width)
    print(f"{'kernel':44s} {'us':>8s} {'DRAM GB':>8s} {'need GB':>8s} {'TB/s':>5s} "
          f"{'DRAM%':>5s} {'SM%':>5s} {'issue%':>6s} {'occ%':>9s} {'regs':>4s} {'L2hit':>5s}  "
          "top stalls (warps per issue)")
    for o in out:
        print(f"{o['kernel']:44s} {fmt(o['us'], '8.1f')} {fmt(o['dram_gb'], '8.3f')} "
              f"{fmt(o['need_gb'], '8.3f')} {fmt(o['tbps'], '5.2f')} {fmt(o['dram_pct'], '5.1f')} "
              f"{fmt(o['sm_pct'], '5.1f')} {fmt(o['issue'], '6.1f')} "
              f"{fmt(o['occ'], '4.1f')}/{fmt(o['occ_max'], '<4.0f')} {fmt(o['regs'], '4.0f')} "
              f"{fmt(o['l2'], '5.1f')}  {o['stalls']}")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("launch", help="launch the targets once each in an NVTX range")
    p.add_argument("--kernels", nargs="+", required=True, help="compiled kernel folders")
    p.add_argument("--targets", nargs="*", default=[], help="MODULE:KERNEL:SHAPE ...")
    p.add_argument("--record", help="file for the bytes each target must move")
    p = sub.add_parser("summarize", help="one row per kernel of an ncu report")
    p.add_argument("report", help="an .ncu-rep, or the raw CSV of one")
    p.add_argument("--launched", help="the --record file of `launch`")
    sub.add_parser("targets", help="print the default targets")
    args = ap.parse_args(argv)
    if args.cmd == "launch":
        targets = args.targets or DEFAULT_TARGETS
        try:
            for t in targets:
                parse_target(t)  # fail before any GPU work
        except ValueError as e:
            sys.exit(str(e))
        launch_targets(args.kernels, targets, args.record)
    elif args.cmd == "summarize":
        summarize(args.report, args.launched)
    else:
        print("\n".join(DEFAULT_TARGETS))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Trains the same model the ways of examples/train_llama.py (BF16, COAT,
torchao float8, each eager or compiled) side by side, each in its own process
(clean memory statistics), same seed and data order; prints one table and
writes the loss curves as a PNG.

  python bench/train_compare.py --config 100m --steps 1000 --out DIR
  python bench/train_compare.py --config tinyllama --steps 30 --eval-every 0 --out DIR
  python bench/train_compare.py --modes bf16 coat --graph --config 100m --steps 1000 --out DIR
  python bench/train_compare.py --modes bf16 bf16-compiled torchao coat coat-compiled \
      --config 100m --steps 60 --eval-every 0 --warmup-timing 20 --profile 10 --out DIR
  python bench/train_compare.py --modes torchao coat coat-sib --config 7b \
      --param-dtype bf16 --batch 4 --seq 2048 --steps 8 --eval-every 0 \
      --warmup-timing 3 --log-every 1 --torchao-optim adamw8bit --out DIR

A mode `X-compiled` runs train_llama.py --mode X --compile (torchao is
always compiled; `--compile-mode reduce-overhead` gives every compiled run
torch.compile's CUDA graphs, eager runs ignore it). A compiled mode may name
its own torch.compile mode after `@`, which the run takes instead of
--compile-mode's: `--modes torchao torchao@reduce-overhead
coat-compiled@reduce-overhead` puts both of torchao's next to COAT's in one
table. `coat-sib` (and `coat-sib-compiled`) runs coat with
--step-in-backward: FP8AdamW steps each bucket inside the backward;
`coat-persistent` with --persistent-grads: FP8AdamW's gradient buffers
allocated once, as before they became lazy (to compare step times);
`coat-master` with --param-dtype bf16-master: bf16 parameters, FP8AdamW
keeping f32 master copies, while the other runs keep --param-dtype's. Options
of one kind of run go to those runs only: --step-in-backward (every coat
run steps in the backward) and --bucket-mb to coat runs, --torchao-optim to
torchao and bf16 runs (the baselines share their optimizer). Every other
option goes to train_llama.py. A mode that cannot run (torchao not
installed) or whose torch.compile fails is reported as such, with the
reason, and left out of the tables.

--batches B [B ...] runs every mode at each batch size (train_llama.py
--batch B, into OUT/bB) and ends with the largest batch that fits per mode:
a run out of GPU memory is a cell, not a failure of the comparison.

--profile N profiles the last N steps of each run (train_llama.py --profile,
bench/step_profile.py; the step time is measured before them) and prints a
second table, also written to OUT/profile.md: per mode the step time,
GPU-busy time against the step time and against the profiled steps' wall
time, kernels per step and milliseconds per step by category; our kernels'
traffic against the copy bandwidth and the FP8 peak by category and op, and
each GEMM kernel's rate (one row a compiled shape); then the
memory view of one step (allocated between steps, after the forward, the
backward and the optimizer step, the step's peak) and the torch element-wise
time by aten op. --profile-traces keeps each run's Chrome trace as
OUT/MODE.trace.json.gz. Without --profile the memory view is printed (and
written to OUT/memory.md) on its own.
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "train_llama.py"
sys.path.insert(0, str(HERE))

from step_profile import CATEGORIES, traffic_rows  # noqa: E402

COMPILED = "-compiled"
STEP_IN_BACKWARD = "-sib"
#: FP8AdamW's gradient buffers as before they became lazy (an A/B of the
#: step time on one machine).
PERSISTENT = "-persistent"
#: bf16 parameters with FP8AdamW's f32 master copies, while the other runs
#: keep --param-dtype's (an f32 BF16 or torchao run next to it).
MASTER = "-master"
COAT_VARIANTS = {STEP_IN_BACKWARD: ["--step-in-backward"],
                 PERSISTENT: ["--persistent-grads"],
                 MASTER: ["--param-dtype", "bf16-master"]}
BASES = ("bf16", "coat", "torchao")
#: Separates a mode from the torch.compile mode it runs under.
COMPILE_MODE_SEP = "@"


@functools.lru_cache(maxsize=None)
def _compile_modes() -> tuple:
    """train_llama.py's torch.compile modes (imported only when a mode names
    one: the example imports torch)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_train_llama", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.COMPILE_MODES


def mode_args(mode: str, kind_args: dict | None = None) -> list:
    """train_llama.py's arguments for a mode: `X` or `X-compiled`, where a
    coat X may be `coat-sib` (stepping in the backward) or
    `coat-persistent` (persistent gradient buffers), then the options of its
    kind (``kind_args``: {base mode: [options]}). A compiled mode may end in
    `@MODE`, its torch.compile mode."""
    name = mode
    mode, sep, compile_mode = mode.partition(COMPILE_MODE_SEP)
    args = []
    if sep:
        if not (mode.endswith(COMPILED) or mode == "torchao"):
            raise ValueError(f"{name}: only a compiled run (X-compiled, torchao) takes a "
                             "torch.compile mode")
        modes = _compile_modes()
        if compile_mode not in modes:
            raise ValueError(f"{name}: unknown torch.compile mode {compile_mode!r} "
                             f"({', '.join(modes)})")
    if mode.endswith(COMPILED):
        mode, args = mode[:-len(COMPILED)], ["--compile"]
    for suffix, flags in COAT_VARIANTS.items():
        if mode.endswith(suffix):
            mode, args = mode[:-len(suffix)], [*flags, *args]
            if mode != "coat":
                raise ValueError(f"{mode}{suffix}: only coat has {' '.join(flags)}")
            break
    if mode not in BASES:
        raise ValueError(f"unknown mode {mode!r} (bf16, coat, torchao, each optionally "
                         f"-compiled, a compiled one optionally @MODE; coat-sib, coat-persistent, "
                         "coat-master)")
    extra = [a for a in (kind_args or {}).get(mode, []) if a not in args]
    if "--persistent-grads" in args:  # a persistent run does not step in the backward
        extra = [a for a in extra if a != "--step-in-backward"]
    own = ["--compile-mode", compile_mode] if sep else []
    return ["--mode", mode, *args, *extra, *own]


def passthrough_for(mode: str, passthrough: list) -> list:
    """The options every run gets, less those the mode sets itself:
    --compile-mode for a mode that names its own, --param-dtype for a
    master one."""
    own = set()
    if COMPILE_MODE_SEP in mode:
        own.add("--compile-mode")
    if mode.partition(COMPILE_MODE_SEP)[0].removesuffix(COMPILED).endswith(MASTER):
        own.add("--param-dtype")
    out, skip = [], False
    for a in passthrough:
        if skip:
            skip = False
        elif a in own:
            skip = True
        elif a.partition("=")[0] not in own:
            out.append(a)
    return out


def run_modes(modes, out: Path, passthrough, profile=0, traces=False, kind_args=None):
    """({mode: record} of the runs that finished, {mode: why} of the rest)."""
    records, failed = {}, {}
    for mode in modes:
        log = out / f"{mode}.json"
        if log.exists():
            log.unlink()  # a failed run must not leave an earlier run's record
        cmd = [sys.executable, str(EXAMPLE), *mode_args(mode, kind_args), "--log", str(log),
               *passthrough_for(mode, passthrough)]
        if profile:
            cmd += ["--profile", str(profile)]
            if traces:
                cmd += ["--profile-trace", str(out / f"{mode}.trace.json.gz")]
        print("+", " ".join(cmd), flush=True)
        rc = subprocess.run(cmd).returncode
        record = json.loads(log.read_text()) if log.exists() else None
        if record is not None and "error" in record:
            err = record["error"]
            failed[mode] = f"{err.get('phase', 'run')} failed: {err['type']}: {err['message']}"
        elif rc != 0 or record is None:
            failed[mode] = f"failed (exit {rc})"
        else:
            records[mode] = record
            continue
        print(f"{mode}: {failed[mode]}", flush=True)
    return records, failed


def fit_table(results: dict) -> str:
    """Per mode, each batch size's step time and peak (or "out of memory",
    or why it failed) and the largest batch that ran. `results`: {batch:
    (records, failed)} of run_modes."""
    modes = []
    for records, failed in results.values():
        modes += [m for m in (*records, *failed) if m not in modes]
    batches = sorted(results)
    rows = ["| mode | " + " | ".join(f"batch {b}" for b in batches) + " | largest that ran |",
            "|---|" + "---|" * (len(batches) + 1)]
    for mode in modes:
        cells, fits = [], None
        for b in batches:
            records, failed = results[b]
            r = records.get(mode)
            if r is not None:
                fits = b if fits is None else max(fits, b)
                step = f"{r['step_time_s'] * 1e3:.1f} ms, " if "step_time_s" in r else ""
                cells.append(step + f"{r.get('peak_memory_bytes', 0) / 2**30:.2f} GiB")
            elif mode in failed:
                cells.append("out of memory" if failed[mode].startswith("memory failed")
                             else failed[mode])
            else:
                cells.append("-")
        rows.append(f"| {mode} | " + " | ".join(cells) + f" | {fits if fits else 'none'} |")
    return "\n".join(rows)


def anchor_ratios(records: dict) -> str:
    """Per COAT run, its step time and peak over those of each anchor run in
    the same table (BF16 compiled and torchao, in any torch.compile mode):
    the ratios the targets are stated in."""
    anchors = [m for m in records
               if m.partition(COMPILE_MODE_SEP)[0] in ("bf16" + COMPILED, "torchao")]
    lines = []
    for mode, r in records.items():
        if not mode.startswith("coat") or not anchors:
            continue
        parts = []
        for key, what in (("step_time_s", "step"), ("peak_memory_bytes", "peak")):
            got = [f"{r[key] / records[a][key]:.3f}x {a}" for a in anchors
                   if r.get(key) and records[a].get(key)]
            if got:
                parts.append(f"{what} " + ", ".join(got))
        if parts:
            lines.append(f"- {label(mode, r)}: " + "; ".join(parts))
    return "\n".join(lines)


def table(records: dict) -> str:
    base = records.get("bf16")
    # The last step's loss next to the mean of the last steps: a short run's
    # mean hides a curve of another shape (high early, low late).
    rows = ["| mode | params | final train loss | last step loss | held-out loss | vs BF16 | "
            "peak memory GiB | vs BF16 | fwd-retained per layer (U) | step ms | vs BF16 | "
            "tokens/s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def ratio(r, key, fmt="{:.3f}"):
        if base is None or key not in r or key not in base or not base[key]:
            return "-"
        return fmt.format(r[key] / base[key])

    for mode, r in records.items():
        held = r.get("final_held_out")
        rows.append(
            f"| {label(mode, r)} | {r['params'] / 1e6:.1f}M | {r['final_train_loss']:.4f} | "
            + (f"{r['train_loss'][-1]:.4f}" if r.get("train_loss") else "-") + " | "
            + (f"{held:.4f}" if held is not None else "-") + f" | {ratio(r, 'final_held_out')} | "
            + (f"{r['peak_memory_bytes'] / 2**30:.2f}" if "peak_memory_bytes" in r else "-")
            + f" | {ratio(r, 'peak_memory_bytes')} | "
            + (f"{r['forward_retained_per_layer_U']:.2f}"
               if "forward_retained_per_layer_U" in r else "-")
            + " | " + (f"{r['step_time_s'] * 1e3:.1f}" if "step_time_s" in r else "-")
            + f" | {ratio(r, 'step_time_s')} | "
            + (f"{r['tokens_per_s']:,.0f}" if "tokens_per_s" in r else "-") + " |")
    return "\n".join(rows)


def label(mode: str, r: dict) -> str:
    base = mode.partition(COMPILE_MODE_SEP)[0]
    base = base[:-len(COMPILED)] if base.endswith(COMPILED) else base
    notes = [n for n, on in (("graph", r.get("graph")),
                             ("step in backward", r.get("step_in_backward")
                              and not base.endswith(STEP_IN_BACKWARD)),
                             ("q/k/v recomputed", r.get("recompute_attention_inputs")),
                             ("GEMM operands kept", r.get("keep_gemm_operands")),
                             ("attention output reused", r.get("reuse_attention_output")),
                             ("AdamW8bit", r.get("torchao_optim") == "adamw8bit"),
                             (r.get("param_dtype"), r.get("param_dtype") not in (None, "f32")
                              and not base.endswith(MASTER)),
                             (r.get("compile_mode"), r.get("compile_mode") not in (None, "default")
                              and COMPILE_MODE_SEP not in mode))
             if on]
    return mode + (f" ({', '.join(notes)})" if notes else "")


def _cell(v, fmt):
    return "-" if v is None else fmt.format(v)


def _table_head(head: list) -> list:
    """A Markdown table's header and rule lines for the column names ``head``."""
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]


def profile_table(records: dict) -> str:
    """Per mode: step time, GPU-busy time, kernels per step and milliseconds
    per step by category (the categories some run has, in step_profile's
    order), from the records' `profile`."""
    prof = {m: r["profile"] for m, r in records.items() if r.get("profile")}
    if not prof:
        return ""
    cats = [c for c in CATEGORIES if any(c in p["categories"] for p in prof.values())]
    head = ["mode", "step ms", "profiled wall ms", "GPU busy ms", "busy % of step",
            "busy % of wall", "kernels/step", *[f"{c} ms" for c in cats]]
    rows = _table_head(head)
    for mode, p in prof.items():
        r = records[mode]
        step_ms = r["step_time_s"] * 1e3 if "step_time_s" in r else None
        share = p.get("busy_share_of_step")
        wall_share = p.get("busy_share")
        name = label(mode, r) + (" (CPU ops)" if p.get("activity") == "cpu" else "")
        cells = [name, _cell(step_ms, "{:.1f}"), _cell(p.get("wall_ms"), "{:.1f}"),
                 f"{p['busy_ms']:.1f}", _cell(None if share is None else 100 * share, "{:.0f}%"),
                 _cell(None if wall_share is None else 100 * wall_share, "{:.0f}%"),
                 f"{p['kernels']:.0f}"]
        cells += [_cell(p["categories"].get(c, {}).get("ms"), "{:.2f}") for c in cats]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def traffic_table(records: dict) -> str:
    """Per mode and category of our kernels, each followed by its ops
    ("category: op"): what a step moved and computed, over those kernels'
    time (step_profile.traffic_rows), against the copy bandwidth the run
    measured and the FP8 peak."""
    rows = []
    for mode, r in records.items():
        p = r.get("profile") or {}
        for cat, n, gb, tf, ms, tbps, pc, tfs, pp in traffic_rows(p, p.get("copy_tbps"),
                                                                  by_op=True):
            rows.append([label(mode, r), cat, f"{n:.0f}", f"{gb:.2f}", _cell(tf, "{:.2f}"),
                         f"{ms:.2f}", _cell(tbps, "{:.2f}"), _cell(pc, "{:.1f}"),
                         _cell(tfs, "{:.0f}"), _cell(pp, "{:.1f}"),
                         _cell(p.get("copy_tbps"), "{:.2f}")])
    if not rows:
        return ""
    head = ["mode", "category", "launches/step", "GB/step", "TFLOP/step", "ms/step", "TB/s",
            "% of copy", "TFLOP/s", "% of FP8 peak", "copy TB/s"]
    return "\n".join(_table_head(head) + ["| " + " | ".join(c) + " |" for c in rows])


def gemm_kernel_table(records: dict) -> str:
    """Per mode, each of our GEMM kernels (one compiled configuration: a
    program's GEMM of one shape) over its time: which shapes and epilogues
    fall short of the FP8 peak, where the category's rate averages them."""
    rows = []
    for mode, r in records.items():
        p = r.get("profile") or {}
        for name, n, _, tf, ms, _, _, tfs, pp in traffic_rows(p, p.get("copy_tbps"),
                                                              by_kernel=True):
            parts = name.split(": ")
            if len(parts) != 3 or parts[0] != "coat gemm":
                continue
            rows.append([label(mode, r), parts[2], parts[1], f"{n:.0f}", _cell(tf, "{:.2f}"),
                         f"{ms:.2f}", _cell(tfs, "{:.0f}"), _cell(pp, "{:.1f}")])
    if not rows:
        return ""
    head = ["mode", "GEMM kernel", "op", "launches/step", "TFLOP/step", "ms/step", "TFLOP/s",
            "% of FP8 peak"]
    return "\n".join(_table_head(head) + ["| " + " | ".join(c) + " |" for c in rows])


def memory_table(records: dict) -> str:
    """Allocated GiB at the points of one step (the records' `memory`) and
    the run's peak."""
    mem = {m: r["memory"] for m, r in records.items() if r.get("memory")}
    if not mem:
        return ""
    points = (("between_steps", "between steps"), ("after_forward", "after forward"),
              ("after_backward", "after backward"), ("after_optimizer", "after optimizer"),
              ("step_peak", "step peak"))
    head = ["mode", "step", *[f"{name} GiB" for _, name in points], "run peak GiB"]
    rows = _table_head(head)
    gib = lambda b: None if b is None else b / 2**30  # noqa: E731
    for mode, m in mem.items():
        r = records[mode]
        cells = [label(mode, r), str(m.get("step", "-"))]
        cells += [_cell(gib(m.get(key + "_bytes")), "{:.2f}") for key, _ in points]
        cells.append(_cell(gib(r.get("peak_memory_bytes")), "{:.2f}"))
        rows.append("| " + " | ".join(cells) + " |")
    if any(records[m].get("step_in_backward") for m in mem):
        rows.append("\nStepping in the backward, \"after backward\" is after the optimizer "
                    "step too: it ran inside the backward.")
    return "\n".join(rows)


def detail_lines(records: dict, top: int = 6) -> str:
    """Per mode, the torch element-wise time by aten op and what `other`
    holds (ms per step)."""
    lines = []
    for mode, r in records.items():
        p = r.get("profile")
        if r.get("profile_error"):
            lines.append(f"- {label(mode, r)}: the profile failed: {r['profile_error']}")
        if not p:
            continue
        ew = ", ".join(f"{op} {ms:.2f}" for op, ms, _ in p["elementwise_ops"][:top])
        lines.append(f"- {label(mode, r)}: torch elementwise by op: {ew or '-'}")
        other = p["categories"].get("other")
        if other:
            lines.append("  other: " + ", ".join(f"{k} {v:.2f}" for k, v in other["top"][:top]))
    return "\n".join(lines)


def profile_report(records: dict) -> str:
    first = next(iter(records.values()))
    steps = sorted({r["profile"]["steps"] for r in records.values() if r.get("profile")})
    head = (f"Profile: {first.get('config')}, {first.get('batch')}x{first.get('seq')} tokens a "
            f"step, {first.get('device')}, torch {first.get('torch')}; ms per step over the last "
            f"{'/'.join(map(str, steps)) or '-'} steps of each run.")
    parts = [head, profile_table(records), traffic_table(records), gemm_kernel_table(records),
             memory_table(records), detail_lines(records)]
    return "\n\n".join(p for p in parts if p)


def plot(records: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for mode, r in records.items():
        tl = r["train_loss"]
        k = 20
        smooth = [sum(tl[max(0, i - k + 1):i + 1]) / len(tl[max(0, i - k + 1):i + 1])
                  for i in range(len(tl))]
        line, = ax.plot(range(1, len(tl) + 1), smooth, label=f"{mode} train (mean of 20)",
                        linewidth=1)
        if r["held_out"]:
            xs, ys = zip(*r["held_out"])
            ax.plot(xs, ys, "o--", color=line.get_color(), label=f"{mode} held-out",
                    markersize=3)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/byte)")
    first = next(iter(records.values()))
    ax.set_title(f"{first['config']} ({first['params'] / 1e6:.0f}M), "
                 f"{first['batch']}x{first['seq']} tokens/step, {first['device']}")
    ax.set_ylim(top=min(3.5, ax.get_ylim()[1]))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    # No abbreviations: train_llama.py's options pass through (--batch is
    # not --batches).
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--modes", nargs="+", default=["bf16", "coat", "torchao"],
                    help="bf16, coat, torchao, each optionally -compiled; coat-sib: coat "
                         "stepping in the backward; coat-persistent: persistent gradient "
                         "buffers")
    ap.add_argument("--out", required=True)
    ap.add_argument("--plot", default=None, help="PNG path (default OUT/loss.png)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="profile the last N steps of each run (train_llama.py --profile)")
    ap.add_argument("--profile-traces", action="store_true",
                    help="keep each run's trace as OUT/MODE.trace.json.gz")
    ap.add_argument("--step-in-backward", action="store_true",
                    help="coat runs step FP8AdamW inside the backward (as coat-sib)")
    ap.add_argument("--bucket-mb", default=None, help="coat runs: FP8AdamW's bucket size")
    ap.add_argument("--recompute-attention-inputs", action="store_true",
                    help="coat runs: q, k and v made again in the backward instead of kept "
                         "(train_llama.py's flag)")
    ap.add_argument("--reuse-attention-output", action="store_true",
                    help="coat runs: the attention output program reads attention's kept "
                         "output instead of keeping an FP8 copy (train_llama.py's flag)")
    ap.add_argument("--keep-gemm-operands", action="store_true",
                    help="coat runs: the backward GEMMs' FP8 operands kept from the forward "
                         "instead of derived again (train_llama.py's flag)")
    ap.add_argument("--torchao-optim", default=None,
                    help="torchao and bf16 runs: adamw or adamw8bit")
    ap.add_argument("--batches", type=int, nargs="+", default=None, metavar="B",
                    help="run every mode at each batch size and report the largest that fits")
    args, passthrough = ap.parse_known_args()
    if args.batches and "--batch" in passthrough:
        ap.error("--batches and --batch do not go together")
    if args.batches and min(args.batches) < 1:
        ap.error("--batches takes positive batch sizes")
    kind_args = {"coat": ((["--step-in-backward"] if args.step_in_backward else [])
                          + (["--bucket-mb", args.bucket_mb] if args.bucket_mb else [])
                          + (["--recompute-attention-inputs"]
                             if args.recompute_attention_inputs else [])
                          + (["--keep-gemm-operands"] if args.keep_gemm_operands else [])
                          + (["--reuse-attention-output"]
                             if args.reuse_attention_output else [])),
                 "torchao": ["--torchao-optim", args.torchao_optim] if args.torchao_optim
                 else []}
    kind_args["bf16"] = kind_args["torchao"]  # the baselines share their optimizer
    try:
        for mode in args.modes:
            mode_args(mode)
    except ValueError as e:
        ap.error(str(e))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.batches:
        results = {}
        for b in sorted(set(args.batches)):
            where = out / f"b{b}"
            where.mkdir(parents=True, exist_ok=True)
            results[b] = run_modes(args.modes, where, passthrough + ["--batch", str(b)],
                                   args.profile, args.profile_traces, kind_args)
            if results[b][0]:
                (where / "table.md").write_text(table(results[b][0]) + "\n")
        text = fit_table(results)
        (out / "fit.md").write_text(text + "\n")
        print(text)
        return 0 if any(records for records, _ in results.values()) else 1
    records, failed = run_modes(args.modes, out, passthrough, args.profile, args.profile_traces,
                                kind_args)
    notes = "\n".join(f"- {mode}: {why}" for mode, why in failed.items())
    if not records:
        print(notes)
        return 1
    ratios = anchor_ratios(records)
    text = (table(records) + (("\n\n" + ratios) if ratios else "")
            + (("\n\nNot in the table:\n" + notes) if notes else ""))
    (out / "table.md").write_text(text + "\n")
    try:
        plot(records, Path(args.plot) if args.plot else out / "loss.png")
    except ImportError:
        print("(no matplotlib: no plot)")
    print(text)
    report = profile_report(records) if args.profile else ""
    if report:
        (out / "profile.md").write_text(report + "\n")
        print()
        print(report)
    elif memory_table(records):  # the memory view is taken without the profiler too
        text = memory_table(records)
        (out / "memory.md").write_text(text + "\n")
        print()
        print(text)
    return 0 if len(records) == len(args.modes) else 1


if __name__ == "__main__":
    sys.exit(main())

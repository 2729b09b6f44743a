#!/usr/bin/env python3
"""One table of every row the benchmarks recorded (bench/_timing.py record,
one JSON line each, in the file named by $COAT_BENCH_RESULTS), sorted by
family, in the order measured within a family.

  python3 bench/summary.py [RESULTS]      (default: $COAT_BENCH_RESULTS)

Columns: ms is the median time per call over the repeats and spread
(p90 - min) / median; % ideal is the ideal time over ours (bytes at the copy
bandwidth measured in the same run, or FLOPs at the peak, as each family's
legend line says); anchor ms is the in-run anchor's median and ratio the
anchor's time over ours (above 1: ours is faster). '-' where a row has no
such figure.
"""

import json
import math
import os
import sys

COLUMNS = ("family", "kernel", "shape", "ms", "spread", "% ideal", "anchor", "anchor ms",
           "ratio")
RIGHT = {"ms", "spread", "% ideal", "anchor ms", "ratio"}


def load(path):
    """The records of a results file; lines that do not parse (a benchmark
    killed mid-write) are reported on stderr and skipped."""
    out = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except ValueError:
                print(f"{path}:{i}: not a JSON record, skipped", file=sys.stderr)
                continue
            if isinstance(r, dict) and "family" in r:
                out.append(r)
    return out


def fmt_ms(ms):
    """Four significant digits, no exponent."""
    if ms is None:
        return "-"
    if ms <= 0:
        return f"{ms:.4f}"
    return f"{ms:.{max(0, 3 - math.floor(math.log10(ms)))}f}"


def _num(v, spec, suffix=""):
    return "-" if v is None else f"{v:{spec}}{suffix}"


def cells(r):
    ms = r.get("ms")
    spread = None
    if ms and r.get("ms_p90") is not None and r.get("ms_min") is not None:
        spread = 100.0 * (r["ms_p90"] - r["ms_min"]) / ms
    return (str(r.get("family", "-")), str(r.get("kernel", "-")), str(r.get("shape", "-")),
            fmt_ms(ms), _num(spread, ".1f", "%"), _num(r.get("pct_ideal"), ".1f"),
            r.get("anchor") or "-", fmt_ms(r.get("anchor_ms")), _num(r.get("ratio"), ".2f", "x"))


def table(records):
    """The lines of the summary: a legend line per family and ideal, then one
    Markdown table of all rows, sorted by family."""
    rows = sorted(records, key=lambda r: str(r.get("family", "")))
    lines = []
    devices = sorted({r["device"] for r in rows if r.get("device")})
    if devices:
        lines.append("device: " + ", ".join(devices))
    legends = {}
    for r in rows:
        if r.get("ideal"):
            legends.setdefault(r["family"], [])
            if r["ideal"] not in legends[r["family"]]:
                legends[r["family"]].append(r["ideal"])
    for fam, ideals in legends.items():
        lines.append(f"% ideal, {fam}: " + "; ".join(ideals))
    lines.append("ms: median per call over the repeats; spread: (p90 - min) / median; "
                 "ratio: anchor ms / ms (above 1: ours is faster)")
    body = [cells(r) for r in rows]
    widths = [max([len(c)] + [len(b[i]) for b in body]) for i, c in enumerate(COLUMNS)]

    def line(vals):
        return "| " + " | ".join(v.rjust(w) if c in RIGHT else v.ljust(w)
                                 for c, v, w in zip(COLUMNS, vals, widths)) + " |"

    lines.append(line(COLUMNS))
    lines.append("|" + "|".join(("-" * (w + 1) + ":") if c in RIGHT else "-" * (w + 2)
                                for c, w in zip(COLUMNS, widths)) + "|")
    lines += [line(b) for b in body]
    return lines


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    path = argv[0] if argv else os.environ.get("COAT_BENCH_RESULTS")
    if not path:
        print("usage: summary.py RESULTS (or set COAT_BENCH_RESULTS)", file=sys.stderr)
        return 2
    records = load(path) if os.path.exists(path) else []
    print(f"\n# Benchmark summary: {len(records)} rows from {path}")
    if not records:
        print("(no benchmark recorded a row)")
        return 0
    print("\n".join(table(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Trains the same model the three ways of examples/train_llama.py (BF16,
COAT, torchao float8) side by side, each in its own process (clean memory
statistics), same seed and data order; prints one table and writes the loss
curves as a PNG.

  python bench/train_compare.py --config 100m --steps 1000 --out DIR
  python bench/train_compare.py --config tinyllama --steps 30 --eval-every 0 --out DIR
  python bench/train_compare.py --modes bf16 coat --graph --config 100m --steps 1000 --out DIR

Every other option goes to train_llama.py. A mode that cannot run (torchao
not installed) is reported as such and left out of the table.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train_llama.py"


def run_modes(modes, out: Path, passthrough) -> dict:
    records = {}
    for mode in modes:
        log = out / f"{mode}.json"
        cmd = [sys.executable, str(EXAMPLE), "--mode", mode, "--log", str(log), *passthrough]
        print("+", " ".join(cmd), flush=True)
        rc = subprocess.run(cmd).returncode
        if rc != 0 or not log.exists():
            print(f"{mode}: failed (exit {rc})", flush=True)
            continue
        records[mode] = json.loads(log.read_text())
    return records


def table(records: dict) -> str:
    base = records.get("bf16")
    rows = ["| mode | params | final train loss | held-out loss | vs BF16 | peak memory GiB | "
            "vs BF16 | fwd-retained per layer (U) | step ms | vs BF16 | tokens/s |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]

    def ratio(r, key, fmt="{:.3f}"):
        if base is None or key not in r or key not in base or not base[key]:
            return "-"
        return fmt.format(r[key] / base[key])

    for mode, r in records.items():
        held = r.get("final_held_out")
        label = mode + (" (graph)" if r.get("graph") else "")
        rows.append(
            f"| {label} | {r['params'] / 1e6:.1f}M | {r['final_train_loss']:.4f} | "
            + (f"{held:.4f}" if held is not None else "-") + f" | {ratio(r, 'final_held_out')} | "
            + (f"{r['peak_memory_bytes'] / 2**30:.2f}" if "peak_memory_bytes" in r else "-")
            + f" | {ratio(r, 'peak_memory_bytes')} | "
            + (f"{r['forward_retained_per_layer_U']:.2f}"
               if "forward_retained_per_layer_U" in r else "-")
            + " | " + (f"{r['step_time_s'] * 1e3:.1f}" if "step_time_s" in r else "-")
            + f" | {ratio(r, 'step_time_s')} | "
            + (f"{r['tokens_per_s']:,.0f}" if "tokens_per_s" in r else "-") + " |")
    return "\n".join(rows)


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
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", nargs="+", default=["bf16", "coat", "torchao"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--plot", default=None, help="PNG path (default OUT/loss.png)")
    args, passthrough = ap.parse_known_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records = run_modes(args.modes, out, passthrough)
    if not records:
        return 1
    text = table(records)
    (out / "table.md").write_text(text + "\n")
    try:
        plot(records, Path(args.plot) if args.plot else out / "loss.png")
    except ImportError:
        print("(no matplotlib: no plot)")
    print(text)
    return 0 if len(records) == len(args.modes) else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Reproduces the *ordering* of COAT's Table 1 (MSE of m/sqrt(v) by moment format).

COAT (arXiv 2410.19313) Table 1 reports the quantization error of the Adam
update direction m/sqrt(v) for every pairing of a first-moment format with a
second-moment format, each E4M3 or E5M2, with or without Dynamic Range
Expansion (COAT.md §6.2). The paper's moments come from a real training run
and its normalisation of the MSE is not stated, so only the ordering of the
16 cells can be compared.

What this script does
---------------------
1. Builds a synthetic gradient sequence for a small ReLU-MLP transformer
   (vocab 4096, d 256, MLP 1024, 2 layers: ~2.6 M parameters in 14 tensors,
   see ``build_model``): per-tensor scales, per-row and per-column lognormal
   scales, 2 % dead ReLU neurons (exactly zero gradient rows/columns),
   Zipf-distributed embedding rows (rare rows are hit intermittently, unseen
   rows stay exactly zero), a slowly drifting per-coordinate mean (signal)
   plus heavy-tailed noise (Gaussian scale mixture), per-step per-row factors
   and an early-training gradient burst. Three variants (``PROFILES``) differ
   in how wide a 128-group's range is: ``narrow`` (no outlier channels),
   ``outliers`` (1 % activation-outlier input channels, x20) and ``wide``
   (outliers plus 1 % near-dead input channels, x0.01). Everything is seeded.
2. Runs fp32 Adam moments on it (m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2;
   the parameters do not feed back into the gradients, so the parameter
   update itself is not needed).
3. At every checkpoint, quantizes and dequantizes the *true* m and v with the
   reference library (``coat.reference.moment_quantize`` /
   ``moment_dequantize``: flat groups of 128, expand_min 16, max_k 16) in each
   of the four formats, and for all 16 (m format, v format) pairs computes

       u     = m     / ((sqrt(v)    / sqrt(1-b2^t) + eps) * (1-b1^t))
       u_hat = m_hat / ((sqrt(v_hat)/ sqrt(1-b2^t) + eps) * (1-b1^t))
       MSE   = mean over all N coordinates of (u_hat - u)^2

   i.e. the bias-corrected AdamW update direction of COAT.md §2.4 (float64
   arithmetic on the f32 moments). The table is the MSE averaged over the
   checkpoints, multiplied by 1e3 for display. This is a one-shot error (true
   moments quantized once); the error that FP8 moments accumulate over a
   closed training loop is not measured.
4. Does this for ``mode=fixed`` (this project's default numerics) and
   ``mode=reference`` (the official kernel's quirks: zero-skipping min,
   unclamped k, 1e-30 offsets; docs/optimizer-numerics.md §4), prints both
   tables in the paper's layout, and checks the paper's orderings.

Usage:
    COAT_REFERENCE_LIB=/path/to/libcoat_reference.so \\
        python scripts/table1_mse.py [--profiles narrow,outliers,wide] [--seed 0] [--check]

``--check`` exits with status 1 when the main ordering (E4M3+Expand on both
moments beats plain E4M3/E4M3) fails in any profile or mode.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from coat import reference as ref  # noqa: E402

# (label, library format, expansion)
FORMATS: List[Tuple[str, str, bool]] = [
    ("E4M3", "e4m3", False),
    ("E4M3+Expand", "e4m3", True),
    ("E5M2", "e5m2", False),
    ("E5M2+Expand", "e5m2", True),
]

# COAT Table 1 (rows: m format, columns: v format, order of FORMATS).
PAPER = np.array([
    [20.10, 18.08, 25.65, 18.16],
    [15.13, 12.31, 21.96, 12.43],
    [37.02, 35.96, 40.30, 36.00],
    [17.79, 15.48, 23.84, 15.57],
])

DISPLAY_SCALE = 1e3
PE, PX, QE, QX = 0, 1, 2, 3  # E4M3, E4M3+Expand, E5M2, E5M2+Expand


# --------------------------------------------------------------------------
# Synthetic gradient model
# --------------------------------------------------------------------------

@dataclass
class Config:
    vocab: int = 4096
    d_model: int = 256
    d_ff: int = 1024
    layers: int = 2
    steps: int = 200
    first_checkpoint: int = 100
    checkpoint_every: int = 50
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    base_scale: float = 1e-4        # typical |g| of a coordinate
    row_sigma: float = 0.5          # lognormal per-row (output unit) scale
    col_sigma: float = 0.8          # lognormal per-column (input channel) scale
    outlier_frac: float = 0.01      # activation-outlier input channels ...
    outlier_gain: float = 20.0      # ... and their gain
    weak_frac: float = 0.01         # near-dead input channels ...
    weak_gain: float = 0.01         # ... and their gain
    dead_frac: float = 0.02         # dead ReLU neurons: exactly zero gradient
    snr_median: float = 0.2         # |mean| / noise std per coordinate (lognormal)
    tail_sigma: float = 0.6         # heavy tail: noise = z * exp(tail_sigma * z' - tail_sigma^2/2)
    step_row_sigma: float = 0.3     # per-step per-row fluctuation
    drift_every: int = 10           # the mean direction is an AR(1) updated every n steps
    drift_rho: float = 0.9
    tokens_per_step: int = 4096     # embedding: a row is hit with prob 1-(1-p_i)^B, p_i Zipf
    zipf_a: float = 1.1
    seed: int = 0
    group_size: int = 128
    expand_min: int = 16
    max_k: float = 16.0


# Variants of the gradient model (fields of Config they override).
# - narrow: no outlier or near-dead channels, smaller channel spread and
#   lighter tails: nearly every 128-group of v fits plain E4M3's range
#   (~2.3e5), so the formats differ by precision rather than by underflow.
# - outliers: 1 % activation-outlier input channels (x20) and the default
#   lognormal spreads; no near-dead channels.
# - wide: outliers plus 1 % near-dead input channels (x0.01) in the same
#   groups: the in-group range of v often exceeds plain E4M3's.
# Dead ReLU neurons (exact zeros) and Zipf embedding rows are in all three.
PROFILES: Dict[str, Dict] = {
    "narrow": {"weak_frac": 0.0, "outlier_frac": 0.0, "col_sigma": 0.4, "row_sigma": 0.3,
               "tail_sigma": 0.3},
    "outliers": {"weak_frac": 0.0},
    "wide": {},
}


@dataclass
class Model:
    """Per-coordinate static structure of the flattened parameter vector."""
    n: int
    tensors: List[Tuple[str, int, int, int]]   # (name, offset, rows, cols)
    scale: np.ndarray                          # f32 static scale of |g|
    snr: np.ndarray                            # f32 signal/noise amplitude
    row_of: np.ndarray                         # int32 global row id of each coordinate
    n_rows: int
    embed_rows: Tuple[int, int]                # global row ids [lo, hi) of the embedding
    embed_hit_p: np.ndarray                    # per embedding row, per-step hit probability
    meta: Dict[str, float] = field(default_factory=dict)


def build_model(cfg: Config, rng: np.random.Generator) -> Model:
    d, f, V = cfg.d_model, cfg.d_ff, cfg.vocab
    # (name, rows = output units, cols = input channels, tensor scale, relu_out, relu_in)
    specs = [("embed", V, d, 1.0, False, False)]
    for layer in range(cfg.layers):
        specs += [
            (f"l{layer}.ln1", 1, d, 5.0, False, False),
            (f"l{layer}.qkv", 3 * d, d, 0.5, False, False),
            (f"l{layer}.o", d, d, 1.0, False, False),
            (f"l{layer}.ln2", 1, d, 5.0, False, False),
            (f"l{layer}.up", f, d, 2.0, True, False),     # dead neuron = zero row
            (f"l{layer}.down", d, f, 1.0, False, True),   # dead neuron = zero column
        ]
    specs.append(("ln_f", 1, d, 5.0, False, False))

    n = sum(r * c for _, r, c, *_ in specs)
    scale = np.empty(n, dtype=np.float32)
    row_of = np.empty(n, dtype=np.int32)
    tensors, off, row_base = [], 0, 0
    # Input-channel structure shared by every tensor that reads the residual stream.
    def channel_gains(width):
        g = np.exp(cfg.col_sigma * rng.standard_normal(width))
        u = rng.random(width)
        g[u < cfg.outlier_frac] *= cfg.outlier_gain
        g[(u >= cfg.outlier_frac) & (u < cfg.outlier_frac + cfg.weak_frac)] *= cfg.weak_gain
        return g
    resid_gain = channel_gains(d)
    dead = {}
    embed_rows = (0, 0)
    for name, rows, cols, tscale, relu_out, relu_in in specs:
        if rows == 1:  # norm weight: one vector, own per-channel spread
            s = tscale * np.exp(cfg.col_sigma * rng.standard_normal(cols))[None, :]
        else:
            if name.endswith(".down"):
                layer = name.split(".")[0]
                cg = np.exp(cfg.col_sigma * rng.standard_normal(cols))
                cg[dead[layer]] = 0.0
            elif name == "embed":
                cg = np.exp(0.3 * rng.standard_normal(cols))  # embedding rows: mild channel spread
            else:
                cg = resid_gain * np.exp(0.3 * rng.standard_normal(cols))
            rg = np.exp(cfg.row_sigma * rng.standard_normal(rows))
            if relu_out:
                dmask = rng.random(rows) < cfg.dead_frac
                dead[name.split(".")[0]] = dmask
                rg[dmask] = 0.0
            s = tscale * rg[:, None] * cg[None, :]
        scale[off:off + rows * cols] = (cfg.base_scale * s).reshape(-1)
        row_of[off:off + rows * cols] = (row_base + np.arange(rows, dtype=np.int32)).repeat(cols)
        if name == "embed":
            embed_rows = (row_base, row_base + rows)
        tensors.append((name, off, rows, cols))
        off += rows * cols
        row_base += rows

    snr = (cfg.snr_median * np.exp(0.7 * rng.standard_normal(n))).astype(np.float32)
    ranks = np.arange(1, V + 1, dtype=np.float64)
    p = ranks ** -cfg.zipf_a
    p /= p.sum()
    p = p[rng.permutation(V)]
    hit = 1.0 - np.exp(-cfg.tokens_per_step * p)
    return Model(n=n, tensors=tensors, scale=scale, snr=snr, row_of=row_of, n_rows=row_base,
                 embed_rows=embed_rows, embed_hit_p=hit)


class GradientStream:
    def __init__(self, cfg: Config, model: Model, rng: np.random.Generator):
        self.cfg, self.model, self.rng = cfg, model, rng
        self.mu = rng.standard_normal(model.n, dtype=np.float32)
        # Heavy-tail multipliers exp(sigma z' - sigma^2/2): drawn once into a pool
        # and read at a random offset each step (fresh pairing with the fresh
        # Gaussian z, at a fraction of the cost of a second draw per step).
        pool = rng.standard_normal(2 * model.n, dtype=np.float32)
        pool *= np.float32(cfg.tail_sigma)
        pool -= np.float32(cfg.tail_sigma ** 2 / 2)
        self.tail_pool = np.exp(pool, out=pool)
        self.t = 0

    def next(self) -> np.ndarray:
        cfg, mdl, rng = self.cfg, self.model, self.rng
        self.t += 1
        t = self.t
        if t % cfg.drift_every == 0:
            rho = np.float32(cfg.drift_rho)
            self.mu *= rho
            self.mu += np.float32(np.sqrt(1 - cfg.drift_rho ** 2)) * \
                rng.standard_normal(mdl.n, dtype=np.float32)
        z = rng.standard_normal(mdl.n, dtype=np.float32)
        off = int(rng.integers(0, mdl.n))
        z *= self.tail_pool[off:off + mdl.n]               # heavy-tailed noise
        z += mdl.snr * self.mu                             # + signal
        row = np.exp(cfg.step_row_sigma * rng.standard_normal(mdl.n_rows)).astype(np.float32)
        lo, hi = mdl.embed_rows
        row[lo:hi] *= (rng.random(hi - lo) < mdl.embed_hit_p)
        global_norm = np.float32(1.0 + 2.0 * np.exp(-t / 50.0))  # early-training gradient burst
        z *= mdl.scale
        z *= row[mdl.row_of]
        z *= global_norm
        return z


# --------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------

def roundtrip(x: np.ndarray, fmt: str, expand: bool, signed: bool, mode: str,
              cfg: Config) -> np.ndarray:
    st = ref.moment_quantize(x, fmt, expand=expand, signed=signed, group_size=cfg.group_size,
                             expand_min=cfg.expand_min, max_k=cfg.max_k, mode=mode)
    return ref.moment_dequantize(st["codes"], st["scale"], st.get("k"), st.get("c"), fmt,
                                 signed=signed, group_size=cfg.group_size)


def checkpoint_errors(m: np.ndarray, v: np.ndarray, t: int, cfg: Config, mode: str):
    """(16-cell MSE table, diagnostics per format) for one checkpoint."""
    bc1 = 1.0 - cfg.beta1 ** t
    bc2s = np.sqrt(1.0 - cfg.beta2 ** t)

    def direction(mm, vv):
        return mm.astype(np.float64) / ((np.sqrt(vv.astype(np.float64)) / bc2s + cfg.eps) * bc1)

    u = direction(m, v)
    m_hat = [roundtrip(m, f, e, True, mode, cfg) for _, f, e in FORMATS]
    v_hat = [roundtrip(v, f, e, False, mode, cfg) for _, f, e in FORMATS]
    rdens = [1.0 / ((np.sqrt(vh.astype(np.float64)) / bc2s + cfg.eps) * bc1) for vh in v_hat]
    # v coordinates that are non-zero but dequantize to 0: u_hat = m_hat/(eps*bc1).
    flushed = [np.nonzero((v != 0) & (vh == 0))[0] for vh in v_hat]
    table = np.empty((4, 4))
    table_kept = np.empty((4, 4))
    diff = np.empty(m.size)
    for i, mh in enumerate(m_hat):
        mh64 = mh.astype(np.float64)
        for j, rden in enumerate(rdens):
            np.multiply(mh64, rden, out=diff)
            diff -= u
            diff *= diff
            total = float(np.sum(diff))
            table[i, j] = total / diff.size
            table_kept[i, j] = (total - float(np.sum(diff[flushed[j]]))) / diff.size
    m_nz, v_nz = m != 0, v != 0
    mm, vv = float(np.mean(m.astype(np.float64) ** 2)), float(np.mean(v.astype(np.float64) ** 2))
    diag = []
    for (label, _, _), mh, vh in zip(FORMATS, m_hat, v_hat):
        diag.append({
            "label": label,
            "m_rel_mse": float(np.mean((mh.astype(np.float64) - m) ** 2) / mm),
            "v_rel_mse": float(np.mean((vh.astype(np.float64) - v) ** 2) / vv),
            "m_zeroed": float(np.mean(m_nz & (mh == 0))),
            "v_zeroed": float(np.mean(v_nz & (vh == 0))),
            "nonfinite": float(np.mean(~np.isfinite(mh)) + np.mean(~np.isfinite(vh))),
        })
    return table, table_kept, diag, float(np.mean(u * u))


def run(cfg: Config, modes=("fixed", "reference"), verbose: bool = False) -> Dict:
    rng = np.random.default_rng(cfg.seed)
    model = build_model(cfg, rng)
    stream = GradientStream(cfg, model, rng)
    m = np.zeros(model.n, dtype=np.float32)
    v = np.zeros(model.n, dtype=np.float32)
    b1, b2 = np.float32(cfg.beta1), np.float32(cfg.beta2)
    a1, a2 = np.float32(1 - cfg.beta1), np.float32(1 - cfg.beta2)
    sums = {mode: np.zeros((4, 4)) for mode in modes}
    sums_kept = {mode: np.zeros((4, 4)) for mode in modes}
    diags = {mode: None for mode in modes}
    usq, count = 0.0, 0
    t0 = time.time()
    for t in range(1, cfg.steps + 1):
        g = stream.next()
        m *= b1
        m += a1 * g
        v *= b2
        g *= a2 * g   # ((1-b2) g) g, as in COAT §2.4 (order of rounding aside)
        v += g
        if t >= cfg.first_checkpoint and (t - cfg.first_checkpoint) % cfg.checkpoint_every == 0:
            count += 1
            for mode in modes:
                table, table_kept, diag, usq_t = checkpoint_errors(m, v, t, cfg, mode)
                sums[mode] += table
                sums_kept[mode] += table_kept
                if diags[mode] is None:
                    diags[mode] = diag
                else:
                    for acc, d in zip(diags[mode], diag):
                        for key in acc:
                            if key != "label":
                                acc[key] += d[key]
            usq += usq_t
            if verbose:
                print(f"  checkpoint t={t} ({time.time() - t0:.1f} s)", file=sys.stderr)
    if count == 0:
        raise ValueError("no checkpoint within the run: lower first_checkpoint or raise steps")
    for mode in modes:
        for acc in diags[mode]:
            for key in acc:
                if key != "label":
                    acc[key] /= count
    return {"tables": {mode: sums[mode] / count for mode in modes},
            "tables_no_flush": {mode: sums_kept[mode] / count for mode in modes},
            "diagnostics": diags,
            "n": model.n, "tensors": model.tensors, "checkpoints": count,
            "mean_u2": usq / count, "seconds": time.time() - t0}


# --------------------------------------------------------------------------
# Orderings and printing
# --------------------------------------------------------------------------

def orderings(T: np.ndarray) -> List[Tuple[str, bool, str]]:
    """(claim, holds, detail) for the paper's orderings on a 4x4 table T."""
    names = [f[0] for f in FORMATS]
    out = []
    out.append(("main: E4M3+Expand/E4M3+Expand < E4M3/E4M3", T[PX, PX] < T[PE, PE],
                f"{T[PX, PX]:.4g} vs {T[PE, PE]:.4g}"))
    fails = [f"m={names[r]}: v {names[b]} {T[r, b]:.4g} !< v {names[a]} {T[r, a]:.4g}"
             for r in range(4) for a, b in ((PE, PX), (QE, QX)) if not T[r, b] < T[r, a]]
    out.append(("expansion on v helps for every m format (8 pairs)", not fails,
                "; ".join(fails) or "all 8 hold"))
    fails = [f"v={names[c]}: m {names[a]} {T[a, c]:.4g} !< m {names[b]} {T[b, c]:.4g}"
             for c in range(4) for a, b in ((PE, QE), (PX, QX)) if not T[a, c] < T[b, c]]
    out.append(("E4M3 m beats E5M2 m, plain vs plain and expanded vs expanded (8 pairs)",
                not fails, "; ".join(fails) or "all 8 hold"))
    fails = [f"v={names[c]}: m {names[b]} {T[b, c]:.4g} !< m {names[a]} {T[a, c]:.4g}"
             for c in range(4) for a, b in ((PE, PX), (QE, QX)) if not T[b, c] < T[a, c]]
    out.append(("(extra) expansion on m helps for every v format (8 pairs)", not fails,
                "; ".join(fails) or "all 8 hold"))
    fails = [f"m={names[r]}: v E4M3 {T[r, PE]:.4g} !< v E5M2 {T[r, QE]:.4g}"
             for r in range(4) if not T[r, PE] < T[r, QE]]
    out.append(("(extra) plain E4M3 v beats plain E5M2 v in every row", not fails,
                "; ".join(fails) or "all 4 hold"))
    best = np.unravel_index(np.argmin(T), T.shape)
    out.append(("(extra) best cell has m=E4M3+Expand and an expanded v",
                best[0] == PX and best[1] in (PX, QX),
                f"best is m={names[best[0]]}, v={names[best[1]]}"))
    rho = spearman(T.reshape(-1), PAPER.reshape(-1))
    out.append(("(extra) Spearman rank correlation with the paper's 16 cells > 0.5", rho > 0.5,
                f"rho = {rho:.3f}"))
    return out


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    def ranks(x):
        order = np.argsort(x, kind="stable")
        r = np.empty(len(x))
        r[order] = np.arange(len(x))
        return r
    ra, rb = ranks(a), ranks(b)
    ra -= ra.mean()
    rb -= rb.mean()
    return float((ra * rb).sum() / np.sqrt((ra * ra).sum() * (rb * rb).sum()))


def format_table(T: np.ndarray, title: str, scale: float = DISPLAY_SCALE) -> str:
    names = [f[0] for f in FORMATS]
    lines = [title, "",
             "| m format \\ v format | " + " | ".join(names) + " |",
             "|---|" + "---|" * len(names)]
    best = np.argmin(T)
    for i, row in enumerate(names):
        cells = []
        for j in range(4):
            s = f"{T[i, j] * scale:.4g}"
            cells.append(f"**{s}**" if i * 4 + j == best else s)
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_report(result: Dict, cfg: Config) -> str:
    out = []
    out.append(f"N = {result['n']:,} parameters in {len(result['tensors'])} tensors, "
               f"{cfg.steps} steps, betas ({cfg.beta1}, {cfg.beta2}), eps {cfg.eps}, "
               f"seed {cfg.seed}, {result['checkpoints']} checkpoints "
               f"(t = {cfg.first_checkpoint}, {cfg.first_checkpoint + cfg.checkpoint_every}, "
               f"..., every {cfg.checkpoint_every}), group {cfg.group_size}, "
               f"expand_min {cfg.expand_min}, max_k {cfg.max_k}")
    out.append(f"mean u^2 (true update direction) = {result['mean_u2']:.4g}; "
               f"MSE shown x{DISPLAY_SCALE:g}")
    out.append("")
    out.append(format_table(PAPER / DISPLAY_SCALE, "Paper (COAT Table 1, its own units)"))
    for mode, T in result["tables"].items():
        out.append("")
        out.append(format_table(T, f"This run, mode={mode}: MSE(u_hat - u) x {DISPLAY_SCALE:g}"))
        out.append("")
        out.append(format_table(result["tables_no_flush"][mode],
                                f"Same, without the error of v-flush coordinates (v != 0 "
                                f"but v_hat == 0; summed error / N) x {DISPLAY_SCALE:g}"))
        out.append("")
        out.append("Relative to plain E4M3/E4M3: " + ", ".join(
            f"{FORMATS[i][0]}/{FORMATS[j][0]} {T[i, j] / T[PE, PE]:.3g}"
            for i in range(4) for j in range(4) if (i, j) in ((PX, PX), (PX, QX), (PE, PX))))
        out.append("")
        out.append("Per-format moment diagnostics (mean over checkpoints):")
        out.append("")
        out.append("| format | rel MSE m | rel MSE v | nonzero m -> 0 | nonzero v -> 0 | non-finite |")
        out.append("|---|---|---|---|---|---|")
        for d in result["diagnostics"][mode]:
            out.append(f"| {d['label']} | {d['m_rel_mse']:.3g} | {d['v_rel_mse']:.3g} | "
                       f"{d['m_zeroed']:.3g} | {d['v_zeroed']:.3g} | {d['nonfinite']:.3g} |")
        out.append("")
        out.append(f"Orderings (mode={mode}):")
        for claim, ok, detail in orderings(T):
            out.append(f"- [{'HOLDS' if ok else 'FAILS'}] {claim}: {detail}")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profiles", default="narrow,outliers,wide",
                    help="comma-separated gradient-model variants: " + ", ".join(PROFILES))
    ap.add_argument("--steps", type=int, default=Config.steps)
    ap.add_argument("--first-checkpoint", type=int, default=Config.first_checkpoint)
    ap.add_argument("--checkpoint-every", type=int, default=Config.checkpoint_every)
    ap.add_argument("--beta2", type=float, default=Config.beta2)
    ap.add_argument("--seed", type=int, default=Config.seed)
    ap.add_argument("--modes", default="fixed,reference")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if the main ordering fails in any profile and mode")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    profiles = [p for p in args.profiles.split(",") if p]
    for p in profiles:
        if p not in PROFILES:
            ap.error(f"unknown profile {p!r}; choose from {', '.join(PROFILES)}")
    modes = tuple(m for m in args.modes.split(",") if m)
    try:
        ref.load()
    except ref.LibraryNotFound as e:
        print(e, file=sys.stderr)
        return 2
    t0 = time.time()
    summary = []
    for p in profiles:
        cfg = Config(steps=args.steps, first_checkpoint=args.first_checkpoint,
                     checkpoint_every=args.checkpoint_every, beta2=args.beta2,
                     seed=args.seed, **PROFILES[p])
        result = run(cfg, modes, verbose=args.verbose)
        print(f"## Profile `{p}` ({result['seconds']:.1f} s)")
        print()
        print(format_report(result, cfg))
        print()
        for mode, T in result["tables"].items():
            summary.append((p, mode, orderings(T),
                            orderings(result["tables_no_flush"][mode])))
    print(f"## Summary ({platform.machine()}, {time.time() - t0:.1f} s in all)")
    print()
    claims = [c for c, _, _ in summary[0][2]]
    for k, what in ((2, "full MSE"), (3, "MSE without v-flush coordinates")):
        print(f"Orderings on the {what}:")
        print()
        print("| ordering | " + " | ".join(f"{row[0]}/{row[1]}" for row in summary) + " |")
        print("|---|" + "---|" * len(summary))
        for i, c in enumerate(claims):
            print(f"| {c} | " + " | ".join("holds" if row[k][i][1] else "FAILS"
                                           for row in summary) + " |")
        print()
    main_ok = all(row[2][0][1] for row in summary)
    print()
    print(f"Main ordering (E4M3+Expand on both < E4M3/E4M3) in every profile and mode: "
          f"{'REPRODUCED' if main_ok else 'NOT REPRODUCED'}")
    return 0 if (main_ok or not args.check) else 1


if __name__ == "__main__":
    sys.exit(main())

"""The timing core of every benchmark in bench/, and the result records that
bench/summary.py turns into one table.

measure(fn) times fn with CUDA events: `warmup` calls, then `repeats`
samples, each of `inner` back-to-back calls between two events (so that with
inner > 1 the host's launch cost overlaps the GPU work) divided by `inner`.
With graph=True fn is captured once into a CUDA graph and the graph is
replayed (no host launch cost in the timing; fn itself when it cannot be
captured). The figure is the median sample; min and p90 give the spread.

The ideal of a memory-bound kernel is its bytes (read + written) at the
device-to-device copy bandwidth measured in the same run (copy_bandwidth);
that of a GEMM its FLOPs at the datasheet peak. "ratio" is always the
anchor's time over ours: above 1, ours is faster.

record() appends one JSON line per measured row to the file named by
$COAT_BENCH_RESULTS (nothing when unset); scripts/gpu_check.sh --bench sets
it and prints bench/summary.py's table of the file at the end.

torch is imported where a GPU is used, so the statistics, the ideal
arithmetic and the records work without it.
"""

import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))
from coat.traffic import FP8_PEAK_TFLOPS  # noqa: E402,F401 - the benchmarks' FP8 ceiling

RESULTS_ENV = "COAT_BENCH_RESULTS"

#: The ideal of a GEMM: the datasheet dense peak of an H100 SXM and an H200
#: (the same), TFLOP/s (docs/anchors.md); the FP8 one is the package's.
BF16_PEAK_TFLOPS = 989.0


def percentile(samples, q):
    """The q-th percentile (0..100) of samples, linearly interpolated between
    the closest ranks (numpy's default)."""
    xs = sorted(samples)
    if not xs:
        raise ValueError("percentile of no samples")
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass(frozen=True)
class Timing:
    """Milliseconds per call, one sample per repeat."""

    samples: tuple
    inner: int = 1
    graph: bool = False

    @property
    def median(self):
        return statistics.median(self.samples)

    @property
    def min(self):
        return min(self.samples)

    @property
    def p90(self):
        return percentile(self.samples, 90)

    @property
    def spread(self):
        """(p90 - min) / median: how far the repeats scatter, as a fraction."""
        return (self.p90 - self.min) / self.median if self.median > 0 else 0.0


def graphed(fn):
    """fn replayed from a CUDA graph when it can be captured (no host launch
    cost in the timing), else fn itself; and whether it was captured."""
    import torch

    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        return g.replay, True
    except Exception:  # noqa: BLE001 - any capture failure: time it directly
        torch.cuda.synchronize()
        return fn, False


def measure(fn, *, warmup=3, repeats=10, inner=20, graph=False, cuda=True):
    """Timing of fn (see the module's doc). cuda=False times on the host
    with perf_counter (CPU runs, and the tests)."""
    if repeats < 1 or inner < 1:
        raise ValueError("measure needs repeats >= 1 and inner >= 1")
    captured = False
    if cuda:
        import torch

        if graph:
            fn, captured = graphed(fn)
    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        if cuda:
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(inner):
                fn()
            b.record()
            b.synchronize()
            ms = a.elapsed_time(b)
        else:
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            ms = (time.perf_counter() - t0) * 1e3
        samples.append(ms / inner)
    return Timing(tuple(samples), inner, captured)


def copy_bandwidth(nbytes=2 << 30):
    """Device-to-device copy bandwidth in bytes/s (read + written) of an
    nbytes buffer, median of 5 samples of 10 back-to-back copies."""
    import torch

    x = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()
    y = torch.empty_like(x)
    t = measure(lambda: y.copy_(x), warmup=3, repeats=5, inner=10)
    return 2 * nbytes / (t.median * 1e-3)


def ideal_ms(nbytes, copy_bw):
    """Time to move nbytes at copy_bw bytes/s."""
    return nbytes / copy_bw * 1e3


def pct_of_copy(nbytes, ms, copy_bw):
    """% of the ideal of a memory-bound kernel: ideal time / measured time."""
    return 100.0 * ideal_ms(nbytes, copy_bw) / ms


def tflops(flop, ms):
    return flop / ms / 1e9


def pct_of_peak(flop, ms, peak_tflops):
    """% of the ideal of a GEMM: achieved TFLOP/s / peak TFLOP/s."""
    return 100.0 * tflops(flop, ms) / peak_tflops


def ratio(anchor_ms, ms):
    """Anchor time / ours (above 1: ours is faster); None without both."""
    if not anchor_ms or not ms:
        return None
    return anchor_ms / ms


def copy_ideal(copy_bw):
    """The `ideal` text of a record measured against the copy bandwidth."""
    return f"bytes at copy {copy_bw / 1e12:.2f} TB/s"


def peak_ideal(peak_tflops):
    return f"FLOPs at {peak_tflops:.0f} TFLOP/s"


def _finite(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


_DEVICE = []


def _device():
    if not _DEVICE:
        name = "cpu"
        torch = sys.modules.get("torch")
        try:
            if torch is not None and torch.cuda.is_available():
                name = torch.cuda.get_device_name()
        except Exception:  # noqa: BLE001 - a record without the device name
            pass
        _DEVICE.append(name)
    return _DEVICE[0]


def record(family, kernel, shape, timing, *, pct_ideal=None, ideal=None, anchor=None,
           anchor_timing=None, device=None, **extra):
    """The result record of one measured row; appended as a JSON line to
    $COAT_BENCH_RESULTS when it is set. timing/anchor_timing are Timings
    (anchor_timing None where the anchor failed or does not exist)."""
    r = dict(family=family, kernel=kernel, shape=str(shape), ms=timing.median,
             ms_min=timing.min, ms_p90=timing.p90, repeats=len(timing.samples),
             inner=timing.inner, graph=timing.graph, pct_ideal=pct_ideal, ideal=ideal,
             anchor=anchor, anchor_ms=anchor_timing.median if anchor_timing else None,
             anchor_p90=anchor_timing.p90 if anchor_timing else None,
             ratio=ratio(anchor_timing.median, timing.median) if anchor_timing else None,
             device=device or _device())
    r.update(extra)
    r = {k: _finite(v) for k, v in r.items()}
    write_record(r)
    return r


def write_record(r, path=None):
    path = path or os.environ.get(RESULTS_ENV)
    if not path:
        return
    with open(path, "a") as f:
        f.write(json.dumps(r) + "\n")

#!/usr/bin/env python3
"""Where a training step's GPU time goes: the kernels of a torch.profiler
trace, sorted into categories by one rule table (RULES), per step.

examples/train_llama.py --profile N profiles N steps after its timing
warm-up and stores summarize()'s result in its JSON record under `profile`;
bench/train_compare.py --profile N prints it per mode. A kept trace
(train_llama.py --profile-trace PATH) can be summarised again, with the
rules as they are now:

  python bench/step_profile.py TRACE.json[.gz] --steps N [--wall-ms MS]

Input: activities, each (kernel name, duration, start, end, the op that
launched it or None), times in microseconds. The categories:

  coat gemm / quantize / norms / flow / optimizer / other
                      our compiled kernels (coat.programs' `<program>_k<i>_<op>`
                      and the library kernels `coat_<op>_...`), by op
  torch gemm          cuBLAS / cuBLASLt / CUTLASS GEMMs (_scaled_mm's too)
  attention           flash / memory-efficient / cuDNN SDPA kernels
  torch elementwise   ATen's element-wise, reduction, copy, softmax, loss
                      kernels, detailed by the aten op that launched them
  triton              Inductor's generated kernels (torch.compile)
  torch optimizer     fused AdamW and foreach kernels (gradient clipping)
  nccl                collectives
  memcpy/memset       copies and fills the driver does
  other               none of the above (the detail lists their names)

Per step: the GPU time of each category (the sum of its kernels' durations),
the GPU-busy time (the union of every activity's interval: overlapping
kernels count once), the wall time, kernels launched. With the traffic of
our kernels (coat.traffic, counted over the same steps) it also gives, per
category of ours, the bytes and FLOPs a step moved and computed over the
time of those kernels: the bandwidth they reached against the copy
bandwidth measured in the same run, and the GEMMs' rate against the FP8
peak (traffic_rows). This module is plain Python: the tests feed it
made-up kernel lists.
"""

import argparse
import gzip
import json
import re
import sys
from collections import namedtuple

from _timing import FP8_PEAK_TFLOPS  # (puts the package on the path)
from coat.traffic import program_kernel_op  # noqa: E402

#: One GPU activity (or, on a CPU device, one CPU op and its self time). Times
#: in microseconds.
Activity = namedtuple("Activity", "name dur start end op")

#: The rules, first match wins. Each is (category, field, pattern): the
#: pattern is searched (case-insensitively) in
#:   "coat"  the op part of one of our kernel names (coat_op());
#:   "name"  the kernel name;
#:   "op"    the op that launched the kernel (aten::..., known only where
#:           the profiler recorded CPU ops).
#: Name rules come before op rules: a kernel is what it is wherever it was
#: launched from; the op decides only for names no rule knows.
RULES = (
    ("nccl", "name", r"nccl"),
    ("triton", "name", r"^triton_"),
    ("coat gemm", "coat", r"^(fp8_)?linear"),
    ("coat quantize", "coat",
     r"^(quantize|absmax|scale_from_maxima|max_of_|requantize|dequantize|transpose)"),
    ("coat norms", "coat", r"^(rmsnorm|layernorm)"),
    ("coat flow", "coat", r"^(silu|gelu|swiglu|mul|residual|rope)"),
    ("coat optimizer", "coat", r"^adamw"),
    ("coat other", "coat", r""),
    # Before the GEMMs: flash and memory-efficient kernels carry cutlass types.
    ("attention", "name", r"flash|fmha|sdpa|attention|attn"),
    ("torch optimizer", "name", r"multi_tensor_apply|fused_?adam|lpnorm_cleanup"),
    ("torch gemm", "name", r"gemm|gemv|cutlass|cublas|nvjet|xmma|splitkreduce"),
    ("memcpy/memset", "name", r"^mem(cpy|set)\b"),
    ("attention", "op",
     r"^aten::(_?scaled_dot_product|_flash_attention|_efficient_attention|_cudnn_attention)"),
    ("torch gemm", "op",
     r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear|_scaled_mm|addmv|mv|dot|_addmm_activation)$"),
    ("torch optimizer", "op", r"^aten::(_fused_adam|_foreach_)"),
    ("torch elementwise", "name", r"at::native|at_cuda_detail|elementwise|^void at::"),
    ("torch elementwise", "op", r"^aten::"),
)

#: Every category, in the order of the tables.
CATEGORIES = ("coat gemm", "coat quantize", "coat norms", "coat flow", "coat optimizer",
              "coat other", "torch gemm", "attention", "torch elementwise", "triton",
              "torch optimizer", "nccl", "memcpy/memset", "other")

#: Categories that are not kernel launches (not counted in kernels per step).
NOT_KERNELS = ("memcpy/memset",)

_RULES = tuple((cat, field, re.compile(pat, re.IGNORECASE)) for cat, field, pat in RULES)
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _known_coat_op(op):
    return any(field == "coat" and pat.pattern and pat.search(op)
               for _, field, pat in _RULES)


def coat_op(name):
    """The op part of one of our kernel names, else None: `quantize_per_group`
    of a program kernel `coat_mlp_h1024_f2816_k4_quantize_per_group`,
    `adamw_f32_...` of a library kernel `coat_adamw_f32_...`. A program
    kernel whose program is not named coat_* (the examples' programs) is
    ours when its op is one the rules know; a plain `rmsnorm_*` /
    `layernorm_*` is one of the norm benchmarks' kernels."""
    if not _IDENT.match(name):
        return None
    op = program_kernel_op(name)
    if name.startswith("coat_"):
        return op or name[len("coat_"):]
    if op and _known_coat_op(op):
        return op
    if name.startswith(("rmsnorm_", "layernorm_")):
        return name
    return None


def short_name(name, width=60):
    """A kernel name without `void `, its template arguments and its
    parameter list, cut to `width` characters."""
    s = name[5:] if name.startswith("void ") else name
    s = s.replace("(anonymous namespace)::", "")
    depth, out = 0, []
    for ch in s:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0:
            break
        elif depth == 0:
            out.append(ch)
    s = "".join(out).strip() or name
    return s if len(s) <= width else s[:width - 3] + "..."


def categorize(name, op=None):
    """(category, detail) of a kernel named `name` launched from `op`. The
    detail: our kernels' op, Triton's kernel kind (poi, red, per, tem) and the
    aten ops it fused, the
    launching aten op for torch's kernels, the short name for the rest."""
    cop = coat_op(name)
    for cat, field, pat in _RULES:
        if field == "coat":
            hit = cop is not None and pat.search(cop)
        elif field == "name":
            hit = pat.search(name)
        else:
            hit = op is not None and pat.search(op)
        if not hit:
            continue
        if cop is not None and cat.startswith("coat"):
            return cat, cop
        if cat == "triton":
            # Inductor names a kernel by its kind and the aten ops it fused
            # (triton_poi_fused__to_copy_cat_3): both, less the counter.
            m = re.match(r"triton_([a-z]+)(?:_fused)?(?:_(.*?))??(?:_\d+)?$", name)
            if not m:
                return cat, "triton"
            return cat, f"{m.group(1)} {m.group(2)}" if m.group(2) else m.group(1)
        if cat in ("torch elementwise", "torch gemm", "torch optimizer", "attention") and op:
            return cat, op
        return cat, short_name(name)
    return "other", short_name(name)


def busy_time(intervals):
    """The length of the union of (start, end) intervals."""
    total, cur_start, cur_end = 0.0, None, None
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def _activity(a):
    if isinstance(a, Activity):
        return a
    a = tuple(a)
    if len(a) == 4:
        a = a + (None,)
    return Activity(*a)


def summarize(activities, steps, wall_ms=None, top=8, traffic=None):
    """The per-step table of `activities` (Activity or (name, dur, start,
    end[, op]) tuples, microseconds) gathered over `steps` steps, whose wall
    time was `wall_ms` per step (None: unknown). Returns a JSON-ready dict:

      kernels        kernel launches per step (memcpy/memset not counted)
      gpu_ms         the sum of every activity's duration, per step
      busy_ms        the union of their intervals, per step
      wall_ms        as given; busy_share = busy_ms / wall_ms
      categories     {category: {ms, count, top: [[detail, ms], ...]}} per
                     step, the categories that occur, in CATEGORIES order
      elementwise_ops  the torch elementwise time by launching op, per step
                     ([[op, ms, count], ...], largest first)
      traffic        with `traffic` (coat.traffic.Traffic.per_step() of the
                     same steps): {category: {kernels, launches, bytes,
                     flop, ms}} per step, ms the GPU time of the counted
                     kernels in the activities; `uncounted_ms`, the time of
                     our kernels that were not counted (launched elsewhere
                     or replayed from a CUDA graph)
    """
    if steps < 1:
        raise ValueError("summarize needs steps >= 1")
    acts = [_activity(a) for a in activities]
    per_cat, details, counts = {}, {}, {}
    for a in acts:
        cat, detail = categorize(a.name, a.op)
        per_cat[cat] = per_cat.get(cat, 0.0) + a.dur
        counts[cat] = counts.get(cat, 0) + 1
        d = details.setdefault(cat, {})
        t, n = d.get(detail, (0.0, 0))
        d[detail] = (t + a.dur, n + 1)
    ms = lambda us: round(us / 1e3 / steps, 4)  # noqa: E731 - per-step ms of a total in us
    categories = {}
    for cat in CATEGORIES:
        if cat not in per_cat:
            continue
        ranked = sorted(details[cat].items(), key=lambda kv: (-kv[1][0], kv[0]))
        categories[cat] = {"ms": ms(per_cat[cat]), "count": round(counts[cat] / steps, 2),
                           "top": [[k, ms(t)] for k, (t, _) in ranked[:top]]}
    elementwise = sorted(details.get("torch elementwise", {}).items(),
                         key=lambda kv: (-kv[1][0], kv[0]))
    busy = ms(busy_time((a.start, a.end) for a in acts))
    out = {
        "steps": steps,
        "kernels": round(sum(n for c, n in counts.items() if c not in NOT_KERNELS) / steps, 2),
        "gpu_ms": ms(sum(a.dur for a in acts)),
        "busy_ms": busy,
        "wall_ms": wall_ms,
        "busy_share": round(busy / wall_ms, 4) if wall_ms else None,
        "categories": categories,
        "elementwise_ops": [[k, ms(t), round(n / steps, 2)] for k, (t, n) in elementwise[:15]],
    }
    if traffic is not None:
        out["traffic"], out["uncounted_ms"] = _traffic_by_category(acts, traffic, steps)
    return out


def _traffic_by_category(acts, traffic, steps):
    """summarize()'s `traffic` and `uncounted_ms`: per category, and within
    it per op (the category's detail) and per kernel of the op
    (`by_kernel`: one kernel is one compiled configuration, e.g. one GEMM
    shape of a program), the counted kernels' launches, bytes, FLOPs and
    GPU time a step."""
    us_by_name = {}
    for a in acts:
        us_by_name[a.name] = us_by_name.get(a.name, 0.0) + a.dur
    fields = lambda: {"kernels": 0, "launches": 0.0, "bytes": 0.0, "flop": 0.0, "ms": 0.0}  # noqa: E731
    by_cat = {}
    for name, k in traffic.items():
        cat, op = categorize(name)
        c = by_cat.setdefault(cat, dict(fields(), ops={}))
        o = c["ops"].setdefault(op, dict(fields(), by_kernel={}))
        for row in (c, o, o["by_kernel"].setdefault(name, fields())):
            row["kernels"] += 1
            row["launches"] += k["launches"]
            row["bytes"] += k["bytes"]
            row["flop"] += k["flop"]
            row["ms"] += us_by_name.get(name, 0.0) / 1e3 / steps
    uncounted = sum(us for name, us in us_by_name.items()
                    if name not in traffic and coat_op(name) is not None)
    ordered = {cat: by_cat[cat] for cat in CATEGORIES if cat in by_cat}
    slowest_first = lambda rows: dict(sorted(rows.items(),  # noqa: E731
                                             key=lambda kv: (-kv[1]["ms"], kv[0])))
    for c in ordered.values():
        c["ops"] = slowest_first(c["ops"])
        for o in c["ops"].values():
            o["by_kernel"] = slowest_first(o["by_kernel"])
        for row in (c, *c["ops"].values(), *(k for o in c["ops"].values()
                                             for k in o["by_kernel"].values())):
            row["launches"] = round(row["launches"], 2)
            row["ms"] = round(row["ms"], 4)
    return ordered, round(uncounted / 1e3 / steps, 4)


def traffic_rows(summary, copy_tbps=None, peak_tflops=FP8_PEAK_TFLOPS, by_op=False,
                 by_kernel=False):
    """Per category of summary["traffic"] (with `by_op`, each followed by
    its ops, named "category: op"; with `by_kernel` too, each op by its
    kernels, "category: op: kernel"): (name, launches, GB, TFLOP, ms, TB/s,
    % of copy, TFLOP/s, % of peak); a figure that cannot be computed (no
    time, no copy bandwidth, no FLOPs) is None. TB/s is bytes over time; %
    of copy compares it with `copy_tbps`, % of peak the FLOP rate with
    `peak_tflops`."""
    items = []
    for cat, c in summary.get("traffic", {}).items():
        items.append((cat, c))
        for op, o in c.get("ops", {}).items() if by_op or by_kernel else ():
            items.append((f"{cat}: {op}", o))
            if by_kernel:
                items += [(f"{cat}: {op}: {k}", row)
                          for k, row in o.get("by_kernel", {}).items()]
    rows = []
    for cat, c in items:
        ms = c["ms"]
        tbps = c["bytes"] / ms / 1e9 if ms > 0 else None
        tflops = c["flop"] / ms / 1e9 if ms > 0 and c["flop"] else None
        rows.append((cat, c["launches"], c["bytes"] / 1e9, c["flop"] / 1e12 if c["flop"] else None,
                     ms, tbps,
                     100 * tbps / copy_tbps if tbps is not None and copy_tbps else None,
                     tflops, 100 * tflops / peak_tflops if tflops is not None else None))
    return rows


def format_traffic(summary, copy_tbps=None):
    """The lines of traffic_rows() as text (none without traffic), each
    category followed by its ops."""
    # An op's row is indented under its category's.
    rows = [(("  " + name.split(": ", 1)[1]) if ": " in name else name, *rest)
            for name, *rest in traffic_rows(summary, copy_tbps, by_op=True)]
    if not rows:
        return []
    f = lambda v, fmt: "-" if v is None else format(v, fmt)  # noqa: E731
    copy = f"copy {copy_tbps:.2f} TB/s" if copy_tbps else "copy not measured"
    lines = [f"our kernels' traffic per step ({copy}, FP8 peak {FP8_PEAK_TFLOPS:.0f} TFLOP/s):",
             f"{'category / op':<32} {'launches':>8} {'GB':>8} {'TFLOP':>7} {'ms':>8} {'TB/s':>6} "
             f"{'%copy':>6} {'TFLOP/s':>8} {'%peak':>6}"]
    for cat, n, gb, tf, ms, tbps, pc, tfs, pp in rows:
        lines.append(f"{cat:<32} {n:8.0f} {gb:8.2f} {f(tf, '7.2f'):>7} {ms:8.3f} "
                     f"{f(tbps, '6.2f'):>6} {f(pc, '6.1f'):>6} {f(tfs, '8.0f'):>8} "
                     f"{f(pp, '6.1f'):>6}")
    if summary.get("uncounted_ms"):
        lines.append(f"(our kernels not counted: {summary['uncounted_ms']:.2f} ms a step)")
    return lines


# Trace reading ---------------------------------------------------------------

_GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_OP_CATS = ("cpu_op", "user_annotation")


def load_trace(path):
    """The parsed Chrome trace that torch.profiler's export_chrome_trace
    wrote (optionally gzipped)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        text = f.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(text, strict=False)  # control characters in names


def _self_times(events):
    """[(start, end, self time, name)] of CPU events (start, end, name,
    thread): an op's interval less its direct children's, children being
    the events nested in it on its thread (a child with its parent's very
    interval is listed after it)."""
    by_thread = {}
    for e in events:
        by_thread.setdefault(e[3], []).append(e)
    out = []
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e[0], -e[1]))
        stack = []  # [start, end, children's time, name] of the open events
        for start, end, name, _ in evs:
            while stack and stack[-1][1] <= start:
                top = stack.pop()
                out.append((top[0], top[1], top[1] - top[0] - top[2], top[3]))
            if stack and end <= stack[-1][1]:
                stack[-1][2] += end - start
            elif stack:  # overlapping, not nested: close the open ones
                while stack:
                    top = stack.pop()
                    out.append((top[0], top[1], top[1] - top[0] - top[2], top[3]))
            stack.append([start, end, 0.0, name])
        while stack:
            top = stack.pop()
            out.append((top[0], top[1], top[1] - top[0] - top[2], top[3]))
    return sorted(out)


def activities_from_trace(trace, device="cuda"):
    """Activities of a Chrome trace (load_trace). device "cuda": its kernels,
    copies and fills, each with the CPU op (or record_function range) that
    launched it where the trace links them (`External id`). device "cpu":
    every CPU op with its self time (its interval less its children's), each
    its own op, and kernels per step counting every op. Kineto's traces are a dict with
    `traceEvents`; torch builds without Kineto write a plain list of CPU
    events, read the same way."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    spans = [e for e in events if e.get("ph") == "X" and "dur" in e]
    if device != "cpu":
        ops = {}
        for e in spans:
            if e.get("cat") in _OP_CATS:
                ext = (e.get("args") or {}).get("External id")
                if ext is not None:
                    ops.setdefault(ext, e["name"])
        out = []
        for e in spans:
            if e.get("cat", "").lower() not in _GPU_CATS:
                continue
            ts, dur = float(e["ts"]), float(e["dur"])
            ext = (e.get("args") or {}).get("External id")
            out.append(Activity(e["name"], dur, ts, ts + dur, ops.get(ext)))
        return out
    cpu = [(float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["name"],
            (e.get("pid"), e.get("tid")))
           for e in spans if e.get("cat", "cpu_op") in ("cpu_op", "user_annotation")]
    return [Activity(name, max(0.0, self_us), start, end,
                     name if name.startswith("aten::") else None)
            for start, end, self_us, name in _self_times(cpu)]


def format_summary(s):
    """A readable text of one summarize() result."""
    wall = f"{s['wall_ms']:.2f}" if s.get("wall_ms") else "-"
    share = f"{100 * s['busy_share']:.0f}%" if s.get("busy_share") else "-"
    what = ("CPU", "ops") if s.get("activity") == "cpu" else ("GPU", "kernels")
    lines = [f"profile, per step ({s['steps']} steps): wall {wall} ms, {what[0]} busy "
             f"{s['busy_ms']:.2f} ms ({share} of the wall), {what[0]} time {s['gpu_ms']:.2f} ms, "
             f"{s['kernels']:.0f} {what[1]}",
             f"{'category':<18} {'ms':>9} {'count':>7}  top"]
    for cat, c in s["categories"].items():
        top = ", ".join(f"{k} {v:.2f}" for k, v in c["top"][:4])
        lines.append(f"{cat:<18} {c['ms']:9.3f} {c['count']:7.1f}  {top}")
    if s["elementwise_ops"]:
        lines.append("torch elementwise by op: " + ", ".join(
            f"{k} {t:.2f} ms ({n:.0f})" for k, t, n in s["elementwise_ops"][:10]))
    lines += format_traffic(s, s.get("copy_tbps"))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", help="Chrome trace (json or json.gz) of torch.profiler")
    ap.add_argument("--steps", type=int, required=True, help="steps the trace holds")
    ap.add_argument("--wall-ms", type=float, default=None, help="wall time per step")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = ap.parse_args(argv)
    acts = activities_from_trace(load_trace(args.trace), args.device)
    summary = summarize(acts, args.steps, args.wall_ms)
    summary["activity"] = args.device
    print(format_summary(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())

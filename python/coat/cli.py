"""The ``coat`` command (the console entry point, and ``python -m coat``).

    coat --version                the package's version, and coat-opt's if found
    coat compile FILE OUT [...]   coat.compile(FILE, OUT): PTX, cubin, the CPU
                                  library and manifest.json in OUT
    coat costs DIR... --tokens N  what each program of the compiled modules
                                  in DIR moves and computes for N tokens, and
                                  its time at the memory and FP8 ceilings
    coat check-kernels DIR...     fails, naming them, when compiled modules in
                                  DIR were made by another compiler than this
                                  package's (their programs would be passed over)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import List, Optional, Sequence

from . import _paths
from ._version import __version__
from .traffic import FP8_PEAK_TFLOPS, ideal_ms, program_kernel_op


def coat_opt_version(tool: str, timeout: float = 60) -> Optional[str]:
    """What ``tool --version`` prints, or None when it cannot run or fails."""
    try:
        r = subprocess.run([tool, "--version"], capture_output=True, text=True,
                           timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    return (r.stdout.strip() or r.stderr.strip()) or None


def version_text() -> str:
    """``coat <version> (<package dir>)``, then which coat-opt the package
    uses (_paths.find_coat_opt) and its --version lines, indented."""
    lines = [f"coat {__version__} ({os.path.dirname(os.path.abspath(__file__))})"]
    tool = _paths.find_coat_opt()
    if not tool:
        lines.append("coat-opt: not found (build it with scripts/build.sh, or set COAT_OPT "
                     "or put it on PATH)")
        return "\n".join(lines)
    text = coat_opt_version(tool)
    if text is None:
        lines.append(f"coat-opt: {tool} (`--version` failed)")
        return "\n".join(lines)
    lines.append(f"coat-opt: {tool}")
    lines += ["  " + ln.strip() for ln in text.splitlines() if ln.strip()]
    return "\n".join(lines)


def _cmd_compile(args: argparse.Namespace) -> int:
    from .compiler import CompileError, compile

    source = args.file
    if source == "-":
        source = sys.stdin.read()
    elif not os.path.isfile(source):
        print(f"coat compile: error: {source}: no such file", file=sys.stderr)
        return 1
    try:
        out = compile(source, args.out, chip=args.chip, features=args.features,
                      coat_opt=args.coat_opt, timeout=args.timeout,
                      gpu=not args.no_gpu, cpu=not args.no_cpu)
    except CompileError as e:
        print(f"coat compile: error: {e}", file=sys.stderr)
        return 1
    print(os.path.join(out, "manifest.json"))
    return 0


def costs_table(programs, tokens: int, copy_tbps: float, peak_tflops: float) -> str:
    """Per program and phase (Program.launch_costs): launches, GB, TFLOP and
    the time at the ceilings, each kernel at the copy bandwidth or (a GEMM)
    the FP8 peak, whichever bounds it."""
    lines = [f"{tokens} tokens; ceilings: copy {copy_tbps:.2f} TB/s, FP8 {peak_tflops:.0f} TFLOP/s",
             f"{'program':<48} {'phase':<9} {'launches':>8} {'GB':>8} {'TFLOP':>8} "
             f"{'ideal ms':>9}"]
    for prog in programs:
        for phase in ("forward", "backward", "recompute"):
            costs = prog.launch_costs(tokens, phase)
            if not costs:
                continue
            gb = sum(c[2] for c in costs) / 1e9
            tflop = sum(c[3] for c in costs) / 1e12
            ideal = sum(ideal_ms(b, f, copy_tbps, peak_tflops) for _, _, b, f in costs)
            lines.append(f"{prog.name:<48} {phase:<9} {len(costs):8d} {gb:8.3f} {tflop:8.3f} "
                         f"{ideal:9.3f}")
    return "\n".join(lines)


def costs_by_op(programs, tokens: int, copy_tbps: float, peak_tflops: float) -> str:
    """Every program's launches (all phases) summed per op, the part of a
    program kernel's name after `_k<i>_` (quantize_per_tensor_transpose,
    linear_dgrad, ...; a kernel named otherwise: its manifest op), largest
    ceiling time first."""
    ops = {}
    for prog in programs:
        for name, op, nbytes, flop in prog.launch_costs(tokens):
            row = ops.setdefault(program_kernel_op(name) or op, [0, 0, 0, 0.0])
            row[0] += 1
            row[1] += nbytes
            row[2] += flop
            row[3] += ideal_ms(nbytes, flop, copy_tbps, peak_tflops)
    lines = [f"{tokens} tokens; ceilings: copy {copy_tbps:.2f} TB/s, FP8 {peak_tflops:.0f} TFLOP/s",
             f"{'op':<48} {'launches':>8} {'GB':>8} {'TFLOP':>8} {'ideal ms':>9}"]
    for op, (n, nbytes, flop, ideal) in sorted(ops.items(), key=lambda kv: (-kv[1][3], kv[0])):
        lines.append(f"{op:<48} {n:8d} {nbytes / 1e9:8.3f} {flop / 1e12:8.3f} {ideal:9.3f}")
    return "\n".join(lines)


def _module_dirs(paths: Sequence[str]) -> List[str]:
    """Each path that holds a manifest.json, else its sub-folders that do
    (what scripts/compile_model.py writes: one folder per program)."""
    out = []
    for path in paths:
        if os.path.isfile(os.path.join(path, "manifest.json")):
            out.append(path)
        elif os.path.isdir(path):
            out += sorted(os.path.join(path, d) for d in os.listdir(path)
                          if os.path.isfile(os.path.join(path, d, "manifest.json")))
    return out


def _cmd_costs(args: argparse.Namespace) -> int:
    from .executor import load_programs
    from .manifest import ManifestError
    from .runtime import load

    if args.tokens < 1:
        print("coat costs: error: --tokens must be at least 1", file=sys.stderr)
        return 1
    dirs = _module_dirs(args.dirs)
    if not dirs:
        print(f"coat costs: error: no manifest.json in {' or '.join(args.dirs)} or their "
              "sub-folders", file=sys.stderr)
        return 1
    programs = []
    for d in dirs:
        try:
            programs += list(load_programs(load(d)).values())
        except (OSError, ManifestError, RuntimeError) as e:
            print(f"coat costs: error: {d}: {e}", file=sys.stderr)
            return 1
    if not programs:
        print(f"coat costs: error: {' '.join(dirs)}: no programs", file=sys.stderr)
        return 1
    table = costs_by_op if args.by_op else costs_table
    print(table(programs, args.tokens, args.copy_tbps, args.peak_tflops))
    return 0


def _cmd_check_kernels(args: argparse.Namespace) -> int:
    from .artifacts import compiled_by_another_compiler

    dirs = _module_dirs(args.dirs)
    if not dirs:
        print(f"coat check-kernels: error: no manifest.json in {' or '.join(args.dirs)} or "
              "their sub-folders", file=sys.stderr)
        return 1
    stale = compiled_by_another_compiler(dirs)
    if not stale:
        print(f"coat check-kernels: {len(dirs)} compiled modules, all by this package's "
              "compiler with the default options")
        return 0
    print(f"coat check-kernels: error: {len(stale)} of {len(dirs)} compiled modules were not "
          "compiled by this package's compiler with the default options, so its finder "
          "passes over their programs (compile them again from these sources: "
          "scripts/demo.sh, scripts/compile_model.py):", file=sys.stderr)
    for path, what in stale:
        print(f"  {path}: {what}", file=sys.stderr)
    return 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="coat", description="COAT-MLIR: compile modules with coat-opt.")
    p.add_argument("--version", action="store_true",
                   help="print the package version and coat-opt's, then exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    c = sub.add_parser(
        "compile", help="compile an MLIR module (coat.compile)",
        description="Compiles FILE (a .mlir module, or - for standard input) into OUT: "
                    "PTX and cubin of the GPU kernels, the CPU twins as a shared library, "
                    "and manifest.json, whose path is printed. Load OUT with coat.load.")
    c.add_argument("file", metavar="FILE")
    c.add_argument("out", metavar="OUT")
    c.add_argument("--chip", help="GPU to compile for (default sm_90a)")
    c.add_argument("--features", help="PTX features (default +ptx80)")
    c.add_argument("--coat-opt", dest="coat_opt", metavar="PATH",
                   help="the coat-opt to run (default: $COAT_OPT, the build, PATH)")
    c.add_argument("--timeout", type=float, default=900,
                   help="seconds each compiler step may take (default 900)")
    c.add_argument("--no-gpu", action="store_true", help="skip the GPU kernels")
    c.add_argument("--no-cpu", action="store_true", help="skip the CPU twins")
    c.set_defaults(run=_cmd_compile)
    c = sub.add_parser(
        "costs", help="bytes, FLOPs and ceiling time of a compiled module's programs",
        description="For each program of the modules in DIR (a folder with manifest.json, "
                    "or one whose sub-folders have one) and each phase: the launches a run of N tokens makes, the bytes of "
                    "their buffers, the GEMMs' FLOPs, and the time every launch would take "
                    "at the copy bandwidth or the FP8 peak, whichever bounds it. From the "
                    "launch plans alone: nothing runs.")
    c.add_argument("dirs", metavar="DIR", nargs="+")
    c.add_argument("--tokens", type=int, required=True, help="token count (batch x sequence)")
    c.add_argument("--copy-tbps", type=float, default=3.35,
                   help="memory ceiling, TB/s (default 3.35: an H100 SXM's HBM3)")
    c.add_argument("--peak-tflops", type=float, default=FP8_PEAK_TFLOPS,
                   help=f"FP8 dense peak, TFLOP/s (default {FP8_PEAK_TFLOPS:.0f}: H100/H200 SXM)")
    c.add_argument("--by-op", action="store_true",
                   help="sum every program's launches per op instead")
    c.set_defaults(run=_cmd_costs)
    c = sub.add_parser(
        "check-kernels", help="whether compiled modules are this compiler's",
        description="Checks that every compiled module in DIR (a folder with manifest.json, "
                    "or one whose sub-folders have one) was compiled by this package's "
                    "compiler with the default options: the second half of its source_key. "
                    "Lists those that were not and exits 1; their programs would be passed "
                    "over by the finder (kernels carried from an older build).")
    c.add_argument("dirs", metavar="DIR", nargs="+")
    c.set_defaults(run=_cmd_check_kernels)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = _parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.version:
        print(version_text())
        return 0
    if not args.command:
        parser.print_help(sys.stderr)
        return 2
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())

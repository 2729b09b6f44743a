"""The ``coat`` command (the console entry point, and ``python -m coat``).

    coat --version                the package's version, and coat-opt's if found
    coat compile FILE OUT [...]   coat.compile(FILE, OUT): PTX, cubin, the CPU
                                  library and manifest.json in OUT
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import List, Optional, Sequence

from . import _paths
from ._version import __version__


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

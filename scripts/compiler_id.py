#!/usr/bin/env python3
"""The compiler's identity as a hash of the sources that shape an artifact
(include/coat and lib/ without the runtime, tools/coat-opt), recorded in
python/coat/_compiler_id.py so that a host without the sources (the GPU
host, an installed package) knows it too. coat.toolchain.source_key puts it
in every artifact's key: kernels compiled before a lowering changed are
never taken for the new compiler's.

  scripts/compiler_id.py           print the id of the checkout's sources
  scripts/compiler_id.py --check   exit 1 when the recorded id is stale
  scripts/compiler_id.py --write   record the id of the checkout's sources
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD = os.path.join(ROOT, "python", "coat", "_compiler_id.py")
# What coat-opt is built from; the runtime (include/coat/Runtime,
# lib/Runtime) runs artifacts and does not shape them.
SOURCES = ("include/coat", "lib", "tools/coat-opt")
EXCLUDED = ("include/coat/Runtime", "lib/Runtime")
SUFFIXES = (".cpp", ".h", ".td", ".txt", ".inc", ".def")


def source_files(root: str = ROOT):
    """The compiler's source files, relative to ``root``, sorted."""
    out = []
    for top in SOURCES:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
            if any(rel_dir == e or rel_dir.startswith(e + "/") for e in EXCLUDED):
                dirnames[:] = []
                continue
            out += [f"{rel_dir}/{f}" for f in filenames if f.endswith(SUFFIXES)]
    return sorted(out)


def compute(root: str = ROOT) -> str:
    """sha256 over each source's path and bytes, in path order."""
    h = hashlib.sha256()
    for rel in source_files(root):
        with open(os.path.join(root, rel), "rb") as f:
            h.update(rel.encode() + b"\0" + f.read() + b"\0")
    return h.hexdigest()[:32]


def recorded(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        m = re.search(r'^COMPILER_ID = "([0-9a-f]+)"$', f.read(), re.M)
    if m is None:
        raise SystemExit(f"{path}: no COMPILER_ID line")
    return m.group(1)


RECORD_TEXT = '''"""The compiler's identity: a hash of the sources coat-opt is built from
(scripts/compiler_id.py writes it; test_compiler_id checks it is current).
Part of every artifact's source key, so kernels a previous compiler made
are not taken for this one's."""

COMPILER_ID = "{ident}"
'''


def write(ident: str, path: str) -> None:
    """Writes the record whole (a merge may have left two ids in it)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(RECORD_TEXT.format(ident=ident))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--check", action="store_true")
    g.add_argument("--write", action="store_true")
    args = p.parse_args(argv)
    ident = compute()
    if args.write:
        write(ident, RECORD)
    elif args.check and recorded(RECORD) != ident:
        print(f"python/coat/_compiler_id.py records {recorded(RECORD)}, the sources hash to "
              f"{ident}: the compiler changed; run scripts/compiler_id.py --write",
              file=sys.stderr)
        return 1
    print(ident)
    return 0


if __name__ == "__main__":
    sys.exit(main())

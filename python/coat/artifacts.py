"""Compiled artifacts: where the kernels come from, one finder, one cache.

Every user of compiled kernels finds them here: coat.nn's program modules,
FP8AdamW and coat.linear. An artifact is a folder ``coat-compile-artifact``
wrote (docs/manifest.md, "The artifact"), loaded once per process while its
manifest stays the same (:func:`module`). The search path
(:func:`search_path`) is ``$COAT_KERNELS``, then the build's demo output; a
folder on it whose manifest does not load is an error that names it, never
skipped.

A compiled program is found by what it is, not by its name: the source key
of its text and compile options (:func:`coat.toolchain.source_key`, recorded
as the manifest's ``source_key``). So a layer with another epsilon or group
size never runs kernels compiled for the first; a program no folder holds is
compiled into the cache (:func:`cache_dir`) under a folder named by that
key, where LLVM is.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from typing import Dict, Iterable, List, Optional, Tuple, Union

from . import _paths
from .manifest import ManifestError
from .runtime import Module, load


class ArtifactNotFound(RuntimeError):
    """No folder holds the compiled program, and it cannot be compiled here."""


_lock = threading.RLock()
# realpath -> (manifest's mtime and size, module)
_modules: Dict[str, Tuple[Tuple[int, int], Module]] = {}
# (folder given or "", source key) -> program
_programs: Dict[Tuple[str, str], object] = {}


def cache_dir() -> str:
    """Where programs compiled on first use are kept: $COAT_KERNEL_CACHE,
    else ~/.cache/coat-mlir/kernels."""
    return os.environ.get("COAT_KERNEL_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "coat-mlir", "kernels")


def search_path() -> List[str]:
    """The artifact folders searched for compiled kernels when none is
    given: those of $COAT_KERNELS (os.pathsep-separated; a folder without a
    manifest stands for its sub-folders that have one), then every folder
    under <build>/demo holding a manifest.json (scripts/demo.sh's output),
    unless $COAT_KERNELS_ONLY is 1 (an A/B of compiled variants tests each
    variant alone: scripts/gpu_ab.py). A folder reached twice is searched
    once."""
    out: List[str] = []
    env = os.environ.get("COAT_KERNELS")
    roots = [d for d in (env.split(os.pathsep) if env else []) if d]
    if os.environ.get("COAT_KERNELS_ONLY") != "1":
        roots += [os.path.join(b, "demo") for b in _paths.build_dirs()]
    for d in roots:
        out += [d] if _holds_manifest(d) else _artifact_subfolders(d)
    seen, unique = set(), []
    for d in out:
        key = os.path.realpath(d)
        if key not in seen:
            seen.add(key)
            unique.append(d)
    return unique


def _holds_manifest(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, "manifest.json"))


def _artifact_subfolders(folder: str) -> List[str]:
    """The sub-folders of ``folder`` holding a manifest (a folder of compiled
    programs, scripts/compile_model.py's --out)."""
    if not os.path.isdir(folder):
        return []
    return [os.path.join(folder, n) for n in sorted(os.listdir(folder))
            if _holds_manifest(os.path.join(folder, n))]


def module(folder: Union[str, os.PathLike, Module]) -> Module:
    """The loaded artifact of ``folder`` (or its manifest.json), loaded once
    while its manifest is unchanged. A manifest that does not load raises
    ManifestError naming the file."""
    if isinstance(folder, Module):
        return folder
    path = os.fspath(folder)
    manifest = path if path.endswith(".json") else os.path.join(path, "manifest.json")
    key = os.path.realpath(manifest)
    try:
        st = os.stat(key)
        version = (st.st_mtime_ns, st.st_size)
    except OSError as e:
        raise ManifestError(f"cannot read manifest {manifest}: {e.strerror}") from None
    with _lock:
        hit = _modules.get(key)
        if hit is None or hit[0] != version:
            hit = _modules[key] = (version, load(manifest))
        return hit[1]


def modules(folders: Optional[Iterable[Union[str, os.PathLike, Module]]] = None) -> List[Module]:
    """The artifacts of ``folders`` (default: the search path), in order."""
    return [module(f) for f in (search_path() if folders is None else folders)]


def program(cfg, folder: Optional[str] = None):
    """The compiled program of ``cfg`` (a :mod:`coat.programs` config): from
    ``folder``, else the search path, else the cache, compiled there on
    first use with coat-opt. From the search path only an artifact compiled
    from ``cfg.text()`` with the default options (its source key) is taken;
    ``folder`` may have been compiled with other options (an A/B), but from
    another text (another configuration) it is an error that says so."""
    from . import toolchain
    from .executor import load_programs

    text = cfg.text()
    key = toolchain.source_key(text)
    with _lock:
        cached = _programs.get((folder or "", key))
        if cached is not None:
            return cached
        if folder is not None:
            found = module(folder)
            text_key = toolchain.key_halves(found.manifest.raw.get("source_key", ""))[0]
            if text_key != toolchain.key_halves(key)[0]:
                raise ArtifactNotFound(
                    f"{found.manifest.path} was not compiled from {cfg.name} as configured "
                    f"(its source_key says another program text: another configuration, "
                    f"or an artifact older than source keys); compile it again with "
                    f"scripts/compile_model.py")
        else:
            found = _find(key) or _compile(cfg, text, key)
        programs = load_programs(found)
        if cfg.name not in programs:
            raise ArtifactNotFound(f"{found.manifest.path} holds no program {cfg.name}")
        prog = _programs[(folder or "", key)] = programs[cfg.name]
        return prog


def _find(key: str) -> Optional[Module]:
    for d in [*search_path(), _cache_folder(key)]:
        if _holds_manifest(d):
            m = module(d)
            if m.manifest.raw.get("source_key") == key:
                return m
    return None


def _compiled_otherwise(key: str) -> Optional[Module]:
    """An artifact of the search path compiled from the program text of
    ``key`` (its first half) in another way (the second half): kernels
    carried from an older compiler, which the search rightly passes over."""
    from .toolchain import key_halves

    text_key = key_halves(key)[0]
    for d in search_path():
        if _holds_manifest(d):
            m = module(d)
            found = str(m.manifest.raw.get("source_key", ""))
            if key_halves(found)[0] == text_key and found != key:
                return m
    return None


def compiled_by_another_compiler(folders: Iterable[str]) -> List[Tuple[str, str]]:
    """The artifact folders among ``folders`` (each one holding a manifest,
    or whose sub-folders do) that the search would pass over although they
    may hold the right programs: the second half of their source_key is not
    this package's compiler with the default options (an older coat-opt, a
    changed compiler source, another package version or other options), or
    they record no source_key. As (manifest path, what it records) pairs;
    read from the manifests alone, nothing is loaded. Kernels carried to a
    GPU host are checked with it before a test run, which would otherwise
    skip every test that needs them (``coat check-kernels``)."""
    from . import toolchain

    current = {toolchain.key_halves(toolchain.source_key("", program=p))[1]
               for p in (True, False)}
    out: List[Tuple[str, str]] = []
    for folder in folders:
        for d in [folder] if _holds_manifest(folder) else _artifact_subfolders(folder):
            path = os.path.join(d, "manifest.json")
            try:
                with open(path, encoding="utf-8") as f:
                    key = str(json.load(f).get("source_key", ""))
            except (OSError, ValueError, AttributeError) as e:
                out.append((path, f"unreadable manifest: {e}"))
                continue
            if not key:
                out.append((path, "no source_key"))
            elif toolchain.key_halves(key)[1] not in current:
                out.append((path, f"source_key {key}"))
    return out


def _cache_folder(key: str) -> str:
    return os.path.join(cache_dir(), key)


def _compile(cfg, text: str, key: str) -> Module:
    from .toolchain import Toolchain

    tool = _paths.find_coat_opt()
    if tool is None:
        stale = _compiled_otherwise(key)
        raise ArtifactNotFound(
            f"no compiled kernels for {cfg.name} as configured (searched "
            f"{', '.join(search_path() + [cache_dir()]) or 'nothing'}) and no coat-opt "
            "to compile them: run scripts/compile_model.py where LLVM is and pass its "
            "output folder (or put it on COAT_KERNELS)"
            + (f"; {stale.manifest.path} holds this program's text but was compiled by "
               "another compiler, package version or options (the second half of its "
               "source_key differs): compile it again from these sources" if stale else ""))
    out = _cache_folder(key)
    # The ranks of a distributed job start together and compile the same
    # programs at once: each compiles into a folder of its own and moves it
    # into place whole, so that none reads or overwrites another's
    # half-written files.
    os.makedirs(cache_dir(), exist_ok=True)
    work = tempfile.mkdtemp(prefix=f".{key}.", dir=cache_dir())
    try:
        src = os.path.join(work, f"{cfg.name}.mlir")
        with open(src, "w", encoding="utf-8") as f:
            f.write(text)
        Toolchain(coat_opt=tool).compile_program(src, work)
        _move_into_place(work, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return module(out)


def _move_into_place(work: str, out: str) -> None:
    """Renames the compiled folder ``work`` to ``out``, unless another
    process got there first (then its folder, compiled from the same text,
    stays). A folder without a manifest at ``out`` is what an interrupted
    compile left: it is moved aside and replaced."""
    for _ in range(3):
        try:
            os.rename(work, out)
            return
        except OSError:
            if _holds_manifest(out):
                return
        try:
            aside = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.stale.",
                                     dir=os.path.dirname(out))
            os.rename(out, os.path.join(aside, "old"))
            shutil.rmtree(aside, ignore_errors=True)
        except OSError:
            pass  # gone meanwhile: try again
    os.rename(work, out)  # raises, naming both folders

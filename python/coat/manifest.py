"""manifest.json (docs/manifest.md) as Python objects, validated the same way
the C++ runtime validates it (lib/Runtime/Manifest.cpp)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import _dtypes


class ManifestError(ValueError):
    """A manifest that is malformed or that this version cannot read."""


@dataclasses.dataclass(frozen=True)
class ArgSpec:
    name: str
    kind: str  # "memref" | "scalar" | "tensormap"
    dtype: str
    extent: Any = None  # "n" | "groups" | "m*n" | int, memrefs only
    # tensormap only: global dims innermost first (scalar names or ints), box, swizzle
    dims: Tuple[Any, ...] = ()
    box: Tuple[int, ...] = ()
    swizzle: str = "none"
    # What the argument is in terms of the kernel-spec function it was
    # lowered from (docs/manifest.md, "Bindings"): value references for
    # buffers, one extent expression for scalars; () when not recorded.
    bind: Tuple[str, ...] = ()

    @property
    def is_memref(self) -> bool:
        """Takes one buffer: memrefs and tensormaps (the runtime encodes the
        CUtensorMap from the buffer's address)."""
        return self.kind in ("memref", "tensormap")

    def extent_for(self, n: int, group_size: int, scalars: Optional[Mapping[str, int]] = None) -> int:
        scalars = dict(scalars or {})
        scalars.setdefault("n", n)
        if self.kind == "tensormap":
            out = 1
            for d in self.dims:
                out *= int(d) if isinstance(d, int) else int(scalars[d])
            return out
        if self.extent == "n":
            return n
        if self.extent == "groups":
            return -(-n // group_size)
        if isinstance(self.extent, str):
            out = 1
            for f in self.extent.split("*"):
                name, _, div = f.partition("/")
                v = -(-n // group_size) if name == "groups" else int(scalars[name])
                out *= -(-max(v, 0) // int(div)) if div else v
            return out
        return int(self.extent)


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    name: str
    op: str
    module: str
    cubin: Optional[str]  # absolute paths (resolved against the manifest dir)
    ptx: Optional[str]
    cpu_object: Optional[str]
    cpu_symbol: Optional[str]
    config: Mapping[str, Any]
    block: Tuple[int, int, int]
    elements_per_block: int
    shared_bytes: int
    args: Tuple[ArgSpec, ...]
    grid_tiles: Tuple[Tuple[str, int], ...] = ()  # launch.grid_tiles
    # launch.persistent: the runtime launches min(tiles, multiprocessors) CTAs
    persistent: bool = False

    @property
    def group_size(self) -> int:
        return int(self.config.get("group_size", 0) or 0)

    @property
    def memrefs(self) -> Tuple[ArgSpec, ...]:
        return tuple(a for a in self.args if a.is_memref)

    @property
    def scalars(self) -> Tuple[ArgSpec, ...]:
        return tuple(a for a in self.args if not a.is_memref)

    def grid(self, n: int, scalars: Optional[Mapping[str, int]] = None):
        """gridDim.x, or with launch.grid_tiles the (x, y, z) grid (for a
        persistent kernel: the number of tiles, which the runtime caps at the
        multiprocessor count)."""
        if self.grid_tiles:
            sc = dict(scalars or {})
            sc.setdefault("n", n)
            g = [-(-int(sc[name]) // tile) for name, tile in self.grid_tiles]
            if self.persistent:
                return (g[0] * (g[1] if len(g) > 1 else 1) * (g[2] if len(g) > 2 else 1), 1, 1)
            return tuple(g + [1] * (3 - len(g)))
        return -(-n // self.elements_per_block)


@dataclasses.dataclass(frozen=True)
class Manifest:
    path: str
    directory: str
    version: int
    target: Mapping[str, Any]
    kernels: Tuple[KernelSpec, ...]
    fp8: Mapping[str, _dtypes.Fp8Format]
    raw: Mapping[str, Any]

    def kernel(self, name: str) -> KernelSpec:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"no kernel named {name!r} in {self.path} "
                       f"(it has: {', '.join(k.name for k in self.kernels)})")


def _fail(where: str, what: str):
    raise ManifestError(f"manifest: {where}: {what}")


def _get(obj: Mapping, where: str, key: str, typ, required: bool = True):
    if key not in obj:
        if required:
            _fail(where, f"missing required field {key!r}")
        return None
    v = obj[key]
    ok = isinstance(v, typ) and not (typ in (int, (int, float)) and isinstance(v, bool))
    if not ok:
        _fail(f"{where}.{key}", f"expected {getattr(typ, '__name__', typ)}, got {type(v).__name__}")
    return v


def _int(v, where: str, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (
            isinstance(v, float) and (not math.isfinite(v) or v != math.floor(v))) or v < minimum:
        _fail(where, f"expected an integer >= {minimum}")
    return int(v)


def _resolve(directory: str, rel: Optional[str]) -> Optional[str]:
    if not rel:
        return None
    return rel if os.path.isabs(rel) else os.path.join(directory, rel)


def _parse_kernel(k: Any, where: str, directory: str) -> KernelSpec:
    if not isinstance(k, dict):
        _fail(where, "expected an object")
    name = _get(k, where, "name", str)
    if not name:
        _fail(f"{where}.name", "empty kernel name")
    gpu = _get(k, where, "gpu", dict, required=False) or {}
    cpu = _get(k, where, "cpu", dict, required=False) or {}
    config = _get(k, where, "config", dict, required=False) or {}
    if "group_size" in config:
        _int(config["group_size"], f"{where}.config.group_size", 1)
    # The launch rule is GPU-only: a CPU-only kernel may omit it.
    launch = _get(k, where, "launch", dict, required=bool(gpu) or "launch" in k)
    if launch is None:
        launch = {"block": [1], "elements_per_block": max(1, int(config.get("group_size", 1)))}
    lw = f"{where}.launch"
    block = _get(launch, lw, "block", list)
    if not 1 <= len(block) <= 3:
        _fail(f"{lw}.block", "expected 1 to 3 integers")
    b = [_int(x, f"{lw}.block[{i}]", 1) for i, x in enumerate(block)] + [1] * (3 - len(block))
    if max(b) > 1024 or b[0] * b[1] * b[2] > 1024:
        _fail(f"{lw}.block", "more than 1024 threads per block")
    tiles = launch.get("grid_tiles") or []
    if not isinstance(tiles, list) or len(tiles) > 3 or not all(
            isinstance(t, list) and len(t) == 2 and isinstance(t[0], str) for t in tiles):
        _fail(f"{lw}.grid_tiles", 'expected up to 3 ["scalar name", tile] pairs')
    grid_tiles = tuple((t[0], _int(t[1], f"{lw}.grid_tiles", 1)) for t in tiles)
    epb = (_int(_get(launch, lw, "elements_per_block", (int, float)), f"{lw}.elements_per_block", 1)
           if not grid_tiles or "elements_per_block" in launch else 0)
    shared = _int(launch.get("shared_bytes", 0), f"{lw}.shared_bytes", 0)
    persistent = launch.get("persistent", False)
    if not isinstance(persistent, bool) or (persistent and not grid_tiles):
        _fail(f"{lw}.persistent", "expected true or false, and true only with grid_tiles")
    args: List[ArgSpec] = []
    needs_groups = False
    for i, a in enumerate(_get(k, where, "args", list)):
        aw = f"{where}.args[{i}]"
        if not isinstance(a, dict):
            _fail(aw, "expected an object")
        aname = _get(a, aw, "name", str)
        kind = _get(a, aw, "kind", str)
        dtype = _get(a, aw, "dtype", str)
        aw += f" ({aname!r})"
        bind = a.get("bind", ())
        bind = (bind,) if isinstance(bind, str) else bind
        if not isinstance(bind, (list, tuple)) or not all(isinstance(b, str) for b in bind):
            _fail(f"{aw}.bind", "expected a string or a list of strings")
        bind = tuple(bind)
        if any(p.name == aname for p in args):
            _fail(aw, "duplicate argument name")
        if kind == "memref":
            if dtype not in _dtypes.MEMREF_DTYPES:
                _fail(aw, f"unknown memref dtype {dtype!r}")
            if "extent" not in a:
                _fail(aw, "missing required field 'extent'")
            ext = a["extent"]
            if ext in ("n", "groups"):
                needs_groups |= ext == "groups"
            elif isinstance(ext, str) and ext:
                pass  # "m*n": product of scalar arguments
            elif isinstance(ext, (int, float)) and not isinstance(ext, bool):
                ext = _int(ext, f"{aw}.extent", 0)
            else:
                _fail(f"{aw}.extent", 'expected "n", "groups" or an integer, or a product of '
                  'scalar arguments like "m*n"')
            args.append(ArgSpec(aname, kind, dtype, ext, bind=bind))
        elif kind == "scalar":
            if dtype not in _dtypes.SCALAR_DTYPES:
                _fail(aw, f"unsupported scalar dtype {dtype!r} (expected i64, i32 or f32)")
            args.append(ArgSpec(aname, kind, dtype, bind=bind))
        elif kind == "tensormap":
            if dtype not in _dtypes.MEMREF_DTYPES:
                _fail(aw, f"unknown tensormap dtype {dtype!r}")
            dims, box = _get(a, aw, "dims", list), _get(a, aw, "box", list)
            if not 1 <= len(dims) <= 5 or len(box) != len(dims):
                _fail(aw, "expected 1 to 5 dims and one box size per dim")
            dims = tuple(d if isinstance(d, str) else _int(d, f"{aw}.dims", 1) for d in dims)
            box = tuple(_int(x, f"{aw}.box", 1) for x in box)
            swz = a.get("swizzle", "none")
            if swz not in ("none", "32b", "64b", "128b"):
                _fail(f"{aw}.swizzle", "expected none, 32b, 64b or 128b")
            args.append(ArgSpec(aname, kind, dtype, None, dims, box, swz, bind))
        else:
            _fail(f"{aw}.kind", f'expected "memref", "scalar" or "tensormap", got {kind!r}')
    scalar_names = {a.name for a in args if a.kind == "scalar"}
    for a in args:
        if isinstance(a.extent, str) and a.extent not in ("n", "groups"):
            for f in a.extent.split("*"):
                needs_groups |= f == "groups"
                f, slash, div = f.partition("/")  # "rows/128": ceil(rows / 128)
                if slash and (f == "groups" or not div.isdigit() or int(div) <= 0):
                    _fail(f"{where}.args ({a.name!r}).extent",
                          f"{a.extent!r}: a factor name/k needs a scalar name and k > 0")
                if f != "groups" and f not in scalar_names:
                    _fail(f"{where}.args ({a.name!r}).extent",
                          'expected "n", "groups" or an integer, or a product of scalar '
                          f'arguments like "m*n" ({f!r} is not a scalar argument)')
        for d in a.dims:
            if isinstance(d, str) and d not in scalar_names:
                _fail(f"{where}.args ({a.name!r}).dims", f"{d!r} is not a scalar argument")
    for tile_dim, _ in grid_tiles:
        if tile_dim not in scalar_names:
            _fail(f"{lw}.grid_tiles", f"{tile_dim!r} is not a scalar argument")
    if needs_groups and not config.get("group_size"):
        _fail(where, 'an argument has extent "groups" but config.group_size is missing')
    return KernelSpec(
        name=name, op=k.get("op", ""), module=k.get("module", ""),
        cubin=_resolve(directory, gpu.get("cubin")), ptx=_resolve(directory, gpu.get("ptx")),
        cpu_object=_resolve(directory, cpu.get("object")), cpu_symbol=cpu.get("symbol"),
        config=config, block=tuple(b), elements_per_block=epb, shared_bytes=shared,
        args=tuple(args), grid_tiles=grid_tiles, persistent=persistent)


def parse_manifest(doc: Any, path: str = "<memory>", directory: str = ".") -> Manifest:
    """Validates a decoded manifest document."""
    if not isinstance(doc, dict):
        _fail("top level", "expected an object")
    fmt = _get(doc, "top level", "format", str)
    if fmt != "coat-manifest":
        _fail("format", f'expected "coat-manifest", got {fmt!r}')
    version = _int(_get(doc, "top level", "version", (int, float)), "version", 1)
    if version != 1:
        _fail("version", f"unsupported manifest version {version} (this package reads 1)")
    target = _get(doc, "top level", "target", dict, required=False) or {}
    kernels: List[KernelSpec] = []
    for i, k in enumerate(_get(doc, "top level", "kernels", list)):
        ks = _parse_kernel(k, f"kernels[{i}]", directory)
        if any(p.name == ks.name for p in kernels):
            _fail(f"kernels[{i}]", f"duplicate kernel name {ks.name!r}")
        kernels.append(ks)
    try:
        fp8 = _dtypes.fp8_formats_from_manifest(doc)
    except (KeyError, TypeError, ValueError) as e:
        raise ManifestError(f"manifest: formats: {e}") from None
    return Manifest(path=path, directory=directory, version=version, target=target,
                    kernels=tuple(kernels), fp8=fp8, raw=doc)


def load_manifest(path: str) -> Manifest:
    """Reads ``path`` (a manifest.json, or a folder holding one)."""
    if os.path.isdir(path):
        path = os.path.join(path, "manifest.json")
    try:
        with open(path, "r", encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ManifestError(f"cannot read manifest {path}: {e.strerror}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ManifestError(f"{path}: JSON parse error at line {e.lineno}, column {e.colno}: "
                            f"{e.msg}") from None
    try:
        return parse_manifest(doc, path=os.path.abspath(path),
                              directory=os.path.dirname(os.path.abspath(path)))
    except ManifestError as e:
        raise ManifestError(f"{path}: {e}") from None

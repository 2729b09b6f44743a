"""manifest.json (docs/manifest.md) as Python objects.

Parsing and validation are the C++ runtime's (lib/Runtime/ManifestParse.cpp),
reached through libcoat_manifest.so (coat_manifest.h): it returns the
validated manifest in a normalized form, from which this module builds its
dataclasses. Every rule and error message lives there, not here."""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import threading
from typing import Any, Mapping, Optional, Tuple

from . import _dtypes, _paths


class ManifestError(ValueError):
    """A manifest that is malformed or that this version cannot read."""


class ManifestLibraryNotFound(FileNotFoundError):
    """libcoat_manifest.so, the manifest reader, is not built."""


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


# ---- the C++ reader (coat_manifest.h) --------------------------------------

ABI_VERSION = 1  # COAT_MANIFEST_ABI_VERSION
_ERRLEN = 4096
_lib: Optional[ctypes.CDLL] = None
_lock = threading.Lock()


def _library() -> ctypes.CDLL:
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        candidates = _paths.manifest_lib_candidates()
        for cand in candidates:
            if not os.path.isfile(cand):
                continue
            lib = ctypes.CDLL(cand)
            lib.coat_manifest_abi_version.restype = ctypes.c_int
            lib.coat_manifest_abi_version.argtypes = []
            # c_void_p, not c_char_p: the pointer goes back to coat_manifest_free.
            lib.coat_manifest_normalize.restype = ctypes.c_void_p
            lib.coat_manifest_normalize.argtypes = [ctypes.c_char_p, ctypes.c_size_t,
                                                    ctypes.c_char_p, ctypes.c_size_t]
            lib.coat_manifest_free.restype = None
            lib.coat_manifest_free.argtypes = [ctypes.c_void_p]
            if lib.coat_manifest_abi_version() != ABI_VERSION:
                raise ManifestLibraryNotFound(
                    f"{cand}: ABI version {lib.coat_manifest_abi_version()}, "
                    f"expected {ABI_VERSION} (rebuild coat_manifest)")
            _lib = lib
            return lib
    raise ManifestLibraryNotFound(
        "libcoat_manifest.so (the manifest reader) not found; build it with "
        "`ninja -C build coat_manifest` or `cmake -S lib/Runtime -B build-rt && "
        "cmake --build build-rt`, or set COAT_MANIFEST_LIB. Looked in: "
        + ", ".join(candidates))


def _normalize(text: bytes) -> Mapping[str, Any]:
    """The C++ reader's validated, normalized document; ManifestError with
    its message otherwise."""
    lib = _library()
    err = ctypes.create_string_buffer(_ERRLEN)
    ptr = lib.coat_manifest_normalize(text, len(text), err, _ERRLEN)
    if not ptr:
        raise ManifestError(err.value.decode("utf-8", "replace"))
    try:
        return json.loads(ctypes.string_at(ptr).decode("utf-8", "replace"))
    finally:
        lib.coat_manifest_free(ptr)


def _resolve(directory: str, rel: Optional[str]) -> Optional[str]:
    if not rel:
        return None
    return rel if os.path.isabs(rel) else os.path.join(directory, rel)


def _arg(a: Mapping[str, Any]) -> ArgSpec:
    return ArgSpec(name=a["name"], kind=a["kind"], dtype=a["dtype"], extent=a["extent"],
                   dims=tuple(a["dims"]), box=tuple(a["box"]), swizzle=a["swizzle"],
                   bind=tuple(a["bind"]))


def _kernel(k: Mapping[str, Any], raw: Mapping[str, Any], directory: str) -> KernelSpec:
    return KernelSpec(
        name=k["name"], op=k["op"], module=k["module"],
        cubin=_resolve(directory, k["cubin"]), ptx=_resolve(directory, k["ptx"]),
        cpu_object=_resolve(directory, k["cpu_object"]), cpu_symbol=k["cpu_symbol"] or None,
        config=raw.get("config") or {}, block=tuple(k["block"]),
        elements_per_block=k["elements_per_block"], shared_bytes=k["shared_bytes"],
        args=tuple(_arg(a) for a in k["args"]),
        grid_tiles=tuple((name, tile) for name, tile in k["grid_tiles"]),
        persistent=k["persistent"])


def _manifest(norm: Mapping[str, Any], doc: Mapping[str, Any], path: str,
              directory: str) -> Manifest:
    # `doc` (the decoded document) supplies what the manifest carries through
    # unvalidated: config and target objects, programs, and the rest of `raw`.
    fp8 = dict(_dtypes.FALLBACK_FP8)
    for name, f in norm["formats"].items():
        fp8[name] = _dtypes.Fp8Format(
            name=name, mlir_type=f["mlir_type"], exponent_bits=f["exponent_bits"],
            mantissa_bits=f["mantissa_bits"], exponent_bias=f["exponent_bias"],
            has_infinity=f["has_infinity"], max_finite=float(f["max_finite"]),
            min_normal=float(f["min_normal"]), min_subnormal=float(f["min_subnormal"]))
    kernels = tuple(_kernel(k, raw, directory) for k, raw in zip(norm["kernels"], doc["kernels"]))
    return Manifest(path=path, directory=directory, version=norm["version"],
                    target=doc.get("target") or {}, kernels=kernels, fp8=fp8, raw=doc)


def parse_manifest(doc: Any, path: str = "<memory>", directory: str = ".") -> Manifest:
    """Validates a decoded manifest document."""
    try:
        text = json.dumps(doc, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise ManifestError(f"manifest: top level: not a JSON document ({e})") from None
    return _manifest(_normalize(text), doc, path, directory)


def load_manifest(path: str) -> Manifest:
    """Reads ``path`` (a manifest.json, or a folder holding one)."""
    if os.path.isdir(path):
        path = os.path.join(path, "manifest.json")
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError as e:
        raise ManifestError(f"cannot read manifest {path}: {e.strerror}") from None
    try:
        norm = _normalize(text)
    except ManifestError as e:
        raise ManifestError(f"{path}: {e}") from None
    # Valid JSON: the C++ reader accepted it.
    doc = json.loads(text.decode("utf-8", "replace"))
    return _manifest(norm, doc, os.path.abspath(path), os.path.dirname(os.path.abspath(path)))

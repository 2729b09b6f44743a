"""manifest.json (docs/manifest.md) as Python objects.

Parsing, validation and the launch rules are the C++ reader's (lib/Runtime:
ManifestParse.cpp and ProgramParse.cpp read and check a manifest whole,
LaunchArgs.cpp holds the launch rules, Plan.cpp the program plans), reached
through libcoat_manifest.so (coat_manifest.h). It returns the validated
manifest in a normalized form, from which this module builds its
dataclasses, and answers extents, grids, launch checks and plans through
:class:`Reader`. Every rule and error message lives there, not here."""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from . import _dtypes, _paths


class ManifestError(ValueError):
    """A manifest that is malformed or that this version cannot read."""


class ProgramError(ValueError):
    """Inputs a program cannot take, or a launch plan it cannot follow."""


class ProgramManifestError(ManifestError, ProgramError):
    """A manifest whose programs section an executor cannot follow (a call
    of a missing kernel, a binding that does not parse, ...): refused when
    the manifest is read."""


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
    kernel: str = ""  # the kernel it is an argument of
    reader: Optional["Reader"] = dataclasses.field(default=None, compare=False,
                                                   repr=False)

    @property
    def is_memref(self) -> bool:
        """Takes one buffer: memrefs and tensormaps (the runtime encodes the
        CUtensorMap from the buffer's address)."""
        return self.kind in ("memref", "tensormap")

    def extent_for(self, n: int, scalars: Optional[Mapping[str, int]] = None) -> int:
        """The elements this buffer argument takes for a launch over ``n``,
        given the integer scalars its extent names."""
        return self.reader.extent(self.kernel, self.name, n, scalars or {})


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
    reader: Optional["Reader"] = dataclasses.field(default=None, compare=False,
                                                   repr=False)

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
        grid = self.reader.grid(self.name, n, scalars or {})
        return tuple(grid) if self.grid_tiles else grid[0]


@dataclasses.dataclass(frozen=True)
class Manifest:
    path: str
    directory: str
    version: int
    target: Mapping[str, Any]
    kernels: Tuple[KernelSpec, ...]
    fp8: Mapping[str, _dtypes.Fp8Format]
    # The launch plans (docs/manifest.md, "Programs"), normalized:
    # coat_manifest.h describes the fields; coat.executor runs them.
    programs: Tuple[Mapping[str, Any], ...] = ()
    # The normalized document all of the above is built from (with the
    # source_key the module was compiled from, "" when it says none).
    raw: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    reader: Optional["Reader"] = dataclasses.field(default=None, compare=False,
                                                   repr=False)

    def kernel(self, name: str) -> KernelSpec:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"no kernel named {name!r} in {self.path} "
                       f"(it has: {', '.join(k.name for k in self.kernels)})")


# ---- the C++ reader (coat_manifest.h) --------------------------------------

ABI_VERSION = 2  # COAT_MANIFEST_ABI_VERSION
_ERRLEN = 4096
_ERR_PROGRAM = 3  # COAT_MANIFEST_ERR_PROGRAM
_N_FROM_BUFFERS = -2 ** 63  # COAT_MANIFEST_N_FROM_BUFFERS
_RESIDENT_FN = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_char_p)
_lib: Optional[ctypes.CDLL] = None
_lock = threading.Lock()


def _declare(lib: ctypes.CDLL) -> None:
    c = ctypes
    i64p = c.POINTER(c.c_int64)
    names = c.POINTER(c.c_char_p)
    err = [c.c_char_p, c.c_size_t]
    for fn, restype, argtypes in [
            ("coat_manifest_abi_version", c.c_int, []),
            ("coat_manifest_open", c.c_int,
             [c.c_char_p, c.c_size_t, c.POINTER(c.c_void_p)] + err),
            ("coat_manifest_close", None, [c.c_void_p]),
            ("coat_manifest_document", c.c_char_p, [c.c_void_p]),
            # c_void_p, not c_char_p: the pointer goes back to coat_manifest_free.
            ("coat_manifest_plan", c.c_int,
             [c.c_void_p, c.c_char_p, c.c_int64, c.c_int64, _RESIDENT_FN, c.c_void_p,
              c.POINTER(c.c_void_p)] + err),
            ("coat_manifest_free", None, [c.c_void_p]),
            ("coat_manifest_check_launch", c.c_int,
             [c.c_void_p, c.c_char_p, i64p, i64p, c.c_int, c.POINTER(c.c_double),
              c.c_int] + err),
            ("coat_manifest_extent", c.c_int,
             [c.c_void_p, c.c_char_p, c.c_char_p, c.c_int64, names, i64p, c.c_int,
              i64p] + err),
            ("coat_manifest_grid", c.c_int,
             [c.c_void_p, c.c_char_p, c.c_int64, names, i64p, c.c_int, i64p] + err),
            ("coat_manifest_default_partials", c.c_int,
             [c.c_void_p, c.c_char_p, c.c_int64, c.c_int64, i64p] + err)]:
        f = getattr(lib, fn)
        f.restype, f.argtypes = restype, argtypes


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
            if lib.coat_manifest_abi_version() != ABI_VERSION:
                raise ManifestLibraryNotFound(
                    f"{cand}: ABI version {lib.coat_manifest_abi_version()}, "
                    f"expected {ABI_VERSION} (rebuild coat_manifest)")
            _declare(lib)
            _lib = lib
            return lib
    raise ManifestLibraryNotFound(
        "libcoat_manifest.so (the manifest reader) not found; build it with "
        "`ninja -C build coat_manifest` or `cmake -S lib/Runtime -B build-rt && "
        "cmake --build build-rt`, or set COAT_MANIFEST_LIB. Looked in: "
        + ", ".join(candidates))


def _names(scalars: Mapping[str, int]):
    keys = list(scalars)
    names = (ctypes.c_char_p * max(len(keys), 1))(*[k.encode() for k in keys])
    values = (ctypes.c_int64 * max(len(keys), 1))(*[int(scalars[k]) for k in keys])
    return names, values, len(keys)


class Reader:
    """One validated manifest in the C++ reader (a coat_manifest handle)."""

    def __init__(self, text: bytes):
        lib = self._lib = _library()
        self._handle = ctypes.c_void_p()
        err = ctypes.create_string_buffer(_ERRLEN)
        status = lib.coat_manifest_open(text, len(text), ctypes.byref(self._handle), err,
                                        _ERRLEN)
        if status:
            message = err.value.decode("utf-8", "replace")
            raise (ProgramManifestError if status == _ERR_PROGRAM else ManifestError)(message)

    def __del__(self):
        if getattr(self, "_handle", None):
            self._lib.coat_manifest_close(self._handle)
            self._handle = None

    def document(self) -> Mapping[str, Any]:
        """The normalized document (coat_manifest.h)."""
        return json.loads(self._lib.coat_manifest_document(self._handle).decode("utf-8"))

    def _call(self, fn, *args, error=ValueError) -> None:
        err = ctypes.create_string_buffer(_ERRLEN)
        if fn(self._handle, *args, err, _ERRLEN):
            raise error(err.value.decode("utf-8", "replace"))

    def plan(self, program: str, step: int, tokens: int,
             resident: Optional[Callable[[str], int]] = None) -> Mapping[str, Any]:
        """The plan of one call for ``tokens`` tokens (coat_manifest.h);
        ``resident(kernel name)``: the CTAs the GPU holds at once (None: the
        CPU twins)."""
        raised: List[BaseException] = []

        def ask(_ctx, name):
            try:
                return int(resident(name.decode()))
            except BaseException as e:  # reported after the call returns
                raised.append(e)
                return 0

        callback = _RESIDENT_FN(ask) if resident is not None else _RESIDENT_FN()
        out = ctypes.c_void_p()
        try:
            self._call(self._lib.coat_manifest_plan, program.encode(), step, tokens, callback,
                       None, ctypes.byref(out), error=ProgramError)
        except ProgramError:
            if raised:
                raise raised[0]
            raise
        try:
            return json.loads(ctypes.string_at(out).decode("utf-8"))
        finally:
            self._lib.coat_manifest_free(out)

    def check_launch(self, kernel: str, n: Optional[int], numels: Sequence[int],
                     scalars: List[float]) -> int:
        """Checks a launch's buffer sizes and scalars
        (coat_manifest_check_launch); returns n, taken from the buffers when
        None, and sets the scalar named n in ``scalars``."""
        c = ctypes
        nbuf, nscalar = len(numels), len(scalars)
        n_io = c.c_int64(_N_FROM_BUFFERS if n is None else n)
        sc = (c.c_double * max(nscalar, 1))(*scalars)
        self._call(self._lib.coat_manifest_check_launch, kernel.encode(), c.byref(n_io),
                   (c.c_int64 * max(nbuf, 1))(*numels), nbuf, sc, nscalar)
        scalars[:] = sc[:nscalar]
        return n_io.value

    def extent(self, kernel: str, arg: str, n: int, scalars: Mapping[str, int]) -> int:
        out = ctypes.c_int64()
        self._call(self._lib.coat_manifest_extent, kernel.encode(), arg.encode(), n,
                   *_names(scalars), ctypes.byref(out))
        return out.value

    def grid(self, kernel: str, n: int, scalars: Mapping[str, int]) -> Tuple[int, int, int]:
        out = (ctypes.c_int64 * 3)()
        self._call(self._lib.coat_manifest_grid, kernel.encode(), n, *_names(scalars), out)
        return tuple(out)

    def default_partials(self, kernel: str, rows: int, resident_blocks: int = 0) -> int:
        out = ctypes.c_int64()
        self._call(self._lib.coat_manifest_default_partials, kernel.encode(), rows,
                   resident_blocks, ctypes.byref(out))
        return out.value


def _resolve(directory: str, rel: Optional[str]) -> Optional[str]:
    if not rel:
        return None
    return rel if os.path.isabs(rel) else os.path.join(directory, rel)


def _kernel(k: Mapping[str, Any], directory: str, reader: Reader) -> KernelSpec:
    args = tuple(ArgSpec(name=a["name"], kind=a["kind"], dtype=a["dtype"], extent=a["extent"],
                         dims=tuple(a["dims"]), box=tuple(a["box"]), swizzle=a["swizzle"],
                         bind=tuple(a["bind"]), kernel=k["name"], reader=reader)
                 for a in k["args"])
    return KernelSpec(
        name=k["name"], op=k["op"], module=k["module"],
        cubin=_resolve(directory, k["cubin"]), ptx=_resolve(directory, k["ptx"]),
        cpu_object=_resolve(directory, k["cpu_object"]), cpu_symbol=k["cpu_symbol"] or None,
        config=k["config"], block=tuple(k["block"]),
        elements_per_block=k["elements_per_block"], shared_bytes=k["shared_bytes"],
        args=args, grid_tiles=tuple((name, tile) for name, tile in k["grid_tiles"]),
        persistent=k["persistent"], reader=reader)


def _manifest(text: bytes, path: str, directory: str) -> Manifest:
    reader = Reader(text)
    norm = reader.document()
    fp8: Dict[str, _dtypes.Fp8Format] = dict(_dtypes.FALLBACK_FP8)
    for name, f in norm["formats"].items():
        fp8[name] = _dtypes.Fp8Format(
            name=name, mlir_type=f["mlir_type"], exponent_bits=f["exponent_bits"],
            mantissa_bits=f["mantissa_bits"], exponent_bias=f["exponent_bias"],
            has_infinity=f["has_infinity"], max_finite=float(f["max_finite"]),
            min_normal=float(f["min_normal"]), min_subnormal=float(f["min_subnormal"]))
    kernels = tuple(_kernel(k, directory, reader) for k in norm["kernels"])
    return Manifest(path=path, directory=directory, version=norm["version"],
                    target=norm["target"], kernels=kernels, fp8=fp8,
                    programs=tuple(norm["programs"]), raw=norm, reader=reader)


def parse_manifest(doc: Any, path: str = "<memory>", directory: str = ".") -> Manifest:
    """Validates a decoded manifest document."""
    try:
        text = json.dumps(doc, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise ManifestError(f"manifest: top level: not a JSON document ({e})") from None
    return _manifest(text, path, directory)


def load_manifest(path: str) -> Manifest:
    """Reads ``path`` (a manifest.json, or a folder holding one); a manifest
    the reader refuses raises ManifestError naming the file, the entry and
    the reason."""
    if os.path.isdir(path):
        path = os.path.join(path, "manifest.json")
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError as e:
        raise ManifestError(f"cannot read manifest {path}: {e.strerror}") from None
    try:
        return _manifest(text, os.path.abspath(path), os.path.dirname(os.path.abspath(path)))
    except ManifestError as e:
        raise type(e)(f"{path}: {e}") from None

"""coat.load: kernels of a compiled module, launched by name on the GPU
(through libcoat_runtime.so, the C++ runtime) or on the CPU (through the CPU
twin's shared library), both with the launch ABI of docs/manifest.md."""

from __future__ import annotations

import ctypes
import math
import operator
import os
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _dtypes, _paths, traffic
from .compiler import (CPU_FEATURES_SYMBOL, host_cpu_features, link_cpu_object,
                       shared_library_for)
from .manifest import KernelSpec, Manifest, load_manifest

#: Scalars reach a launch as doubles (the reader and the runtime refuse
#: larger ones), so an i64 scalar arrives exactly only within +-2^53.
I64_SCALAR_LIMIT = 2 ** 53

ALIGNMENT = 16  # bytes, docs/manifest.md


# The C runtime's interface version (coat_runtime.h: COAT_RT_ABI_VERSION).
ABI_VERSION = 3


class RuntimeError_(RuntimeError):
    """A failure reported by the C++ runtime (status name + message)."""


# ---- the C++ runtime -------------------------------------------------------

class _RuntimeLib:
    """ctypes binding of coat_runtime.h (one per process)."""

    _lock = threading.Lock()
    _instance: Optional["_RuntimeLib"] = None
    ERRLEN = 4096

    def __init__(self, path: str):
        self.path = path
        lib = ctypes.CDLL(path)
        c = ctypes
        lib.coat_rt_abi_version.restype = c.c_int
        lib.coat_rt_status_name.argtypes = [c.c_int]
        lib.coat_rt_status_name.restype = c.c_char_p
        lib.coat_rt_open.argtypes = [c.c_char_p, c.POINTER(c.c_void_p), c.c_char_p, c.c_size_t]
        lib.coat_rt_prepare.argtypes = [c.c_void_p, c.c_char_p, c.POINTER(c.c_int), c.c_char_p,
                                        c.c_size_t]
        launch_args = [c.c_void_p, c.c_char_p, c.c_int64, c.POINTER(c.c_void_p), c.c_int,
                       c.POINTER(c.c_double), c.c_int]
        lib.coat_rt_launch.argtypes = launch_args + [c.c_void_p, c.c_char_p, c.c_size_t]
        lib.coat_rt_check_launch.argtypes = launch_args + [c.c_char_p, c.c_size_t]
        lib.coat_rt_bind_launch.argtypes = launch_args + [c.POINTER(c.c_void_p), c.c_char_p,
                                                          c.c_size_t]
        lib.coat_rt_launch_bound.argtypes = [c.c_void_p, c.POINTER(c.c_void_p), c.c_int,
                                             c.c_void_p, c.c_char_p, c.c_size_t]
        lib.coat_rt_free_bound.argtypes = [c.c_void_p]
        lib.coat_rt_free_bound.restype = None
        lib.coat_rt_resident_blocks.argtypes = [c.c_void_p, c.c_char_p,
                                                c.POINTER(c.c_int64), c.c_char_p, c.c_size_t]
        lib.coat_rt_num_kernels.argtypes = [c.c_void_p]
        lib.coat_rt_kernel_name.argtypes = [c.c_void_p, c.c_int]
        lib.coat_rt_kernel_name.restype = c.c_char_p
        lib.coat_rt_close.argtypes = [c.c_void_p]
        lib.coat_rt_close.restype = None
        for f in (lib.coat_rt_open, lib.coat_rt_prepare, lib.coat_rt_launch,
                  lib.coat_rt_check_launch, lib.coat_rt_num_kernels, lib.coat_rt_bind_launch,
                  lib.coat_rt_launch_bound, lib.coat_rt_resident_blocks):
            f.restype = c.c_int
        if lib.coat_rt_abi_version() != ABI_VERSION:
            raise RuntimeError_(f"{path}: runtime ABI version {lib.coat_rt_abi_version()}, "
                                f"this package speaks {ABI_VERSION}")
        self.lib = lib

    @classmethod
    def get(cls) -> "_RuntimeLib":
        with cls._lock:
            if cls._instance is None:
                errors = []
                for p in _paths.runtime_lib_candidates():
                    if not os.path.isfile(p):
                        errors.append(f"{p}: not found")
                        continue
                    try:
                        cls._instance = cls(p)
                        break
                    except OSError as e:
                        errors.append(f"{p}: {e}")
                if cls._instance is None:
                    raise RuntimeError_(
                        "cannot load libcoat_runtime.so (set COAT_RUNTIME_LIB or build it: "
                        "cmake -S lib/Runtime -B build-rt && cmake --build build-rt): "
                        + "; ".join(errors))
            return cls._instance

    def check(self, status: int, err: ctypes.Array) -> None:
        if status != 0:
            name = self.lib.coat_rt_status_name(status).decode()
            raise RuntimeError_(f"{name}: {err.value.decode(errors='replace')}")

    def open(self, manifest_path: str) -> int:
        h = ctypes.c_void_p()
        err = ctypes.create_string_buffer(self.ERRLEN)
        self.check(self.lib.coat_rt_open(manifest_path.encode(), ctypes.byref(h), err,
                                         self.ERRLEN), err)
        return h.value

    @staticmethod
    def _arrays(ptrs: Sequence[int], scalars: Sequence[float]):
        bufs = (ctypes.c_void_p * max(len(ptrs), 1))(*ptrs)
        sc = (ctypes.c_double * max(len(scalars), 1))(*scalars)
        return bufs, sc

    def launch(self, handle: int, name: str, n: int, ptrs: Sequence[int],
               scalars: Sequence[float], stream: int) -> None:
        bufs, sc = self._arrays(ptrs, scalars)
        err = ctypes.create_string_buffer(self.ERRLEN)
        self.check(self.lib.coat_rt_launch(handle, name.encode(), n, bufs, len(ptrs), sc,
                                           len(scalars), stream, err, self.ERRLEN), err)

    def check_launch(self, handle: int, name: str, n: int, ptrs: Sequence[int],
                     scalars: Sequence[float]) -> None:
        bufs, sc = self._arrays(ptrs, scalars)
        err = ctypes.create_string_buffer(self.ERRLEN)
        self.check(self.lib.coat_rt_check_launch(handle, name.encode(), n, bufs, len(ptrs), sc,
                                                 len(scalars), err, self.ERRLEN), err)

    def prepare(self, handle: int, name: str) -> bool:
        used_ptx = ctypes.c_int(0)
        err = ctypes.create_string_buffer(self.ERRLEN)
        self.check(self.lib.coat_rt_prepare(handle, name.encode(), ctypes.byref(used_ptx), err,
                                            self.ERRLEN), err)
        return bool(used_ptx.value)

    def resident_blocks(self, handle: int, name: str) -> int:
        blocks = ctypes.c_int64(0)
        err = ctypes.create_string_buffer(self.ERRLEN)
        self.check(self.lib.coat_rt_resident_blocks(handle, name.encode(), ctypes.byref(blocks),
                                                    err, self.ERRLEN), err)
        return blocks.value


# ---- argument classification ----------------------------------------------

def _is_torch(x) -> bool:
    t = type(x)
    return t.__module__.startswith("torch") and hasattr(x, "data_ptr")


def _is_numpy(x) -> bool:
    return type(x).__module__ == "numpy" and hasattr(x, "__array_interface__")


_CTYPE = {"i64": ctypes.c_int64, "i32": ctypes.c_int32, "f32": ctypes.c_float}


class _BoundLaunch:
    """A coat_rt_bound_launch, freed with its owner (a prepared launcher)."""

    def __init__(self, rt: "_RuntimeLib"):
        self.rt = rt
        self.ptr = ctypes.c_void_p()

    def __del__(self):
        if self.ptr:
            self.rt.lib.coat_rt_free_bound(self.ptr)
            self.ptr = ctypes.c_void_p()


class Kernel:
    """One kernel of a loaded module. Call :meth:`launch` with every memref
    argument (a torch tensor or numpy array) and every scalar argument of the
    manifest as keyword arguments; a scalar named ``n`` is taken from ``n``."""

    def __init__(self, module: "Module", spec: KernelSpec):
        self.module = module
        self.spec = spec
        self._cpu_fn = None

    name = property(lambda self: self.spec.name)
    config = property(lambda self: self.spec.config)

    def __repr__(self) -> str:
        return f"<coat.Kernel {self.spec.name} ({self.spec.op})>"

    # -- validation --
    def bind(self, n: Optional[int] = None, **kwargs) -> Tuple[int, str, Any, List[Any], List[Any]]:
        """Validates the arguments of a launch. Returns (n, device_kind, device,
        buffers, scalar values) with buffers and scalars in manifest order;
        ``n`` defaults to the size of the first buffer of extent n."""
        spec = self.spec
        names = {a.name for a in spec.args}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise ValueError(f"{spec.name}: unknown argument(s) {', '.join(unknown)} "
                             f"(expected: {', '.join(a.name for a in spec.args)})")
        missing = [a.name for a in spec.args if a.name not in kwargs
                   and not (a.name == "n" and not a.is_memref)]
        if missing:
            raise ValueError(f"{spec.name}: missing argument(s) {', '.join(missing)}")
        if n is not None:
            try:
                n = operator.index(n)
            except TypeError:
                raise ValueError(f"{spec.name}: n must be an integer, got {n!r}") from None
        buffers = [kwargs[a.name] for a in spec.memrefs]
        # The scalar n is the launch size (filled in by check() when inferred).
        scalars = [(n or 0) if a.name == "n" else kwargs[a.name] for a in spec.scalars]
        n, kind, device, scalars = self.check(n, buffers, scalars)
        return n, kind, device, buffers, scalars

    def check(self, n: Optional[int], buffers: Sequence[Any],
              scalars: Sequence[Any]) -> Tuple[int, str, Any, List[Any]]:
        """Checks one launch's arguments, in manifest order. What concerns
        Python objects is checked here (each buffer a contiguous torch tensor
        or writable numpy array of its argument's dtype, all on one device,
        16-byte aligned; each scalar a number); the manifest's rules (sizes,
        scalar ranges, the 2-D rules) by the C++ reader. Returns n (from the
        buffers when None), the device kind, the device and the scalars as
        their dtypes take them."""
        spec = self.spec
        kind = device = first_name = None
        numels = []
        for a, x in zip(spec.memrefs, buffers):
            k, dev, numel = _buffer(x, a, f"{spec.name}: argument '{a.name}'")
            if kind is None:
                kind, device, first_name = k, dev, a.name
            elif (k, str(dev)) != (kind, str(device)):
                raise ValueError(f"{spec.name}: argument '{a.name}': on {dev}, but "
                                 f"'{first_name}' is on {device}")
            numels.append(numel)
        values = [_scalar(a, v, f"{spec.name}: scalar argument '{a.name}' ({a.dtype})")
                  for a, v in zip(spec.scalars, scalars)]
        n = spec.reader.check_launch(spec.name, n, numels, values)
        values = [int(v) if a.dtype in ("i64", "i32") else v
                  for a, v in zip(spec.scalars, values)]
        if kind is None:
            kind, device = "cpu", "cpu"
        return n, kind, device, values

    # -- launching --
    def launch(self, n: Optional[int] = None, stream=None, **kwargs) -> None:
        """Launches over ``n`` elements (default: the size of the first memref
        with extent n). CUDA tensors go through the GPU runtime on ``stream``
        (default: torch's current stream of their device); CPU tensors and
        numpy arrays through the CPU twin, synchronously."""
        n, kind, device, buffers, scalars = self.bind(n, **kwargs)
        if traffic.active is not None:
            traffic.active.add(self.spec.name, self.spec.op,
                               *traffic.launch_cost(self.spec, buffers, scalars))
        if kind == "cuda":
            self._launch_gpu(n, device, buffers, scalars, stream)
        else:
            if stream is not None:
                raise ValueError(f"{self.spec.name}: stream= is only for CUDA tensors")
            self._launch_cpu(n, buffers, scalars)

    __call__ = launch

    def prepared(self, n: int, scalars: Sequence[Any], device_kind: str):
        """A launcher ``run(buffers, stream)`` for arguments that check() has
        checked once: the executor's cached launch plans call it with
        buffers of the same sizes, dtypes and device. On the GPU the first
        call binds the launch (coat_rt_bind_launch: the arguments checked and
        packed, the function resolved) and every call is one ctypes call that
        writes the addresses and launches (coat_rt_launch_bound)."""
        scalars = list(scalars)
        if device_kind != "cuda":
            def run_cpu(buffers, stream=None):
                self._launch_cpu(n, buffers, scalars)
            return run_cpu
        rt, handle = self.module._gpu()
        sc = (ctypes.c_double * max(len(scalars), 1))(*map(float, scalars))
        nbuf = len(self.spec.memrefs)
        ptr_array = ctypes.c_void_p * max(nbuf, 1)
        err = ctypes.create_string_buffer(rt.ERRLEN)
        launch = rt.lib.coat_rt_launch_bound
        bound = _BoundLaunch(rt)

        def run_gpu(buffers, stream):
            if len(buffers) != nbuf:
                raise RuntimeError_(f"{self.spec.name}: expected {nbuf} buffers, "
                                    f"got {len(buffers)}")
            ptrs = ptr_array(*[b.data_ptr() for b in buffers])
            if not bound.ptr:
                # Bound in the first call's context, with its buffers checked.
                rt.check(rt.lib.coat_rt_bind_launch(
                    handle, self.spec.name.encode(), n, ptrs, nbuf, sc, len(scalars),
                    ctypes.byref(bound.ptr), err, rt.ERRLEN), err)
            status = launch(bound.ptr, ptrs, nbuf, stream, err, rt.ERRLEN)
            if status:
                rt.check(status, err)
        return run_gpu

    def resident_blocks(self, device=None) -> int:
        """CTAs of this kernel that the GPU ``device`` (default: the current
        one) holds at once: one wave (coat_rt_resident_blocks)."""
        import torch

        with torch.cuda.device(device if device is not None else torch.cuda.current_device()):
            rt, handle = self.module._gpu()
            return rt.resident_blocks(handle, self.spec.name)

    def _launch_gpu(self, n, device, buffers, scalars, stream) -> None:
        import torch

        ptrs = [b.data_ptr() for b in buffers]
        with torch.cuda.device(device):
            if stream is None:
                s = torch.cuda.current_stream(device).cuda_stream
            elif isinstance(stream, int):
                s = stream
            else:
                s = stream.cuda_stream
            rt, handle = self.module._gpu()
            rt.launch(handle, self.spec.name, n, ptrs, [float(x) for x in scalars], s)

    def _cpu_function(self):
        if self._cpu_fn is None:
            lib = self.module._cpu_library(self.spec)
            try:
                fn = getattr(lib, self.spec.cpu_symbol)
            except AttributeError:
                raise RuntimeError_(f"{self.spec.name}: symbol {self.spec.cpu_symbol!r} not "
                                    f"found in {lib._name}") from None
            argtypes = []
            for a in self.spec.args:
                if a.is_memref:  # allocated, aligned, offset, size, stride
                    argtypes += [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                 ctypes.c_int64, ctypes.c_int64]
                else:
                    argtypes.append(_CTYPE[a.dtype])
            fn.argtypes = argtypes
            fn.restype = None
            self._cpu_fn = fn
        return self._cpu_fn

    def cpu_arguments(self, n: int, buffers, scalars) -> List[Any]:
        """The expanded C argument list of the CPU twin (for tests/debugging)
        of a launch over ``n`` whose arguments check() accepted: each buffer's
        size is its extent."""
        out: List[Any] = []
        bi = si = 0
        for a in self.spec.args:
            if a.is_memref:
                b = buffers[bi]
                bi += 1
                ptr, size = ((b.data_ptr(), b.numel()) if _is_torch(b)
                             else (b.ctypes.data, b.size))
                out += [ptr, ptr, 0, size, 1]
            else:
                out.append(scalars[si])
                si += 1
        return out

    def _launch_cpu(self, n, buffers, scalars) -> None:
        if n == 0:
            return
        fn = self._cpu_function()
        fn(*self.cpu_arguments(n, buffers, scalars))


def compiled_cpu_features(library: ctypes.CDLL) -> frozenset:
    """The extensions a loaded CPU-twin ``library`` was compiled for (its
    CPU_FEATURES_SYMBOL string; none where it has no such record, as
    libraries compiled before it existed: baseline code)."""
    try:
        first = ctypes.c_char.in_dll(library, CPU_FEATURES_SYMBOL)
    except ValueError:
        return frozenset()
    return frozenset((ctypes.cast(ctypes.addressof(first), ctypes.c_char_p).value or b"")
                     .decode().split())


def check_cpu_features(library: ctypes.CDLL, path: str) -> None:
    """Raises where the loaded CPU-twin ``library`` (at ``path``) was
    compiled for extensions this CPU lacks (compiler.CPU_TWIN_FEATURES),
    before any of its code runs: it would die of an illegal instruction."""
    missing = sorted(compiled_cpu_features(library) - host_cpu_features())
    if missing:
        raise RuntimeError_(f"{path}: its CPU twins were compiled for a CPU with "
                            f"{', '.join(missing)}, which this CPU lacks; compile the "
                            f"module again on this machine")


class Module:
    """A compiled module: its manifest and its kernels by name."""

    def __init__(self, manifest: Manifest):
        self.manifest = manifest
        self.kernels: Dict[str, Kernel] = {k.name: Kernel(self, k) for k in manifest.kernels}
        self._rt = None
        self._handle = None
        self._cpu_libs: Dict[str, ctypes.CDLL] = {}
        self._lock = threading.Lock()

    @property
    def directory(self) -> str:
        return self.manifest.directory

    @property
    def fp8(self):
        return self.manifest.fp8

    def __getitem__(self, name: str) -> Kernel:
        try:
            return self.kernels[name]
        except KeyError:
            raise KeyError(f"no kernel named {name!r} in {self.manifest.path} "
                           f"(it has: {', '.join(self.kernels)})") from None

    def __getattr__(self, name: str) -> Kernel:
        kernels = self.__dict__.get("kernels", {})
        if name in kernels:
            return kernels[name]
        raise AttributeError(name)

    def __repr__(self) -> str:
        return f"<coat.Module {self.manifest.path}: {', '.join(self.kernels)}>"

    def find(self, op: Optional[str] = None, **config) -> List[Kernel]:
        """Kernels whose op and config entries equal the given ones (nested
        dicts such as m={"format": "e4m3"} match on the keys given)."""
        def match(have, want):
            if isinstance(want, dict):
                return isinstance(have, dict) and all(match(have.get(k), v) for k, v in want.items())
            return have == want
        return [k for k in self.kernels.values()
                if (op is None or k.spec.op == op) and match(dict(k.spec.config), config)]

    def _gpu(self):
        with self._lock:
            if self._handle is None:
                self._rt = _RuntimeLib.get()
                self._handle = self._rt.open(self.manifest.path)
            return self._rt, self._handle

    def _cpu_library(self, spec: KernelSpec) -> ctypes.CDLL:
        if not spec.cpu_object or not spec.cpu_symbol:
            raise RuntimeError_(f"{spec.name}: the manifest names no CPU twin (cpu.object/symbol)")
        with self._lock:
            lib = self._cpu_libs.get(spec.cpu_object)
            if lib is None:
                path = shared_library_for(spec.cpu_object)
                if not os.path.isfile(path) or (os.path.isfile(spec.cpu_object) and
                                                os.path.getmtime(path) < os.path.getmtime(spec.cpu_object)):
                    path = link_cpu_object(spec.cpu_object)
                lib = ctypes.CDLL(path)
                check_cpu_features(lib, path)
                self._cpu_libs[spec.cpu_object] = lib
            return lib

    def close(self) -> None:
        if self._handle is not None and self._rt is not None:
            self._rt.lib.coat_rt_close(self._handle)
            self._handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _buffer(x, a, where: str) -> Tuple[str, Any, int]:
    """(device kind, device, elements) of one buffer argument, a contiguous
    tensor or array of its dtype whose data is aligned."""
    if _is_torch(x):
        if getattr(x, "is_sparse", False):
            raise ValueError(f"{where}: sparse tensors are not supported")
        if x.dtype not in _dtypes.torch_dtypes(a.dtype):
            raise ValueError(f"{where}: dtype {x.dtype} does not match the manifest's "
                             f"{a.dtype} (accepted: {_dtypes.torch_dtypes(a.dtype)})")
        if not x.is_contiguous():
            raise ValueError(f"{where}: tensor is not contiguous")
        k, dev, numel, ptr = ("cuda" if x.is_cuda else "cpu"), x.device, x.numel(), x.data_ptr()
    elif _is_numpy(x):
        if x.dtype not in _dtypes.numpy_dtypes(a.dtype):
            raise ValueError(f"{where}: dtype {x.dtype} does not match the manifest's "
                             f"{a.dtype} (accepted: "
                             f"{[str(d) for d in _dtypes.numpy_dtypes(a.dtype)]})")
        if not x.flags.c_contiguous:
            raise ValueError(f"{where}: array is not contiguous")
        if not x.flags.writeable:
            raise ValueError(f"{where}: array is read-only")
        k, dev, numel, ptr = "cpu", "cpu", x.size, x.ctypes.data
    else:
        raise ValueError(f"{where}: expected a torch tensor or numpy array, "
                         f"got {type(x).__name__}")
    if ptr % ALIGNMENT:
        raise ValueError(f"{where}: data pointer {ptr:#x} is not {ALIGNMENT}-byte aligned")
    return k, dev, numel


def _scalar(a, v, where: str) -> float:
    """A scalar argument as the double that carries it to the launch."""
    if _is_torch(v) or (_is_numpy(v) and getattr(v, "ndim", 0) != 0):
        raise ValueError(f"{where}: pass a Python number, not a tensor/array")
    if isinstance(v, (str, bytes)):
        raise ValueError(f"{where}: expected a number, got {v!r}")
    try:
        f = float(v)
    except OverflowError:
        f = math.copysign(math.inf, v)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: expected a number, got {v!r}") from None
    if a.dtype in ("i64", "i32") and not isinstance(v, float) and f != v:
        # A double holds integers exactly up to 2^53: the reader would check
        # a rounded value.
        raise ValueError(f"{where}: {v} out of range (an integer scalar travels as a "
                         f"double, exact within +-{I64_SCALAR_LIMIT})")
    return f


def load(path: str) -> Module:
    """Loads a compiled module from its folder (or its manifest.json)."""
    return Module(load_manifest(path))

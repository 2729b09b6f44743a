/*===- coat_runtime.h - C ABI of the COAT kernel runtime -------*- C -*-===//
//
// The host runtime loads a manifest.json written by coat-opt (see
// docs/manifest.md), loads the module's cubin (falling back to the PTX) with
// the CUDA driver API and launches kernels by name. It depends on the CUDA
// driver API only (no MLIR, no CUDA runtime API) and never aborts: every entry
// point returns a coat_rt_status and, on failure, writes a NUL-terminated
// message into the caller's `errbuf` (truncated to `errlen` bytes).
//
// Plain C so that Python can call it through ctypes.
//
//===--------------------------------------------------------------------===*/

#ifndef COAT_RUNTIME_COAT_RUNTIME_H
#define COAT_RUNTIME_COAT_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define COAT_RT_API __attribute__((visibility("default")))
#else
#define COAT_RT_API
#endif

/// Bumped whenever a signature below changes.
#define COAT_RT_ABI_VERSION 3

typedef enum coat_rt_status {
  COAT_RT_OK = 0,
  COAT_RT_ERR_INVALID_VALUE = 1, /* null handle/pointer, bad n */
  COAT_RT_ERR_IO = 2,            /* manifest or binary file unreadable */
  COAT_RT_ERR_MANIFEST = 3,      /* malformed or unsupported manifest */
  COAT_RT_ERR_NOT_FOUND = 4,     /* no kernel of that name */
  COAT_RT_ERR_ARGUMENTS = 5,     /* wrong count, null, misaligned, bad scalar */
  COAT_RT_ERR_CUDA = 6           /* a CUDA driver call failed */
} coat_rt_status;

typedef struct coat_rt_handle coat_rt_handle;

/// COAT_RT_ABI_VERSION of the loaded library.
COAT_RT_API int coat_rt_abi_version(void);

/// Short name of a status code ("COAT_RT_ERR_ARGUMENTS").
COAT_RT_API const char *coat_rt_status_name(int status);

/// Parses `manifest_path` and reads every cubin/PTX it names (paths are
/// relative to the manifest's folder). Does not touch the GPU: modules are
/// loaded into the CUDA context current at the first launch (or prepare).
COAT_RT_API int coat_rt_open(const char *manifest_path, coat_rt_handle **out_handle,
                 char *errbuf, size_t errlen);

/// Loads the module of `kernel_name` into the current CUDA context (retaining
/// device 0's primary context if none is current) and looks the kernel up.
/// `*used_ptx` (if non-null) is set to 1 when the cubin failed to load and the
/// PTX was JIT-compiled instead. Optional: launch does the same lazily.
COAT_RT_API int coat_rt_prepare(coat_rt_handle *handle, const char *kernel_name,
                    int *used_ptx, char *errbuf, size_t errlen);

/// Launches `kernel_name` over `n` elements on `stream` (a CUstream; NULL is
/// the legacy default stream). `buffers` are the device pointers of the
/// manifest's memref arguments in order (`nbuf` of them); `scalars` are the
/// values of its scalar arguments in order (`nscalar` of them, converted to
/// the manifest's i64/i32/f32; an argument named "n" must equal `n`).
/// gridDim.x = ceil(n / elements_per_block); n == 0 launches nothing.
COAT_RT_API int coat_rt_launch(coat_rt_handle *handle, const char *kernel_name, int64_t n,
                   void *const *buffers, int nbuf, const double *scalars,
                   int nscalar, void *stream, char *errbuf, size_t errlen);

/// A launch bound to its kernel, size, scalars and CUDA context, for callers
/// that repeat it with other buffers of the same sizes (an executor's launch
/// plan): each repetition is one cuLaunchKernel after writing the addresses,
/// without looking the kernel up or validating and packing the arguments.
typedef struct coat_rt_bound_launch coat_rt_bound_launch;

/// Validates and packs a launch as coat_rt_launch does (with `buffers`, which
/// it does not launch), resolves its function in the current context (loading
/// the module), and returns it in `*out` (free with coat_rt_free_bound). The
/// handle must outlive it.
COAT_RT_API int coat_rt_bind_launch(coat_rt_handle *handle, const char *kernel_name,
                        int64_t n, void *const *buffers, int nbuf,
                        const double *scalars, int nscalar,
                        coat_rt_bound_launch **out, char *errbuf, size_t errlen);

/// Launches `bound` with `buffers` (`nbuf`, as when bound) on `stream`. Each
/// address is checked (not null where the extent is not 0, 16-byte aligned);
/// tensormaps are encoded again when their address changed. Fails, launching
/// nothing, when the current context is not the one it was bound in. A bound
/// launch keeps the addresses it last wrote: one thread at a time may
/// launch it.
COAT_RT_API int coat_rt_launch_bound(coat_rt_bound_launch *bound, void *const *buffers,
                         int nbuf, void *stream, char *errbuf, size_t errlen);

COAT_RT_API void coat_rt_free_bound(coat_rt_bound_launch *bound);

/// `*out_blocks` = how many CTAs of `kernel_name` the device holds at once:
/// CTAs per multiprocessor at its block size, registers and dynamic shared
/// memory (cuOccupancyMaxActiveBlocksPerMultiprocessor), times the
/// multiprocessors. Prepares the kernel as coat_rt_prepare does. A grid of
/// this size is one wave (e.g. a norm backward's `partials`).
COAT_RT_API int coat_rt_resident_blocks(coat_rt_handle *handle,
                            const char *kernel_name, int64_t *out_blocks,
                            char *errbuf, size_t errlen);

/// Same validation and parameter packing as coat_rt_launch without any CUDA
/// call. Lets callers (and tests on machines without a GPU) check arguments.
COAT_RT_API int coat_rt_check_launch(coat_rt_handle *handle, const char *kernel_name,
                         int64_t n, void *const *buffers, int nbuf,
                         const double *scalars, int nscalar, char *errbuf,
                         size_t errlen);

/// Number of kernels in the manifest, and the name of the i-th (NULL when out
/// of range). The string lives as long as the handle.
COAT_RT_API int coat_rt_num_kernels(const coat_rt_handle *handle);
COAT_RT_API const char *coat_rt_kernel_name(const coat_rt_handle *handle, int index);

/// Unloads the modules (in the contexts they were loaded into) and frees the
/// handle. NULL is ignored.
COAT_RT_API void coat_rt_close(coat_rt_handle *handle);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* COAT_RUNTIME_COAT_RUNTIME_H */

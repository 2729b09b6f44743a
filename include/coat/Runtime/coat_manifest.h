/*===- coat_manifest.h - C ABI of the manifest reader ----------*- C -*-===//
//
// Parses and validates manifest.json text (docs/manifest.md) with the code
// the runtime uses (lib/Runtime: ManifestParse.cpp, ProgramParse.cpp), and
// answers what other languages (the Python package, through ctypes) would
// otherwise re-implement: the validated document in a normalized form, the
// launch plan of a program's call, a launch's argument checks, a buffer's
// extent and a launch's grid. libcoat_manifest.so has no CUDA dependency and is built wherever
// lib/Runtime is. Every call that can fail returns a coat_manifest_status
// and writes a NUL-terminated message into `errbuf` (truncated to `errlen`
// bytes).
//
// The normalized document (JSON, version COAT_MANIFEST_ABI_VERSION):
//   {"version": 1, "chip": "...", "features": "...", "source_key": "...",
//    "target": {...},
//    "formats": {"e4m3": {"mlir_type", "exponent_bits", "mantissa_bits",
//                         "exponent_bias", "has_infinity", "max_finite",
//                         "min_normal", "min_subnormal"}, ...},
//    "kernels": [{"name", "op", "module", "cubin", "ptx", "cpu_object",
//                 "cpu_symbol" (strings, "" when absent; paths as written),
//                 "config": {... as written},
//                 "block": [x, y, z], "elements_per_block", "shared_bytes",
//                 "group_size", "max_cols" (0 when absent),
//                 "grid_tiles": [["scalar", tile], ...], "persistent",
//                 "args": [{"name", "kind", "dtype",
//                           "extent": "n" | "groups" | "m*n" | integer | null,
//                           "dims": [name or integer, ...], "box": [...],
//                           "swizzle", "bind": ["ref", ...]}]}],
//    "programs": [{"name",
//                  "values": [{"kind": "tensor", "shape", "dtype"} |
//                             {"kind": "qtensor", "shape", "dtype", "scaling",
//                              "scale_dtype", "scale_shape"}],
//                  "inputs": [{"value", "role", "grad_of": index | null}],
//                  "steps": [{"spec", "phase" ("forward" | "recompute" |
//                             "backward"), "operands", "results",
//                             "kernels": [name, ...] (in launch order)}],
//                  "outputs": [{"value", "phase", "flagged",
//                               "grad_of": index | null,
//                               "recompute_of": index | null}],
//                  "saved": [value, ...]}]}
//
// A plan (coat_manifest_plan) for one call and token count:
//   {"allocs": [{"shape": [...], "dtype"}, ...],   result buffers to allocate
//    "scratch": [{"extent", "dtype"}, ...],        zeroed workspaces
//    "launches": [{"kernel", "n", "scalars": [every scalar argument, in order],
//                  "buffers": [source per memref/tensormap argument]}],
//    "results": [{"value", "buffers": [source] or [codes, scale]}]}
// where a source is ["value", id, "" | "codes" | "scale"] (a value the call
// reads, or a part of it), ["alloc", i] or ["scratch", i].
//
//===--------------------------------------------------------------------===*/

#ifndef COAT_RUNTIME_COAT_MANIFEST_H
#define COAT_RUNTIME_COAT_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define COAT_MANIFEST_API __attribute__((visibility("default")))
#else
#define COAT_MANIFEST_API
#endif

/// Bumped whenever a signature, the normalized document or the plan changes.
#define COAT_MANIFEST_ABI_VERSION 2

typedef enum coat_manifest_status {
  COAT_MANIFEST_OK = 0,
  COAT_MANIFEST_ERR_INVALID_VALUE = 1, /* null pointer, unknown name or step */
  COAT_MANIFEST_ERR_MANIFEST = 2,      /* malformed or unsupported document */
  COAT_MANIFEST_ERR_PROGRAM = 3,       /* its programs section, or a plan */
  COAT_MANIFEST_ERR_ARGUMENTS = 4      /* a launch's arguments */
} coat_manifest_status;

typedef struct coat_manifest coat_manifest;

COAT_MANIFEST_API int coat_manifest_abi_version(void);

/// Parses and validates `len` bytes of manifest text, programs included, into
/// `*out` (release with coat_manifest_close). Messages read "manifest:
/// <where>: <what>"; a `programs` entry that fails returns
/// COAT_MANIFEST_ERR_PROGRAM.
COAT_MANIFEST_API int coat_manifest_open(const char *text, size_t len,
                                         coat_manifest **out, char *errbuf,
                                         size_t errlen);

COAT_MANIFEST_API void coat_manifest_close(coat_manifest *m);

/// The normalized document (above), valid as long as `m`.
COAT_MANIFEST_API const char *coat_manifest_document(const coat_manifest *m);

/// How many CTAs of `kernel_name` the device holds at once (a norm
/// backward's `partials` is one wave of them); 0 or less reports a failure.
typedef int64_t (*coat_manifest_resident_fn)(void *ctx, const char *kernel_name);

/// The plan (above) of step `step` of program `program` for `tokens` tokens,
/// in `*out_plan` (release with coat_manifest_free). `resident` (with `ctx`)
/// is asked for kernels whose scalars are `free`; NULL: the CPU twins.
COAT_MANIFEST_API int coat_manifest_plan(const coat_manifest *m,
                                         const char *program, int64_t step,
                                         int64_t tokens,
                                         coat_manifest_resident_fn resident,
                                         void *ctx, char **out_plan,
                                         char *errbuf, size_t errlen);

COAT_MANIFEST_API void coat_manifest_free(char *text);

/// `*n` for coat_manifest_check_launch: take n from the buffers.
#define COAT_MANIFEST_N_FROM_BUFFERS INT64_MIN

/// Checks the rules of a launch of `kernel_name` over `*n` elements that hold
/// on any device (the CPU twins): `numels` (elements) per memref/tensormap
/// argument against its extent, `scalars` per scalar argument (both in
/// manifest order) against their dtypes and the 2-D rules. What only the GPU
/// needs (addresses, grid limits, TMA strides) coat_rt_check_launch adds.
/// With `*n` = COAT_MANIFEST_N_FROM_BUFFERS, n is the size of the first
/// buffer of extent n (else the scalar `cols`), written to `*n` and to the
/// scalar named "n", if any.
COAT_MANIFEST_API int coat_manifest_check_launch(
    const coat_manifest *m, const char *kernel_name, int64_t *n,
    const int64_t *numels, int nbuf, double *scalars, int nscalar,
    char *errbuf, size_t errlen);

/// `*out` = the elements argument `arg_name` (a memref or tensormap) of
/// `kernel_name` takes for a launch over `n`, given the integer scalars
/// `names[i]` = `values[i]` its extent names.
COAT_MANIFEST_API int coat_manifest_extent(const coat_manifest *m,
                                           const char *kernel_name,
                                           const char *arg_name, int64_t n,
                                           const char *const *names,
                                           const int64_t *values, int count,
                                           int64_t *out, char *errbuf,
                                           size_t errlen);

/// `grid` = the grid of a launch of `kernel_name` over `n` given the integer
/// scalars its launch rule names: x = ceil(n / elements_per_block), or the
/// launch.grid_tiles counts (a persistent kernel: their product along x,
/// which the runtime caps at the multiprocessor count).
COAT_MANIFEST_API int coat_manifest_grid(const coat_manifest *m,
                                         const char *kernel_name, int64_t n,
                                         const char *const *names,
                                         const int64_t *values, int count,
                                         int64_t grid[3], char *errbuf,
                                         size_t errlen);

/// `*out` = the `partials` of a norm backward over `rows` rows whose row
/// kernel `kernel_name` has `resident_blocks` CTAs resident at once (0: the
/// CPU twins' count): one wave of its row teams, in [1, rows].
COAT_MANIFEST_API int coat_manifest_default_partials(const coat_manifest *m,
                                                     const char *kernel_name,
                                                     int64_t rows,
                                                     int64_t resident_blocks,
                                                     int64_t *out, char *errbuf,
                                                     size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* COAT_RUNTIME_COAT_MANIFEST_H */

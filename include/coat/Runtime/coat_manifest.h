/*===- coat_manifest.h - C ABI of the manifest reader ----------*- C -*-===//
//
// Parses and validates manifest.json text (docs/manifest.md) with the same
// code the runtime uses (lib/Runtime/ManifestParse.cpp) and returns the
// validated document in a normalized form, so that other languages (the
// Python package, through ctypes) build their view of a manifest from it
// instead of re-implementing the rules. libcoat_manifest.so has no CUDA
// dependency and is built wherever lib/Runtime is.
//
// The normalized document (a JSON object, version COAT_MANIFEST_ABI_VERSION):
//   {"version": 1, "chip": "...", "features": "...",
//    "formats": {"e4m3": {"mlir_type", "exponent_bits", "mantissa_bits",
//                         "exponent_bias", "has_infinity", "max_finite",
//                         "min_normal", "min_subnormal"}, ...},
//    "kernels": [{"name", "op", "module", "cubin", "ptx", "cpu_object",
//                 "cpu_symbol" (strings, "" when absent; paths as written),
//                 "block": [x, y, z], "elements_per_block", "shared_bytes",
//                 "group_size", "max_cols" (0 when absent),
//                 "grid_tiles": [["scalar", tile], ...], "persistent",
//                 "args": [{"name", "kind", "dtype",
//                           "extent": "n" | "groups" | "m*n" | integer | null,
//                           "dims": [name or integer, ...], "box": [...],
//                           "swizzle", "bind": ["ref", ...]}]}]}
//
//===--------------------------------------------------------------------===*/

#ifndef COAT_RUNTIME_COAT_MANIFEST_H
#define COAT_RUNTIME_COAT_MANIFEST_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define COAT_MANIFEST_API __attribute__((visibility("default")))
#else
#define COAT_MANIFEST_API
#endif

/// Bumped whenever a signature or the normalized document changes.
#define COAT_MANIFEST_ABI_VERSION 1

COAT_MANIFEST_API int coat_manifest_abi_version(void);

/// Parses and validates `len` bytes of manifest text. Returns the normalized
/// document (NUL-terminated, to be released with coat_manifest_free), or NULL
/// with the message ("manifest: <where>: <what>") written into `errbuf`
/// (truncated to `errlen` bytes).
COAT_MANIFEST_API char *coat_manifest_normalize(const char *text, size_t len,
                                                char *errbuf, size_t errlen);

COAT_MANIFEST_API void coat_manifest_free(char *doc);

#ifdef __cplusplus
}
#endif

#endif /* COAT_RUNTIME_COAT_MANIFEST_H */

//===- Manifest.h - manifest.json model and launch-argument packing -------===//
//
// The runtime's view of docs/manifest.md: the kernels of one compiled module
// and how their arguments are laid out. No MLIR and no CUDA dependency, so it
// is unit-tested on machines without a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_RUNTIME_MANIFEST_H
#define COAT_RUNTIME_MANIFEST_H

#include "coat/Runtime/Program.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace coat::rt {

/// One entry of a kernel's "args" list.
struct ArgSpec {
  /// A tensormap is a CUtensorMap (128 bytes, passed by value) that the
  /// runtime encodes from a buffer pointer; it takes one `buffers` entry like
  /// a memref.
  enum class Kind { Memref, Scalar, TensorMap };
  /// What a memref's size parameter is: the element count n, the number of
  /// groups ceil(n / group_size), a fixed number from the manifest, or the
  /// product of named scalar arguments ("m*n").
  enum class Extent { N, Groups, Fixed, Product };

  std::string name;
  Kind kind = Kind::Memref;
  std::string dtype; ///< one of f32 bf16 f16 e4m3 e5m2 i32 i64
  Extent extent = Extent::N;
  int64_t fixedExtent = 0;
  std::vector<std::string> extentFactors; ///< Extent::Product: scalar names
  /// TensorMap: global dims, innermost first (scalar names or integers as
  /// strings), the box (innermost first) and the swizzle ("none", "32b",
  /// "64b", "128b"). The tensor is dense: stride[i] = prod(dims[0..i]) * size.
  std::vector<std::string> mapDims;
  std::vector<int64_t> mapBox;
  std::string swizzle;
  /// What the argument is in terms of the kernel-spec function it was
  /// lowered from (docs/manifest.md, "Bindings"); empty when not recorded.
  std::vector<std::string> bind;
};

/// One entry of the manifest's "kernels" list (the fields the runtime uses).
struct KernelSpec {
  std::string name;
  std::string op;
  std::string module;
  std::string cubin; ///< path relative to the manifest's folder, may be empty
  std::string ptx;   ///< idem
  std::string cpuObject;
  std::string cpuSymbol;
  std::array<unsigned, 3> block = {1, 1, 1};
  int64_t elementsPerBlock = 0;
  /// launch.grid_tiles: gridDim[i] = ceil(scalar[name_i] / tile_i); when set,
  /// elements_per_block is unused.
  std::vector<std::pair<std::string, int64_t>> gridTiles;
  /// launch.persistent: the kernel loops over its tiles, so the runtime
  /// launches min(product of grid_tiles, multiprocessors) CTAs along x.
  bool persistent = false;
  unsigned sharedBytes = 0;
  int64_t groupSize = 0; ///< config.group_size, 0 when absent
  int64_t maxCols = 0;   ///< config.max_cols (widest row), 0 when absent
  int64_t cols = 0;      ///< config.cols (the one row length), 0 when absent
  int64_t rowsPerBlock = 1; ///< config.rows_per_block (row teams of a CTA)
  std::string of;        ///< config.of: the spec whose call this kernel ends
  std::string config;    ///< the whole config object, as JSON text
  std::vector<ArgSpec> args;

  /// Arguments that take one `buffers` entry: memrefs and tensormaps.
  size_t numMemrefs() const;
  size_t numScalars() const;
};

/// One entry of the optional "formats" section: the FP8 facts of one format.
struct Fp8FormatSpec {
  std::string name; ///< "e4m3", "e5m2"
  std::string mlirType;
  int exponentBits = 0;
  int mantissaBits = 0;
  int exponentBias = 0;
  bool hasInfinity = false;
  double maxFinite = 0;
  double minNormal = 0;
  double minSubnormal = 0;
};

struct Manifest {
  int version = 0;
  std::string chip;
  std::string features;
  std::string target; ///< the whole target object, as JSON text
  std::string sourceKey; ///< what the module was compiled from, "" if unsaid
  std::vector<Fp8FormatSpec> formats; ///< in document order
  std::string directory; ///< folder the manifest was read from
  std::vector<KernelSpec> kernels;
  std::vector<Program> programs;

  const KernelSpec *find(const std::string &name) const;
  const Program *findProgram(const std::string &name) const;
};

/// Size in bytes of one element of a manifest dtype, 0 if unknown.
int dtypeSize(const std::string &dtype);

/// Parses and validates manifest text (ManifestParse.cpp). On failure returns
/// false and sets `error` to "manifest: <where>: <what>".
bool parseManifest(const std::string &text, const std::string &directory,
                   Manifest &out, std::string &error);

/// Reads and parses a manifest file.
bool loadManifest(const std::string &path, Manifest &out, std::string &error);

/// Reads a whole file into `out`.
bool readFile(const std::string &path, std::string &out, std::string &error);

/// Required alignment of every buffer (docs/manifest.md).
inline constexpr uint64_t kBufferAlignment = 16;

/// The launch parameters of one kernel call, expanded per the memref calling
/// convention: each memref becomes (allocated, aligned, 0, extent, 1).
/// `params[i]` points into `storage`, in the layout cuLaunchKernel and the CPU
/// twin expect.
/// What cuTensorMapEncodeTiled needs for one tensormap argument.
struct TensorMapRequest {
  std::string name;
  std::string dtype;
  uint64_t address = 0;
  std::vector<uint64_t> dims;    ///< innermost first
  std::vector<uint64_t> strides; ///< bytes, dims 1.. (rank - 1 entries)
  std::vector<uint32_t> box;
  std::string swizzle;
  /// What the argument is in terms of the kernel-spec function it was
  /// lowered from (docs/manifest.md, "Bindings"); empty when not recorded.
  std::vector<std::string> bind;
};
/// Storage of one encoded CUtensorMap (the driver wants 64-byte alignment).
struct alignas(64) TensorMapBytes {
  unsigned char bytes[128] = {};
};
struct PackedLaunch {
  std::vector<uint64_t> storage; ///< one 8-byte slot per scalar/memref parameter
  std::vector<TensorMapRequest> tensorMaps; ///< filled by packLaunch
  std::vector<TensorMapBytes> tensorMapStorage; ///< encoded by the runtime
  std::vector<void *> params;
  /// Per buffer (memref and tensormap arguments in manifest order): the
  /// storage slot of a memref's pointers (allocated, then aligned; its
  /// extent is 3 slots on), or -1 - the index of a tensormap.
  std::vector<long> bufferSlots;
  std::array<unsigned, 3> grid = {0, 1, 1};
  std::array<unsigned, 3> block = {1, 1, 1};
  unsigned sharedBytes = 0;
};

/// Integer scalar arguments of one launch by name.
using NamedScalars = std::vector<std::pair<std::string, int64_t>>;

/// How many elements buffer argument `arg` of `kernel` takes for a launch
/// over `n` (docs/manifest.md: a memref's extent, a tensormap's product of
/// dims). False with `error` when it needs a scalar `named` lacks.
bool argumentExtent(const KernelSpec &kernel, const ArgSpec &arg, int64_t n,
                    const NamedScalars &named, int64_t &out, std::string &error);

/// A launch's size when the caller gives none: the scalar `n`, else the size
/// of the first buffer of extent n (`numels`: per buffer argument, may be
/// null), else the scalar `cols`; -1 when none applies.
int64_t launchSize(const KernelSpec &kernel, const NamedScalars &named,
                   const int64_t *numels);

/// Converts scalar values (`double`s, in argument order) to their dtypes:
/// integers must be integral and in range (+-2^53 for i64, as doubles carry
/// them), f32 must not overflow. Fills `named` with the integers.
bool convertScalars(const KernelSpec &kernel, const double *scalars,
                    int nscalar, NamedScalars &named, std::string &error);

/// The rules between a launch's size and its scalars: `n` equals it, and
/// for 2-D kernels rows * cols = n, cols a multiple of config.group_size,
/// at most config.max_cols and equal to config.cols.
bool checkLaunchShape(const KernelSpec &kernel, int64_t n,
                      const NamedScalars &named, std::string &error);

/// The grid of a launch over `n`: ceil(n / elements_per_block) along x, or
/// with launch.grid_tiles the tile counts of the named scalars (a persistent
/// kernel: their product along x, which the runtime caps at the
/// multiprocessor count).
bool launchGrid(const KernelSpec &kernel, int64_t n, const NamedScalars &named,
                std::array<unsigned, 3> &grid, std::string &error);

/// The rules of a launch on any device: the argument counts, the scalars,
/// the shape rules and each buffer's size (`numels`, elements) against its
/// extent, for callers that know the sizes (the CPU twins, an executor's
/// first run). What only the GPU needs (addresses, grid limits, TMA strides)
/// is packLaunch's. With `inferN`, `n` is launchSize's and the scalar named
/// "n", if any, is set to it in `scalars`.
bool checkLaunch(const KernelSpec &kernel, int64_t &n, bool inferN,
                 const int64_t *numels, int nbuf, double *scalars, int nscalar,
                 std::string &error);

/// Validates a launch of `kernel` over `n` elements and packs its parameters.
/// `buffers` are the memref arguments' device addresses in manifest order,
/// `scalars` the scalar arguments' values in manifest order. On failure
/// returns false and sets `error` (naming the offending argument).
bool packLaunch(const KernelSpec &kernel, int64_t n, const uint64_t *buffers,
                int nbuf, const double *scalars, int nscalar,
                PackedLaunch &out, std::string &error);

} // namespace coat::rt

#endif // COAT_RUNTIME_MANIFEST_H

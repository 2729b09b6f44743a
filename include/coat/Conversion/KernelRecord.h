//===- KernelRecord.h - the coat.kernel manifest record of a kernel -*- C++ -*-===//
//
// Lowerings that generate kernels describe each one with a `coat.kernel`
// dictionary (docs/manifest.md); coat-export-manifest serialises it. The ABI
// argument list and the record layout are built here, once.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_CONVERSION_KERNELRECORD_H
#define COAT_CONVERSION_KERNELRECORD_H

#include "mlir/IR/BuiltinAttributes.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mlir::coat {

/// The manifest's name of an element type: f32, bf16, f16, e4m3, e5m2, i64...
std::string manifestDtype(Type t);

/// One argument of a kernel's ABI, in order.
struct AbiArg {
  std::string name;
  Type type;          ///< memref of the storage type, or the scalar type
  std::string dtype;  ///< the manifest's element type
  std::string extent; ///< "n", "groups", "1" (fixed); "" for scalars
};

/// The GPU launch rule: gridDim.x = ceil(n / elementsPerBlock), or with
/// `gridTiles` gridDim[i] = ceil(scalar_i / tile_i) (x first).
struct LaunchRule {
  int64_t blockSize;
  int64_t elementsPerBlock;
  int64_t sharedBytes = 0;
  std::vector<std::pair<std::string, int64_t>> gridTiles = {};
};

/// {name, op, config, args[, launch]} as docs/manifest.md lays it out.
DictionaryAttr buildKernelRecord(MLIRContext *ctx, StringRef name,
                                 StringRef op, ArrayRef<NamedAttribute> config,
                                 ArrayRef<AbiArg> abi,
                                 std::optional<LaunchRule> launch);

} // namespace mlir::coat

#endif // COAT_CONVERSION_KERNELRECORD_H

//===- KernelRecord.h - the coat.kernel manifest record of a kernel -*- C++ -*-===//
//
// Lowerings that generate kernels describe each one with a `coat.kernel`
// dictionary (docs/manifest.md); coat-export-manifest serialises it. The ABI
// argument list and the record layout are built here, once.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_CONVERSION_KERNELRECORD_H
#define COAT_CONVERSION_KERNELRECORD_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
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
  /// What the argument is in terms of the kernel-spec function it was
  /// lowered from (docs/manifest.md, "Bindings"): value parts for buffers,
  /// one extent expression for scalars; empty when not recorded.
  std::vector<std::string> bind = {};
};

/// Names the values of a kernel-spec function the way bindings do: `in<i>`
/// for argument i, `out<i>` for returned value i, `.codes`/`.scale` for the
/// components of a !coat.qtensor.
class SpecRefs {
public:
  explicit SpecRefs(func::FuncOp spec) : spec(spec) {}

  /// `v` (a spec argument or returned value), or its component `part`; ""
  /// for a value the spec computes and consumes itself.
  std::string ref(Value v, StringRef part = "") const;
  /// Extent expressions over the logical shape of `v`: the product of all
  /// but the innermost extent, the innermost extent, all extents.
  std::string rows(Value v) const { return "rows(" + ref(v) + ")"; }
  std::string cols(Value v) const { return "cols(" + ref(v) + ")"; }
  std::string numel(Value v) const { return "numel(" + ref(v) + ")"; }

private:
  mutable func::FuncOp spec; // op handles are not const-correct
};

/// The binding of a caller-provided workspace, and of a launch parameter the
/// caller picks (docs/manifest.md says within which range).
inline constexpr const char *kBindScratch = "scratch";
inline constexpr const char *kBindFree = "free";

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

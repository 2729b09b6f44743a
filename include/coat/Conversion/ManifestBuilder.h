//===- ManifestBuilder.h - manifest.json from kernel records ----*- C++ -*-===//
//
// What goes into manifest.json (docs/manifest.md), built in memory by the one
// pass that writes a compiled artifact (coat-compile-artifact): the
// `coat.kernel` records the lowerings attach to the kernels of each target,
// a kernel and its CPU twin in one entry, and the launch plans of the
// outlined programs, checked against those records.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_CONVERSION_MANIFESTBUILDER_H
#define COAT_CONVERSION_MANIFESTBUILDER_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/Support/JSON.h"

#include <string>

namespace mlir::coat {

class ManifestBuilder {
public:
  /// Records the GPU target the kernels were compiled for.
  void setTarget(StringRef chip, StringRef features);

  /// Adds the `coat.kernel` record of a kernel, under `section` ("gpu" or
  /// "cpu") with where its code is. A record of a kernel already added (its
  /// twin on the other target) joins that entry: objects (`config`,
  /// `launch`) merge key by key, so a fact only one target records (the
  /// GPU's launch, a norm's row prefetch) survives.
  void addKernel(DictionaryAttr record, StringRef section,
                 llvm::json::Object where);

  /// Whether any kernel was added.
  bool empty() const { return kernels.empty(); }

  /// Adds the launch plan of an outlined program (a function marked
  /// `coat.program`, docs/manifest.md "Programs"). Every call must run a
  /// kernel spec whose kernels were added, with a binding for every
  /// argument; otherwise an error at the call.
  LogicalResult addProgram(func::FuncOp program);

  /// The manifest text (keys sorted, two-space indent). `sourceKey`, when
  /// not empty, identifies what was compiled (source text, options and
  /// target) to the programs' finders.
  std::string text(StringRef sourceKey) const;

private:
  llvm::json::Object *findKernel(StringRef name);

  std::optional<llvm::json::Object> target;
  llvm::json::Array kernels;
  llvm::json::Array programs;
};

} // namespace mlir::coat

#endif // COAT_CONVERSION_MANIFESTBUILDER_H

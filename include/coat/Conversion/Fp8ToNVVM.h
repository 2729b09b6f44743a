//===- Fp8ToNVVM.h - FP8 arith conversions to NVVM --------------*- C++ -*-===//

#ifndef COAT_CONVERSION_FP8TONVVM_H
#define COAT_CONVERSION_FP8TONVVM_H

namespace mlir {
class RewritePatternSet;
namespace coat {
/// Adds the patterns of `coat-lower-fp8-to-nvvm`: `arith.truncf` to and
/// `arith.extf` from f8E4M3FN/f8E5M2 (scalars and vectors of any shape) become
/// packed NVVM cvt ops (rn, satfinite). They are plain rewrite patterns, so
/// any driver (greedy, walk, dialect conversion) can apply them.
void populateFp8ToNVVMPatterns(RewritePatternSet &patterns);
} // namespace coat
} // namespace mlir

#endif // COAT_CONVERSION_FP8TONVVM_H

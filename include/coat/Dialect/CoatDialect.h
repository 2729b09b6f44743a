//===- CoatDialect.h - The coat dialect -------------------------*- C++ -*-===//

#ifndef COAT_DIALECT_COATDIALECT_H
#define COAT_DIALECT_COATDIALECT_H

#include "coat/Numerics/Fp8.h"
#include "coat/Numerics/Layout.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "coat/Dialect/CoatDialect.h.inc"
#include "coat/Dialect/CoatEnums.h.inc"

namespace llvm {
/// Hashing for the Scaling attribute parameter.
inline ::llvm::hash_code hash_value(const ::coat::Scaling &s) {
  return ::llvm::hash_combine(static_cast<int>(s.kind), s.groupSize,
                              s.blockRows, s.blockCols);
}
} // namespace llvm
namespace coat {
using llvm::hash_value;
} // namespace coat

namespace mlir::OpTrait::coat {
/// Marks a memory-bound, deterministic op cheap enough to run twice
/// (Coat_Recomputable).
template <typename ConcreteType>
class Recomputable : public TraitBase<ConcreteType, Recomputable> {};
/// Marks an op whose kernel can write its result into the buffer of its
/// first operand when the caller gives that buffer up (Coat_InPlace).
template <typename ConcreteType>
class InPlace : public TraitBase<ConcreteType, InPlace> {};
} // namespace mlir::OpTrait::coat

#define GET_ATTRDEF_CLASSES
#include "coat/Dialect/CoatAttrs.h.inc"
#define GET_TYPEDEF_CLASSES
#include "coat/Dialect/CoatTypes.h.inc"
#define GET_OP_CLASSES
#include "coat/Dialect/CoatOps.h.inc"

namespace mlir::coat {
/// Discardable attributes of model programs, described (with their rules)
/// in the dialect's ODS description and verified by the dialect on function
/// arguments and results.
inline constexpr llvm::StringLiteral kProgramAttr = "coat.program";
inline constexpr llvm::StringLiteral kWeightAttr = "coat.weight";
inline constexpr llvm::StringLiteral kFrozenAttr = "coat.frozen";
inline constexpr llvm::StringLiteral kGradientAttr = "coat.gradient";
inline constexpr llvm::StringLiteral kGradOfAttr = "coat.grad_of";
/// On an activation argument of a program: the caller keeps the value for
/// its own backward anyway, so the program's backward may read it at no
/// cost (coat-recompute-activations derives values from it).
inline constexpr llvm::StringLiteral kKeptByCallerAttr = "coat.kept_by_caller";
/// On an argument of a kernel-spec function: the caller reads the value no
/// more after the call, so the kernel may write into its buffer.
inline constexpr llvm::StringLiteral kWritableAttr = "coat.writable";
/// On a float tensor result of a kernel-spec function: the program returns
/// it, so the kernel that writes it also writes a finiteness flag for it.
inline constexpr llvm::StringLiteral kFiniteFlagAttr = "coat.finite_flag";
/// Marks an op (or the kernel call outlined from it) that recomputes a
/// forward value for the backward: it runs in the backward although none of
/// its operands depends on a gradient (coat-recompute-activations).
///
/// On a program result (unit): the caller may drop the value after the
/// forward and ask the program for it again in the backward. On an op (or
/// call) whose value is `kRecomputeOutput`: it computes such a result again
/// for the caller, in the program's `recompute` phase.
inline constexpr llvm::StringLiteral kRecomputeAttr = "coat.recompute";
/// The value of `coat.recompute` on the ops of the `recompute` phase.
inline constexpr llvm::StringLiteral kRecomputeOutput = "output";
/// On a program result: the copy of forward result `i` that the `recompute`
/// phase computes (coat-recompute-activations appends it).
inline constexpr llvm::StringLiteral kRecomputeOfAttr = "coat.recompute_of";

/// On a program function (bool): whether `coat-recompute-activations` keeps
/// the per-tensor FP8 operands of the backward's GEMMs from the forward
/// instead of deriving them again (its `keep-gemm-operands` option gives
/// the default).
inline constexpr llvm::StringLiteral kKeepGemmOperandsAttr =
    "coat.keep_gemm_operands";

/// Whether `op` computes a result again for the caller (the `recompute`
/// phase) rather than for the program's own backward.
inline bool recomputesOutput(Operation *op) {
  auto tag = op->getAttrOfType<StringAttr>(kRecomputeAttr);
  return tag && tag.getValue() == kRecomputeOutput;
}

/// Whether `op` runs in the backward of a program whose backward values so
/// far are `backward`: it reads one of them or recomputes for the backward.
template <typename ValueSet>
bool runsInBackward(Operation *op, const ValueSet &backward) {
  return op->hasAttr(kRecomputeAttr) ||
         llvm::any_of(op->getOperands(),
                      [&](Value v) { return backward.contains(v); });
}

/// The FP8 format of an MLIR float type, or nothing if it is not one of ours.
std::optional<::coat::Fp8Format> getFp8Format(Type t);
/// The MLIR float type of an FP8 format.
FloatType getFp8Type(MLIRContext *ctx, ::coat::Fp8Format f);
/// Converts between MLIR shapes and coat layout shapes (kDynamic identical).
std::vector<int64_t> toLayoutShape(ArrayRef<int64_t> shape);
/// Checks that the scale-shape derivation of `shape` under `scaling` cannot
/// overflow int64: at most 2^48 elements and group/block sizes of at most
/// 2^32. Returns an error message, or nothing.
std::optional<std::string> verifyLayoutLimits(ArrayRef<int64_t> shape,
                                              const ::coat::Scaling &scaling);
/// The bytes a value of `type` occupies: FP8 codes plus scales (plus k and c
/// per scale when range-expanded) for a `!coat.qtensor`, elements times
/// width otherwise. Nothing for non-shaped types and for dynamic shapes,
/// unless `dynamicExtent` gives every dynamic dimension an extent.
std::optional<int64_t>
storageBytes(Type type, std::optional<int64_t> dynamicExtent = std::nullopt);
} // namespace mlir::coat

#endif // COAT_DIALECT_COATDIALECT_H

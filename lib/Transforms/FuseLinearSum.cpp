//===- FuseLinearSum.cpp - a sum of GEMM results in the last GEMM ---------===//
//
// The gate and up dgrads of a SwiGLU MLP are each written by their GEMM and
// read back by the kernel that adds them; with the first as the second
// GEMM's `addend`, the sum is written once, by the second GEMM.
//
//===----------------------------------------------------------------------===//

#include "coat/Dialect/CoatDialect.h"
#include "coat/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATFUSELINEARSUM
#include "coat/Transforms/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

/// Whether `v` is available where `op` runs: an argument of its block or a
/// value defined before it there.
bool availableAt(Value v, Operation *op) {
  if (auto arg = dyn_cast<BlockArgument>(v))
    return arg.getOwner() == op->getBlock();
  Operation *def = v.getDefiningOp();
  return def->getBlock() == op->getBlock() && def->isBeforeInBlock(op);
}

/// The GEMM whose result is `x`, read only by the sum, that can take
/// `other` as its addend; or null.
LinearOp gemmTaking(Value x, Value other) {
  auto linear = x.getDefiningOp<LinearOp>();
  if (!linear || linear.getAddend() || !x.hasOneUse() ||
      !isa<RankedTensorType>(x.getType()) || other.getType() != x.getType() ||
      !availableAt(other, linear))
    return {};
  return linear;
}

struct CoatFuseLinearSumPass
    : mlir::coat::impl::CoatFuseLinearSumBase<CoatFuseLinearSumPass> {
  void runOnOperation() override {
    SmallVector<ResidualAddGradOp> sums;
    getOperation().walk([&](ResidualAddGradOp op) { sums.push_back(op); });
    for (ResidualAddGradOp sum : sums) {
      // A quantized copy, or maxima from the producer's epilogue, would be
      // the GEMM's to write.
      if (sum.getSumQ() || llvm::any_of(sum.getSum().getUsers(), [](Operation *u) {
            auto a = dyn_cast<AbsMaxOp>(u);
            return a && a.getEpilogue();
          }))
        continue;
      if (sum.getSum().getType() != sum.getLhs().getType())
        continue;
      Value lhs = sum.getLhs(), rhs = sum.getRhs();
      // The later GEMM takes the earlier value (a + b = b + a in f32).
      LinearOp gemm = gemmTaking(rhs, lhs);
      Value addend = lhs;
      if (!gemm) {
        gemm = gemmTaking(lhs, rhs);
        addend = rhs;
      }
      if (!gemm)
        continue;
      gemm.getAddendMutable().assign(addend);
      sum.getSum().replaceAllUsesWith(gemm.getResult());
      sum.erase();
    }
  }
};

} // namespace

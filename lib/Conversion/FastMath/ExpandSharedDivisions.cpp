//===- ExpandSharedDivisions.cpp - divisions by one divisor, one reciprocal ===//
//
// Turns runs of `arith.divf` marked `coat.shared_divisor` (emitted by the
// kernel lowerings through emitSharedDivisions) into one IEEE reciprocal
// and Markstein's correction per value (divideBySharedDivisor).
//
//===----------------------------------------------------------------------===//

#include "coat/Conversion/GroupKernel.h"
#include "coat/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATEXPANDSHAREDDIVISIONS
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

/// The contract a marked division asks for; none for other ops. A mark on
/// anything but a scalar f32 `arith.divf`, or with another value, is an
/// error.
FailureOr<std::optional<DivisionUse>> contractOf(Operation *op) {
  Attribute mark = op->getDiscardableAttr(kSharedDivisorAttr);
  if (!mark)
    return std::optional<DivisionUse>();
  auto div = dyn_cast<arith::DivFOp>(op);
  if (!div || !div.getType().isF32())
    return op->emitOpError() << "carries " << kSharedDivisorAttr
                             << ", which only an f32 arith.divf may";
  if (auto contract = dyn_cast<StringAttr>(mark))
    if (std::optional<DivisionUse> use = parseDivisionUse(contract.getValue()))
      return use;
  return op->emitOpError() << kSharedDivisorAttr << " must be \""
                           << stringifyDivisionUse(DivisionUse::Exact)
                           << "\" or \""
                           << stringifyDivisionUse(DivisionUse::Fp8Codes)
                           << "\", got " << mark;
}

/// Replaces one run: its divisions share the divisor and the contract, and
/// no dividend is the quotient of another division of the run, so every
/// dividend is defined before the first.
void expandRun(ArrayRef<arith::DivFOp> run, DivisionUse use) {
  arith::DivFOp first = run.front();
  ImplicitLocOpBuilder b(first.getLoc(), first);
  F32Emitter f{b};
  SmallVector<Value> dividends;
  for (arith::DivFOp div : run)
    dividends.push_back(div.getLhs());
  SmallVector<Value> quotients =
      divideBySharedDivisor(f, dividends, first.getRhs(), use);
  for (auto [i, q] : llvm::enumerate(quotients)) {
    arith::DivFOp div = run[i];
    div.getResult().replaceAllUsesWith(q);
    div.erase();
  }
}

struct CoatExpandSharedDivisionsPass
    : mlir::coat::impl::CoatExpandSharedDivisionsBase<
          CoatExpandSharedDivisionsPass> {
  void runOnOperation() override {
    // Collect first: expanding creates blocks (scf.if) while walking.
    SmallVector<std::pair<SmallVector<arith::DivFOp>, DivisionUse>> runs;
    bool failed = false;
    getOperation()->walk([&](Block *block) {
      SmallVector<arith::DivFOp> run;
      DivisionUse use = DivisionUse::Exact;
      auto flush = [&] {
        if (!run.empty())
          runs.push_back({run, use});
        run.clear();
      };
      for (Operation &op : *block) {
        FailureOr<std::optional<DivisionUse>> checked = contractOf(&op);
        if (mlir::failed(checked)) {
          failed = true;
          continue;
        }
        std::optional<DivisionUse> c = *checked;
        auto div = dyn_cast<arith::DivFOp>(&op);
        bool continues =
            c && !run.empty() && *c == use &&
            div.getRhs() == run.front().getRhs() &&
            llvm::none_of(run, [&](arith::DivFOp d) {
              return d.getResult() == div.getLhs();
            });
        if (!continues)
          flush();
        if (!c)
          continue;
        use = *c;
        run.push_back(div);
      }
      flush();
    });
    if (failed)
      return signalPassFailure();
    for (auto &[run, use] : runs)
      expandRun(run, use);
  }
};

} // namespace

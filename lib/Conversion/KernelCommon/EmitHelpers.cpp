//===- EmitHelpers.cpp - structured control flow for kernel emitters ------===//

#include "coat/Conversion/EmitHelpers.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::coat;

void mlir::coat::setInsertionPointIn(OpBuilder &b, Block *block) {
  if (!block->empty() && block->back().hasTrait<OpTrait::IsTerminator>())
    b.setInsertionPoint(&block->back());
  else
    b.setInsertionPointToEnd(block);
}

SmallVector<Value>
mlir::coat::emitIf(ImplicitLocOpBuilder &b, Value cond, TypeRange types,
                   function_ref<SmallVector<Value>()> thenFn,
                   function_ref<SmallVector<Value>()> elseFn) {
  auto op = scf::IfOp::create(b, types, cond, /*withElseRegion=*/true);
  for (auto [region, fn] : {std::pair{&op.getThenRegion(), thenFn},
                            std::pair{&op.getElseRegion(), elseFn}}) {
    OpBuilder::InsertionGuard guard(b);
    setInsertionPointIn(b, &region->front());
    SmallVector<Value> results = fn();
    if (!types.empty())
      scf::YieldOp::create(b, results);
  }
  return SmallVector<Value>(op.getResults());
}

void mlir::coat::emitIfElse(ImplicitLocOpBuilder &b, Value cond,
                            function_ref<void()> thenFn,
                            function_ref<void()> elseFn) {
  auto op = scf::IfOp::create(b, TypeRange{}, cond, /*withElseRegion=*/true);
  OpBuilder::InsertionGuard guard(b);
  setInsertionPointIn(b, &op.getThenRegion().front());
  thenFn();
  setInsertionPointIn(b, &op.getElseRegion().front());
  elseFn();
}

void mlir::coat::emitIfThen(ImplicitLocOpBuilder &b, Value cond,
                            function_ref<void()> fn) {
  auto op = scf::IfOp::create(b, TypeRange{}, cond, /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  setInsertionPointIn(b, &op.getThenRegion().front());
  fn();
}

SmallVector<Value>
mlir::coat::emitFor(ImplicitLocOpBuilder &b, Value lb, Value ub, Value step,
                    ValueRange inits,
                    function_ref<SmallVector<Value>(Value, ValueRange)> body) {
  auto loop = scf::ForOp::create(b, lb, ub, step, inits);
  OpBuilder::InsertionGuard guard(b);
  setInsertionPointIn(b, loop.getBody());
  SmallVector<Value> results =
      body(loop.getInductionVar(), loop.getRegionIterArgs());
  if (!inits.empty())
    scf::YieldOp::create(b, results);
  return SmallVector<Value>(loop.getResults());
}

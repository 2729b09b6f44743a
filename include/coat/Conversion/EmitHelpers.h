//===- EmitHelpers.h - control flow for kernel emitters ---------*- C++ -*-===//
//
// The scf.if / scf.for shapes kernel emitters build over and over: bodies
// given as callbacks, the builder left after the op, yields added only where
// the op has results.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_CONVERSION_EMITHELPERS_H
#define COAT_CONVERSION_EMITHELPERS_H

#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace mlir::coat {

/// Moves `b` into `block`, before its terminator if it has one.
void setInsertionPointIn(OpBuilder &b, Block *block);

/// scf.if with results built by two callbacks.
SmallVector<Value> emitIf(ImplicitLocOpBuilder &b, Value cond, TypeRange types,
                          function_ref<SmallVector<Value>()> thenFn,
                          function_ref<SmallVector<Value>()> elseFn);

/// scf.if without results and with an else branch.
void emitIfElse(ImplicitLocOpBuilder &b, Value cond,
                function_ref<void()> thenFn, function_ref<void()> elseFn);

/// scf.if without results or else branch.
void emitIfThen(ImplicitLocOpBuilder &b, Value cond, function_ref<void()> fn);

/// scf.for with loop-carried values; `body` gets the induction variable and
/// the carried values and returns the next ones.
SmallVector<Value>
emitFor(ImplicitLocOpBuilder &b, Value lb, Value ub, Value step,
        ValueRange inits,
        function_ref<SmallVector<Value>(Value, ValueRange)> body);

} // namespace mlir::coat

#endif // COAT_CONVERSION_EMITHELPERS_H

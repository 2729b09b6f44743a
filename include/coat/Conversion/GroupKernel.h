//===- GroupKernel.h - shared scaffolding of grouped kernels ----*- C++ -*-===//
//
// Kernels over groups of consecutive elements (optimizer groups, activation
// groups) share one shape: a "lane" holds E consecutive elements, L lanes form
// a group, and per-group statistics combine across those L lanes. On the GPU
// a lane is a thread and lanes of a group are adjacent threads of one warp; on
// the CPU a lane is a loop iteration holding the whole group (L = 1). The
// element math is emitted once against this interface.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_CONVERSION_GROUPKERNEL_H
#define COAT_CONVERSION_GROUPKERNEL_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace mlir::coat {

enum class GroupReduceKind { MaxNum, MinNum, BitOr };

/// One lane of a grouped kernel: which elements it holds and how it reaches
/// the other lanes of its group.
struct GroupLane {
  int64_t elementsPerLane = 1; ///< E
  int64_t lanesPerGroup = 1;   ///< L (power of two, <= 32)
  int64_t groupSize = 1;       ///< G = E * L
  Value group;                 ///< index of the group
  Value laneInGroup;           ///< index in [0, L)
  Value firstElement;          ///< flat index of this lane's first element
  bool onGpu = false;

  /// Combines `v` (f32 or i32) over the lanes of the group by a butterfly of
  /// warp shuffles; every lane receives the result. Identity on the CPU.
  Value allReduce(ImplicitLocOpBuilder &b, Value v, GroupReduceKind kind) const;
};

/// Small helpers for emitting scalar f32 arithmetic. With `approx`, divisions
/// and the special functions carry `afn`, which the NVVM lowering maps to the
/// hardware approximations (ex2/lg2/rcp/sqrt .approx).
struct F32Emitter {
  ImplicitLocOpBuilder &b;
  bool approx = false;
  Value c(double v);
  Value add(Value x, Value y);
  Value sub(Value x, Value y);
  Value mul(Value x, Value y);
  Value div(Value x, Value y);
  Value fma(Value x, Value y, Value z);
  Value abs(Value x);
  Value sqrt(Value x);
  Value exp2(Value x);
  Value log2(Value x);
  Value floor(Value x);
  Value pow(Value x, Value y);
  Value copysign(Value mag, Value sign);
  Value maxnum(Value x, Value y);
  Value minnum(Value x, Value y);
  Value select(Value cond, Value x, Value y);
  Value lt(Value x, Value y);
  Value le(Value x, Value y);
  Value gt(Value x, Value y);
  Value eq(Value x, Value y);
  /// True for finite values (not NaN, not +-inf).
  Value isFinite(Value x);
};

} // namespace mlir::coat

#endif // COAT_CONVERSION_GROUPKERNEL_H

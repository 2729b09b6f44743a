//===- Norms.h - the RMSNorm/LayerNorm kernel family ------------*- C++ -*-===//
//
// Lowers kernel-spec functions holding one row-normalization op of the FP8
// precision flow (coat.rmsnorm, coat.layernorm, their _grad ops) on a 2-D
// [rows, cols] 1xG FP8 input into a GPU kernel and a CPU twin with the same
// ABI. One parameterized emitter serves all of them:
//
//  - a *team* of T threads normalizes one row; T = 32 is a row per warp, a
//    larger T a row per CTA (T = block), several teams share a CTA when T is
//    smaller than the block;
//  - thread j of a team owns the V-element chunks j, j + T, ...,
//    j + (K-1)T of its row, one per slot. With V = G (the default) a slot
//    is a whole group, so every access is one group wide (16 bytes of E4M3
//    codes for G = 16) and the group's scale, its partial maximum and the
//    masked tail (groups past cols) are per slot. With V < G the G/V
//    adjacent lanes of a group share its scale and combine its partial
//    maximum by shuffles, and a warp's access to a wide operand (f32
//    weight, bias, y) is contiguous: 16 bytes a lane for V = 4 instead of
//    16 bytes out of every 64;
//  - the K slots are unrolled and stay in registers between the statistics
//    pass and the output pass (backward: what it re-reads instead is chosen
//    per kernel, see emitBackwardRow); K = ceil(max_cols / (G*T)) bounds
//    cols;
//  - backward: sum((x [- mean]) * w*dy) is scaled by rstd once per row,
//    group sums and dweight use fused multiply-adds;
//  - row sums combine by a warp butterfly and, for T > 32, through one f32
//    per warp in workgroup memory summed in warp order, so every thread of
//    the team holds bitwise the same statistic;
//  - backward: dweight/dbias are column sums over rows. Partial p of
//    `partials` sums rows p, p + partials, ... in row order and writes one
//    f32 row of a workspace; `<name>_reduce` sums the workspace rows in a
//    fixed order. No atomics: results depend on `partials` only, not on
//    scheduling. Where the partial sums are taken is a ColumnSums choice:
//    in the row kernel (team p takes those rows), either in its registers
//    or in dynamic shared memory (each thread reads and writes only its own
//    columns' sums, so no barrier), or in a kernel of their own
//    (`<name>_columns`: a thread per group and partial re-reads x and dy).
//    The last two free the row kernel of 16 accumulators per slot and sum;
//  - backward with the sums in the row kernel, optionally (row prefetch):
//    each thread copies its slots of the team's next row into shared
//    memory (cp.async, two stages) and its scalars into registers while
//    the team works on the current row.
//
// The CPU twin runs the same math with loops (T = 1, K = groups), re-reading
// its operands instead of keeping them in registers; its per-partial sums
// follow the same row order as the GPU.
//
// What a spec means and its ABI: NormsSpec.cpp; the row and column-sum
// kernels and their CPU twins: NormsEmitter.cpp; the pass: NormsToKernels.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_LIB_CONVERSION_FLOWTOKERNELS_NORMS_H
#define COAT_LIB_CONVERSION_FLOWTOKERNELS_NORMS_H

#include "coat/Conversion/KernelDriver.h"
#include "coat/Numerics/Fp8.h"

#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <string>

namespace mlir::coat {

enum class NormKind { RMS, Layer };

/// Where a backward with dweight takes its per-partial column sums.
enum class ColumnSums {
  None,     ///< no dweight
  Fused,    ///< in the row kernel, 16 f32 registers per slot and sum
  Shared,   ///< in the row kernel, in dynamic shared memory
  Separate, ///< in `<name>_columns`, which reads x and dy again
};

/// Everything the kernel math needs, fixed per kernel-spec function.
struct NormSpec {
  NormKind kind = NormKind::RMS;
  bool backward = false;
  bool hasWeight = false;  ///< fwd: weight operand; bwd: weight and dweight
  bool hasBias = false;    ///< fwd: bias operand; bwd: dbias result
  bool epilogueMax = false;
  ::coat::Fp8Format format = ::coat::Fp8Format::E4M3;
  Type scaleType;          ///< the input's group-scale type
  int64_t groupSize = 16;  ///< G
  Type weightType;         ///< weight, bias, dweight, dbias
  Type outType;            ///< y (forward) or dx (backward)
  Type gradType;           ///< dy (backward)
  float eps = 1e-5f;
  /// coat.finite_flag results: y or dx (the row kernel), dweight, dbias (the
  /// reduction) write `finite_<name>` flags.
  bool flagOut = false, flagDweight = false, flagDbias = false;

  StringRef opName() const {
    if (kind == NormKind::RMS)
      return backward ? "rmsnorm_grad" : "rmsnorm";
    return backward ? "layernorm_grad" : "layernorm";
  }
  bool hasMean() const { return kind == NormKind::Layer; }
  /// Column sums of a backward with a weight: dweight [and dbias].
  int64_t columnSumCount() const { return hasBias ? 2 : 1; }
};

/// Values a team reduces at once (backward: two sums).
constexpr int64_t kMaxSums = 2;

/// How the GPU kernel spreads a row over threads.
struct TeamShape {
  int64_t threadsPerRow; ///< T
  int64_t slots;         ///< K chunks of laneElements per thread
  int64_t laneElements;  ///< V: elements of a slot, a divisor of G
  int64_t blockSize;     ///< threads per CTA, a multiple of T
  int64_t maxCols;       ///< the widest row: K * T * G (Shared: sumCols)
  bool stageStores = false; ///< forward y through workgroup memory per warp
  /// ColumnSums::Shared: the columns a team's sums cover (the static cols,
  /// else the max-cols bound), and how many sums (dweight [and dbias]); 0
  /// otherwise.
  int64_t sumCols = 0;
  int64_t sharedSums = 0;
  /// Row prefetch (a backward whose teams loop over rows): the bytes of x
  /// codes and of dy one thread copies per row, 0 without.
  int64_t threadCodeBytes = 0;
  int64_t threadGradBytes = 0;
  /// Stages of the row prefetch: the row in use and the next one.
  static constexpr int64_t kPrefetchStages = 2;
  bool prefetchesRows() const { return threadCodeBytes > 0; }
  /// Workgroup memory of the team sums: one f32 per warp and sum.
  int64_t teamSumFloats() const { return blockSize / 32 * kMaxSums; }
  /// Whether the row kernel's workgroup memory is dynamic: the team sums,
  /// then the teams' column sums (ColumnSums::Shared), then the prefetch
  /// stages. (All of it or none: a static buffer beside dynamic memory
  /// would share its base.)
  bool dynamicShared() const { return sharedSums > 0 || prefetchesRows(); }
  int64_t columnSumsOffset() const {
    return llvm::alignTo(teamSumFloats() * 4, 16);
  }
  int64_t columnSumsBytes() const {
    return teamsPerBlock() * sharedSums * sumCols * 4;
  }
  /// The prefetch stages: every stage's x codes, then every stage's dy.
  int64_t stagingOffset() const {
    return llvm::alignTo(columnSumsOffset() + columnSumsBytes(), 16);
  }
  int64_t stagedCodesBytes() const {
    return kPrefetchStages * blockSize * threadCodeBytes;
  }
  int64_t stagedGradsOffset() const {
    return stagingOffset() + llvm::alignTo(stagedCodesBytes(), 16);
  }
  /// The dynamic shared memory a CTA asks for (0: all static).
  int64_t sharedBytes() const {
    if (!dynamicShared())
      return 0;
    return stagedGradsOffset() + kPrefetchStages * blockSize * threadGradBytes;
  }
  int64_t teamsPerBlock() const { return blockSize / threadsPerRow; }
  int64_t warpsPerTeam() const {
    return std::max<int64_t>(threadsPerRow / 32, 1);
  }
};

/// Threads per CTA of the column-sum kernel: 32 columns x kReduceWarps warps.
constexpr int64_t kReduceWarps = 8;
/// Threads per CTA of `<name>_columns`, one group of one partial each.
constexpr int64_t kColumnsBlock = 128;
/// The most threads a row team with fused column sums has (one slot each).
constexpr int64_t kFusedColumnSumsThreads = 512;

/// A norm spec and how its GPU kernel spreads rows over threads.
struct NormPlan {
  NormSpec spec;
  TeamShape team;
  ColumnSums sums = ColumnSums::None;
  /// Whether a backward also sums dweight (and dbias) over rows:
  /// `<name>_reduce` adds up the per-partial rows of the workspace.
  bool columnSums() const { return sums != ColumnSums::None; }
  /// Whether the row kernel takes the partial sums (and `partials`).
  bool sumsInRowKernel() const {
    return sums == ColumnSums::Fused || sums == ColumnSums::Shared;
  }
  /// Column sums per group and partial: dweight [and dbias].
  int64_t sumsPerColumn() const {
    return columnSums() ? spec.columnSumCount() : 0;
  }

  /// The kernels of a spec, in the order declare() lists them.
  enum class Kernel { Row, Columns, Reduce };
  Kernel kernelAt(unsigned index) const {
    if (index == 0)
      return Kernel::Row;
    return index == 1 && sums == ColumnSums::Separate ? Kernel::Columns
                                                      : Kernel::Reduce;
  }
};

/// The kernel-lowering hooks of coat-lower-norms.
class NormsLowering : public KernelLowering<NormsLowering, NormPlan> {
public:
  NormsLowering(int64_t blockSize, int64_t threadsPerRow,
                int64_t groupsPerThread, int64_t laneElements, bool stageStores,
                int64_t maxCols, StringRef columnSums, int64_t backwardMinCtas,
                StringRef rowPrefetch)
      : KernelLowering({"coat-lower-norms", "coat_norm_kernels"}),
        blockSize(blockSize), threadsPerRow(threadsPerRow),
        groupsPerThread(groupsPerThread), laneElements(laneElements),
        stageStores(stageStores), maxCols(maxCols),
        columnSums(columnSums.str()), backwardMinCtas(backwardMinCtas),
        rowPrefetch(rowPrefetch.str()) {}

  bool isSpecOp(Operation *op) const;

  FailureOr<NormPlan> analyze(func::FuncOp fn) const;
  SpecBindings bindings(func::FuncOp fn, const NormPlan &plan) const;
  // Kernel 0 normalizes rows; a backward with dweight then has
  // `<name>_columns` (ColumnSums::Separate) and `<name>_reduce`, which adds
  // up the partial column sums. analyze, bindings, declare, record:
  // NormsSpec.cpp; emitGpu, emitCpu: NormsEmitter.cpp.
  COAT_KERNEL_LOWERING_HOOKS(NormPlan)

private:
  FailureOr<NormSpec> analyzeNorm(func::FuncOp fn, int64_t &maxColsOut) const;
  FailureOr<ColumnSums> chooseColumnSums(Operation *anchor,
                                         const NormSpec &spec,
                                         int64_t maxCols) const;
  FailureOr<TeamShape> chooseTeam(Operation *anchor, const NormSpec &spec,
                                  ColumnSums sums, int64_t maxCols) const;
  FailureOr<bool> choosePrefetch(Operation *anchor, const NormSpec &spec,
                                 ColumnSums sums) const;

  int64_t blockSize;
  int64_t threadsPerRow;
  int64_t groupsPerThread;
  int64_t laneElements;
  bool stageStores;
  int64_t maxCols;
  std::string columnSums;
  int64_t backwardMinCtas;
  std::string rowPrefetch;
};

} // namespace mlir::coat

#endif // COAT_LIB_CONVERSION_FLOWTOKERNELS_NORMS_H

//===- Gemm.h - what a coat.linear asks of its kernels ----------*- C++ -*-===//
//
// The problem description and kernel-lowering hooks shared by the GEMM's
// spec analysis and parameters (LinearSpec.cpp), its GPU kernel
// (LinearEmitter.cpp), its CPU twin (LinearCpuTwin.cpp) and the pass
// (LinearToNVGPU.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef COAT_LIB_CONVERSION_LINEARTONVGPU_GEMM_H
#define COAT_LIB_CONVERSION_LINEARTONVGPU_GEMM_H

#include "coat/Conversion/KernelDriver.h"
#include "coat/Dialect/CoatDialect.h"
#include "coat/Numerics/Fp8.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <algorithm>
#include <optional>
#include <string>

namespace mlir::coat {

/// Group size of a quantized GEMM output (COAT.md §3.1, §4.1: 1x16).
constexpr int64_t kOutputGroup = 16;
/// Side of a block-scale block (1x128 for A, 128x128 for B); on the GPU
/// equal to the K slice of one ring stage, so one stage is one scale block.
constexpr int64_t kScaleBlock = 128;

enum class OutputKind { BF16, F32, Fp8Groups };

/// How results leave the kernel (`epilogue`). FP8 codes are staged under
/// Staged and Tma alike (their group scales are stored directly; `out` stays
/// a buffer).
enum class EpilogueKind {
  Direct, ///< each thread its fragment's element pairs
  Staged, ///< a 128-byte column block at a time through shared memory,
          ///< then contiguous 16-byte stores
  Tma,    ///< the same blocks, stored by TMA from shared memory (`out` is
          ///< a tensormap; rows 16-byte aligned)
};
/// A staged epilogue block's row: the span of TMA's 128-byte swizzle.
constexpr int64_t kEpilogueBlockBytes = 128;
/// Bytes of a result element (an FP8 code is one).
inline int64_t outputElementBytes(OutputKind k) {
  switch (k) {
  case OutputKind::F32:
    return 4;
  case OutputKind::BF16:
    return 2;
  case OutputKind::Fp8Groups:
    return 1;
  }
  llvm_unreachable("unknown output kind");
}
/// Result columns of a staged epilogue block.
inline int64_t epilogueBlockCols(OutputKind k) {
  return kEpilogueBlockBytes / outputElementBytes(k);
}
constexpr EpilogueKind kEpilogueKinds[] = {
    EpilogueKind::Direct, EpilogueKind::Staged, EpilogueKind::Tma};
/// The `epilogue` option's spelling of each kind (also the manifest's).
inline StringRef epilogueName(EpilogueKind e) {
  switch (e) {
  case EpilogueKind::Direct:
    return "direct";
  case EpilogueKind::Staged:
    return "staged";
  case EpilogueKind::Tma:
    return "tma";
  }
  llvm_unreachable("epilogue kind");
}

/// A coat.rope in the epilogue (coat-fuse-rope): the values, rounded to
/// the result type as the unfused GEMM stores them, have their first
/// `rotatedHeads` heads of `headDim` columns rotated by the token's rows of
/// the `cos` and `sin` tables (`tableElem`), as coat.rope computes it.
struct FusedRope {
  int64_t headDim, rotatedHeads;
  Type tableElem;
};

/// What one coat.linear asks of the kernel.
struct GemmProblem {
  LinearKind kind;
  ::coat::Fp8Format lhs, rhs;
  OutputKind out;
  ::coat::Fp8Format outFormat = ::coat::Fp8Format::E4M3; ///< Fp8Groups codes
  Type biasElem; ///< null without a bias
  /// The element type of a result-shaped addend summed in the epilogue
  /// (coat-fuse-linear-sum), after the bias; null without one.
  Type addendElem;
  /// Element types of the operands' per-tensor scales (f32 or bf16), which
  /// the kernel reads as they are stored; block scales are always f32.
  Type lhsScale, rhsScale;
  /// DeepSeek-style scales (COAT.md §4.4): A 1x128 along K, B 128x128, f32,
  /// applied to each 128-wide K slice's partial product before it is added
  /// to the f32 accumulator.
  bool blockScaled = false;
  /// The result is `coat.finite_flag`: the epilogue flags NaN and infinities
  /// (bf16/f32 results only) in the `finite_out` argument.
  bool finiteFlag = false;
  std::optional<FusedRope> rope;
};

constexpr int64_t kTileK = 128; // 128 FP8 bytes: the 128B swizzle span
constexpr int64_t kWgmmaK = 32; // K of one FP8 wgmma
/// Registers per thread: what the producer warpgroup keeps, and the file.
constexpr int64_t kProducerRegisters = 40;
constexpr int64_t kRegisterFile = 65536;
/// ptxas (13.0) compiles each wgmma within the launch share of registers,
/// whatever setmaxnreg grants later, and asks for this many beyond its
/// accumulators (C7602 "Insufficient registers": 130 for tile-n = 208 at
/// 512 threads, 98 for tile-n = 144 at 640).
constexpr int64_t kWgmmaExtraRegisters = 26;
/// What a consumer thread keeps beside its fragments (addresses, scales,
/// indices), as the register checks estimate it.
constexpr int64_t kConsumerExtraRegisters = 24;
static_assert(kScaleBlock == kTileK, "one ring stage per K scale block");

/// The kernel's tiling and schedule (the pass options).
struct GemmShape {
  int64_t tileM, tileN, stages, warpgroups; ///< warpgroups issuing wgmma
  bool warpSpecialized;
  int64_t groupM; ///< M tiles per group of the persistent tile order
  EpilogueKind epilogue = EpilogueKind::Direct;
  /// Block-scaled: each K slice is multiplied and promoted one 64-row
  /// m-block at a time, so one partial fragment lives beside the
  /// accumulators instead of one per m-block (set where the latter do not
  /// fit the consumer's registers).
  bool promotePerMBlock = false;

  int64_t mPerWarpgroup() const { return tileM / warpgroups; }
  int64_t mBlocks() const { return mPerWarpgroup() / 64; }
  int64_t aBytes() const { return tileM * kTileK; }
  int64_t bBytes() const { return tileN * kTileK; }
  int64_t stageBytes() const { return aBytes() + bBytes(); }
  int64_t barrierOffset() const { return stages * stageBytes(); }
  bool stagesEpilogue() const { return epilogue != EpilogueKind::Direct; }
  /// Staged or TMA epilogue: each consumer warpgroup's rows x one block row
  /// after the mbarriers, 1024-byte aligned (TMA's 128-byte swizzle atom).
  int64_t epilogueOffset() const {
    return (barrierOffset() + 16 * stages + 1023) / 1024 * 1024;
  }
  int64_t epilogueBytes() const {
    return stagesEpilogue()
               ? warpgroups * mPerWarpgroup() * kEpilogueBlockBytes
               : 0;
  }
  /// Dynamic shared memory: the ring, full and empty mbarriers, the
  /// epilogue's rows if any, and 1 KiB of slack to round the base up to the
  /// 1024-byte swizzle atom.
  int64_t sharedBytes() const {
    return (stagesEpilogue() ? epilogueOffset() + epilogueBytes()
                             : barrierOffset() + 16 * stages) +
           1024;
  }
  int64_t threads() const { return 128 * (warpgroups + (warpSpecialized ? 1 : 0)); }
  /// Registers per thread at launch: the file shared by the CTA's threads
  /// in ptxas's steps of 8, at most 255.
  int64_t launchRegisters() const {
    return std::min<int64_t>(kRegisterFile / threads() / 8 * 8, 255);
  }
  /// Whether ptxas can compile a wgmma with `tileN` columns: its
  /// accumulators and kWgmmaExtraRegisters within the launch share.
  bool wgmmaFitsLaunch(int64_t n) const {
    return n / 2 + kWgmmaExtraRegisters <= launchRegisters();
  }
  /// Why ptxas cannot compile this shape's wgmma (empty: it can);
  /// `tileOption` names the option that sets its width.
  std::string wgmmaLaunchProblem(StringRef tileOption) const {
    if (wgmmaFitsLaunch(tileN))
      return {};
    return (Twine(threads()) + " threads per CTA get " +
            Twine(launchRegisters()) +
            " registers each at launch, too few for a wgmma with " +
            Twine(tileN / 2) + " accumulators (ptxas needs about " +
            Twine(kWgmmaExtraRegisters) +
            " more): use fewer warpgroups or a narrower " + tileOption)
        .str();
  }
  /// Registers per consumer thread once the producer gave its share away
  /// (setmaxnreg counts are multiples of 8 in [24, 256]); 0: leave as is
  /// (a single consumer warpgroup already gets the per-thread maximum).
  /// consumerBudget() is what a consumer thread has either way.
  int64_t consumerRegisters() const {
    if (!warpSpecialized || warpgroups < 2)
      return 0;
    int64_t r = (kRegisterFile - 128 * kProducerRegisters) / (128 * warpgroups);
    return std::min<int64_t>(r / 8 * 8, 240);
  }
  int64_t consumerBudget() const {
    int64_t r = consumerRegisters();
    return r ? r : launchRegisters();
  }
};

/// One kernel parameter: its lowered type and its manifest record. The
/// parameter list and the manifest come from this one list.
struct GemmParam {
  std::string name;
  Type type;
  Attribute record;
  /// The CPU twin's type of a tensormap (null: memref<?xi8> of its bytes).
  Type cpuType = {};
};

/// A coat.linear spec ready to lower: the problem, the kernel's tiling and
/// its parameters.
struct LinearPlan {
  LinearOp op;
  RopeOp rope; ///< rotating the result in the epilogue, or null
  GemmProblem problem;
  GemmShape shape;
  SmallVector<GemmParam> params;
};

/// The kernel-lowering hooks of coat-lower-linear (LinearSpec.cpp,
/// LinearEmitter.cpp), run by the kernel driver like every other family.
class LinearLowering : public KernelLowering<LinearLowering, LinearPlan> {
public:
  /// `options` is the tiling the pass options ask for (its epilogue is set
  /// by checkOptions from `epilogue`); `tilesGiven` whether tile-m or
  /// tile-n was set; `blockTileM` (0: tile-m) and `blockTileN` the tile of
  /// block-scaled kernels.
  LinearLowering(GemmShape options, bool tilesGiven, int64_t blockTileM,
                 int64_t blockTileN, StringRef epilogue,
                 int64_t multiprocessors)
      : KernelLowering({"coat-lower-linear", "coat_linear"}),
        options(options), tilesGiven(tilesGiven), blockTileM(blockTileM),
        blockTileN(blockTileN), epilogue(epilogue.str()),
        multiprocessors(multiprocessors) {}

  bool isSpecOp(Operation *op) const { return isa<LinearOp>(op); }
  /// Private functions are not kernel specs.
  bool takesSpec(func::FuncOp fn) const { return !fn.isPrivate(); }
  /// The tiling options every spec shares; the tile width, shared memory
  /// and registers are checked per spec (analyze): tile-n only shapes
  /// per-tensor kernels, and block-scaled ones have their own width.
  LogicalResult checkOptions(Operation *anchor);
  /// The problem the spec's coat.linear poses and the tiling that fits it;
  /// reports (on the op) what the lowering does not handle.
  FailureOr<LinearPlan> analyze(func::FuncOp fn) const;
  // analyze, checkOptions, declare, record: LinearSpec.cpp; emitGpu,
  // emitCpu: LinearEmitter.cpp.
  COAT_KERNEL_LOWERING_HOOKS(LinearPlan)

private:
  FailureOr<LinearPlan> analyzeLinear(func::FuncOp fn, LinearOp op,
                                      RopeOp rope = {}) const;
  /// The tiling of a per-tensor spec without tile options, from its static
  /// extents: 256x128 for a tall M, narrower tiles where the default's
  /// leave multiprocessors idle (a remark says so), else 128x256. With
  /// `headDim` (a fused rope), only widths that hold whole heads.
  void chooseTiles(LinearOp op, GemmShape &shape, int64_t headDim = 0) const;

  GemmShape options;
  bool tilesGiven;
  int64_t blockTileM;
  int64_t blockTileN;
  std::string epilogue; ///< the option as given
  /// Multiprocessors the persistent grid fills (tile choice).
  int64_t multiprocessors;
  /// epilogue=auto: chosen per spec (options.epilogue is not used).
  bool epilogueAuto = false;
};

/// Emits the body of the CPU twin of a GEMM kernel over its arguments `args`
/// (the GPU kernel's, by name, tensormaps as memrefs of FP8 codes): the same
/// products, scales, bias and epilogue as the kernel, one output element at
/// a time with an f32 accumulator summed in K order.
void emitGemmCpuTwin(ImplicitLocOpBuilder &b, const KernelArgs &args,
                     const GemmProblem &p);

} // namespace mlir::coat

#endif // COAT_LIB_CONVERSION_LINEARTONVGPU_GEMM_H

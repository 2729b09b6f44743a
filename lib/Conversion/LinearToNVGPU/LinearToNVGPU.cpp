//===- LinearToNVGPU.cpp - coat.linear to a Hopper TMA + wgmma kernel -----===//
//
// The coat-lower-linear pass: a kernel-spec function holding one
// per-tensor or block-scaled `coat.linear` becomes one GEMM kernel
// (LinearEmitter.cpp) or its CPU twin (LinearCpuTwin.cpp). The pass
// collects the specs and checks the tiling options once; the kernel driver
// declares, records and emits each kernel (Gemm.h).
//
//===----------------------------------------------------------------------===//

#include "Gemm.h"

#include "coat/Conversion/Passes.h"

// The dialects the pass depends on (Passes.h.inc registers them).
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATLOWERLINEAR
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

struct CoatLowerLinearPass
    : mlir::coat::impl::CoatLowerLinearBase<CoatLowerLinearPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (failed(checkSpecsAreTopLevel(
            module, "coat-lower-linear",
            [](Operation *op) { return isa<LinearOp>(op); })))
      return signalPassFailure();
    SmallVector<std::pair<func::FuncOp, LinearOp>> specs;
    bool bad = false;
    for (auto fn : module.getOps<func::FuncOp>()) {
      if (fn.isExternal() || fn.isPrivate())
        continue;
      // The lowering reads only the coat.linear and the value returned: one
      // nested in a region, or a return of anything else, would be dropped.
      LinearOp nested;
      fn.walk([&](LinearOp op) {
        if (!nested && op->getParentOp() != fn.getOperation())
          nested = op;
      });
      if (nested) {
        nested.emitOpError("coat-lower-linear: a kernel spec's coat.linear "
                           "sits directly in the function body, not in a "
                           "nested region");
        bad = true;
        continue;
      }
      auto ops = fn.getBody().getOps<LinearOp>();
      if (ops.empty())
        continue;
      if (!llvm::hasSingleElement(ops)) {
        fn.emitError("coat-lower-linear: a kernel-spec function holds one "
                     "coat.linear, this one holds several");
        bad = true;
        continue;
      }
      LinearOp op = *ops.begin();
      auto ret = dyn_cast<func::ReturnOp>(fn.getBody().back().getTerminator());
      if (!fn.getBody().hasOneBlock() || !ret ||
          ret.getOperands() != ValueRange(op.getResult())) {
        (ret ? ret.getOperation() : fn.getOperation())
            ->emitError("coat-lower-linear: a kernel-spec function returns "
                        "the result of its coat.linear and nothing else");
        bad = true;
        continue;
      }
      specs.push_back({fn, op});
    }
    if (bad)
      return signalPassFailure();
    if (specs.empty())
      return;
    GemmShape g{tileM, tileN, stages, warpgroups, warpSpecialize, groupM};
    // Options apply to every spec; report at the first one.
    auto fail = [&](const Twine &msg) {
      emitError(specs.front().first.getLoc()) << "coat-lower-linear: " << msg;
      signalPassFailure();
    };
    bool epilogueAuto = epilogue == "auto";
    const EpilogueKind *kind = llvm::find_if(
        kEpilogueKinds, [&](EpilogueKind k) { return epilogueName(k) == epilogue; });
    if (!epilogueAuto && kind == std::end(kEpilogueKinds))
      return fail("epilogue must be auto, direct, staged or tma, got '" +
                  epilogue + "'");
    if (!epilogueAuto)
      g.epilogue = *kind;
    if (g.warpgroups < 1 || g.tileM % (64 * g.warpgroups) != 0 || g.tileM > 256)
      return fail("tile-m (" + Twine(tileM) +
                  ") must be a positive multiple of 64 * "
                  "warpgroups and at most 256 (a TMA box)");
    if (blockTileM != 0 &&
        (blockTileM < 0 || blockTileM % (64 * g.warpgroups) != 0 ||
         blockTileM > 256))
      return fail("block-tile-m (" + Twine(blockTileM) +
                  ") must be 0 (tile-m) or a positive multiple of 64 * "
                  "warpgroups and at most 256 (a TMA box)");
    if (g.stages < 2)
      return fail("stages must be >= 2");
    if (g.groupM < 1)
      return fail("group-m must be >= 1");
    if (g.threads() > 1024)
      return fail(Twine(g.threads()) + " threads per CTA exceed 1024");
    // The tile width, shared memory and registers are checked per spec
    // (LinearLowering::analyze): tile-n only shapes per-tensor kernels, and
    // block-scaled ones have their own width.

    FailureOr<bool> gpu =
        parseKernelTarget(module, "coat-lower-linear", target);
    if (failed(gpu))
      return signalPassFailure();
    KernelContainer kernels(module, "coat-lower-linear", "coat_linear", *gpu);
    LinearLowering lowering(g, tileM.hasValue() || tileN.hasValue(),
                            blockTileM, blockTileN, epilogueAuto);
    for (auto [fn, op] : specs) {
      FailureOr<LinearPlan> plan = lowering.analyze(fn, op, *gpu);
      if (failed(plan))
        return signalPassFailure();
      lowering.lowerSpec(kernels, fn, *plan);
    }
    if (failed(kernels.finish()))
      return signalPassFailure();
  }
};

} // namespace

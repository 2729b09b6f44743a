//===- LinearSpec.cpp - what a coat.linear kernel spec means --------------===//
//
// Reads a coat.linear into a GemmProblem, picks the kernel's tiling, and
// declares the kernel: its parameters (tensormaps, buffers, scalars) with
// their bindings to the spec, and its manifest record.
//
//===----------------------------------------------------------------------===//

#include "Gemm.h"

#include "coat/Conversion/GroupKernel.h"

#include "mlir/Dialect/LLVMIR/LLVMTypes.h"

#include "llvm/Support/FormatVariadic.h"

#include <numeric>

using namespace mlir;
using namespace mlir::coat;

namespace {

StringRef outputDtype(const GemmProblem &p) {
  switch (p.out) {
  case OutputKind::BF16:
    return "bf16";
  case OutputKind::F32:
    return "f32";
  case OutputKind::Fp8Groups:
    return ::coat::getFp8Traits(p.outFormat).name;
  }
  llvm_unreachable("output kind");
}

/// The parameters of the GEMM lowered from `op` in the spec `fn`, each with
/// its binding to the spec (docs/manifest.md, "Bindings"). `rope`: rotating
/// the result in the epilogue (its result is what the kernel writes).
SmallVector<GemmParam> gemmParams(func::FuncOp fn, LinearOp op, RopeOp rope,
                                  const GemmProblem &p, const GemmShape &g) {
  MLIRContext *ctx = fn.getContext();
  Builder b(ctx);
  SpecRefs refs(fn);
  auto str = [&](StringRef s) { return b.getStringAttr(s); };
  auto named = [&](StringRef k, Attribute v) { return b.getNamedAttr(k, v); };
  // A value the spec computes itself has no binding (an empty list).
  auto binds = [&](Value v, StringRef part) {
    std::string r = refs.ref(v, part);
    return named("bind", r.empty() ? b.getArrayAttr({})
                                   : b.getArrayAttr({str(r)}));
  };
  auto ptr = LLVM::LLVMPointerType::get(ctx);
  auto dynMemref = [&](Type elem) {
    return MemRefType::get({ShapedType::kDynamic}, elem);
  };
  SmallVector<GemmParam> params;
  auto tensormap = [&](StringRef n, ::coat::Fp8Format f, StringRef rows,
                       int64_t boxRows, Value of) {
    params.push_back(
        {n.str(), ptr,
         b.getDictionaryAttr(
             {named("name", str(n)), named("kind", str("tensormap")),
              named("dtype", str(::coat::getFp8Traits(f).name)),
              named("dims", b.getArrayAttr({str("k"), str(rows)})),
              named("box", b.getI64ArrayAttr({kTileK, boxRows})),
              named("swizzle", str("128b")), binds(of, "codes")})});
  };
  auto memref = [&](StringRef n, Type storage, StringRef dtype,
                    Attribute extent, Value of, StringRef part = "") {
    params.push_back({n.str(), dynMemref(storage),
                      b.getDictionaryAttr({named("name", str(n)),
                                           named("kind", str("memref")),
                                           named("dtype", str(dtype)),
                                           named("extent", extent),
                                           binds(of, part)})});
  };
  auto scalar = [&](StringRef n, std::string bind) {
    SmallVector<NamedAttribute> rec = {named("name", str(n)),
                                       named("kind", str("scalar")),
                                       named("dtype", str("i64"))};
    if (bind.find("()") == std::string::npos)
      rec.push_back(named("bind", str(bind)));
    params.push_back({n.str(), b.getI64Type(), b.getDictionaryAttr(rec)});
  };
  Value lhs = op.getLhs(), rhs = op.getRhs();
  Value out = rope ? rope.getResult() : op.getResult();
  tensormap("a", p.lhs, "m", g.tileM, lhs);
  tensormap("b", p.rhs, "n", g.tileN, rhs);
  // The TMA epilogue stores 128-byte column blocks of a warpgroup's rows
  // (row-major m x n, dims innermost first); the CPU twin writes the same
  // buffer as a memref.
  auto outMap = [&](Type elem, StringRef dtype) {
    int64_t blockCols = epilogueBlockCols(p.out);
    params.push_back(
        {"out", ptr,
         b.getDictionaryAttr(
             {named("name", str("out")), named("kind", str("tensormap")),
              named("dtype", str(dtype)),
              named("dims", b.getArrayAttr({str("n"), str("m")})),
              named("box", b.getI64ArrayAttr({blockCols, g.mPerWarpgroup()})),
              named("swizzle", str("128b")), binds(out, "")}),
         dynMemref(elem)});
  };
  bool tmaOut = g.epilogue == EpilogueKind::Tma;
  switch (p.out) {
  case OutputKind::BF16:
    if (tmaOut)
      outMap(b.getBF16Type(), "bf16");
    else
      memref("out", b.getBF16Type(), "bf16", str("m*n"), out);
    break;
  case OutputKind::F32:
    if (tmaOut)
      outMap(b.getF32Type(), "f32");
    else
      memref("out", b.getF32Type(), "f32", str("m*n"), out);
    break;
  case OutputKind::Fp8Groups:
    // Codes as bytes; scales as bf16 bits: `groups` = ceil(n / 16) per row.
    memref("out", b.getI8Type(), outputDtype(p), str("m*n"), out, "codes");
    memref("out_scale", b.getI16Type(), "bf16", str("m*groups"), out, "scale");
    break;
  }
  if (p.blockScaled) {
    // Row-major [m, k_blocks] and [n_blocks, k_blocks] f32 scale matrices.
    memref("a_scale", b.getF32Type(), "f32", str("m*k_blocks"), lhs, "scale");
    memref("b_scale", b.getF32Type(), "f32", str("n_blocks*k_blocks"), rhs,
           "scale");
  } else {
    memref("a_scale", laneStorageType(p.lhsScale), manifestDtype(p.lhsScale),
           b.getI64IntegerAttr(1), lhs, "scale");
    memref("b_scale", laneStorageType(p.rhsScale), manifestDtype(p.rhsScale),
           b.getI64IntegerAttr(1), rhs, "scale");
  }
  if (p.biasElem)
    memref("bias", p.biasElem, manifestDtype(p.biasElem), str("n"),
           op.getBias());
  if (p.addendElem)
    memref("addend", p.addendElem, manifestDtype(p.addendElem), str("m*n"),
           op.getAddend());
  if (p.rope) {
    // [m, d] tables, a row per token.
    Attribute extent = str("m*" + std::to_string(p.rope->headDim));
    std::string dtype = manifestDtype(p.rope->tableElem);
    memref("cos", p.rope->tableElem, dtype, extent, rope.getCos());
    memref("sin", p.rope->tableElem, dtype, extent, rope.getSin());
  }
  if (p.finiteFlag) {
    std::string name = finiteFlagArgName("out");
    params.push_back(
        {name, dynMemref(b.getI32Type()),
         b.getDictionaryAttr(
             {named("name", str(name)), named("kind", str("memref")),
              named("dtype", str("i32")), named("extent", b.getI64IntegerAttr(1)),
              named("bind", b.getArrayAttr(
                                {str("finite(" + refs.ref(out) + ")")}))})});
  }
  // Both operands are K-major: a is M x K, b is N x K.
  scalar("m", refs.rows(lhs));
  scalar("n", refs.rows(rhs));
  scalar("k", refs.cols(lhs));
  if (p.blockScaled) {
    // ceil(n / 128) and ceil(k / 128): scalars so the runtime can size the
    // scale buffers with its product-of-scalars extents.
    std::string blk = std::to_string(kScaleBlock);
    scalar("n_blocks", "ceildiv(" + refs.rows(rhs) + "," + blk + ")");
    scalar("k_blocks", "ceildiv(" + refs.cols(lhs) + "," + blk + ")");
  }
  return params;
}

DictionaryAttr buildManifestRecord(MLIRContext *ctx, StringRef name,
                                   const GemmProblem &p, const GemmShape &g,
                                   ArrayRef<GemmParam> params) {
  Builder b(ctx);
  auto str = [&](StringRef s) { return b.getStringAttr(s); };
  auto named = [&](StringRef k, Attribute v) { return b.getNamedAttr(k, v); };
  SmallVector<NamedAttribute> config = {
      named("kind", str(stringifyLinearKind(p.kind))),
      named("a", str(::coat::getFp8Traits(p.lhs).name)),
      named("b", str(::coat::getFp8Traits(p.rhs).name)),
      named("out", str(outputDtype(p))),
      named("scaling", str(p.blockScaled ? "block" : "per_tensor")),
      named("bias", b.getBoolAttr(static_cast<bool>(p.biasElem))),
      named("tile", b.getI64ArrayAttr({g.tileM, g.tileN, kTileK})),
      named("stages", b.getI64IntegerAttr(g.stages)),
      named("warpgroups", b.getI64IntegerAttr(g.warpgroups)),
      named("warp_specialized", b.getBoolAttr(g.warpSpecialized)),
      named("epilogue", str(epilogueName(g.epilogue)))};
  if (g.warpSpecialized)
    config.push_back(named("group_m", b.getI64IntegerAttr(g.groupM)));
  if (p.blockScaled) {
    config.push_back(
        named("a_scale_block", b.getI64ArrayAttr({1, kScaleBlock})));
    config.push_back(
        named("b_scale_block", b.getI64ArrayAttr({kScaleBlock, kScaleBlock})));
    config.push_back(named(
        "promotion", str(g.promotePerMBlock ? "per_m_block" : "per_tile")));
  }
  if (p.addendElem)
    config.push_back(named("addend", b.getBoolAttr(true)));
  if (p.rope) {
    config.push_back(
        named("rope_head_dim", b.getI64IntegerAttr(p.rope->headDim)));
    config.push_back(named("rope_rotated_heads",
                           b.getI64IntegerAttr(p.rope->rotatedHeads)));
  }
  if (p.out == OutputKind::Fp8Groups) {
    config.push_back(named("group_size", b.getI64IntegerAttr(kOutputGroup)));
    config.push_back(named("out_scale", str("bf16")));
  }
  auto tile = [&](StringRef dim, int64_t size) {
    return b.getArrayAttr({str(dim), b.getI64IntegerAttr(size)});
  };
  SmallVector<NamedAttribute> launch = {
      named("block", b.getI64ArrayAttr({g.threads(), 1, 1})),
      named("shared_bytes", b.getI64IntegerAttr(g.sharedBytes()))};
  if (g.warpSpecialized) {
    // Persistent: the runtime launches min(tiles, multiprocessors) CTAs.
    launch.push_back(named("grid_tiles", b.getArrayAttr({tile("m", g.tileM),
                                                         tile("n", g.tileN)})));
    launch.push_back(named("persistent", b.getBoolAttr(true)));
  } else {
    launch.push_back(named("grid_tiles", b.getArrayAttr({tile("n", g.tileN),
                                                         tile("m", g.tileM)})));
  }
  SmallVector<Attribute> args;
  for (const GemmParam &a : params)
    args.push_back(a.record);
  return b.getDictionaryAttr(
      {named("name", str(name)), named("op", str("linear")),
       named("config", b.getDictionaryAttr(config)),
       named("launch", b.getDictionaryAttr(launch)),
       named("args", b.getArrayAttr(args))});
}

/// The GPU kernel's TMA maps take the K-major operands as byte matrices
/// whose rows are K bytes apart, which TMA needs to be a multiple of 16. The
/// runtime checks this at launch; a static K is checked here.
LogicalResult checkStaticK(LinearOp op) {
  auto lhs = cast<ShapedType>(op.getLhs().getType());
  auto rhs = cast<ShapedType>(op.getRhs().getType());
  int64_t k = ShapedType::isDynamic(lhs.getDimSize(1)) ? rhs.getDimSize(1)
                                                       : lhs.getDimSize(1);
  if (!ShapedType::isDynamic(k) && k % 16 != 0)
    return op.emitOpError("coat-lower-linear: K = ")
           << k << " is not a multiple of 16; the GPU GEMM loads the K-major "
              "FP8 operands with TMA, whose row pitch (K bytes) must be a "
              "multiple of 16 bytes";
  return success();
}

/// Reads the operand and result types of `op` into a GemmProblem, or
/// reports (on the op) what the lowering does not handle.
FailureOr<GemmProblem> analyzeProblem(LinearOp op) {
  auto lhs = dyn_cast<QTensorType>(op.getLhs().getType());
  auto rhs = dyn_cast<QTensorType>(op.getRhs().getType());
  if (!lhs || !rhs)
    return op.emitOpError(
        "coat-lower-linear needs resolved !coat.qtensor operands "
        "(run coat-mixed-granularity first)");
  bool perTensor =
      lhs.getScaling().isPerTensor() && rhs.getScaling().isPerTensor();
  bool blockScaled =
      lhs.getScalingValue() == ::coat::Scaling::perGroup(kScaleBlock) &&
      rhs.getScalingValue() ==
          ::coat::Scaling::perBlock(kScaleBlock, kScaleBlock) &&
      lhs.getScaleType().isF32() && rhs.getScaleType().isF32();
  if (!perTensor && !blockScaled)
    return op.emitOpError(
        "coat-lower-linear handles per_tensor operands and "
        "per_group<128> x per_block<128x128> ones with f32 scales");
  if (lhs.getRank() != 2 || rhs.getRank() != 2)
    return op.emitOpError("coat-lower-linear needs 2-D operands");
  GemmProblem p;
  p.blockScaled = blockScaled;
  p.lhsScale = lhs.getScaleType();
  p.rhsScale = rhs.getScaleType();
  p.kind = op.getKind();
  p.lhs = lhs.getFormat();
  p.rhs = rhs.getFormat();
  Type result = op.getResult().getType();
  if (auto t = dyn_cast<RankedTensorType>(result)) {
    p.out = t.getElementType().isF32() ? OutputKind::F32 : OutputKind::BF16;
  } else if (auto q = dyn_cast<QTensorType>(result)) {
    if (q.getScalingValue() != ::coat::Scaling::perGroup(kOutputGroup) ||
        !q.getScaleType().isBF16())
      return op.emitOpError(
                 "coat-lower-linear writes quantized results only as "
                 "per_group<16> with bf16 scales, got ")
             << q;
    p.out = OutputKind::Fp8Groups;
    p.outFormat = q.getFormat();
  } else {
    return op.emitOpError(
               "coat-lower-linear needs a ranked bf16/f32 tensor or a "
               "!coat.qtensor result, got ")
           << result;
  }
  if (Value bias = op.getBias())
    p.biasElem = cast<ShapedType>(bias.getType()).getElementType();
  if (Value addend = op.getAddend())
    p.addendElem = cast<ShapedType>(addend.getType()).getElementType();
  return p;
}

} // namespace

/// epilogue=auto, from the A/B in docs/benchmarks.md: results of a static
/// N whose rows are 16-byte aligned go out by TMA (FP8 codes, which have no
/// TMA store, are then staged like any `tma` request); block-scaled kernels
/// and any other N are staged through shared memory, which stores any N and
/// was never slower than storing the fragments directly.
static EpilogueKind chooseEpilogue(const GemmProblem &problem, LinearOp op,
                                   int64_t tileN) {
  if (problem.blockScaled)
    return EpilogueKind::Staged;
  int64_t n = cast<ShapedType>(op.getResult().getType()).getDimSize(1);
  bool alignedRows = !ShapedType::isDynamic(n) &&
                     n * outputElementBytes(problem.out) % 16 == 0;
  return alignedRows && tileN % epilogueBlockCols(problem.out) == 0
             ? EpilogueKind::Tma
             : EpilogueKind::Staged;
}

/// A tiling a per-tensor spec may get without tile options, and its
/// throughput per multiprocessor on a problem of many tiles, relative to
/// 128x256: the mean over the four many-tile shapes of bench_linear
/// --shapes wgrad on an H100 (docs/benchmarks.md, "Tiles for few output
/// tiles").
struct TileCandidate {
  int64_t tileM, tileN, warpgroups;
  double rate;
};
static constexpr TileCandidate kDefaultTiles{128, 256, 2, 1.0};
static constexpr TileCandidate kTallTiles{256, 128, 2, 1.0};
static constexpr TileCandidate kNarrowTiles[] = {{128, 192, 2, 0.948},
                                                 {128, 128, 2, 0.936},
                                                 {64, 256, 1, 0.872},
                                                 {64, 128, 1, 0.641}};
/// A narrower tiling replaces the default only where the wave estimate
/// gains at least this much: near a tie the larger tile's measured speed
/// is worth more than the model's.
static constexpr double kNarrowGain = 1.15;

/// The tiles of an M x N output in `c`'s tiling.
static int64_t tileCount(int64_t m, int64_t n, const TileCandidate &c) {
  return llvm::divideCeil(m, c.tileM) * llvm::divideCeil(n, c.tileN);
}

/// Estimated time of an M x N output in `c`'s tiles on `multiprocessors`
/// persistent CTAs: whole waves of tiles, each as long as its tile's area
/// over its rate (K cancels out).
static double waveCost(int64_t m, int64_t n, const TileCandidate &c,
                       int64_t multiprocessors) {
  int64_t waves = llvm::divideCeil(tileCount(m, n, c), multiprocessors);
  return double(waves) * double(c.tileM * c.tileN) / c.rate;
}

void LinearLowering::chooseTiles(LinearOp op, GemmShape &shape,
                                 int64_t headDim) const {
  // Only with the default warpgroups: the candidates set their own.
  if (options.warpgroups != kDefaultTiles.warpgroups)
    return;
  auto lhs = cast<ShapedType>(op.getLhs().getType()).getShape();
  auto rhs = cast<ShapedType>(op.getRhs().getType()).getShape();
  // Tall problems (M >= 8192) ran fastest with 256x128 tiles on the H200,
  // smaller ones with 128x256 (docs/benchmarks.md, FP8 GEMM).
  bool tall = !ShapedType::isDynamic(lhs[0]) && lhs[0] >= 8192;
  const TileCandidate &base = tall ? kTallTiles : kDefaultTiles;
  TileCandidate best = base;
  // With M and N both static (a weight gradient: M x N is the weight, the
  // tokens are K) the tile count is known. Where the default's tiles leave
  // multiprocessors idle, narrower tiles fill them.
  if (!ShapedType::isDynamic(lhs[0]) && !ShapedType::isDynamic(rhs[0])) {
    int64_t m = lhs[0], n = rhs[0];
    double baseCost = waveCost(m, n, base, multiprocessors);
    double bestCost = baseCost / kNarrowGain;
    for (const TileCandidate &c : kNarrowTiles) {
      if (headDim && c.tileN % headDim != 0)
        continue;
      double cost = waveCost(m, n, c, multiprocessors);
      if (cost < bestCost) {
        best = c;
        bestCost = cost;
      }
    }
    // The CPU twin records the same tiles (one kernel, two targets) but
    // says nothing about them.
    if (onGpu() && (best.tileM != base.tileM || best.tileN != base.tileN))
      op.emitRemark("coat-lower-linear: ")
          << best.tileM << "x" << best.tileN << " tiles: " << m << " x " << n
          << " makes " << tileCount(m, n, best) << " of them for " << multiprocessors
          << " multiprocessors, " << tileCount(m, n, base) << " of " << base.tileM
          << "x" << base.tileN << " (estimated "
          << llvm::formatv("{0:F2}", baseCost / bestCost).str() << "x faster)";
  }
  shape.tileM = best.tileM;
  shape.tileN = best.tileN;
  shape.warpgroups = best.warpgroups;
}

LogicalResult LinearLowering::checkOptions(Operation *anchor) {
  auto fail = [&](const Twine &msg) {
    return anchor->emitError("coat-lower-linear: ") << msg;
  };
  epilogueAuto = epilogue == "auto";
  const EpilogueKind *kind = llvm::find_if(kEpilogueKinds, [&](EpilogueKind k) {
    return epilogueName(k) == epilogue;
  });
  if (!epilogueAuto && kind == std::end(kEpilogueKinds))
    return fail("epilogue must be auto, direct, staged or tma, got '" +
                epilogue + "'");
  if (!epilogueAuto)
    options.epilogue = *kind;
  const GemmShape &g = options;
  if (g.warpgroups < 1 || g.tileM % (64 * g.warpgroups) != 0 || g.tileM > 256)
    return fail("tile-m (" + Twine(g.tileM) +
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
  if (multiprocessors < 1)
    return fail("multiprocessors must be >= 1");
  if (g.groupM < 1)
    return fail("group-m must be >= 1");
  if (g.threads() > 1024)
    return fail(Twine(g.threads()) + " threads per CTA exceed 1024");
  return success();
}

FailureOr<LinearPlan> LinearLowering::analyze(func::FuncOp fn) const {
  // The lowering reads only the coat.linear and the value returned: one
  // nested in a region, or a return of anything else, would be dropped.
  LinearOp nested;
  fn.walk([&](LinearOp op) {
    if (!nested && op->getParentOp() != fn.getOperation())
      nested = op;
  });
  if (nested)
    return nested.emitOpError("coat-lower-linear: a kernel spec's "
                              "coat.linear sits directly in the function "
                              "body, not in a nested region");
  auto ops = fn.getBody().getOps<LinearOp>();
  if (!llvm::hasSingleElement(ops))
    return fn.emitError("coat-lower-linear: a kernel-spec function holds one "
                        "coat.linear, this one holds several");
  LinearOp op = *ops.begin();
  // An `epilogue` coat.rope of the result (coat-fuse-rope) is the kernel's.
  RopeOp rope;
  for (Operation *user : op.getResult().getUsers())
    if (auto r = dyn_cast<RopeOp>(user); r && r.getEpilogue())
      rope = r;
  Value written = rope ? rope.getResult() : op.getResult();
  auto ret = dyn_cast<func::ReturnOp>(fn.getBody().back().getTerminator());
  if (!fn.getBody().hasOneBlock() || !ret ||
      ret.getOperands() != ValueRange(written))
    return (ret ? ret.getOperation() : fn.getOperation())
        ->emitError("coat-lower-linear: a kernel-spec function returns the "
                    "result of its coat.linear (or of the coat.rope in its "
                    "epilogue) and nothing else");
  return analyzeLinear(fn, op, rope);
}

FailureOr<LinearPlan> LinearLowering::analyzeLinear(func::FuncOp fn,
                                                    LinearOp op,
                                                    RopeOp rope) const {
  FailureOr<GemmProblem> problem = analyzeProblem(op);
  if (failed(problem))
    return failure();
  if (rope) {
    if (problem->out == OutputKind::Fp8Groups)
      return rope.emitOpError("coat-lower-linear: an epilogue rope needs a "
                              "bf16/f32 GEMM result");
    problem->rope = FusedRope{
        rope.getHeadDim(), static_cast<int64_t>(rope.getRotatedHeads()),
        cast<ShapedType>(rope.getCos().getType()).getElementType()};
  }
  problem->finiteFlag = problem->out != OutputKind::Fp8Groups &&
                        fn.getResultAttr(0, kFiniteFlagAttr);
  if (onGpu() && failed(checkStaticK(op)))
    return failure();
  GemmShape shape = options;
  int64_t headDim = problem->rope ? problem->rope->headDim : 0;
  if (!tilesGiven && !problem->blockScaled)
    chooseTiles(op, shape, headDim);
  // Block-scaled kernels have their own tile width (and height, if given).
  StringRef widthOption = problem->blockScaled ? "block-tile-n" : "tile-n";
  if (problem->blockScaled) {
    if (blockTileM)
      shape.tileM = blockTileM;
    shape.tileN = blockTileN;
  }
  if (epilogueAuto)
    shape.epilogue = chooseEpilogue(*problem, op, shape.tileN);
  // FP8 codes have no TMA store (their scales are a second output): they
  // are staged and stored by the threads.
  if (problem->out == OutputKind::Fp8Groups &&
      shape.epilogue == EpilogueKind::Tma)
    shape.epilogue = EpilogueKind::Staged;
  if (shape.tileN % 16 != 0 || shape.tileN < 16 || shape.tileN > 256)
    return op.emitOpError("coat-lower-linear: ")
           << widthOption << " (" << shape.tileN
           << ") must be a multiple of 16 in [16, 256] (wgmma N, whole "
              "1x16 output groups)";
  // A block-scaled tile may span at most two 128-column weight blocks:
  // starting at a multiple of gcd(tile-n, 128) inside one, it must end in
  // the next.
  if (problem->blockScaled &&
      shape.tileN > kScaleBlock + std::gcd(shape.tileN, kScaleBlock))
    return op.emitOpError("coat-lower-linear: block-tile-n (")
           << shape.tileN
           << ") must be a multiple of 16 whose tiles span at most two "
              "128-column weight blocks (<= 128 + gcd(block-tile-n, 128))";
  if (std::string why = shape.wgmmaLaunchProblem(widthOption); !why.empty())
    return op.emitOpError("coat-lower-linear: ") << why;
  if (!problem->blockScaled) {
    int64_t accumulators = shape.tileN / 2 * shape.mBlocks();
    if (shape.consumerRegisters() &&
        shape.consumerRegisters() < accumulators + kConsumerExtraRegisters)
      return op.emitOpError("coat-lower-linear: warpgroups = ")
             << shape.warpgroups << " leaves " << shape.consumerRegisters()
             << " registers per consumer thread, too few for "
             << accumulators << " accumulators";
  } else {
    // The slice's partial product doubles the accumulators. Accumulators
    // and partial fragments (tile-n / 2 f32 registers per m-block each)
    // plus kConsumerExtraRegisters: a partial per m-block where they fit,
    // else one, promoted m-block by m-block. Only warp-specialized kernels
    // promote per m-block: with the plain schedule's refills in the loop
    // ptxas spilled accumulators (332 bytes at 128x128 on one warpgroup).
    int64_t regs = shape.consumerBudget();
    int64_t fragment = shape.tileN / 2, accumulators = fragment * shape.mBlocks();
    shape.promotePerMBlock = regs < 2 * accumulators + kConsumerExtraRegisters;
    int64_t partials = shape.warpSpecialized ? fragment : accumulators;
    if (regs < accumulators + partials + kConsumerExtraRegisters)
      return op.emitOpError(
                 "coat-lower-linear: a block-scaled kernel with tile-m = ")
             << shape.tileM << ", tile-n = " << shape.tileN
             << ", warpgroups = " << shape.warpgroups << " has " << regs
             << " registers per consumer thread, too few for " << accumulators
             << " accumulators and " << partials << " partial sums"
             << (shape.warpSpecialized ? ""
                                       : " (without warp specialization, one "
                                         "partial per m-block)");
  }
  // A TMA store writes whole 128-byte boxes: a narrower last block would
  // write into the next tile's columns.
  int64_t blockCols = epilogueBlockCols(problem->out);
  if (shape.epilogue == EpilogueKind::Tma && shape.tileN % blockCols != 0)
    return op.emitOpError("coat-lower-linear: epilogue=tma stores 128-byte "
                          "column blocks (")
           << blockCols << " " << outputDtype(*problem)
           << " columns): tile-n = " << shape.tileN << " is not a multiple";
  // epilogue=auto prefers a staged block, but not at the price of the ring:
  // where the block does not fit beside the stages, fragments are stored
  // directly.
  if (epilogueAuto && shape.sharedBytes() > kSharedBytesPerBlock)
    shape.epilogue = EpilogueKind::Direct;
  if (shape.sharedBytes() > kSharedBytesPerBlock)
    return op.emitOpError("coat-lower-linear: ")
           << shape.tileM << "x" << shape.tileN << " tiles with "
           << shape.stages << " stages"
           << (shape.stagesEpilogue() ? " and the " +
                                            epilogueName(shape.epilogue).str() +
                                            " epilogue"
                                      : "")
           << " need " << shape.sharedBytes()
           << " bytes of shared memory, more than Hopper's 227 KiB per block";
  // Each thread rotates the heads of its own fragment: a tile must hold
  // whole heads (both halves of each).
  if (headDim && headDim % 16 != 0)
    return rope.emitOpError("coat-lower-linear: head_dim (")
           << headDim
           << ") must be a multiple of 16 for the rope in the GEMM's "
              "epilogue (a head's halves in whole 8-column chunks)";
  if (headDim && shape.tileN % headDim != 0)
    return rope.emitOpError("coat-lower-linear: ")
           << widthOption << " (" << shape.tileN
           << ") must be a multiple of head_dim (" << headDim
           << ") for the rope in the GEMM's epilogue";
  return LinearPlan{op, rope, *problem, shape,
                    gemmParams(fn, op, rope, *problem, shape)};
}

SmallVector<KernelDecl> LinearLowering::declare(func::FuncOp fn,
                                                const LinearPlan &plan) const {
  // The CPU twin takes the tensormaps' buffers as memrefs: the operands'
  // codes as bytes, a TMA-stored `out` with its element type.
  Builder mb(fn.getContext());
  KernelDecl kernel{fn.getSymName().str(), {}, plan.shape.threads(), {}};
  for (const GemmParam &a : plan.params) {
    bool tensormap =
        cast<DictionaryAttr>(a.record).getAs<StringAttr>("kind") == "tensormap";
    Type type = a.type;
    if (tensormap && !onGpu())
      type = a.cpuType ? a.cpuType
                       : MemRefType::get({ShapedType::kDynamic}, mb.getI8Type());
    kernel.abi.push_back({a.name, type, "", ""});
  }
  return {kernel};
}

DictionaryAttr LinearLowering::record(const LinearPlan &plan,
                                      const KernelDecl &decl, unsigned) const {
  MLIRContext *ctx = plan.op->getContext();
  DictionaryAttr record = buildManifestRecord(ctx, decl.name, plan.problem,
                                              plan.shape, plan.params);
  if (onGpu())
    return record;
  // The CPU twin keeps the kernel's record (tiles and all, so a module
  // compiled for both targets describes one kernel) without a launch rule.
  SmallVector<NamedAttribute> entries;
  for (NamedAttribute e : record)
    if (e.getName() != "launch")
      entries.push_back(e);
  return DictionaryAttr::get(ctx, entries);
}

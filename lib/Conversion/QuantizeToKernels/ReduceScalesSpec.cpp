//===- ReduceScalesSpec.cpp - what a scale-kernel spec means --------------===//
//
// Checks a kernel-spec function holding one `coat.reduce_scales` followed by
// rank-0 arithmetic, and declares its kernel: the ABI, bound to the spec,
// and the manifest record.
//
//===----------------------------------------------------------------------===//

#include "ReduceScales.h"

#include "coat/Conversion/GroupKernel.h"
#include "coat/Dialect/CoatDialect.h"
#include "coat/Numerics/Fp8.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"

using namespace mlir;
using namespace mlir::coat;

namespace {

/// The splat f32 value of a rank-0 constant, if `v` is one.
std::optional<float> splatConstant(Value v) {
  auto c = v.getDefiningOp<arith::ConstantOp>();
  auto dense = c ? dyn_cast<DenseElementsAttr>(c.getValue()) : nullptr;
  if (!dense || !dense.isSplat() || !dense.getElementType().isF32())
    return std::nullopt;
  return dense.getSplatValue<APFloat>().convertToFloat();
}

/// Matches `returned = [truncf]((max + eps) / fp8max)`.
std::optional<std::pair<float, float>> matchScaleDerivation(Value max,
                                                            Value returned) {
  if (auto t = returned.getDefiningOp<arith::TruncFOp>())
    returned = t.getIn();
  auto div = returned.getDefiningOp<arith::DivFOp>();
  auto add = div ? div.getLhs().getDefiningOp<arith::AddFOp>() : nullptr;
  if (!add || add.getLhs() != max)
    return std::nullopt;
  std::optional<float> eps = splatConstant(add.getRhs());
  std::optional<float> fp8max = splatConstant(div.getRhs());
  if (!eps || !fp8max)
    return std::nullopt;
  return std::make_pair(*eps, *fp8max);
}

} // namespace

FailureOr<ScaleSpec> ReduceScalesLowering::analyze(func::FuncOp fn) const {
  Block &body = fn.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  ScaleSpec spec;
  for (Operation &op : body.without_terminator()) {
    if (auto parts = dyn_cast<DisassembleOp>(op)) {
      // The group scales of a quantized argument (and nothing else of it).
      auto type = cast<QTensorType>(parts.getInput().getType());
      if (spec.groupScalesOf || !isa<BlockArgument>(parts.getInput()) ||
          type.getExpanded() ||
          type.getScalingValue().kind != ::coat::ScalingKind::PerGroup ||
          !parts.getData().use_empty())
        return parts.emitError("a scale kernel may only read the group "
                               "scales of one per_group function argument");
      spec.groupScalesOf = parts;
      continue;
    }
    if (auto a = dyn_cast<AbsMaxOp>(op)) {
      // The maxima of a whole tensor argument, read only by the reduction.
      if (spec.maximaOf || spec.groupScalesOf || a.getEpilogue() ||
          !isa<BlockArgument>(a.getInput()) || !a.getResult().hasOneUse() ||
          !isa<ReduceScalesOp>(*a.getResult().getUsers().begin()))
        return a.emitError("a scale kernel may only hold the maxima of one "
                           "tensor argument, read by its coat.reduce_scales "
                           "alone");
      spec.maximaOf = a;
      continue;
    }
    if (auto r = dyn_cast<ReduceScalesOp>(op)) {
      if (spec.reduce)
        return r.emitError("a scale kernel holds one coat.reduce_scales");
      if (!isa<BlockArgument>(r.getInput()) &&
          !(spec.groupScalesOf &&
            r.getInput() == spec.groupScalesOf.getScale()) &&
          !(spec.maximaOf && r.getInput() == spec.maximaOf.getResult()))
        return r.emitError("the input of a scale kernel's coat.reduce_scales "
                           "must be a function argument, its group scales or "
                           "its maxima");
      spec.reduce = r;
      continue;
    }
    auto t = op.getNumResults() == 1
                 ? dyn_cast<RankedTensorType>(op.getResult(0).getType())
                 : RankedTensorType();
    if (!isa_and_nonnull<arith::ArithDialect>(op.getDialect()) || !t ||
        t.getRank() != 0)
      return op.emitError("a scale kernel may only hold arith ops on rank-0 "
                          "tensors after its coat.reduce_scales");
    if (auto c = dyn_cast<arith::ConstantOp>(op)) {
      auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
      if (!dense || !dense.isSplat())
        return op.emitError("constants of a scale kernel must be splat");
    } else {
      for (Value v : op.getOperands())
        if (isa<BlockArgument>(v))
          return op.emitError("the scalar arithmetic of a scale kernel may "
                              "only use the maximum and constants");
    }
    spec.scalarOps.push_back(&op);
  }
  if (!spec.reduce)
    return fn.emitError("kernel-spec function @")
           << fn.getSymName() << " holds no coat.reduce_scales";
  if (ret.getNumOperands() != 1)
    return fn.emitError("a scale kernel returns one rank-0 value");
  spec.returned = ret.getOperand(0);
  if (spec.returned != spec.reduce.getResult() &&
      !llvm::is_contained(spec.scalarOps, spec.returned.getDefiningOp()))
    return ret.emitError("a scale kernel returns its maximum or the scalar "
                         "arithmetic on it");
  spec.epsAndFp8Max =
      matchScaleDerivation(spec.reduce.getResult(), spec.returned);
  spec.maximumType =
      cast<ShapedType>(spec.reduce.getInput().getType()).getElementType();
  spec.inputType =
      spec.maximaOf
          ? cast<ShapedType>(spec.maximaOf.getInput().getType()).getElementType()
          : spec.maximumType;
  if (!spec.inputType.isF32() && !spec.inputType.isBF16())
    return fn.emitError("a scale kernel reads f32 or bf16 values, got ")
           << spec.inputType;
  spec.outputType = cast<ShapedType>(spec.returned.getType()).getElementType();
  if (!spec.outputType.isF32() && !spec.outputType.isBF16())
    return fn.emitError("a scale kernel returns an f32 or bf16 scale, got ")
           << spec.outputType;
  return spec;
}

SmallVector<KernelDecl>
ReduceScalesLowering::declare(func::FuncOp fn, const ScaleSpec &spec) const {
  MLIRContext *ctx = fn.getContext();
  Type i32 = IntegerType::get(ctx, 32);
  Type i64 = IntegerType::get(ctx, 64);
  SpecRefs s(fn);
  Value input = ReduceScalesOp(spec.reduce).getInput();
  std::string maxima = s.ref(input), n = s.numel(input);
  if (AbsMaxOp of = spec.maximaOf) {
    maxima = s.ref(of.getInput());
    n = s.numel(of.getInput());
  }
  if (DisassembleOp parts = spec.groupScalesOf) {
    // per_group<G> scales: one per G elements (G divides the columns).
    Value q = parts.getInput();
    int64_t g = cast<QTensorType>(q.getType()).getScalingValue().groupSize;
    maxima = s.ref(q, "scale");
    n = "ceildiv(" + s.numel(q) + "," + std::to_string(g) + ")";
  }
  KernelDecl kernel{
      fn.getSymName().str(),
      {{"maxima", abiBuffer(spec.inputType), manifestDtype(spec.inputType),
        "n", {maxima}},
       {"scale", abiBuffer(spec.outputType), manifestDtype(spec.outputType),
        "1", {s.ref(spec.returned)}},
       {"workspace", abiBuffer(i32), "i32", "2", {kBindScratch}},
       {"n", i64, "i64", "", {n}}},
      blockSize,
      // One word per warp for the CTA's reduction.
      {workgroupBuffer({blockSize / 32}, i32)}};
  return {kernel};
}

DictionaryAttr ReduceScalesLowering::record(const ScaleSpec &spec,
                                            const KernelDecl &decl,
                                            unsigned) const {
  MLIRContext *ctx = spec.inputType.getContext();
  Builder b(ctx);
  SmallVector<NamedAttribute> config = {
      b.getNamedAttr("input", b.getStringAttr(manifestDtype(spec.inputType))),
      b.getNamedAttr("scale", b.getStringAttr(manifestDtype(spec.outputType)))};
  if (spec.maximaOf)
    config.push_back(b.getNamedAttr("absolute", b.getBoolAttr(true)));
  if (spec.epsAndFp8Max) {
    auto [eps, fp8max] = *spec.epsAndFp8Max;
    config.push_back(b.getNamedAttr("eps", b.getF32FloatAttr(eps)));
    config.push_back(b.getNamedAttr("fp8max", b.getF32FloatAttr(fp8max)));
    for (::coat::Fp8Format f :
         {::coat::Fp8Format::E4M3, ::coat::Fp8Format::E5M2})
      if (::coat::getFp8Traits(f).maxFinite == fp8max)
        config.push_back(b.getNamedAttr(
            "format", b.getStringAttr(::coat::getFp8Traits(f).name)));
  }
  std::optional<LaunchRule> launch;
  if (onGpu())
    launch = LaunchRule{blockSize,
                        blockSize * scaleVector(spec.inputType) * kScaleSteps};
  return buildKernelRecord(ctx, decl.name, "reduce_scales", config, decl.abi,
                           launch);
}

//===- MixedGranularity.cpp - choose FP8 format and granularity -----------===//
//
// Resolves every coat.quantize_auto by COAT's mixed-granularity rules
// (COAT.md §3.1, §3.8): GEMM operands per-tensor, non-linear-layer inputs 1xG;
// forward tensors in one format, gradients in the other.
//
//===----------------------------------------------------------------------===//

#include "coat/Dialect/CoatDialect.h"
#include "coat/Numerics/Fp8.h"
#include "coat/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATMIXEDGRANULARITY
#include "coat/Transforms/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

/// What one use of an unresolved value asks for.
struct ConsumerNeed {
  Operation *op;
  std::string what;           ///< "coat.linear dgrad lhs", for remarks
  bool perTensor;             ///< GEMM operand (else 1xG)
  bool transposed;            ///< reached through coat.transpose
  FlowDirection direction;    ///< forward tensor or gradient
  bool directionIsHint;       ///< the verifier would accept either format
  std::optional<::coat::Fp8Format> required; ///< format the verifier demands
  unsigned operandNo = 0; ///< orders consumers within one op
};

/// The decision for one coat.quantize_auto.
struct Decision {
  QuantizeAutoOp op;
  bool perTensor = false, perGroup = false, transposed = false;
  ::coat::Fp8Format format = ::coat::Fp8Format::E4M3;
  FlowDirection direction = FlowDirection::forward;
  LinearOp epilogueProducer; ///< set: quantize 1xG in this GEMM's epilogue
  std::string remark;
};

/// COAT's epsilon of derived activation scales, the ops' default.
static const llvm::APFloat kDefaultEps(::coat::kActivationScaleEps);

static StringRef formatName(::coat::Fp8Format f) {
  return ::coat::getFp8Traits(f).mlirType;
}

static std::optional<::coat::Fp8Format> parseFormat(StringRef s) {
  if (s == "e4m3" || s == "f8E4M3FN")
    return ::coat::Fp8Format::E4M3;
  if (s == "e5m2" || s == "f8E5M2")
    return ::coat::Fp8Format::E5M2;
  return std::nullopt;
}

/// The need of `linear`'s operand `operandNo` (0 = lhs, 1 = rhs), following
/// the formats `coat.linear` accepts (COAT.md §3.8, §4.1).
static ConsumerNeed linearNeed(LinearOp linear, unsigned operandNo,
                               bool transposed) {
  bool lhs = operandNo == 0;
  ConsumerNeed n{linear, "", true, transposed, FlowDirection::forward, false,
                 std::nullopt, operandNo};
  n.what = (Twine("coat.linear ") + stringifyLinearKind(linear.getKind()) +
            (lhs ? " lhs" : " rhs") + (transposed ? " (transposed)" : ""))
               .str();
  switch (linear.getKind()) {
  case LinearKind::forward:
    n.required = ::coat::Fp8Format::E4M3;
    break;
  case LinearKind::dgrad:
    // lhs is dY; rhs is the weight and must be E4M3.
    if (lhs) {
      n.direction = FlowDirection::backward;
      n.directionIsHint = true;
    } else {
      n.required = ::coat::Fp8Format::E4M3;
    }
    break;
  case LinearKind::wgrad: {
    // lhs is dY^T, rhs is X^T; the verifier allows one E5M2 operand, so one
    // that is already E5M2 (or this very value) leaves E4M3 for this one.
    n.direction = lhs ? FlowDirection::backward : FlowDirection::forward;
    n.directionIsHint = true;
    Value self = linear->getOperand(operandNo);
    Value other = linear->getOperand(lhs ? 1 : 0);
    auto q = dyn_cast<QTensorType>(other.getType());
    if (other == self || (q && q.getFormat() == ::coat::Fp8Format::E5M2))
      n.required = ::coat::Fp8Format::E4M3;
    break;
  }
  }
  return n;
}

/// The need of a precision-flow op reading a 1xG activation (E4M3 by its
/// verifier), or nothing if `user` is not such an op.
static std::optional<ConsumerNeed> nonLinearNeed(Operation *user) {
  if (!isa<SiluOp, GeluOp, SwigluMulOp, RMSNormOp, LayerNormOp, SiluGradOp,
           GeluGradOp, SwigluMulGradOp, RMSNormGradOp, LayerNormGradOp>(user))
    return std::nullopt;
  bool saved = isa<SiluGradOp, GeluGradOp, SwigluMulGradOp, RMSNormGradOp,
                   LayerNormGradOp>(user);
  std::string what = user->getName().getStringRef().str();
  if (saved)
    what += " (saved input)";
  return ConsumerNeed{user,  what, false, false, FlowDirection::forward,
                      false, ::coat::Fp8Format::E4M3};
}

struct CoatMixedGranularityPass
    : mlir::coat::impl::CoatMixedGranularityBase<CoatMixedGranularityPass> {
  using Base::Base;

  ::coat::Fp8Format fwd = ::coat::Fp8Format::E4M3;
  ::coat::Fp8Format bwd = ::coat::Fp8Format::E5M2;

  ::coat::Fp8Format formatOf(FlowDirection d) const {
    return d == FlowDirection::forward ? fwd : bwd;
  }

  /// Collects the needs of every use of `op`; fails (with a diagnostic) on a
  /// use that is not an FP8 consumer this pass knows.
  LogicalResult collectNeeds(QuantizeAutoOp op,
                             SmallVectorImpl<ConsumerNeed> &needs) {
    for (OpOperand &use : op.getResult().getUses()) {
      Operation *user = use.getOwner();
      if (auto linear = dyn_cast<LinearOp>(user)) {
        needs.push_back(linearNeed(linear, use.getOperandNumber(), false));
        continue;
      }
      if (auto t = dyn_cast<TransposeOp>(user)) {
        if (t.getResult().use_empty()) {
          InFlightDiagnostic d = op.emitError(
              "cannot choose a granularity: its transposed copy has no user");
          d.attachNote(t.getLoc()) << "transposed here";
          return d;
        }
        for (OpOperand &tuse : t.getResult().getUses()) {
          auto linear = dyn_cast<LinearOp>(tuse.getOwner());
          if (!linear) {
            InFlightDiagnostic d =
                op.emitError("cannot choose a granularity: its transposed copy "
                             "is read by '")
                << tuse.getOwner()->getName()
                << "'; only coat.linear reads transposed copies";
            d.attachNote(tuse.getOwner()->getLoc()) << "read here";
            return d;
          }
          needs.push_back(linearNeed(linear, tuse.getOperandNumber(), true));
        }
        continue;
      }
      if (std::optional<ConsumerNeed> n = nonLinearNeed(user)) {
        needs.push_back(*n);
        continue;
      }
      InFlightDiagnostic d =
          op.emitError("cannot choose a granularity: used by '")
          << user->getName()
          << "', which is not an FP8 consumer (coat.linear, coat.transpose or "
             "a precision-flow op)";
      d.attachNote(user->getLoc()) << "used here";
      return d;
    }
    if (needs.empty())
      return op.emitError("cannot choose a granularity: the value has no FP8 "
                          "consumer");
    // Use lists are unordered; report consumers in program order.
    Block *block = needs.front().op->getBlock();
    if (llvm::all_of(needs, [&](const ConsumerNeed &n) {
          return n.op->getBlock() == block;
        }))
      llvm::sort(needs, [](const ConsumerNeed &a, const ConsumerNeed &b) {
        if (a.op == b.op)
          return a.operandNo < b.operandNo;
        return a.op->isBeforeInBlock(b.op);
      });
    return success();
  }

  /// Chooses direction, format and granularity for `op`.
  FailureOr<Decision> decide(QuantizeAutoOp op) {
    SmallVector<ConsumerNeed> needs;
    if (failed(collectNeeds(op, needs)))
      return failure();

    Decision dec;
    dec.op = op;
    // Direction: as given, else what the consumers say. Consumers that would
    // accept either format only give a hint; the others are firm.
    std::string dirWhy;
    if (std::optional<FlowDirection> given = op.getDirection()) {
      dec.direction = *given;
      dirWhy = "as given by 'direction'";
    } else {
      const ConsumerNeed *fwdFirm = nullptr, *bwdFirm = nullptr,
                         *fwdHint = nullptr, *bwdHint = nullptr;
      for (const ConsumerNeed &n : needs) {
        const ConsumerNeed *&slot =
            n.direction == FlowDirection::forward
                ? (n.directionIsHint ? fwdHint : fwdFirm)
                : (n.directionIsHint ? bwdHint : bwdFirm);
        if (!slot)
          slot = &n;
      }
      const ConsumerNeed *f = fwdFirm ? fwdFirm : fwdHint;
      const ConsumerNeed *b = bwdFirm ? bwdFirm : bwdHint;
      // Firm beats hint; two hints or two firm needs that disagree are a
      // conflict only 'direction' can settle.
      if (f && b && (fwdFirm != nullptr) == (bwdFirm != nullptr)) {
        InFlightDiagnostic d =
            op.emitError("cannot choose a format: ")
            << f->what << " reads it as a forward tensor ("
            << formatName(fwd) << ") but " << b->what
            << " reads it as a gradient (" << formatName(bwd)
            << "); state 'direction'";
        d.attachNote(f->op->getLoc()) << "forward consumer";
        d.attachNote(b->op->getLoc()) << "backward consumer";
        return failure();
      }
      const ConsumerNeed *winner = (f && (!b || fwdFirm)) ? f : b;
      dec.direction = winner->direction;
      dirWhy = (Twine("read as a ") +
                (dec.direction == FlowDirection::forward ? "forward tensor"
                                                         : "gradient") +
                " by " + winner->what)
                   .str();
    }
    dec.format = formatOf(dec.direction);
    for (const ConsumerNeed &n : needs) {
      if (n.required && *n.required != dec.format) {
        InFlightDiagnostic d =
            op.emitError("cannot choose a format: ")
            << n.what << " needs " << formatName(*n.required) << " but the "
            << stringifyFlowDirection(dec.direction) << " format is "
            << formatName(dec.format);
        d.attachNote(n.op->getLoc()) << "consumer";
        return failure();
      }
    }

    // Granularity.
    llvm::SetVector<StringRef> groupUsers, tensorUsers;
    for (const ConsumerNeed &n : needs) {
      (n.perTensor ? tensorUsers : groupUsers).insert(n.what);
      dec.perTensor |= n.perTensor;
      dec.perGroup |= !n.perTensor;
      dec.transposed |= n.transposed;
    }
    auto shape = cast<ShapedType>(op.getInput().getType()).getShape();
    if (dec.perGroup) {
      if (shape.empty()) {
        op.emitError("cannot quantize a rank-0 tensor 1xG for ")
            << groupUsers[0];
        return failure();
      }
      int64_t inner = shape.back();
      if (!ShapedType::isDynamic(inner) && inner % groupSize != 0) {
        op.emitError("cannot quantize 1x")
            << static_cast<int64_t>(groupSize) << " for " << groupUsers[0]
            << ": the group size does not divide the innermost extent "
            << inner;
        return failure();
      }
    }

    // coat.silu returns its input's type: a silu result whose type a
    // non-coat user (a return, a call) pins cannot follow another G.
    if (dec.perGroup) {
      MLIRContext *ctx = op.getContext();
      auto groupType = QTensorType::get(
          shape, getFp8Type(ctx, dec.format),
          ScalingAttr::get(ctx, ::coat::Scaling::perGroup(groupSize)),
          BFloat16Type::get(ctx));
      for (const ConsumerNeed &n : needs) {
        auto silu = dyn_cast<SiluOp>(n.op);
        if (!silu || silu.getResult().getType() == groupType)
          continue;
        for (Operation *u : silu.getResult().getUsers()) {
          if (u->getDialect() && isa<CoatDialect>(u->getDialect()))
            continue;
          InFlightDiagnostic d =
              op.emitError("cannot give coat.silu the input type ")
              << groupType << ": its result type "
              << silu.getResult().getType() << " is fixed by '"
              << u->getName() << "'";
          d.attachNote(u->getLoc()) << "fixed here";
          return failure();
        }
      }
    }

    // A 1x16 E4M3 copy that a forward GEMM produces can come out of its
    // epilogue (COAT's quantized gate/up outputs, §3.5).
    if (dec.perGroup && !dec.perTensor && groupSize == 16 &&
        dec.format == ::coat::Fp8Format::E4M3 && op.getInput().hasOneUse()) {
      if (auto linear = op.getInput().getDefiningOp<LinearOp>()) {
        auto operandOk = [](Value v) {
          auto q = dyn_cast<QTensorType>(v.getType());
          return !q || q.getScaling().isPerTensor();
        };
        if (linear.getKind() == LinearKind::forward &&
            operandOk(linear.getLhs()) && operandOk(linear.getRhs()))
          dec.epilogueProducer = linear;
      }
    }

    // The remark: what, for whom, in which format and why.
    std::string s;
    llvm::raw_string_ostream os(s);
    auto list = [&](const llvm::SetVector<StringRef> &v) {
      llvm::interleaveComma(v, os);
    };
    os << formatName(dec.format) << " ";
    if (dec.perGroup)
      os << "1x" << groupSize << " (per_group<" << groupSize << ">)";
    if (dec.epilogueProducer)
      os << " from the epilogue of the producing coat.linear forward";
    if (dec.perGroup && dec.perTensor)
      os << " + ";
    if (dec.perTensor)
      os << "per_tensor";
    if (dec.transposed)
      os << " + transposed copy";
    if (dec.perGroup && dec.perTensor)
      os << ", the per_tensor copy re-quantized from the 1x" << groupSize
         << " one (one read of the high-precision tensor)";
    os << "; ";
    if (dec.perGroup) {
      os << "1xG input of non-linear ";
      list(groupUsers);
    }
    if (dec.perGroup && dec.perTensor)
      os << "; ";
    if (dec.perTensor) {
      os << "per-tensor GEMM operand of ";
      list(tensorUsers);
    }
    os << "; " << formatName(dec.format) << ": " << dirWhy;
    dec.remark = os.str();
    return dec;
  }

  /// Replaces `dec.op` by quantize (and requantize) ops or by the GEMM
  /// epilogue, and re-types the consumers whose types follow.
  void apply(Decision &dec) {
    QuantizeAutoOp op = dec.op;
    MLIRContext *ctx = op.getContext();
    auto inType = cast<RankedTensorType>(op.getInput().getType());
    FloatType fp8 = getFp8Type(ctx, dec.format);
    FloatType bf16 = BFloat16Type::get(ctx);
    auto groupType = QTensorType::get(
        inType.getShape(), fp8,
        ScalingAttr::get(ctx, ::coat::Scaling::perGroup(groupSize)), bf16);
    auto tensorType = QTensorType::get(
        inType.getShape(), fp8, ScalingAttr::get(ctx, ::coat::Scaling()), bf16);

    OpBuilder b(op);
    Value grouped, perTensor;
    if (dec.epilogueProducer) {
      dec.epilogueProducer.getResult().setType(groupType);
      grouped = dec.epilogueProducer.getResult();
    } else if (dec.perGroup) {
      grouped = QuantizeOp::create(b, op.getLoc(), groupType, op.getInput(),
                                   Value(), kDefaultEps)
                    .getResult();
    }
    if (dec.perTensor) {
      perTensor = grouped ? RequantizeOp::create(b, op.getLoc(), tensorType,
                                                 grouped, kDefaultEps)
                                .getResult()
                          : QuantizeOp::create(b, op.getLoc(), tensorType,
                                               op.getInput(), Value(),
                                               kDefaultEps)
                                .getResult();
    }

    for (OpOperand &use : llvm::make_early_inc_range(op.getResult().getUses())) {
      Operation *user = use.getOwner();
      if (auto t = dyn_cast<TransposeOp>(user)) {
        use.set(perTensor);
        auto shape = t.getResult().getType().getShape();
        t.getResult().setType(tensorType.cloneWithShape(shape));
      } else if (isa<LinearOp>(user)) {
        use.set(perTensor);
      } else {
        use.set(grouped);
        // coat.silu returns its input's type.
        if (auto silu = dyn_cast<SiluOp>(user))
          silu.getResult().setType(groupType);
      }
    }
    op.erase();
  }

  void runOnOperation() override {
    Operation *root = getOperation();
    std::optional<::coat::Fp8Format> f = parseFormat(forwardFormat);
    std::optional<::coat::Fp8Format> b = parseFormat(backwardFormat);
    if (!f || !b) {
      root->emitError("coat-mixed-granularity: unknown ")
          << (f ? "backward-format '" : "forward-format '")
          << (f ? backwardFormat : forwardFormat)
          << "' (expected 'e4m3' or 'e5m2')";
      return signalPassFailure();
    }
    if (groupSize <= 0) {
      root->emitError("coat-mixed-granularity: group-size must be positive, "
                      "got ")
          << static_cast<int64_t>(groupSize);
      return signalPassFailure();
    }
    fwd = *f;
    bwd = *b;

    SmallVector<QuantizeAutoOp> ops;
    root->walk([&](QuantizeAutoOp op) { ops.push_back(op); });
    // Decide everything first so that a failure leaves the IR untouched and
    // every undecidable value is reported.
    SmallVector<Decision> decisions;
    bool ok = true;
    for (QuantizeAutoOp op : ops) {
      FailureOr<Decision> d = decide(op);
      if (failed(d)) {
        ok = false;
        continue;
      }
      decisions.push_back(*d);
    }
    if (!ok)
      return signalPassFailure();
    for (Decision &d : decisions) {
      d.op.emitRemark() << d.remark;
      apply(d);
    }
  }
};

} // namespace

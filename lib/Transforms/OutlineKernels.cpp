//===- OutlineKernels.cpp - model programs to kernel-spec functions -------===//
//
// The lowerings turn kernel-spec functions (one kernel's worth of coat ops on
// function arguments) into GPU kernels and CPU twins. A model program (after
// coat-mixed-granularity and coat-group-scaling) holds many kernels' worth of
// ops in one function; this pass cuts it into kernel-spec functions and
// leaves the program as a sequence of calls to them.
//
//===----------------------------------------------------------------------===//

#include "coat/Dialect/CoatDialect.h"
#include "coat/Transforms/GroupScaling.h"
#include "coat/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

#include <map>
#include <tuple>

namespace mlir::coat {
#define GEN_PASS_DEF_COATOUTLINEKERNELS
#include "coat/Transforms/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

/// The ops of one kernel, in program order; `root` is where the call goes.
struct KernelGroup {
  Operation *root = nullptr;
  SmallVector<Operation *> ops;
  /// Whether every result of the group's ops is a kernel output (a kernel
  /// writes all its outputs), or only those used outside the group (the
  /// scalar arithmetic folded into a scale kernel).
  bool allResults = true;
};

bool isCoatOp(Operation *op) {
  return op->getDialect() && isa<CoatDialect>(op->getDialect());
}

/// The dequantize of a requantize kernel: the given-scale quantize that is
/// its only user, or null.
QuantizeOp requantizeOf(DequantizeOp d) {
  if (!d->hasOneUse())
    return nullptr;
  auto q = dyn_cast<QuantizeOp>(*d->user_begin());
  return q && q.getScale() ? q : nullptr;
}

/// The disassemble whose group scales only a scale kernel reads, or null.
DisassembleOp groupScalesOf(ReduceScalesOp r) {
  auto d = r.getInput().getDefiningOp<DisassembleOp>();
  if (!d || !d.getData().use_empty() || !d.getScale().hasOneUse() ||
      !d.getExpansion().empty())
    return nullptr;
  return d;
}

/// The op whose kernel also takes `op` because both read the same tensor
/// whole: a bias gradient and the maxima of its input that no producer
/// computes (a gradient entering the program), in either order; or null.
Operation *sharesReadWith(Operation *op) {
  if (auto g = dyn_cast<BiasGradOp>(op)) {
    for (Operation *user : g.getGrad().getUsers())
      if (auto a = dyn_cast<AbsMaxOp>(user); a && g.canFuseMaxima(a))
        return a;
  } else if (auto a = dyn_cast<AbsMaxOp>(op)) {
    for (Operation *user : a.getInput().getUsers())
      if (auto g = dyn_cast<BiasGradOp>(user); g && g.canFuseMaxima(a))
        return g;
  }
  return nullptr;
}

/// The `coat.absmax` whose maxima only `r` reads, computed by a kernel of
/// its own (not in a producer's epilogue), or null: the scale kernel can
/// take the maximum of the tensor directly.
AbsMaxOp standaloneMaxima(ReduceScalesOp r) {
  auto a = r.getInput().getDefiningOp<AbsMaxOp>();
  if (!a || a.getEpilogue() || !a.getResult().hasOneUse())
    return {};
  // A bias gradient of the same tensor computes the maxima in its read.
  if (sharesReadWith(a))
    return {};
  return a;
}

/// Whether `first` and `second` (in that order) are the two ops of one
/// kernel: a quantize and its transposed copy, a requantize's dequantize
/// and quantize, group scales and the scale kernel reading them, the
/// maxima of a tensor and the scale kernel reducing them, a bias gradient
/// and the maxima of the same input, a GEMM and the rope in its epilogue.
bool isOneKernel(Operation *first, Operation *second) {
  if (sharesReadWith(second) == first)
    return true;
  if (auto rope = dyn_cast<RopeOp>(second))
    return rope.getFusedProducer() == first;
  if (auto t = dyn_cast<TransposeOp>(second))
    return t.getInput().getDefiningOp() == first && isa<QuantizeOp>(first);
  if (auto d = dyn_cast<DequantizeOp>(first))
    return requantizeOf(d) == second;
  if (auto r = dyn_cast<ReduceScalesOp>(second))
    return groupScalesOf(r) == first || standaloneMaxima(r) == first;
  return false;
}

/// Whether the kernel of `q` writes only its transposed copy: a quantize
/// with a given per-tensor scale that the program reads only through its
/// `coat.transpose` (a wgrad or dgrad operand derived again in the
/// backward).
bool isReadOnlyTransposed(QuantizeOp q) {
  return q.getScale() && !q->use_empty() &&
         llvm::all_of(q->getUsers(),
                      [](Operation *u) { return isa<TransposeOp>(u); });
}

/// A short, readable name for the kernel a group becomes.
std::string kernelSuffix(const KernelGroup &group) {
  Operation *root = group.root;
  std::string name = root->getName().stripDialect().str();
  if (group.ops.size() == 2 && sharesReadWith(root) == group.ops.back())
    return "absmax_bias_grad";
  if (isa<AbsMaxOp>(root) &&
      llvm::any_of(group.ops, [](Operation *op) { return isa<ReduceScalesOp>(op); }))
    return "absmax_scale";
  if (auto linear = dyn_cast<LinearOp>(root)) {
    name += "_" + stringifyLinearKind(linear.getKind()).str();
    if (llvm::any_of(group.ops, [](Operation *op) { return isa<RopeOp>(op); }))
      name += "_rope";
  }
  if (auto gelu = dyn_cast<GeluOp>(root); gelu && gelu.isTanh())
    name += "_tanh";
  if (auto grad = dyn_cast<GeluGradOp>(root); grad && grad.isTanh())
    name = "gelu_tanh_grad";
  // With the SiLU folded in (coat-fuse-silu), the whole SwiGLU.
  if (auto mul = dyn_cast<SwigluMulOp>(root); mul && mul.getSiluGate())
    name = "swiglu";
  if (auto grad = dyn_cast<SwigluMulGradOp>(root); grad && grad.getSiluGate())
    name = "swiglu_grad";
  if (auto q = dyn_cast<QuantizeOp>(root)) {
    if (q.getResult().getType().getScaling().isPerTensor())
      name += "_per_tensor";
    else
      name += "_per_group";
    if (isReadOnlyTransposed(q))
      name += "_transposed_only";
    else if (llvm::any_of(q->getUsers(),
                          [](Operation *u) { return isa<TransposeOp>(u); }))
      name += "_transpose";
  }
  if (auto r = dyn_cast<ReduceScalesOp>(root))
    name = groupScalesOf(r) ? "max_of_group_scales" : "scale_from_maxima";
  if (auto d = dyn_cast<DequantizeOp>(root); d && requantizeOf(d))
    name = "requantize_per_tensor";
  return name;
}

struct CoatOutlineKernelsPass
    : mlir::coat::impl::CoatOutlineKernelsBase<CoatOutlineKernelsPass> {
  using Base::Base;

  /// Per-tensor quantizations of tensors that enter the program from
  /// outside (weights, incoming gradients) still derive their scale; no
  /// producer kernel can compute their maxima, so they get a maxima kernel
  /// of their own, then the same two stages as group scaling.
  ///
  /// A quantization that recomputes (coat-recompute-activations) what a
  /// forward one of the same tensor, type and eps computed (a weight's
  /// transposed copy in the backward) takes the forward's scale, a rank-0
  /// value the program keeps, instead of reading the whole tensor again
  /// for its maxima.
  LogicalResult splitEntryScales(func::FuncOp fn) {
    SmallVector<QuantizeOp> work;
    fn.walk([&](QuantizeOp q) {
      if (!q.getScale() && q.getResult().getType().getScaling().isPerTensor())
        work.push_back(q);
    });
    using ScaleKey = std::tuple<const void *, const void *, float>;
    std::map<ScaleKey, Value> forwardScales;
    auto keyOf = [](QuantizeOp q) {
      return ScaleKey{q.getInput().getAsOpaquePointer(),
                      q.getResult().getType().getAsOpaquePointer(),
                      q.getEps().convertToFloat()};
    };
    for (QuantizeOp q : work) {
      if (Attribute recompute = q->getAttr(kRecomputeAttr)) {
        auto found = forwardScales.find(keyOf(q));
        if (found != forwardScales.end()) {
          OpBuilder b(q);
          auto given = QuantizeOp::create(
              b, q.getLoc(), q.getResult().getType(), q.getInput(),
              found->second, q.getEpsAttr(), q.getExpandMinAttr());
          given->setAttr(kRecomputeAttr, recompute);
          q.getResult().replaceAllUsesWith(given.getResult());
          q.erase();
          continue;
        }
      }
      auto shape = cast<ShapedType>(q.getInput().getType()).getShape();
      std::optional<::coat::Scaling> partial =
          partialMaximaScaling(shape, groupSize);
      if (!partial)
        return q.emitError("a per-tensor quantization needs a static row "
                           "length to split its scale into partial maxima");
      // The dequantize kernel writes no maxima: those of its values come
      // from a kernel of their own, as for program inputs.
      Operation *producer = q.getInput().getDefiningOp();
      bool inProducer = producer && isCoatOp(producer) &&
                        !isa<DequantizeOp>(producer);
      bool recomputes = bool(q->getAttr(kRecomputeAttr));
      ScaleKey key = keyOf(q);
      QuantizeOp given = splitDerivedPerTensorScale(q, *partial, inProducer);
      if (!recomputes)
        forwardScales.emplace(key, given.getScale());
    }
    return success();
  }

  /// A `coat.requantize` that changes the tensor's type is cut into what
  /// it means. From 1xG codes to a per-tensor copy in the same format and
  /// scale type, the scale is the maximum of the group scales (a scale
  /// kernel reading only those) and one kernel dequantizes and quantizes,
  /// the values staying in registers. Any other change goes through f32: a
  /// dequantize kernel, then a quantize whose derived scale
  /// splitEntryScales takes from a maxima kernel.
  void expandRequantizes(func::FuncOp fn) {
    SmallVector<RequantizeOp> work;
    fn.walk([&](RequantizeOp r) {
      if (r.getInput().getType() != r.getResult().getType())
        work.push_back(r);
    });
    for (RequantizeOp r : work) {
      OpBuilder b(r);
      QTensorType out = r.getResult().getType();
      auto f32 = RankedTensorType::get(out.getShape(), b.getF32Type());
      Value scale;
      if (r.takesMaxOfGroupScales()) {
        auto parts = DisassembleOp::create(b, r.getLoc(), r.getInput());
        scale = ReduceScalesOp::create(
            b, r.getLoc(), RankedTensorType::get({}, out.getScaleType()),
            parts.getScale());
      }
      Value values = DequantizeOp::create(b, r.getLoc(), f32, r.getInput());
      auto q = QuantizeOp::create(b, r.getLoc(), out, values, scale,
                                  r.getEpsAttr(), r.getExpandMinAttr());
      r.getResult().replaceAllUsesWith(q.getResult());
      r.erase();
    }
  }

  /// Partitions the ops of `fn` into kernels.
  FailureOr<SmallVector<KernelGroup>> partition(func::FuncOp fn) {
    SmallVector<KernelGroup> groups;
    DenseMap<Operation *, size_t> groupOf;
    auto join = [&](Operation *op, size_t g) {
      groupOf[op] = g;
      groups[g].ops.push_back(op);
    };
    for (Operation &op : fn.getBody().front().without_terminator()) {
      if (groupOf.count(&op) || isa<arith::ConstantOp>(op))
        continue;
      // Group scales a scale kernel reads: part of that kernel.
      if (auto d = dyn_cast<DisassembleOp>(op);
          d && !d.getScale().use_empty() &&
          llvm::all_of(d.getScale().getUsers(), [](Operation *u) {
            auto r = dyn_cast<ReduceScalesOp>(u);
            return r && groupScalesOf(r);
          }))
        continue;
      // A requantize: the quantize runs in its dequantize's kernel, so the
      // values never leave registers.
      if (auto q = dyn_cast<QuantizeOp>(op)) {
        auto d = q.getInput().getDefiningOp<DequantizeOp>();
        if (d && requantizeOf(d) == q && groupOf.count(d)) {
          size_t g = groupOf[d];
          join(&op, g);
          groups[g].allResults = false;
          continue;
        }
      }
      // Maxima written by a producer's epilogue belong to its kernel.
      if (auto a = dyn_cast<AbsMaxOp>(op); a && a.getEpilogue()) {
        Operation *producer = a.getInput().getDefiningOp();
        if (producer && groupOf.count(producer)) {
          join(&op, groupOf[producer]);
          continue;
        }
      }
      // A rotation in the epilogue of the GEMM that produces its input
      // (coat-fuse-rope): the GEMM's kernel writes the rotated values.
      if (auto r = dyn_cast<RopeOp>(op); r && r.getEpilogue()) {
        Operation *producer = r.getFusedProducer();
        if (producer && groupOf.count(producer)) {
          size_t g = groupOf[producer];
          join(&op, g);
          // The GEMM's own values are not written.
          groups[g].allResults = false;
          continue;
        }
      }
      // A bias gradient and the maxima of the same gradient: one read.
      if (Operation *partner = sharesReadWith(&op);
          partner && groupOf.count(partner) &&
          groups[groupOf[partner]].ops.size() == 1) {
        join(&op, groupOf[partner]);
        continue;
      }
      // A transposed copy comes from the read that makes the row-major one.
      if (auto t = dyn_cast<TransposeOp>(op)) {
        Operation *producer = t.getInput().getDefiningOp();
        if (producer && isa<QuantizeOp>(producer) && groupOf.count(producer)) {
          join(&op, groupOf[producer]);
          continue;
        }
        return op.emitError("no kernel makes this transposed copy: transpose "
                            "the tensor where it is quantized");
      }
      if (!isCoatOp(&op))
        return op.emitError("cannot outline '")
               << op.getName()
               << "' into a kernel: model programs must express tensor work "
                  "as coat ops";
      auto reduce = dyn_cast<ReduceScalesOp>(op);
      // The maxima of a whole tensor that only this scale reads (a weight,
      // an incoming gradient): the scale kernel reduces the tensor itself,
      // so the maxima are never written.
      size_t g = groups.size();
      if (AbsMaxOp maxima = reduce ? standaloneMaxima(reduce) : AbsMaxOp();
          maxima && groupOf.count(maxima) &&
          groups[groupOf[maxima]].ops.size() == 1)
        g = groupOf[maxima];
      else
        groups.push_back({&op, {}, true});
      join(&op, g);
      if (!reduce)
        continue;
      if (DisassembleOp parts = groupScalesOf(reduce))
        join(parts, g);
      // The scale kernel also runs the scalar arithmetic that turns the
      // maximum into the scale.
      groups[g].allResults = false;
      SmallVector<Value> frontier(op.getResults());
      while (!frontier.empty()) {
        Value v = frontier.pop_back_val();
        for (Operation *user : v.getUsers()) {
          if (groupOf.count(user) || !isScaleArithmetic(user))
            continue;
          join(user, g);
          llvm::append_range(frontier, user->getResults());
        }
      }
      llvm::sort(groups[g].ops, [](Operation *a, Operation *b) {
        return a->isBeforeInBlock(b);
      });
    }
    return groups;
  }

  /// Makes the kernel-spec function of `group` (or finds an identical one)
  /// and replaces the group by a call to it.
  void outline(func::FuncOp fn, KernelGroup &group, unsigned index,
               SymbolTable &symbols,
               llvm::StringMap<func::FuncOp> &specsByBody) {
    llvm::SmallPtrSet<Operation *, 8> inGroup(group.ops.begin(),
                                              group.ops.end());
    llvm::SetVector<Value> inputs;
    SmallVector<Operation *> constants;
    for (Operation *op : group.ops)
      for (Value v : op->getOperands()) {
        Operation *def = v.getDefiningOp();
        if (def && inGroup.contains(def))
          continue;
        if (def && isa<arith::ConstantOp>(def)) {
          if (!llvm::is_contained(constants, def))
            constants.push_back(def);
          continue;
        }
        inputs.insert(v);
      }
    auto readOutside = [&](Value r) {
      return llvm::any_of(r.getUsers(), [&](Operation *u) {
        return !inGroup.contains(u);
      });
    };
    SmallVector<Value> outputs;
    for (Operation *op : group.ops) {
      // Codes read only through their transposed copies are not written.
      if (auto q = dyn_cast<QuantizeOp>(op); q && isReadOnlyTransposed(q))
        continue;
      for (Value r : op->getResults())
        if (group.allResults || readOutside(r))
          outputs.push_back(r);
    }

    OpBuilder b(fn.getContext());
    auto type = b.getFunctionType(ValueRange(inputs.getArrayRef()).getTypes(),
                                  ValueRange(outputs).getTypes());
    auto spec = func::FuncOp::create(
        b, group.root->getLoc(),
        (fn.getSymName() + "_k" + Twine(index) + "_" +
         kernelSuffix(group))
            .str(),
        type);
    // A tensor the program computes and reads only here is the kernel's to
    // overwrite: an op that can update its input in place writes its
    // result there, sparing a buffer and the copy of what it leaves as is.
    // So is a program input the caller gives up (`coat.writable`).
    for (Operation *op : group.ops) {
      if (!op->hasTrait<OpTrait::coat::InPlace>())
        continue;
      Value v = op->getOperand(0);
      auto arg = dyn_cast<BlockArgument>(v);
      bool given = arg && arg.getOwner()->isEntryBlock() &&
                   fn.getArgAttr(arg.getArgNumber(), kWritableAttr);
      if ((!v.getDefiningOp() && !given) || !v.hasOneUse() ||
          !inputs.contains(v))
        continue;
      unsigned i = llvm::find(inputs, v) - inputs.begin();
      spec.setArgAttr(i, kWritableAttr, b.getUnitAttr());
    }
    Block *body = spec.addEntryBlock();
    OpBuilder sb = OpBuilder::atBlockEnd(body);
    IRMapping map;
    map.map(inputs.getArrayRef(), body->getArguments());
    for (Operation *c : constants)
      sb.clone(*c, map);
    for (Operation *op : group.ops)
      sb.clone(*op, map);
    SmallVector<Value> returned;
    for (Value v : outputs)
      returned.push_back(map.lookup(v));
    func::ReturnOp::create(sb, group.root->getLoc(), returned);
    // What the program returns is checked for NaN and infinities by the
    // kernel that writes it (one flag per value, no second read).
    if (finiteFlags)
      for (auto [i, v] : llvm::enumerate(outputs)) {
        auto t = dyn_cast<RankedTensorType>(v.getType());
        bool returned = llvm::any_of(v.getUsers(), [](Operation *u) {
          return isa<func::ReturnOp>(u);
        });
        if (returned && t &&
            (t.getElementType().isF32() || t.getElementType().isBF16() ||
             t.getElementType().isF16()))
          spec.setResultAttr(i, kFiniteFlagAttr, b.getUnitAttr());
      }
    // A recomputation runs the forward's kernel; the mark (for the
    // backward, or for the caller's `recompute` phase) belongs to the call,
    // not to the kernel.
    Attribute recomputes;
    for (Operation &op : *body)
      if (Attribute mark = op.removeAttr(kRecomputeAttr))
        recomputes = mark;

    // Identical kernels (same ops, types and attributes) are compiled once.
    std::string key;
    {
      llvm::raw_string_ostream os(key);
      spec.getFunctionType().print(os);
      if (ArrayAttr argAttrs = spec.getAllArgAttrs())
        argAttrs.print(os);
      if (ArrayAttr resultAttrs = spec.getAllResultAttrs())
        resultAttrs.print(os);
      for (Operation &op : *body)
        op.print(os, OpPrintingFlags().printGenericOpForm());
    }
    auto [it, fresh] = specsByBody.try_emplace(key, spec);
    if (fresh)
      symbols.insert(spec, fn->getIterator());
    else
      spec.erase();
    func::FuncOp callee = it->second;

    b.setInsertionPoint(group.root);
    auto call = func::CallOp::create(b, group.root->getLoc(), callee,
                                     inputs.getArrayRef());
    if (recomputes)
      call->setAttr(kRecomputeAttr, recomputes);
    for (auto [old, now] : llvm::zip(outputs, call.getResults()))
      old.replaceAllUsesWith(now);
    for (Operation *op : llvm::reverse(group.ops))
      op->erase();
  }

  /// Transposed copies nobody reads (their readers moved to the copy that
  /// coat-recompute-activations made in the backward) are not made: their
  /// quantize's kernel then writes the row-major codes alone.
  void dropUnreadTransposes(func::FuncOp fn) {
    for (auto t : llvm::make_early_inc_range(fn.getOps<TransposeOp>()))
      if (t->use_empty())
        t->erase();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (groupSize <= 0) {
      module.emitError("coat-outline-kernels: group-size must be positive, "
                       "got ")
          << static_cast<int64_t>(groupSize);
      return signalPassFailure();
    }
    // Programs: functions holding more than one coat op. (A function with
    // one op, or two that make one kernel, is already a spec, unless it is
    // marked `coat.program`: a program of one kernel call.)
    SmallVector<func::FuncOp> programs;
    for (auto fn : module.getOps<func::FuncOp>()) {
      if (fn.isExternal() || !fn.getBody().hasOneBlock())
        continue;
      SmallVector<Operation *> coatOps;
      fn.walk([&](Operation *op) {
        if (isCoatOp(op))
          coatOps.push_back(op);
      });
      if (coatOps.size() > 2 ||
          (coatOps.size() == 2 && !isOneKernel(coatOps[0], coatOps[1])) ||
          (!coatOps.empty() && fn->hasAttr(kProgramAttr)))
        programs.push_back(fn);
    }
    SymbolTable symbols(module);
    llvm::StringMap<func::FuncOp> specsByBody;
    for (func::FuncOp fn : programs) {
      dropUnreadTransposes(fn);
      expandRequantizes(fn);
      if (failed(splitEntryScales(fn)))
        return signalPassFailure();
      FailureOr<SmallVector<KernelGroup>> groups = partition(fn);
      if (failed(groups))
        return signalPassFailure();
      for (auto [i, group] : llvm::enumerate(*groups))
        outline(fn, group, i, symbols, specsByBody);
      // Constants only used by outlined kernels are dead now.
      for (auto c : llvm::make_early_inc_range(fn.getOps<arith::ConstantOp>()))
        if (c->use_empty())
          c->erase();
      if (dropPrograms)
        fn.erase();
      else // coat-export-programs describes it to the executor
        fn->setAttr(kProgramAttr, UnitAttr::get(fn.getContext()));
    }
  }
};

} // namespace

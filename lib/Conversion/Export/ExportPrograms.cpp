//===- ExportPrograms.cpp - launch plans of outlined programs -------------===//
//
// An outlined program is a sequence of calls to kernel-spec functions; the
// kernels' records say, argument by argument, which spec value each one is
// (`bind`). This pass adds the other half: which program value each spec
// argument and result is at each call, so an executor can run the program
// from the manifest alone, forward and backward apart.
//
//===----------------------------------------------------------------------===//

#include "coat/Conversion/KernelRecord.h"
#include "coat/Conversion/Passes.h"
#include "coat/Dialect/CoatDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATEXPORTPROGRAMS
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

llvm::json::Array shapeJson(ArrayRef<int64_t> shape) {
  llvm::json::Array a;
  for (int64_t d : shape)
    a.push_back(ShapedType::isDynamic(d) ? int64_t(-1) : d);
  return a;
}

/// A value's type as the executor allocates it: a tensor, or a qtensor's
/// codes and scale tensor (its shape from Layout.h's derivation). Nothing
/// for types an executor cannot hold.
std::optional<llvm::json::Object> typeJson(Type t) {
  if (auto q = dyn_cast<QTensorType>(t)) {
    if (q.getExpanded())
      return std::nullopt;
    std::vector<int64_t> scales =
        ::coat::scaleShape(toLayoutShape(q.getShape()), q.getScalingValue());
    SmallVector<int64_t> scaleShape(scales.begin(), scales.end());
    return llvm::json::Object{
        {"kind", "qtensor"},
        {"shape", shapeJson(q.getShape())},
        {"dtype", manifestDtype(q.getElementType())},
        {"scaling", ::coat::toString(q.getScalingValue())},
        {"scale_dtype", manifestDtype(q.getScaleType())},
        {"scale_shape", shapeJson(scaleShape)}};
  }
  if (auto r = dyn_cast<RankedTensorType>(t))
    return llvm::json::Object{{"kind", "tensor"},
                              {"shape", shapeJson(r.getShape())},
                              {"dtype", manifestDtype(r.getElementType())}};
  return std::nullopt;
}

/// The manifest's kernel records by name, and which spec each runs.
struct KernelIndex {
  llvm::StringMap<const llvm::json::Object *> byName;
  llvm::StringMap<SmallVector<const llvm::json::Object *>> bySpec;

  explicit KernelIndex(const llvm::json::Array &kernels) {
    for (const llvm::json::Value &k : kernels) {
      const llvm::json::Object *o = k.getAsObject();
      if (!o)
        continue;
      std::optional<StringRef> name = o->getString("name");
      if (!name)
        continue;
      byName[*name] = o;
      // A spec's own kernel has its name; further kernels (the dweight
      // reduction of a norm backward) say `of` which spec they finish.
      std::optional<StringRef> of;
      if (const llvm::json::Object *c = o->getObject("config"))
        of = c->getString("of");
      bySpec[of ? *of : *name].push_back(o);
    }
  }
};

/// Why a kernel cannot run from a program, or nothing when every argument
/// has a binding.
std::optional<std::string> unbound(const llvm::json::Object &kernel) {
  if (const llvm::json::Array *args = kernel.getArray("args"))
    for (const llvm::json::Value &a : *args)
      if (const llvm::json::Object *o = a.getAsObject(); o && !o->get("bind"))
        return ("its argument '" + o->getString("name").value_or("?") +
                "' has no binding to the spec")
            .str();
  return std::nullopt;
}

struct CoatExportProgramsPass
    : mlir::coat::impl::CoatExportProgramsBase<CoatExportProgramsPass> {
  using Base::Base;

  /// The launch plan of `fn`, checked against the kernels in `index`.
  FailureOr<llvm::json::Object> describe(func::FuncOp fn,
                                         const KernelIndex *index) {
    DenseMap<Value, int64_t> ids;
    llvm::json::Array values;
    auto define = [&](Value v) -> LogicalResult {
      std::optional<llvm::json::Object> t = typeJson(v.getType());
      if (!t)
        return emitError(v.getLoc())
               << "coat-export-programs: a program value of type "
               << v.getType() << " has no executor representation";
      ids[v] = values.size();
      values.push_back(std::move(*t));
      return success();
    };

    // Inputs and their roles; the backward is whatever depends on a
    // gradient input.
    llvm::json::Array inputs;
    llvm::DenseSet<Value> backward;
    for (BlockArgument a : fn.getArguments()) {
      if (failed(define(a)))
        return failure();
      unsigned i = a.getArgNumber();
      StringRef role = "activation";
      if (fn.getArgAttr(i, kGradientAttr)) {
        role = "gradient";
        backward.insert(a);
      } else if (fn.getArgAttr(i, kWeightAttr)) {
        role = "weight";
      }
      llvm::json::Object in{{"value", ids[a]}, {"role", role}};
      if (auto g = fn.getArgAttrOfType<IntegerAttr>(i, kGradOfAttr))
        in["grad_of"] = g.getInt();
      inputs.push_back(std::move(in));
    }

    llvm::json::Array steps;
    // Values the forward defines that a backward step reads.
    llvm::SetVector<int64_t> saved;
    for (Operation &op : fn.getBody().front().without_terminator()) {
      auto call = dyn_cast<func::CallOp>(op);
      if (!call)
        return op.emitError("coat-export-programs: an outlined program holds "
                            "only calls to kernel specs, found ")
               << op.getName();
      StringRef spec = call.getCallee();
      if (index) {
        auto it = index->bySpec.find(spec);
        if (it == index->bySpec.end())
          return call.emitError("coat-export-programs: no kernel in the "
                                "manifest runs @")
                 << spec << " (compile the program's specs first)";
        for (const llvm::json::Object *k : it->second)
          if (std::optional<std::string> why = unbound(*k))
            return call.emitError("coat-export-programs: kernel '")
                   << k->getString("name").value_or(spec) << "' of @" << spec
                   << " cannot run from a program: " << *why;
      }
      bool isBackward = runsInBackward(call, backward);
      llvm::json::Array operands, results;
      for (Value v : call.getOperands()) {
        auto it = ids.find(v);
        if (it == ids.end())
          return call.emitError("coat-export-programs: operand defined "
                                "outside the program's calls and arguments");
        operands.push_back(it->second);
      }
      for (Value r : call.getResults()) {
        if (failed(define(r)))
          return failure();
        results.push_back(ids[r]);
        if (isBackward)
          backward.insert(r);
      }
      if (isBackward)
        for (Value v : call.getOperands())
          if (!backward.contains(v))
            saved.insert(ids[v]);
      steps.push_back(llvm::json::Object{
          {"spec", spec},
          {"phase", isBackward ? "backward" : "forward"},
          {"operands", std::move(operands)},
          {"results", std::move(results)}});
    }

    llvm::json::Array outputs;
    auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
    for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
      llvm::json::Object out{
          {"value", ids[v]},
          {"phase", backward.contains(v) ? "backward" : "forward"}};
      if (auto g = fn.getResultAttrOfType<IntegerAttr>(i, kGradOfAttr))
        out["grad_of"] = g.getInt();
      outputs.push_back(std::move(out));
    }
    llvm::json::Array savedJson;
    for (int64_t id : saved)
      savedJson.push_back(id);
    return llvm::json::Object{{"name", fn.getSymName()},
                              {"values", std::move(values)},
                              {"inputs", std::move(inputs)},
                              {"steps", std::move(steps)},
                              {"outputs", std::move(outputs)},
                              {"saved", std::move(savedJson)}};
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> programs;
    for (auto fn : module.getOps<func::FuncOp>())
      if (fn->hasAttr(kProgramAttr))
        programs.push_back(fn);

    if (!dir.empty()) {
      SmallString<256> path(dir);
      llvm::sys::path::append(path, "manifest.json");
      auto buf = llvm::MemoryBuffer::getFile(path);
      if (!buf) {
        module.emitError("coat-export-programs: cannot read '")
            << path << "': compile the program's kernel specs into it first";
        return signalPassFailure();
      }
      llvm::Expected<llvm::json::Value> parsed =
          llvm::json::parse((*buf)->getBuffer());
      llvm::json::Object *manifest = parsed ? parsed->getAsObject() : nullptr;
      if (!manifest || !manifest->getArray("kernels")) {
        if (!parsed)
          llvm::consumeError(parsed.takeError());
        module.emitError("coat-export-programs: '")
            << path << "' is not a kernel manifest";
        return signalPassFailure();
      }
      KernelIndex index(*manifest->getArray("kernels"));
      llvm::json::Array described;
      if (auto *old = manifest->getArray("programs"))
        for (llvm::json::Value &p : *old)
          if (auto *o = p.getAsObject())
            if (llvm::none_of(programs, [&](func::FuncOp fn) {
                  return o->getString("name") == fn.getSymName();
                }))
              described.push_back(std::move(p));
      for (func::FuncOp fn : programs) {
        FailureOr<llvm::json::Object> plan = describe(fn, &index);
        if (failed(plan))
          return signalPassFailure();
        described.push_back(std::move(*plan));
      }
      (*manifest)["programs"] = std::move(described);
      std::string text;
      llvm::raw_string_ostream os(text);
      os << llvm::formatv("{0:2}", llvm::json::Value(std::move(*manifest)))
         << "\n";
      std::error_code ec;
      llvm::raw_fd_ostream file(path, ec, llvm::sys::fs::OF_None);
      if (ec) {
        module.emitError("coat-export-programs: cannot write '")
            << path << "': " << ec.message();
        return signalPassFailure();
      }
      file << text;
    }
    if (strip)
      for (func::FuncOp fn : programs)
        fn.erase();
  }
};

} // namespace

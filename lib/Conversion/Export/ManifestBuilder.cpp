//===- ManifestBuilder.cpp - manifest.json from kernel records ------------===//
//
// Kernel records come from the lowerings (`coat.kernel` dictionaries); the
// launch plan of an outlined program is the other half: which program value
// each spec argument and result is at each call, so an executor can run the
// program from the manifest alone, forward and backward apart.
//
//===----------------------------------------------------------------------===//

#include "coat/Conversion/ManifestBuilder.h"
#include "coat/Conversion/KernelRecord.h"
#include "coat/Dialect/CoatDialect.h"
#include "coat/Numerics/Fp8.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::coat;

namespace {

llvm::json::Value toJson(Attribute attr) {
  if (auto d = dyn_cast<DictionaryAttr>(attr)) {
    llvm::json::Object o;
    for (NamedAttribute na : d)
      o[na.getName().str()] = toJson(na.getValue());
    return o;
  }
  if (auto a = dyn_cast<ArrayAttr>(attr)) {
    llvm::json::Array arr;
    for (Attribute e : a)
      arr.push_back(toJson(e));
    return arr;
  }
  if (auto s = dyn_cast<StringAttr>(attr))
    return s.str();
  if (auto b = dyn_cast<BoolAttr>(attr))
    return b.getValue();
  if (auto i = dyn_cast<IntegerAttr>(attr))
    return i.getInt();
  if (auto f = dyn_cast<FloatAttr>(attr))
    return f.getValueAsDouble();
  std::string s;
  llvm::raw_string_ostream os(s);
  attr.print(os);
  return s;
}


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

/// Which spec each of the manifest's kernel records runs.
struct KernelIndex {
  llvm::StringMap<SmallVector<const llvm::json::Object *>> bySpec;

  explicit KernelIndex(const llvm::json::Array &kernels) {
    for (const llvm::json::Value &k : kernels) {
      const llvm::json::Object *o = k.getAsObject();
      if (!o)
        continue;
      std::optional<StringRef> name = o->getString("name");
      if (!name)
        continue;
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

/// The launch plan of `fn`, checked against the kernels in `index`.
FailureOr<llvm::json::Object> describe(func::FuncOp fn,
                                       const KernelIndex &index) {
  DenseMap<Value, int64_t> ids;
  llvm::json::Array values;
  auto define = [&](Value v) -> LogicalResult {
    std::optional<llvm::json::Object> t = typeJson(v.getType());
    if (!t)
      return emitError(v.getLoc())
             << "coat-compile-artifact: a program value of type "
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
    // The caller gives the buffer up: a kernel may write over it.
    if (fn.getArgAttr(i, kWritableAttr))
      in["writable"] = true;
    inputs.push_back(std::move(in));
  }

  llvm::json::Array steps;
  // Values the forward defines that a backward or recompute step reads.
  llvm::SetVector<int64_t> saved;
  // Values of the `recompute` phase: what the caller asks for again,
  // computed on demand, which the backward cannot count on.
  llvm::DenseSet<Value> recomputed;
  for (Operation &op : fn.getBody().front().without_terminator()) {
    auto call = dyn_cast<func::CallOp>(op);
    if (!call)
      return op.emitError("coat-compile-artifact: an outlined program holds "
                          "only calls to kernel specs, found ")
             << op.getName();
    StringRef spec = call.getCallee();
    auto it = index.bySpec.find(spec);
    if (it == index.bySpec.end())
      return call.emitError("coat-compile-artifact: no kernel of this "
                            "artifact runs @")
             << spec;
    for (const llvm::json::Object *k : it->second)
      if (std::optional<std::string> why = unbound(*k))
        return call.emitError("coat-compile-artifact: kernel '")
               << k->getString("name").value_or(spec) << "' of @" << spec
               << " cannot run from a program: " << *why;
    bool isRecompute = recomputesOutput(call);
    bool isBackward = !isRecompute && runsInBackward(call, backward);
    llvm::json::Array operands, results;
    for (Value v : call.getOperands()) {
      auto it = ids.find(v);
      if (it == ids.end())
        return call.emitError("coat-compile-artifact: operand defined "
                              "outside the program's calls and arguments");
      if (recomputed.contains(v) && !isRecompute)
        return call.emitError("coat-compile-artifact: only the recompute "
                              "phase reads what it computes");
      operands.push_back(it->second);
    }
    for (Value r : call.getResults()) {
      if (failed(define(r)))
        return failure();
      results.push_back(ids[r]);
      if (isBackward)
        backward.insert(r);
      if (isRecompute)
        recomputed.insert(r);
    }
    if (isBackward || isRecompute)
      for (Value v : call.getOperands())
        if (!backward.contains(v) && !recomputed.contains(v))
          saved.insert(ids[v]);
    StringRef phase = isRecompute  ? "recompute"
                      : isBackward ? "backward"
                                   : "forward";
    steps.push_back(llvm::json::Object{
        {"spec", spec},
        {"phase", phase},
        {"operands", std::move(operands)},
        {"results", std::move(results)}});
  }

  llvm::json::Array outputs;
  auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    StringRef phase = recomputed.contains(v) ? "recompute"
                      : backward.contains(v)  ? "backward"
                                              : "forward";
    llvm::json::Object out{{"value", ids[v]}, {"phase", phase}};
    if (auto g = fn.getResultAttrOfType<IntegerAttr>(i, kGradOfAttr))
      out["grad_of"] = g.getInt();
    if (auto r = fn.getResultAttrOfType<IntegerAttr>(i, kRecomputeOfAttr))
      out["recompute_of"] = r.getInt();
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


/// The FP8 facts readers take from the manifest rather than restate them
/// (docs/manifest.md, "formats").
llvm::json::Object formatsJson() {
  llvm::json::Object formats;
  for (::coat::Fp8Format f : {::coat::Fp8Format::E4M3, ::coat::Fp8Format::E5M2}) {
    ::coat::Fp8Traits t = ::coat::getFp8Traits(f);
    formats[t.name] = llvm::json::Object{{"mlir_type", t.mlirType},
                                         {"exponent_bits", t.exponentBits},
                                         {"mantissa_bits", t.mantissaBits},
                                         {"exponent_bias", t.exponentBias},
                                         {"has_infinity", t.hasInfinity},
                                         {"max_finite", t.maxFinite},
                                         {"min_normal", t.minNormal},
                                         {"min_subnormal", t.minSubnormal}};
  }
  return formats;
}

} // namespace

void ManifestBuilder::setTarget(StringRef chip, StringRef features) {
  target = llvm::json::Object{{"chip", chip}, {"features", features}};
}

llvm::json::Object *ManifestBuilder::findKernel(StringRef name) {
  for (llvm::json::Value &k : kernels)
    if (auto *o = k.getAsObject())
      if (o->getString("name") == name)
        return o;
  return nullptr;
}

void ManifestBuilder::addKernel(DictionaryAttr record, StringRef section,
                                llvm::json::Object where) {
  llvm::json::Object fresh = std::move(*toJson(record).getAsObject());
  StringRef name = record.getAs<StringAttr>("name").getValue();
  llvm::json::Object *entry = findKernel(name);
  if (!entry) {
    kernels.push_back(llvm::json::Object{});
    entry = kernels.back().getAsObject();
  }
  for (auto &kv : fresh) {
    llvm::json::Object *into = entry->getObject(kv.first);
    llvm::json::Object *from = kv.second.getAsObject();
    if (into && from) {
      for (auto &field : *from)
        (*into)[field.first] = std::move(field.second);
      continue;
    }
    (*entry)[kv.first] = std::move(kv.second);
  }
  (*entry)[section] = std::move(where);
}

LogicalResult ManifestBuilder::addProgram(func::FuncOp program) {
  KernelIndex index(kernels);
  FailureOr<llvm::json::Object> plan = describe(program, index);
  if (failed(plan))
    return failure();
  programs.push_back(std::move(*plan));
  return success();
}

std::string ManifestBuilder::text(StringRef sourceKey) const {
  llvm::json::Object manifest{{"format", "coat-manifest"},
                              {"version", 1},
                              {"formats", formatsJson()},
                              {"kernels", llvm::json::Array(kernels)}};
  if (target)
    manifest["target"] = llvm::json::Object(*target);
  if (!programs.empty())
    manifest["programs"] = llvm::json::Array(programs);
  if (!sourceKey.empty())
    manifest["source_key"] = sourceKey;
  std::string out;
  llvm::raw_string_ostream os(out);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(manifest))) << "\n";
  return out;
}

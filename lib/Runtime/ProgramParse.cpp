//===- ProgramParse.cpp - the manifest's programs section -----------------===//
//
// Reads `programs` (docs/manifest.md, "Programs") into the Program model and
// checks it whole against the kernels read before: every call's kernels exist
// and bind every argument; every binding parses, names a value of its call
// and agrees with that value's type; values are defined before use; the
// backward reads only what the forward saves. Each call's plan is then made
// for one token count, which checks every launch it will make (sizes, 2-D
// rules, max_cols). So a manifest an executor cannot follow is refused when
// it is read, naming the program, the entry and the reason.
//
//===----------------------------------------------------------------------===//

#include "ManifestReader.h"

#include <optional>

namespace coat::rt {

namespace {

using json::Value;

/// The token count whose plans are made at load time: a multiple of every
/// group and block size, so that a dynamic extent divides like a real one.
constexpr int64_t kTrialTokens = 256;

bool isDecimal(const std::string &s) {
  return !s.empty() && s.size() < 10 &&
         s.find_first_not_of("0123456789") == std::string::npos;
}

/// `in2`, `out0.scale`.
std::optional<ValueRef> parseRef(const std::string &text) {
  ValueRef ref;
  size_t pos;
  if (text.rfind("out", 0) == 0) {
    ref.result = true;
    pos = 3;
  } else if (text.rfind("in", 0) == 0) {
    pos = 2;
  } else {
    return std::nullopt;
  }
  size_t dot = text.find('.', pos);
  std::string index = text.substr(pos, dot == std::string::npos ? dot : dot - pos);
  if (!isDecimal(index))
    return std::nullopt;
  ref.index = unsigned(std::stoul(index));
  if (dot != std::string::npos) {
    std::string part = text.substr(dot + 1);
    if (part == "codes")
      ref.part = ValueRef::Part::Codes;
    else if (part == "scale")
      ref.part = ValueRef::Part::Scale;
    else
      return std::nullopt;
  }
  return ref;
}

/// `rows(in0)`, `cols(out1)`, `numel(in0)`, `ceildiv(E,k)`.
std::optional<ExtentExpr> parseExtentExpr(const std::string &text) {
  if (text.empty() || text.back() != ')')
    return std::nullopt;
  const std::string ceildiv = "ceildiv(";
  if (text.rfind(ceildiv, 0) == 0) {
    size_t comma = text.rfind(',');
    if (comma == std::string::npos || comma < ceildiv.size())
      return std::nullopt;
    std::string divisor = text.substr(comma + 1, text.size() - comma - 2);
    if (!isDecimal(divisor) || std::stoll(divisor) <= 0)
      return std::nullopt;
    std::optional<ExtentExpr> inner =
        parseExtentExpr(text.substr(ceildiv.size(), comma - ceildiv.size()));
    if (inner)
      inner->divisors.push_back(std::stoll(divisor));
    return inner;
  }
  for (auto [name, measure] :
       {std::pair<std::string, ExtentExpr::Measure>{"rows(", ExtentExpr::Measure::Rows},
        {"cols(", ExtentExpr::Measure::Cols},
        {"numel(", ExtentExpr::Measure::Numel}}) {
    if (text.rfind(name, 0) != 0)
      continue;
    std::optional<ValueRef> ref =
        parseRef(text.substr(name.size(), text.size() - name.size() - 1));
    if (!ref || ref->part != ValueRef::Part::Whole)
      return std::nullopt;
    ExtentExpr e;
    e.measure = measure;
    e.of = *ref;
    return e;
  }
  return std::nullopt;
}

/// One argument's binding; false with the reason.
bool parseBinding(const ArgSpec &arg, Binding &out, std::string &why) {
  const std::vector<std::string> &bind = arg.bind;
  if (bind.empty()) {
    why = "has no binding (compiled by an older coat-opt?)";
    return false;
  }
  if (arg.kind == ArgSpec::Kind::Scalar) {
    if (bind.size() != 1) {
      why = "is a scalar bound to " + std::to_string(bind.size()) + " names";
      return false;
    }
    if (arg.dtype != "i64" && arg.dtype != "i32") {
      why = "is an " + arg.dtype + " scalar; bindings give integers";
      return false;
    }
    if (bind[0] == "free") {
      out.kind = Binding::Kind::Free;
      return true;
    }
    std::optional<ExtentExpr> e = parseExtentExpr(bind[0]);
    if (!e) {
      why = "binds '" + bind[0] + "', not an extent expression (rows(R), "
            "cols(R), numel(R) or ceildiv(E,k) of in<i>/out<i>, or free)";
      return false;
    }
    out.kind = Binding::Kind::Extent;
    out.extent = *e;
    return true;
  }
  if (bind.size() == 1 && bind[0] == "scratch") {
    out.kind = Binding::Kind::Scratch;
    return true;
  }
  const std::string finite = "finite(";
  if (bind.size() == 1 && bind[0].rfind(finite, 0) == 0) {
    std::optional<ValueRef> ref;
    if (bind[0].back() == ')')
      ref = parseRef(bind[0].substr(finite.size(),
                                    bind[0].size() - finite.size() - 1));
    if (!ref || !ref->result || ref->part != ValueRef::Part::Whole) {
      why = "binds '" + bind[0] + "', not finite(out<i>)";
      return false;
    }
    if (arg.dtype != "i32") {
      why = "is a finiteness flag of dtype " + arg.dtype + ", not i32";
      return false;
    }
    out.kind = Binding::Kind::Flag;
    out.names = {*ref};
    return true;
  }
  out.kind = Binding::Kind::Buffer;
  for (const auto &name : bind) {
    std::optional<ValueRef> ref = parseRef(name);
    if (!ref) {
      why = "binds '" + name + "', not a value reference (in<i> or out<i>, "
            "with .codes or .scale), scratch or finite(out<i>)";
      return false;
    }
    out.names.push_back(*ref);
  }
  return true;
}

std::string refText(const ValueRef &ref) {
  std::string s = (ref.result ? "out" : "in") + std::to_string(ref.index);
  if (ref.part == ValueRef::Part::Codes)
    s += ".codes";
  else if (ref.part == ValueRef::Part::Scale)
    s += ".scale";
  return s;
}

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// Reads and checks one program; `where` names it ("programs[0] ('p')").
class ProgramReader {
public:
  ProgramReader(Reader &r, const Manifest &m, std::string where, Program &p)
      : r(r), m(m), where(std::move(where)), p(p) {}

  bool read(const Value &doc) {
    const Value *values = r.member(doc, where, "values", Value::Type::Array, true);
    const Value *inputs = r.member(doc, where, "inputs", Value::Type::Array, true);
    const Value *steps = r.member(doc, where, "steps", Value::Type::Array, true);
    const Value *outputs = r.member(doc, where, "outputs", Value::Type::Array, true);
    const Value *saved = r.member(doc, where, "saved", Value::Type::Array, true);
    if (!values || !inputs || !steps || !outputs || !saved)
      return false;
    for (size_t i = 0; i < values->array.size(); ++i)
      if (!readValue(values->array[i], where + ".values[" + std::to_string(i) + "]"))
        return false;
    for (size_t i = 0; i < inputs->array.size(); ++i)
      if (!readInput(inputs->array[i], where + ".inputs[" + std::to_string(i) + "]"))
        return false;
    for (size_t i = 0; i < steps->array.size(); ++i)
      if (!readStep(steps->array[i], where + ".steps[" + std::to_string(i) + "]"))
        return false;
    for (size_t i = 0; i < outputs->array.size(); ++i)
      if (!readOutput(outputs->array[i], where + ".outputs[" + std::to_string(i) + "]"))
        return false;
    if (!ids(*saved, where + ".saved", p.saved))
      return false;
    return checkDataflow() && checkOverwrites() && checkGrads() && checkPlans();
  }

private:
  Reader &r;
  const Manifest &m;
  std::string where;
  Program &p;

  bool id(const Value &v, const std::string &w, int64_t &out) {
    if (!r.toInt(v, w, out, 0))
      return false;
    if (size_t(out) >= p.values.size())
      return r.fail(w, "value " + std::to_string(out) + " does not exist (" +
                           std::to_string(p.values.size()) + " values)");
    return true;
  }

  bool ids(const Value &list, const std::string &w, std::vector<int64_t> &out) {
    if (!list.isArray())
      return r.fail(w, "expected an array of value ids");
    for (size_t i = 0; i < list.array.size(); ++i) {
      int64_t v;
      if (!id(list.array[i], w + "[" + std::to_string(i) + "]", v))
        return false;
      out.push_back(v);
    }
    return true;
  }

  bool phase(const Value &obj, const std::string &w, Phase &out) {
    std::string phase;
    if (!r.string(obj, w, "phase", phase, true))
      return false;
    if (phase == "forward")
      out = Phase::Forward;
    else if (phase == "recompute")
      out = Phase::Recompute;
    else if (phase == "backward")
      out = Phase::Backward;
    else
      return r.fail(w + ".phase", "expected \"forward\", \"recompute\" or "
                                  "\"backward\", got \"" + phase + "\"");
    return true;
  }

  bool readValue(const Value &v, const std::string &w) {
    if (!v.isObject())
      return r.fail(w, "expected an object");
    ValueType t;
    std::string kind;
    const Value *shape = r.member(v, w, "shape", Value::Type::Array, true);
    if (!r.string(v, w, "kind", kind, true) || !shape ||
        !r.string(v, w, "dtype", t.dtype, true))
      return false;
    if (kind != "tensor" && kind != "qtensor")
      return r.fail(w + ".kind", "expected \"tensor\" or \"qtensor\", got \"" +
                                     kind + "\"");
    t.quantized = kind == "qtensor";
    for (size_t i = 0; i < shape->array.size(); ++i) {
      int64_t d;
      if (!r.toInt(shape->array[i], w + ".shape[" + std::to_string(i) + "]", d, -1))
        return false;
      if (d == 0)
        return r.fail(w + ".shape", "extents are positive, or -1 (the token count)");
      t.shape.push_back(d);
    }
    if (!t.quantized) {
      if (!dtypeSize(t.dtype))
        return r.fail(w + ".dtype", "unknown dtype '" + t.dtype + "'");
    } else if (!readQuantized(v, w, t)) {
      return false;
    }
    p.values.push_back(std::move(t));
    return true;
  }

  /// A qtensor's format, scaling and scale tensor; its scale shape must be
  /// Layout.h's.
  bool readQuantized(const Value &v, const std::string &w, ValueType &t) {
    if (t.dtype != "e4m3" && t.dtype != "e5m2")
      return r.fail(w + ".dtype", "a qtensor holds e4m3 or e5m2 codes, not '" +
                                      t.dtype + "'");
    std::string scaling;
    const Value *scaleShape =
        r.member(v, w, "scale_shape", Value::Type::Array, true);
    if (!r.string(v, w, "scaling", scaling, true) ||
        !r.string(v, w, "scale_dtype", t.scaleDtype, true) || !scaleShape)
      return false;
    std::optional<Scaling> s = parseScaling(scaling);
    if (!s)
      return r.fail(w + ".scaling", "unknown scaling '" + scaling + "'");
    t.scaling = *s;
    if (t.scaleDtype != "f32" && t.scaleDtype != "bf16")
      return r.fail(w + ".scale_dtype", "expected f32 or bf16, got '" +
                                            t.scaleDtype + "'");
    std::vector<int64_t> layout;
    for (int64_t d : t.shape)
      layout.push_back(d < 0 ? kDynamicExtent : d);
    if (std::optional<std::string> err = verifyScalingForShape(layout, t.scaling))
      return r.fail(w, scaling + " does not fit the shape " +
                           shapeText(t.shape) + ": " + *err);
    std::vector<int64_t> want = recordedShape(t, ValueRef::Part::Scale);
    std::vector<int64_t> got;
    for (const Value &d : scaleShape->array)
      got.push_back(d.isNumber() ? int64_t(d.number) : INT64_MIN);
    if (got != want)
      return r.fail(w + ".scale_shape",
                    shapeText(got) + " is not " + shapeText(want) +
                        ", the scale shape of " + scaling + " for " +
                        shapeText(t.shape));
    return true;
  }

  bool readInput(const Value &v, const std::string &w) {
    if (!v.isObject())
      return r.fail(w, "expected an object");
    ProgramInput in;
    std::string role;
    const Value *value = v.get("value");
    if (!value)
      return r.fail(w, "missing required field 'value'");
    if (!id(*value, w + ".value", in.value) ||
        !r.string(v, w, "role", role, true) ||
        !r.integer(v, w, "grad_of", in.gradOf, false, 0))
      return false;
    if (const Value *wr = r.member(v, w, "writable", Value::Type::Bool, false))
      in.writable = wr->boolean;
    else if (!r.error.empty())
      return false;
    if (role == "activation")
      in.role = ProgramInput::Role::Activation;
    else if (role == "weight")
      in.role = ProgramInput::Role::Weight;
    else if (role == "gradient")
      in.role = ProgramInput::Role::Gradient;
    else
      return r.fail(w + ".role", "expected \"activation\", \"weight\" or "
                                 "\"gradient\", got \"" + role + "\"");
    if (in.writable && in.role != ProgramInput::Role::Activation)
      return r.fail(w + ".writable", "only an activation input can be given "
                                     "up; a weight or gradient is the caller's "
                                     "to keep");
    p.inputs.push_back(in);
    return true;
  }

  bool readOutput(const Value &v, const std::string &w) {
    if (!v.isObject())
      return r.fail(w, "expected an object");
    ProgramOutput out;
    const Value *value = v.get("value");
    if (!value)
      return r.fail(w, "missing required field 'value'");
    if (!id(*value, w + ".value", out.value) || !phase(v, w, out.phase) ||
        !r.integer(v, w, "grad_of", out.gradOf, false, 0) ||
        !r.integer(v, w, "recompute_of", out.recomputeOf, false, 0))
      return false;
    p.outputs.push_back(out);
    return true;
  }

  bool readStep(const Value &v, const std::string &w) {
    if (!v.isObject())
      return r.fail(w, "expected an object");
    ProgramStep step;
    const Value *operands = r.member(v, w, "operands", Value::Type::Array, true);
    const Value *results = r.member(v, w, "results", Value::Type::Array, true);
    if (!r.string(v, w, "spec", step.spec, true) || !phase(v, w, step.phase) ||
        !operands || !results)
      return false;
    std::string sw = w + " ('" + step.spec + "')";
    if (!ids(*operands, sw + ".operands", step.operands) ||
        !ids(*results, sw + ".results", step.results))
      return false;
    // The spec's own kernel first, then those that finish it (config.of),
    // in manifest order.
    const KernelSpec *own = m.find(step.spec);
    if (!own)
      return r.fail(sw, "no kernel '" + step.spec + "' in the manifest runs the call");
    step.kernels.push_back({size_t(own - m.kernels.data()), {}});
    for (size_t k = 0; k < m.kernels.size(); ++k)
      if (m.kernels[k].of == step.spec && &m.kernels[k] != own)
        step.kernels.push_back({k, {}});
    for (CallKernel &call : step.kernels)
      if (!bindKernel(step, call, sw))
        return false;
    p.steps.push_back(std::move(step));
    return true;
  }

  /// Parses the bindings of one kernel of a call and checks them against the
  /// call's values.
  bool bindKernel(const ProgramStep &step, CallKernel &call, const std::string &sw) {
    const KernelSpec &k = m.kernels[call.kernel];
    for (const ArgSpec &a : k.args) {
      std::string aw = "kernel '" + k.name + "' argument '" + a.name + "' ";
      Binding b;
      std::string why;
      if (!parseBinding(a, b, why))
        return r.fail(sw, aw + why);
      std::vector<ValueRef> refs = b.names;
      if (b.kind == Binding::Kind::Extent)
        refs.push_back(b.extent.of);
      const ValueType *first = nullptr;
      for (const ValueRef &ref : refs) {
        const std::vector<int64_t> &ids = ref.result ? step.results : step.operands;
        if (ref.index >= ids.size())
          return r.fail(sw, aw + "binds " + refText(ref) + ", the call has " +
                                std::to_string(ids.size()) +
                                (ref.result ? " result(s)" : " operand(s)"));
        if (b.kind != Binding::Kind::Buffer)
          continue;
        const ValueType &t = p.values[size_t(ids[ref.index])];
        if (!t.quantized && ref.part != ValueRef::Part::Whole)
          return r.fail(sw, aw + "binds " + refText(ref) + ", but value " +
                                std::to_string(ids[ref.index]) +
                                " is a tensor (it has no parts)");
        if (t.quantized && ref.part == ValueRef::Part::Whole)
          return r.fail(sw, aw + "binds " + refText(ref) + ", but value " +
                                std::to_string(ids[ref.index]) +
                                " is a qtensor (bind its .codes or .scale)");
        const std::string &dtype =
            ref.part == ValueRef::Part::Scale ? t.scaleDtype : t.dtype;
        if (dtype != a.dtype)
          return r.fail(sw, aw + "(" + a.dtype + ") binds " + refText(ref) +
                                ", a " + dtype + " buffer");
        // Names of one buffer are one shape (a given scale and the scale
        // of the results that share it).
        if (first && recordedShape(*first, b.names.front().part) !=
                         recordedShape(t, ref.part))
          return r.fail(sw, aw + "binds " + refText(b.names.front()) + " and " +
                                refText(ref) + " to one buffer, but their "
                                "shapes differ");
        if (!first)
          first = &t;
      }
      call.bindings.push_back(std::move(b));
    }
    return true;
  }

  std::string stepWhere(size_t i) const {
    return where + ".steps[" + std::to_string(i) + "] ('" + p.steps[i].spec + "')";
  }

  /// Every value is an input or one call's result, defined before it is
  /// read; the forward never reads what a later phase computes, the
  /// backward and the recompute phase read from the forward only what it
  /// saves, and only the recompute phase reads what it computes (it runs
  /// when the caller asks, if at all).
  bool checkDataflow() {
    enum class Def { None, Forward, Recompute, Backward };
    auto defOf = [](Phase phase) {
      return phase == Phase::Forward     ? Def::Forward
             : phase == Phase::Recompute ? Def::Recompute
                                         : Def::Backward;
    };
    std::vector<Def> def(p.values.size(), Def::None);
    for (size_t i = 0; i < p.inputs.size(); ++i) {
      const ProgramInput &in = p.inputs[i];
      if (def[size_t(in.value)] != Def::None)
        return r.fail(where + ".inputs[" + std::to_string(i) + "]",
                      "value " + std::to_string(in.value) + " is input twice");
      def[size_t(in.value)] = in.role == ProgramInput::Role::Gradient
                                  ? Def::Backward
                                  : Def::Forward;
    }
    std::vector<bool> saved(p.values.size(), false);
    for (size_t i = 0; i < p.saved.size(); ++i)
      saved[size_t(p.saved[i])] = true;
    for (size_t s = 0; s < p.steps.size(); ++s) {
      const ProgramStep &step = p.steps[s];
      for (int64_t v : step.operands) {
        std::string what = "reads value " + std::to_string(v);
        if (def[size_t(v)] == Def::None)
          return r.fail(stepWhere(s), what + " before any input or call defines it");
        if (step.phase != Phase::Backward && def[size_t(v)] == Def::Backward)
          return r.fail(stepWhere(s), std::string(step.phase == Phase::Forward
                                                      ? "a forward"
                                                      : "a recompute") +
                                          " call " + what +
                                          ", which depends on a gradient");
        if (step.phase != Phase::Recompute && def[size_t(v)] == Def::Recompute)
          return r.fail(stepWhere(s),
                        std::string(step.phase == Phase::Forward
                                        ? "a forward"
                                        : "a backward") +
                            " call " + what + ", which the recompute phase "
                            "computes (it runs only when the caller asks)");
        if (step.phase != Phase::Forward && def[size_t(v)] == Def::Forward &&
            !saved[size_t(v)])
          return r.fail(stepWhere(s),
                        std::string(step.phase == Phase::Backward
                                        ? "the backward "
                                        : "the recompute phase ") +
                            what + ", which the forward does not save");
      }
      for (int64_t v : step.results) {
        if (def[size_t(v)] != Def::None)
          return r.fail(stepWhere(s), "value " + std::to_string(v) +
                                          " is defined twice");
        def[size_t(v)] = defOf(step.phase);
      }
    }
    for (size_t v = 0; v < def.size(); ++v)
      if (def[v] == Def::None)
        return r.fail(where + ".values[" + std::to_string(v) + "]",
                      "neither an input nor a call's result");
    for (size_t i = 0; i < p.saved.size(); ++i)
      if (def[size_t(p.saved[i])] != Def::Forward)
        return r.fail(where + ".saved[" + std::to_string(i) + "]",
                      "value " + std::to_string(p.saved[i]) +
                          " is computed by the backward, not saved by the forward");
    for (size_t i = 0; i < p.outputs.size(); ++i)
      if (defOf(p.outputs[i].phase) != def[size_t(p.outputs[i].value)])
        return r.fail(where + ".outputs[" + std::to_string(i) + "]",
                      "value " + std::to_string(p.outputs[i].value) +
                          " is not computed in the phase the output names");
    return checkRecomputed();
  }

  /// A `recompute` output names, with `recompute_of`, the forward output
  /// it is a copy of (same type, one copy each); no other output names one.
  bool checkRecomputed() {
    std::vector<bool> named(p.outputs.size(), false);
    for (size_t i = 0; i < p.outputs.size(); ++i) {
      const ProgramOutput &out = p.outputs[i];
      std::string w = where + ".outputs[" + std::to_string(i) + "]";
      bool recompute = out.phase == Phase::Recompute;
      if (!recompute && out.recomputeOf >= 0)
        return r.fail(w + ".recompute_of",
                      "only an output of the recompute phase copies a forward output");
      if (!recompute)
        continue;
      if (out.recomputeOf < 0)
        return r.fail(w, "an output of the recompute phase needs 'recompute_of', "
                         "the forward output it copies");
      if (out.recomputeOf >= int64_t(p.outputs.size()) ||
          p.outputs[size_t(out.recomputeOf)].phase != Phase::Forward)
        return r.fail(w + ".recompute_of",
                      "output " + std::to_string(out.recomputeOf) +
                          " is not a forward output");
      const ProgramOutput &of = p.outputs[size_t(out.recomputeOf)];
      const ValueType &a = p.values[size_t(out.value)];
      const ValueType &b = p.values[size_t(of.value)];
      if (a.quantized != b.quantized || a.shape != b.shape || a.dtype != b.dtype)
        return r.fail(w + ".recompute_of",
                      "value " + std::to_string(out.value) + " " + shapeText(a.shape) +
                          " " + a.dtype + " is not of output " +
                          std::to_string(out.recomputeOf) + "'s type " +
                          shapeText(b.shape) + " " + b.dtype);
      if (named[size_t(out.recomputeOf)])
        return r.fail(w + ".recompute_of",
                      "output " + std::to_string(out.recomputeOf) +
                          " has another recomputed copy");
      named[size_t(out.recomputeOf)] = true;
    }
    return true;
  }

  /// A kernel that binds a result's values to an operand's buffer writes
  /// the result over the operand (an in-place rotary embedding), so that
  /// operand must be the program's own and read by that call alone: not an
  /// input (the caller's, unless it gives it up: `writable`), an output or a
  /// saved value. A result's scale
  /// bound to a given per-tensor scale shares it unchanged and consumes
  /// nothing.
  bool checkOverwrites() {
    std::vector<int> reads(p.values.size(), 0);
    for (const ProgramStep &step : p.steps)
      for (int64_t v : step.operands)
        ++reads[size_t(v)];
    std::vector<bool> input(p.values.size(), false), kept(p.values.size(), false);
    for (const ProgramInput &in : p.inputs)
      input[size_t(in.value)] = !in.writable;
    for (const ProgramOutput &out : p.outputs)
      kept[size_t(out.value)] = true;
    for (int64_t v : p.saved)
      kept[size_t(v)] = true;
    for (size_t s = 0; s < p.steps.size(); ++s) {
      const ProgramStep &step = p.steps[s];
      for (const CallKernel &call : step.kernels)
        for (const Binding &b : call.bindings) {
          const ValueRef *operand = nullptr;
          bool writes = false;
          for (const ValueRef &ref : b.names) {
            if (ref.part == ValueRef::Part::Scale)
              continue;
            if (ref.result)
              writes = true;
            else
              operand = &ref;
          }
          if (!operand || !writes)
            continue;
          int64_t v = step.operands[operand->index];
          std::string what = "kernel '" + m.kernels[call.kernel].name +
                             "' writes its result over value " +
                             std::to_string(v) + ", which ";
          if (input[size_t(v)])
            return r.fail(stepWhere(s), what + "is a program input (the caller's)");
          if (kept[size_t(v)])
            return r.fail(stepWhere(s), what + "the program outputs or saves");
          if (reads[size_t(v)] > 1)
            return r.fail(stepWhere(s), what + "is read elsewhere too");
        }
    }
    return true;
  }

  /// `grad_of` of an input names an output, of an output an input.
  bool checkGrads() {
    for (size_t i = 0; i < p.inputs.size(); ++i)
      if (p.inputs[i].gradOf >= int64_t(p.outputs.size()))
        return r.fail(where + ".inputs[" + std::to_string(i) + "].grad_of",
                      "no output " + std::to_string(p.inputs[i].gradOf));
    for (size_t i = 0; i < p.outputs.size(); ++i)
      if (p.outputs[i].gradOf >= int64_t(p.inputs.size()))
        return r.fail(where + ".outputs[" + std::to_string(i) + "].grad_of",
                      "no input " + std::to_string(p.outputs[i].gradOf));
    return true;
  }

  /// Makes every call's plan once: what only sizes tell (an extent the
  /// kernel computes otherwise, a row wider than max_cols, a result no
  /// kernel writes) is refused here, not at the first launch.
  bool checkPlans() {
    for (size_t s = 0; s < p.steps.size(); ++s) {
      StepPlan plan;
      std::string why;
      if (!planStep(m, p, s, kTrialTokens, nullptr, plan, why))
        return r.fail(stepWhere(s), why + " (planned for " +
                                        std::to_string(kTrialTokens) + " tokens)");
    }
    return true;
  }
};

} // namespace

bool parsePrograms(Reader &r, const Value &programs, Manifest &out) {
  for (size_t i = 0; i < programs.array.size(); ++i) {
    const Value &doc = programs.array[i];
    std::string w = "programs[" + std::to_string(i) + "]";
    Program p;
    if (!doc.isObject())
      return r.fail(w, "expected an object");
    if (!r.string(doc, w, "name", p.name, true))
      return false;
    if (out.findProgram(p.name))
      return r.fail(w, "duplicate program name '" + p.name + "'");
    if (!ProgramReader(r, out, w + " ('" + p.name + "')", p).read(doc))
      return false;
    out.programs.push_back(std::move(p));
  }
  return true;
}

} // namespace coat::rt

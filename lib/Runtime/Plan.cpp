//===- Plan.cpp - one call of a program for one token count ---------------===//
//
// Follows a call's bindings (docs/manifest.md, "Bindings"): evaluates the
// scalars from the call's shapes, finds each buffer (an operand or one of its
// parts, a result to allocate, a result that shares an operand's buffer, a
// workspace), and checks every launch with the rules of LaunchArgs.cpp. It
// knows no op. The program was validated when it was read (ProgramParse.cpp).
//
//===----------------------------------------------------------------------===//

#include "coat/Runtime/Manifest.h"

#include <algorithm>

namespace coat::rt {

namespace {

int64_t product(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

const char *partName(ValueRef::Part part) {
  return part == ValueRef::Part::Codes ? "codes"
         : part == ValueRef::Part::Scale ? "scale"
                                         : "buffer";
}

/// Plans one call; `error` is the reason, without the call's name.
class CallPlanner {
public:
  CallPlanner(const Manifest &m, const Program &p, const ProgramStep &step,
              int64_t tokens, const ResidentBlocks &resident, StepPlan &out,
              std::string &error)
      : m(m), p(p), step(step), tokens(tokens), resident(resident), out(out),
        error(error) {}

  bool plan() {
    for (const CallKernel &call : step.kernels)
      if (!launch(call))
        return false;
    return collectResults();
  }

private:
  const Manifest &m;
  const Program &p;
  const ProgramStep &step;
  int64_t tokens;
  const ResidentBlocks &resident;
  StepPlan &out;
  std::string &error;
  /// Result parts written so far: each is the buffer of the first binding
  /// that names it.
  std::vector<std::pair<std::pair<int64_t, ValueRef::Part>, BufferSource>> parts;
  std::vector<std::pair<std::string, int64_t>> scratchByName;
  NamedScalars free; ///< one value per name and call

  int64_t valueOf(const ValueRef &ref) const {
    return (ref.result ? step.results : step.operands)[ref.index];
  }

  const BufferSource *written(int64_t value, ValueRef::Part part) const {
    for (const auto &[key, src] : parts)
      if (key.first == value && key.second == part)
        return &src;
    return nullptr;
  }

  bool extent(const ExtentExpr &e, int64_t &v) {
    std::vector<int64_t> shape;
    if (!partShape(p.values[size_t(valueOf(e.of))], ValueRef::Part::Whole,
                   tokens, shape, error))
      return false;
    int64_t numel = product(shape);
    int64_t cols = shape.empty() ? 1 : shape.back();
    v = e.measure == ExtentExpr::Measure::Numel  ? numel
        : e.measure == ExtentExpr::Measure::Cols ? cols
                                                 : numel / std::max<int64_t>(cols, 1);
    for (int64_t d : e.divisors)
      v = (v + d - 1) / d;
    return true;
  }

  /// The caller's choice, one per name and call: a norm backward's row
  /// kernel and its reduction share their `partials`.
  bool freeScalar(const KernelSpec &k, const ArgSpec &a,
                  const NamedScalars &named, int64_t &v) {
    for (const auto &[name, value] : free)
      if (name == a.name) {
        v = value;
        return true;
      }
    auto rows = std::find_if(named.begin(), named.end(),
                             [](const auto &s) { return s.first == "rows"; });
    if (rows == named.end()) {
      error = "kernel '" + k.name + "' leaves '" + a.name +
              "' free before any kernel of the call bound rows";
      return false;
    }
    int64_t ctas = resident ? resident(k) : kCpuResidentBlocks;
    if (ctas <= 0) {
      error = "no resident-block count for kernel '" + k.name + "'";
      return false;
    }
    v = defaultPartials(k, rows->second, ctas);
    free.push_back({a.name, v});
    return true;
  }

  bool scalars(const KernelSpec &k, const CallKernel &call, PlannedLaunch &l,
               NamedScalars &named) {
    for (size_t i = 0; i < k.args.size(); ++i) {
      const ArgSpec &a = k.args[i];
      if (a.kind != ArgSpec::Kind::Scalar)
        continue;
      const Binding &b = call.bindings[i];
      int64_t v = 0;
      if (b.kind == Binding::Kind::Extent ? !extent(b.extent, v)
                                          : !freeScalar(k, a, named, v))
        return false;
      named.push_back({a.name, v});
      l.scalars.push_back(v);
    }
    return true;
  }

  /// A new buffer for a result part.
  bool allocate(int64_t value, ValueRef::Part part, BufferSource &src) {
    const ValueType &t = p.values[size_t(value)];
    PlannedBuffer buf;
    if (!partShape(t, part, tokens, buf.shape, error))
      return false;
    buf.dtype = part == ValueRef::Part::Scale ? t.scaleDtype : t.dtype;
    src = {BufferSource::Kind::Alloc, int64_t(out.allocs.size()),
           ValueRef::Part::Whole};
    out.allocs.push_back(std::move(buf));
    return true;
  }

  /// The buffer of one argument bound to values: the first operand it
  /// names, else the first result part already written, else a new one; the
  /// result parts it names not yet written become that buffer.
  bool buffer(const Binding &b, BufferSource &src, int64_t &numel) {
    const BufferSource *found = nullptr;
    BufferSource operand;
    for (const ValueRef &ref : b.names) {
      if (!ref.result) {
        operand = {BufferSource::Kind::Value, valueOf(ref), ref.part};
        found = &operand;
        break;
      }
      if ((found = written(valueOf(ref), ref.part)))
        break;
    }
    if (found)
      src = *found;
    bool have = found != nullptr;
    for (const ValueRef &ref : b.names) {
      if (!ref.result || written(valueOf(ref), ref.part))
        continue;
      if (!have && !allocate(valueOf(ref), ref.part, src))
        return false;
      have = true;
      parts.push_back({{valueOf(ref), ref.part}, src});
    }
    std::vector<int64_t> shape;
    if (src.kind == BufferSource::Kind::Alloc) {
      shape = out.allocs[size_t(src.index)].shape;
    } else if (!partShape(p.values[size_t(src.index)], src.part, tokens, shape,
                          error)) {
      return false;
    }
    numel = product(shape);
    return true;
  }

  /// The flag word of a result the program returns.
  bool flag(const KernelSpec &k, const ArgSpec &a, const Binding &b,
            BufferSource &src) {
    const ValueRef &ref = b.names.front();
    if (ref.index >= step.results.size()) {
      error = "kernel '" + k.name + "' argument '" + a.name + "' flags out" +
              std::to_string(ref.index) + ", but the call has " +
              std::to_string(step.results.size()) + " results";
      return false;
    }
    int64_t v = valueOf(ref);
    for (size_t i = 0; i < p.outputs.size(); ++i)
      if (p.outputs[i].value == v) {
        src = {BufferSource::Kind::Flag, int64_t(i), ValueRef::Part::Whole};
        return true;
      }
    error = "kernel '" + k.name + "' argument '" + a.name + "' flags value " +
            std::to_string(v) + ", which the program does not return";
    return false;
  }

  int64_t scratch(const ArgSpec &a) {
    for (const auto &[name, index] : scratchByName)
      if (name == a.name)
        return index;
    scratchByName.push_back({a.name, int64_t(out.scratch.size())});
    out.scratch.push_back({{-1}, a.dtype}); // sized once n is known
    return scratchByName.back().second;
  }

  bool launch(const CallKernel &call) {
    const KernelSpec &k = m.kernels[call.kernel];
    PlannedLaunch l;
    l.kernel = call.kernel;
    NamedScalars named;
    if (!scalars(k, call, l, named))
      return false;
    std::vector<const ArgSpec *> args;
    std::vector<int64_t> numels;
    for (size_t i = 0; i < k.args.size(); ++i) {
      const ArgSpec &a = k.args[i];
      if (a.kind == ArgSpec::Kind::Scalar)
        continue;
      const Binding &b = call.bindings[i];
      BufferSource src;
      int64_t numel = -1;
      if (b.kind == Binding::Kind::Scratch) {
        src = {BufferSource::Kind::Scratch, scratch(a), ValueRef::Part::Whole};
        numel = out.scratch[size_t(src.index)].shape[0];
      } else if (b.kind == Binding::Kind::Flag) {
        if (!flag(k, a, b, src))
          return false;
        numel = 1;
      } else if (!buffer(b, src, numel)) {
        return false;
      }
      args.push_back(&a);
      l.buffers.push_back(src);
      numels.push_back(numel);
    }
    l.n = launchSize(k, named, numels.data());
    if (l.n < 0) {
      error = "kernel '" + k.name + "' has no launch size (no scalar n or cols, "
              "no bound buffer of extent n)";
      return false;
    }
    if (!checkLaunchShape(k, l.n, named, error))
      return false;
    for (size_t i = 0; i < args.size(); ++i) {
      int64_t want;
      if (!argumentExtent(k, *args[i], l.n, named, want, error))
        return false;
      if (l.buffers[i].kind == BufferSource::Kind::Scratch &&
          numels[i] < 0) {
        out.scratch[size_t(l.buffers[i].index)].shape = {want};
        continue;
      }
      if (numels[i] != want) {
        error = "kernel '" + k.name + "' argument '" + args[i]->name +
                "': its buffer has " + std::to_string(numels[i]) +
                " elements, the kernel takes " + std::to_string(want) +
                " (n = " + std::to_string(l.n) + ")";
        return false;
      }
    }
    out.launches.push_back(std::move(l));
    return true;
  }

  bool collectResults() {
    for (size_t r = 0; r < step.results.size(); ++r) {
      int64_t v = step.results[r];
      std::vector<ValueRef::Part> want = {ValueRef::Part::Whole};
      if (p.values[size_t(v)].quantized)
        want = {ValueRef::Part::Codes, ValueRef::Part::Scale};
      std::vector<BufferSource> sources;
      for (ValueRef::Part part : want) {
        const BufferSource *src = written(v, part);
        if (!src) {
          error = "no kernel of the call writes the " + std::string(partName(part)) +
                  " of result " + std::to_string(v) + " (out" + std::to_string(r) +
                  ")";
          return false;
        }
        sources.push_back(*src);
      }
      out.results.push_back({v, std::move(sources)});
    }
    return true;
  }
};

} // namespace

int64_t defaultPartials(const KernelSpec &rowKernel, int64_t rows,
                        int64_t residentBlocks) {
  return std::max<int64_t>(
      1, std::min<int64_t>(rows, residentBlocks * rowKernel.rowsPerBlock));
}

std::vector<int64_t> recordedShape(const ValueType &type, ValueRef::Part part) {
  if (part != ValueRef::Part::Scale)
    return type.shape;
  std::vector<int64_t> layout;
  for (int64_t d : type.shape)
    layout.push_back(d < 0 ? kDynamicExtent : d);
  std::vector<int64_t> out;
  for (int64_t d : scaleShape(layout, type.scaling))
    out.push_back(d == kDynamicExtent ? -1 : d);
  return out;
}

bool partShape(const ValueType &type, ValueRef::Part part, int64_t tokens,
               std::vector<int64_t> &shape, std::string &error) {
  shape.clear();
  for (int64_t d : type.shape)
    shape.push_back(d < 0 ? tokens : d);
  if (part != ValueRef::Part::Scale)
    return true;
  // Static extents were checked when the manifest was read; an empty batch
  // has empty scales.
  if (tokens > 0)
    if (std::optional<std::string> err = verifyScalingForShape(shape, type.scaling)) {
      error = toString(type.scaling) + " does not fit " + std::to_string(tokens) +
              " tokens: " + *err;
      return false;
    }
  shape = scaleShape(shape, type.scaling);
  return true;
}

bool planStep(const Manifest &manifest, const Program &program, size_t step,
              int64_t tokens, const ResidentBlocks &resident, StepPlan &out,
              std::string &error) {
  out = StepPlan();
  if (tokens < 0 || step >= program.steps.size()) {
    error = tokens < 0 ? "the token count must be >= 0, got " + std::to_string(tokens)
                       : "no step " + std::to_string(step) + " (the program has " +
                             std::to_string(program.steps.size()) + ")";
    return false;
  }
  return CallPlanner(manifest, program, program.steps[step], tokens, resident,
                     out, error)
      .plan();
}

} // namespace coat::rt

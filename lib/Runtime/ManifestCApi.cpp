//===- ManifestCApi.cpp - coat_manifest.h over the Manifest model ---------===//
//
// Serializes the validated Manifest (ManifestParse.cpp, ProgramParse.cpp)
// into the normalized document, and plans (Plan.cpp) into the JSON that
// coat_manifest.h describes; launch checks and extents are LaunchArgs.cpp's.
// No CUDA dependency.
//
//===----------------------------------------------------------------------===//

#include "coat/Runtime/coat_manifest.h"

#include "ErrorBuffer.h"
#include "Json.h"

#include "coat/Runtime/Manifest.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace coat::rt;

struct coat_manifest {
  Manifest manifest;
  std::string document;
};

namespace {

void putNumber(std::string &o, double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  o += buf;
}

void key(std::string &o, const char *k) {
  json::quote(o, k);
  o += ':';
}

void field(std::string &o, const char *k, const std::string &v) {
  key(o, k);
  json::quote(o, v);
  o += ',';
}

void field(std::string &o, const char *k, int64_t v) {
  key(o, k);
  o += std::to_string(v);
  o += ',';
}

void intsField(std::string &o, const char *k, const std::vector<int64_t> &v) {
  key(o, k);
  o += '[';
  for (size_t i = 0; i < v.size(); ++i)
    o += (i ? "," : "") + std::to_string(v[i]);
  o += "],";
}

/// Closes an object or array, dropping a trailing comma.
void close(std::string &o, char c) {
  if (o.back() == ',')
    o.back() = c;
  else
    o += c;
}

bool isInteger(const std::string &s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

void putArg(std::string &o, const ArgSpec &a) {
  o += '{';
  field(o, "name", a.name);
  field(o, "kind", a.kind == ArgSpec::Kind::Memref   ? "memref"
                   : a.kind == ArgSpec::Kind::Scalar ? "scalar"
                                                     : "tensormap");
  field(o, "dtype", a.dtype);
  key(o, "extent");
  if (a.kind != ArgSpec::Kind::Memref) {
    o += "null";
  } else if (a.extent == ArgSpec::Extent::N) {
    o += "\"n\"";
  } else if (a.extent == ArgSpec::Extent::Groups) {
    o += "\"groups\"";
  } else if (a.extent == ArgSpec::Extent::Fixed) {
    o += std::to_string(a.fixedExtent);
  } else {
    std::string product;
    for (const auto &f : a.extentFactors)
      product += (product.empty() ? "" : "*") + f;
    json::quote(o, product);
  }
  o += ",\"dims\":[";
  for (const auto &d : a.mapDims) {
    if (isInteger(d))
      o += d;
    else
      json::quote(o, d);
    o += ',';
  }
  close(o, ']');
  o += ",\"box\":[";
  for (int64_t b : a.mapBox)
    o += std::to_string(b) + ",";
  close(o, ']');
  o += ',';
  field(o, "swizzle", a.swizzle.empty() ? "none" : a.swizzle);
  o += "\"bind\":[";
  for (const auto &b : a.bind) {
    json::quote(o, b);
    o += ',';
  }
  close(o, ']');
  o += '}';
}

void putKernel(std::string &o, const KernelSpec &k) {
  o += '{';
  field(o, "name", k.name);
  field(o, "op", k.op);
  field(o, "module", k.module);
  field(o, "cubin", k.cubin);
  field(o, "ptx", k.ptx);
  field(o, "cpu_object", k.cpuObject);
  field(o, "cpu_symbol", k.cpuSymbol);
  o += "\"config\":" + k.config + ",";
  o += "\"block\":[" + std::to_string(k.block[0]) + "," +
       std::to_string(k.block[1]) + "," + std::to_string(k.block[2]) + "],";
  field(o, "elements_per_block", k.elementsPerBlock);
  field(o, "shared_bytes", int64_t(k.sharedBytes));
  field(o, "group_size", k.groupSize);
  field(o, "max_cols", k.maxCols);
  o += "\"grid_tiles\":[";
  for (const auto &[name, tile] : k.gridTiles) {
    o += '[';
    json::quote(o, name);
    o += "," + std::to_string(tile) + "],";
  }
  close(o, ']');
  o += k.persistent ? ",\"persistent\":true," : ",\"persistent\":false,";
  o += "\"args\":[";
  for (const auto &a : k.args) {
    putArg(o, a);
    o += ',';
  }
  close(o, ']');
  o += '}';
}

const char *phaseName(Phase phase) {
  switch (phase) {
  case Phase::Forward:
    return "forward";
  case Phase::Recompute:
    return "recompute";
  case Phase::Backward:
    return "backward";
  }
  return "forward";
}

void putGradOf(std::string &o, int64_t gradOf) {
  key(o, "grad_of");
  o += gradOf < 0 ? "null" : std::to_string(gradOf);
}

/// Whether a kernel of some call binds the finiteness flag of `value`.
bool flagged(const Program &p, int64_t value) {
  for (const ProgramStep &s : p.steps)
    for (const CallKernel &c : s.kernels)
      for (const Binding &b : c.bindings)
        if (b.kind == Binding::Kind::Flag &&
            s.results[b.names.front().index] == value)
          return true;
  return false;
}

void putProgram(std::string &o, const Manifest &m, const Program &p) {
  o += '{';
  field(o, "name", p.name);
  o += "\"values\":[";
  for (const ValueType &t : p.values) {
    o += '{';
    field(o, "kind", t.quantized ? "qtensor" : "tensor");
    intsField(o, "shape", t.shape);
    field(o, "dtype", t.dtype);
    if (t.quantized) {
      field(o, "scaling", coat::toString(t.scaling));
      field(o, "scale_dtype", t.scaleDtype);
      intsField(o, "scale_shape", recordedShape(t, ValueRef::Part::Scale));
    }
    close(o, '}');
    o += ',';
  }
  close(o, ']');
  o += ",\"inputs\":[";
  for (const ProgramInput &in : p.inputs) {
    o += '{';
    field(o, "value", in.value);
    field(o, "role", in.role == ProgramInput::Role::Weight     ? "weight"
                     : in.role == ProgramInput::Role::Gradient ? "gradient"
                                                               : "activation");
    putGradOf(o, in.gradOf);
    if (in.writable)
      o += ",\"writable\":true";
    o += "},";
  }
  close(o, ']');
  o += ",\"steps\":[";
  for (const ProgramStep &s : p.steps) {
    o += '{';
    field(o, "spec", s.spec);
    field(o, "phase", phaseName(s.phase));
    intsField(o, "operands", s.operands);
    intsField(o, "results", s.results);
    o += "\"kernels\":[";
    for (const CallKernel &c : s.kernels) {
      json::quote(o, m.kernels[c.kernel].name);
      o += ',';
    }
    close(o, ']');
    o += "},";
  }
  close(o, ']');
  o += ",\"outputs\":[";
  for (const ProgramOutput &out : p.outputs) {
    o += '{';
    field(o, "value", out.value);
    field(o, "phase", phaseName(out.phase));
    // Whether a kernel writes its finiteness flag (a finite(out<i>) binding).
    key(o, "flagged");
    o += flagged(p, out.value) ? "true," : "false,";
    putGradOf(o, out.gradOf);
    o += ',';
    key(o, "recompute_of");
    o += out.recomputeOf < 0 ? "null" : std::to_string(out.recomputeOf);
    o += "},";
  }
  close(o, ']');
  o += ',';
  intsField(o, "saved", p.saved);
  close(o, '}');
}

std::string normalize(const Manifest &m) {
  std::string o = "{";
  field(o, "version", int64_t(m.version));
  field(o, "chip", m.chip);
  field(o, "features", m.features);
  field(o, "source_key", m.sourceKey);
  o += "\"target\":" + m.target + ",";
  o += "\"formats\":{";
  for (const auto &f : m.formats) {
    json::quote(o, f.name);
    o += ":{";
    field(o, "mlir_type", f.mlirType);
    field(o, "exponent_bits", int64_t(f.exponentBits));
    field(o, "mantissa_bits", int64_t(f.mantissaBits));
    field(o, "exponent_bias", int64_t(f.exponentBias));
    o += f.hasInfinity ? "\"has_infinity\":true," : "\"has_infinity\":false,";
    key(o, "max_finite");
    putNumber(o, f.maxFinite);
    o += ",\"min_normal\":";
    putNumber(o, f.minNormal);
    o += ",\"min_subnormal\":";
    putNumber(o, f.minSubnormal);
    o += "},";
  }
  close(o, '}');
  o += ",\"kernels\":[";
  for (const auto &k : m.kernels) {
    putKernel(o, k);
    o += ',';
  }
  close(o, ']');
  o += ",\"programs\":[";
  for (const auto &p : m.programs) {
    putProgram(o, m, p);
    o += ',';
  }
  close(o, ']');
  o += '}';
  return o;
}

void putSource(std::string &o, const BufferSource &s) {
  static const char *kinds[] = {"value", "alloc", "scratch", "flag"};
  static const char *parts[] = {"", "codes", "scale"};
  o += "[\"" + std::string(kinds[int(s.kind)]) + "\"," + std::to_string(s.index) +
       ",\"" + parts[int(s.part)] + "\"],";
}

std::string planJson(const Manifest &m, const StepPlan &plan) {
  std::string o = "{\"allocs\":[";
  for (const PlannedBuffer &b : plan.allocs) {
    o += '{';
    intsField(o, "shape", b.shape);
    field(o, "dtype", b.dtype);
    close(o, '}');
    o += ',';
  }
  close(o, ']');
  o += ",\"scratch\":[";
  for (const PlannedBuffer &b : plan.scratch) {
    o += '{';
    field(o, "extent", b.shape[0]);
    field(o, "dtype", b.dtype);
    close(o, '}');
    o += ',';
  }
  close(o, ']');
  o += ",\"launches\":[";
  for (const PlannedLaunch &l : plan.launches) {
    o += '{';
    field(o, "kernel", m.kernels[l.kernel].name);
    field(o, "n", l.n);
    intsField(o, "scalars", l.scalars);
    o += "\"buffers\":[";
    for (const BufferSource &s : l.buffers)
      putSource(o, s);
    close(o, ']');
    o += "},";
  }
  close(o, ']');
  o += ",\"results\":[";
  for (const auto &[value, sources] : plan.results) {
    o += '{';
    field(o, "value", value);
    o += "\"buffers\":[";
    for (const BufferSource &s : sources)
      putSource(o, s);
    close(o, ']');
    o += "},";
  }
  close(o, ']');
  o += '}';
  return o;
}

int fail(char *errbuf, size_t errlen, const std::string &msg, int status) {
  return coat::rt::reportStatus(errbuf, errlen, status, msg);
}

int ok(char *errbuf, size_t errlen) {
  return fail(errbuf, errlen, "", COAT_MANIFEST_OK);
}

char *copy(const std::string &s) {
  char *out = static_cast<char *>(std::malloc(s.size() + 1));
  if (out)
    std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

const KernelSpec *findKernel(const coat_manifest *m, const char *name,
                             std::string &error) {
  const KernelSpec *k = m && name ? m->manifest.find(name) : nullptr;
  if (!k)
    error = !m ? "null manifest" : !name ? "null kernel name"
                                         : "no kernel named '" + std::string(name) + "'";
  return k;
}

NamedScalars namedScalars(const char *const *names, const int64_t *values,
                          int count) {
  NamedScalars named;
  for (int i = 0; i < count; ++i)
    named.push_back({names[i], values[i]});
  return named;
}

} // namespace

extern "C" {

int coat_manifest_abi_version(void) { return COAT_MANIFEST_ABI_VERSION; }

int coat_manifest_open(const char *text, size_t len, coat_manifest **out,
                       char *errbuf, size_t errlen) {
  if ((!text && len) || !out)
    return fail(errbuf, errlen, "manifest: null text or handle",
                COAT_MANIFEST_ERR_INVALID_VALUE);
  *out = nullptr;
  auto *m = new coat_manifest;
  std::string error;
  if (!parseManifest(std::string(text ? text : "", len), ".", m->manifest, error)) {
    delete m;
    // Every entry of the programs section is located "programs[i]...".
    bool program = error.rfind("manifest: programs", 0) == 0;
    return fail(errbuf, errlen, error,
                program ? COAT_MANIFEST_ERR_PROGRAM : COAT_MANIFEST_ERR_MANIFEST);
  }
  m->document = normalize(m->manifest);
  *out = m;
  return ok(errbuf, errlen);
}

void coat_manifest_close(coat_manifest *m) { delete m; }

const char *coat_manifest_document(const coat_manifest *m) {
  return m ? m->document.c_str() : nullptr;
}

int coat_manifest_plan(const coat_manifest *m, const char *program,
                       int64_t step, int64_t tokens,
                       coat_manifest_resident_fn resident, void *ctx,
                       char **out_plan, char *errbuf, size_t errlen) {
  const Program *p = m && program ? m->manifest.findProgram(program) : nullptr;
  if (!p || !out_plan || step < 0 || size_t(step) >= p->steps.size())
    return fail(errbuf, errlen,
                !p ? "no program named '" + std::string(program ? program : "") + "'"
                   : !out_plan ? "null plan pointer"
                               : "program '" + p->name + "' has no step " +
                                     std::to_string(step),
                COAT_MANIFEST_ERR_INVALID_VALUE);
  *out_plan = nullptr;
  ResidentBlocks blocks;
  if (resident)
    blocks = [&](const KernelSpec &k) { return resident(ctx, k.name.c_str()); };
  StepPlan plan;
  std::string error;
  if (!planStep(m->manifest, *p, size_t(step), tokens, blocks, plan, error))
    return fail(errbuf, errlen,
                "program '" + p->name + "' step " + std::to_string(step) + " ('" +
                    p->steps[size_t(step)].spec + "') for " +
                    std::to_string(tokens) + " tokens: " + error,
                COAT_MANIFEST_ERR_PROGRAM);
  if (!(*out_plan = copy(planJson(m->manifest, plan))))
    return fail(errbuf, errlen, "out of memory", COAT_MANIFEST_ERR_INVALID_VALUE);
  return ok(errbuf, errlen);
}

void coat_manifest_free(char *text) { std::free(text); }

int coat_manifest_check_launch(const coat_manifest *m, const char *kernel_name,
                               int64_t *n, const int64_t *numels, int nbuf,
                               double *scalars, int nscalar, char *errbuf,
                               size_t errlen) {
  std::string error;
  const KernelSpec *k = findKernel(m, kernel_name, error);
  if (!k || !n)
    return fail(errbuf, errlen, k ? "null n" : error, COAT_MANIFEST_ERR_INVALID_VALUE);
  bool infer = *n == COAT_MANIFEST_N_FROM_BUFFERS;
  if (!checkLaunch(*k, *n, infer, numels, nbuf, scalars, nscalar, error))
    return fail(errbuf, errlen, error, COAT_MANIFEST_ERR_ARGUMENTS);
  return ok(errbuf, errlen);
}

int coat_manifest_extent(const coat_manifest *m, const char *kernel_name,
                         const char *arg_name, int64_t n,
                         const char *const *names, const int64_t *values,
                         int count, int64_t *out, char *errbuf, size_t errlen) {
  std::string error;
  const KernelSpec *k = findKernel(m, kernel_name, error);
  const ArgSpec *arg = nullptr;
  for (size_t i = 0; k && arg_name && i < k->args.size(); ++i)
    if (k->args[i].name == arg_name && k->args[i].kind != ArgSpec::Kind::Scalar)
      arg = &k->args[i];
  if (!arg || !out || (count > 0 && (!names || !values)))
    return fail(errbuf, errlen,
                !k ? error : "kernel '" + k->name + "' has no buffer argument '" +
                                 std::string(arg_name ? arg_name : "") + "'",
                COAT_MANIFEST_ERR_INVALID_VALUE);
  NamedScalars named = namedScalars(names, values, count);
  if (!argumentExtent(*k, *arg, n, named, *out, error))
    return fail(errbuf, errlen, error, COAT_MANIFEST_ERR_ARGUMENTS);
  return ok(errbuf, errlen);
}

int coat_manifest_grid(const coat_manifest *m, const char *kernel_name,
                       int64_t n, const char *const *names,
                       const int64_t *values, int count, int64_t grid[3],
                       char *errbuf, size_t errlen) {
  std::string error;
  const KernelSpec *k = findKernel(m, kernel_name, error);
  if (!k || !grid || (count > 0 && (!names || !values)))
    return fail(errbuf, errlen, k ? "null grid or scalars" : error,
                COAT_MANIFEST_ERR_INVALID_VALUE);
  NamedScalars named = namedScalars(names, values, count);
  std::array<unsigned, 3> g;
  if (n < 0 || !launchGrid(*k, n, named, g, error))
    return fail(errbuf, errlen,
                n < 0 ? "kernel '" + k->name + "': n must be >= 0" : error,
                COAT_MANIFEST_ERR_ARGUMENTS);
  for (int i = 0; i < 3; ++i)
    grid[i] = g[size_t(i)];
  return ok(errbuf, errlen);
}

int coat_manifest_default_partials(const coat_manifest *m,
                                   const char *kernel_name, int64_t rows,
                                   int64_t resident_blocks, int64_t *out,
                                   char *errbuf, size_t errlen) {
  std::string error;
  const KernelSpec *k = findKernel(m, kernel_name, error);
  if (!k || !out)
    return fail(errbuf, errlen, k ? "null out" : error, COAT_MANIFEST_ERR_INVALID_VALUE);
  *out = defaultPartials(*k, rows,
                         resident_blocks > 0 ? resident_blocks : kCpuResidentBlocks);
  return ok(errbuf, errlen);
}

} // extern "C"

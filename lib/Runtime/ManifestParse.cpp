//===- ManifestParse.cpp - manifest.json parsing and validation -----------===//
//
// The one reader of docs/manifest.md: every validation rule and its message
// lives here and in ProgramParse.cpp (the programs section). The runtime uses
// the Manifest model directly; the Python package gets the validated,
// normalized document through coat_manifest.h. Launch-argument rules are
// LaunchArgs.cpp. No CUDA dependency.
//
//===----------------------------------------------------------------------===//

#include "coat/Runtime/Manifest.h"

#include "ManifestReader.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace coat::rt {

using json::Value;

size_t KernelSpec::numMemrefs() const {
  size_t k = 0;
  for (const auto &a : args)
    k += a.kind != ArgSpec::Kind::Scalar;
  return k;
}

size_t KernelSpec::numScalars() const { return args.size() - numMemrefs(); }

const KernelSpec *Manifest::find(const std::string &name) const {
  for (const auto &k : kernels)
    if (k.name == name)
      return &k;
  return nullptr;
}

const Program *Manifest::findProgram(const std::string &name) const {
  for (const auto &p : programs)
    if (p.name == name)
      return &p;
  return nullptr;
}

int dtypeSize(const std::string &d) {
  if (d == "f32" || d == "i32")
    return 4;
  if (d == "bf16" || d == "f16")
    return 2;
  if (d == "e4m3" || d == "e5m2")
    return 1;
  if (d == "i64")
    return 8;
  return 0;
}

bool readFile(const std::string &path, std::string &out, std::string &error) {
  std::FILE *f = std::fopen(path.c_str(), "rb");
  if (!f) {
    error = "cannot open '" + path + "': " + std::strerror(errno);
    return false;
  }
  out.clear();
  char buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0)
    out.append(buf, got);
  bool bad = std::ferror(f);
  std::fclose(f);
  if (bad) {
    error = "error reading '" + path + "'";
    return false;
  }
  return true;
}

namespace {

bool isMemrefDtype(const std::string &d) { return dtypeSize(d) != 0; }
bool isScalarDtype(const std::string &d) {
  return d == "i64" || d == "i32" || d == "f32";
}

/// The "launch" object of one kernel (docs/manifest.md, "Launch").
bool parseLaunch(Reader &r, const Value &launch, const std::string &lw,
                 KernelSpec &out) {
  const Value *block = r.member(launch, lw, "block", Value::Type::Array, true);
  if (!block)
    return false;
  if (block->array.empty() || block->array.size() > 3)
    return r.fail(lw + ".block", "expected 1 to 3 integers");
  for (size_t i = 0; i < block->array.size(); ++i) {
    int64_t b;
    if (!r.toInt(block->array[i], lw + ".block[" + std::to_string(i) + "]", b, 1))
      return false;
    if (b > 1024)
      return r.fail(lw + ".block", "more than 1024 threads in one dimension");
    out.block[i] = unsigned(b);
  }
  if (uint64_t(out.block[0]) * out.block[1] * out.block[2] > 1024)
    return r.fail(lw + ".block", "more than 1024 threads per block");
  int64_t shared = 0;
  if (const Value *tiles = launch.get("grid_tiles")) {
    if (!tiles->isArray() || tiles->array.empty() || tiles->array.size() > 3)
      return r.fail(lw + ".grid_tiles", "expected 1 to 3 [scalar, tile] pairs");
    for (size_t i = 0; i < tiles->array.size(); ++i) {
      const Value &t = tiles->array[i];
      std::string tw = lw + ".grid_tiles[" + std::to_string(i) + "]";
      int64_t tile = 0;
      if (!t.isArray() || t.array.size() != 2 || !t.array[0].isString())
        return r.fail(tw, "expected [\"scalar name\", tile]");
      if (!r.toInt(t.array[1], tw + "[1]", tile, 1))
        return false;
      out.gridTiles.push_back({t.array[0].string, tile});
    }
  }
  if (const Value *persistent = launch.get("persistent")) {
    if (!persistent->isBool())
      return r.fail(lw + ".persistent", "expected true or false");
    if (persistent->boolean && out.gridTiles.empty())
      return r.fail(lw + ".persistent", "needs grid_tiles");
    out.persistent = persistent->boolean;
  }
  if (!r.integer(launch, lw, "elements_per_block", out.elementsPerBlock,
                 out.gridTiles.empty(), 1) ||
      !r.integer(launch, lw, "shared_bytes", shared, false, 0))
    return false;
  if (shared > int64_t(std::numeric_limits<unsigned>::max()))
    return r.fail(lw + ".shared_bytes", "too large");
  out.sharedBytes = unsigned(shared);
  return true;
}

bool parseKernel(Reader &r, const Value &k, const std::string &where,
                 KernelSpec &out) {
  if (!k.isObject())
    return r.fail(where, "expected an object");
  if (!r.string(k, where, "name", out.name, true) ||
      !r.string(k, where, "op", out.op, false) ||
      !r.string(k, where, "module", out.module, false))
    return false;
  if (out.name.empty())
    return r.fail(where + ".name", "empty kernel name");

  const Value *gpu = r.member(k, where, "gpu", Value::Type::Object, false);
  if (gpu) {
    if (!r.string(*gpu, where + ".gpu", "cubin", out.cubin, false) ||
        !r.string(*gpu, where + ".gpu", "ptx", out.ptx, false))
      return false;
  } else if (!r.error.empty()) {
    return false;
  }
  if (const Value *cpu = r.member(k, where, "cpu", Value::Type::Object, false)) {
    if (!r.string(*cpu, where + ".cpu", "object", out.cpuObject, false) ||
        !r.string(*cpu, where + ".cpu", "symbol", out.cpuSymbol, false))
      return false;
  } else if (!r.error.empty()) {
    return false;
  }

  out.config = "{}";
  if (const Value *cfg = r.member(k, where, "config", Value::Type::Object, false)) {
    std::string cw = where + ".config";
    if (!r.integer(*cfg, cw, "group_size", out.groupSize, false, 1) ||
        !r.integer(*cfg, cw, "max_cols", out.maxCols, false, 1) ||
        !r.integer(*cfg, cw, "cols", out.cols, false, 1) ||
        !r.integer(*cfg, cw, "rows_per_block", out.rowsPerBlock, false, 1) ||
        !r.string(*cfg, cw, "of", out.of, false))
      return false;
    out.config.clear();
    json::write(out.config, *cfg);
  } else if (!r.error.empty()) {
    return false;
  }

  // The launch rule is GPU-only: a kernel without GPU code may omit it, and
  // then counts as one thread per group (or per element).
  bool needsLaunch = (gpu && !gpu->object.empty()) || k.get("launch");
  const Value *launch =
      r.member(k, where, "launch", Value::Type::Object, needsLaunch);
  if (!launch) {
    if (!r.error.empty())
      return false;
    out.elementsPerBlock = out.groupSize > 0 ? out.groupSize : 1;
  }
  if (launch && !parseLaunch(r, *launch, where + ".launch", out))
    return false;

  const Value *args = r.member(k, where, "args", Value::Type::Array, true);
  if (!args)
    return false;
  bool needsGroups = false;
  for (size_t i = 0; i < args->array.size(); ++i) {
    const Value &a = args->array[i];
    std::string aw = where + ".args[" + std::to_string(i) + "]";
    if (!a.isObject())
      return r.fail(aw, "expected an object");
    ArgSpec spec;
    std::string kind;
    if (!r.string(a, aw, "name", spec.name, true) ||
        !r.string(a, aw, "kind", kind, true) ||
        !r.string(a, aw, "dtype", spec.dtype, true))
      return false;
    aw += " ('" + spec.name + "')";
    if (const Value *bind = a.get("bind")) {
      // One value reference, or a list of them (docs/manifest.md, "Bindings").
      bool ok = bind->isString() || bind->isArray();
      if (bind->isString())
        spec.bind.push_back(bind->string);
      for (const Value &b : bind->array) {
        ok &= b.isString();
        spec.bind.push_back(b.string);
      }
      if (!ok)
        return r.fail(aw + ".bind", "expected a string or a list of strings");
    }
    for (const auto &prev : out.args)
      if (prev.name == spec.name)
        return r.fail(aw, "duplicate argument name");
    if (kind == "memref") {
      spec.kind = ArgSpec::Kind::Memref;
      if (!isMemrefDtype(spec.dtype))
        return r.fail(aw, "unknown memref dtype '" + spec.dtype + "'");
      const Value *ext = a.get("extent");
      if (!ext)
        return r.fail(aw, "missing required field 'extent'");
      if (ext->isString() && ext->string == "n") {
        spec.extent = ArgSpec::Extent::N;
      } else if (ext->isString() && ext->string == "groups") {
        spec.extent = ArgSpec::Extent::Groups;
        needsGroups = true;
      } else if (ext->isString() && !ext->string.empty()) {
        // "m*n": product of scalar arguments (or "groups"), checked once
        // all are read.
        spec.extent = ArgSpec::Extent::Product;
        std::string rest = ext->string;
        for (size_t star; (star = rest.find('*')) != std::string::npos;
             rest = rest.substr(star + 1))
          spec.extentFactors.push_back(rest.substr(0, star));
        spec.extentFactors.push_back(rest);
        for (const auto &f : spec.extentFactors)
          needsGroups |= f == "groups";
      } else if (ext->isNumber()) {
        spec.extent = ArgSpec::Extent::Fixed;
        if (!r.toInt(*ext, aw + ".extent", spec.fixedExtent, 0))
          return false;
      } else {
        return r.fail(aw + ".extent",
                      "expected \"n\", \"groups\" or an integer, or a product "
                      "of scalar arguments like \"m*n\"");
      }
    } else if (kind == "scalar") {
      spec.kind = ArgSpec::Kind::Scalar;
      if (!isScalarDtype(spec.dtype))
        return r.fail(aw, "unsupported scalar dtype '" + spec.dtype +
                              "' (expected i64, i32 or f32)");
    } else if (kind == "tensormap") {
      spec.kind = ArgSpec::Kind::TensorMap;
      if (!isMemrefDtype(spec.dtype))
        return r.fail(aw, "unknown tensormap dtype '" + spec.dtype + "'");
      const Value *dims = a.get("dims");
      const Value *box = a.get("box");
      if (!dims || !dims->isArray() || dims->array.empty() || dims->array.size() > 5)
        return r.fail(aw + ".dims", "expected 1 to 5 scalar names or integers");
      if (!box || !box->isArray() || box->array.size() != dims->array.size())
        return r.fail(aw + ".box", "expected one integer per dim");
      for (size_t d = 0; d < dims->array.size(); ++d) {
        const Value &v = dims->array[d];
        int64_t iv = 0;
        if (v.isString())
          spec.mapDims.push_back(v.string);
        else if (r.toInt(v, aw + ".dims", iv, 1))
          spec.mapDims.push_back(std::to_string(iv));
        else
          return false;
        if (!r.toInt(box->array[d], aw + ".box", iv, 1))
          return false;
        if (iv > 256)
          return r.fail(aw + ".box", "box dims are at most 256");
        spec.mapBox.push_back(iv);
      }
      spec.swizzle = "none";
      if (!r.string(a, aw, "swizzle", spec.swizzle, false))
        return false;
      if (spec.swizzle != "none" && spec.swizzle != "32b" && spec.swizzle != "64b" &&
          spec.swizzle != "128b")
        return r.fail(aw + ".swizzle", "expected none, 32b, 64b or 128b");
    } else {
      return r.fail(aw + ".kind", "expected \"memref\", \"scalar\" or "
                                  "\"tensormap\", got \"" + kind + "\"");
    }
    out.args.push_back(std::move(spec));
  }
  auto isScalarArg = [&](const std::string &name) {
    for (const auto &a : out.args)
      if (a.kind == ArgSpec::Kind::Scalar && a.name == name)
        return true;
    return false;
  };
  auto isPositiveInteger = [](const std::string &d) {
    return !d.empty() && d.size() < 10 &&
           d.find_first_not_of("0123456789") == std::string::npos &&
           std::stoll(d) > 0;
  };
  for (const auto &a : out.args) {
    for (const auto &f : a.extentFactors) {
      // "rows/128": ceil(rows / 128), the count of 128-row blocks; "rows*64":
      // 64 entries a row (a rotary table).
      size_t slash = f.find('/');
      std::string name = f.substr(0, slash);
      bool divisorOk =
          slash == std::string::npos || isPositiveInteger(f.substr(slash + 1));
      bool constant = slash == std::string::npos && isPositiveInteger(name);
      if (!divisorOk || (name != "groups" && !constant && !isScalarArg(name)) ||
          (name == "groups" && slash != std::string::npos))
        return r.fail(where, "extent of '" + a.name + "': expected \"n\", "
                             "\"groups\" or an integer, or a product of scalar "
                             "arguments and positive integers like \"m*n\", "
                             "\"rows*64\" or \"rows/128*cols/128\" ('" +
                             f + "' is not a scalar argument, one divided by "
                             "a positive integer or a positive integer)");
    }
    for (const auto &d : a.mapDims)
      if (!(d[0] >= '0' && d[0] <= '9') && !isScalarArg(d))
        return r.fail(where, "dims of '" + a.name + "' name '" + d +
                                 "', which is not a scalar argument");
  }
  for (const auto &t : out.gridTiles)
    if (!isScalarArg(t.first))
      return r.fail(where, "launch.grid_tiles names '" + t.first +
                               "', which is not a scalar argument");
  if (needsGroups && out.groupSize <= 0)
    return r.fail(where, "an argument has extent \"groups\" but config.group_size "
                         "is missing");
  return true;
}

/// One entry of the optional "formats" section (FP8 facts, written by
/// coat-export-manifest from coat/Numerics/Fp8.h).
bool parseFormat(Reader &r, const Value &f, const std::string &where,
                 const std::string &name, std::vector<Fp8FormatSpec> &out) {
  if (!f.isObject())
    return r.fail(where, "expected an object");
  Fp8FormatSpec spec;
  spec.name = name;
  int64_t e = 0, m = 0, bias = 0;
  const Value *inf = r.member(f, where, "has_infinity", Value::Type::Bool, true);
  if (!r.string(f, where, "mlir_type", spec.mlirType, true) ||
      !r.integer(f, where, "exponent_bits", e, true, 1) ||
      !r.integer(f, where, "mantissa_bits", m, true, 0) ||
      !r.integer(f, where, "exponent_bias", bias, true, 0) || !inf)
    return false;
  spec.exponentBits = int(e);
  spec.mantissaBits = int(m);
  spec.exponentBias = int(bias);
  spec.hasInfinity = inf->boolean;
  for (auto [key, dst] : {std::pair<const char *, double *>{"max_finite", &spec.maxFinite},
                          {"min_normal", &spec.minNormal},
                          {"min_subnormal", &spec.minSubnormal}}) {
    const Value *v = r.member(f, where, key, Value::Type::Number, true);
    if (!v)
      return false;
    *dst = v->number;
  }
  out.push_back(std::move(spec));
  return true;
}

} // namespace

bool parseManifest(const std::string &text, const std::string &directory,
                   Manifest &out, std::string &error) {
  out = Manifest();
  out.directory = directory;
  error.clear();
  Value doc;
  std::string jsonError;
  if (!json::parse(text, doc, jsonError)) {
    error = "manifest: " + jsonError;
    return false;
  }
  Reader r{error};
  if (!doc.isObject())
    return r.fail("top level", "expected an object");
  std::string format;
  if (!r.string(doc, "top level", "format", format, true))
    return false;
  if (format != "coat-manifest")
    return r.fail("format", "expected \"coat-manifest\", got \"" + format + "\"");
  int64_t version = 0;
  if (!r.integer(doc, "top level", "version", version, true, 1))
    return false;
  if (version != 1)
    return r.fail("version", "unsupported manifest version " +
                                 std::to_string(version) + " (this runtime reads 1)");
  out.version = int(version);
  if (!r.string(doc, "top level", "source_key", out.sourceKey, false))
    return false;
  out.target = "{}";
  if (const Value *t = r.member(doc, "top level", "target", Value::Type::Object, false)) {
    if (!r.string(*t, "target", "chip", out.chip, false) ||
        !r.string(*t, "target", "features", out.features, false))
      return false;
    out.target.clear();
    json::write(out.target, *t);
  } else if (!error.empty()) {
    return false;
  }
  if (const Value *f = r.member(doc, "top level", "formats", Value::Type::Object, false)) {
    for (const auto &[name, v] : f->object)
      if (!parseFormat(r, v, "formats." + name, name, out.formats))
        return false;
  } else if (!error.empty()) {
    return false;
  }
  const Value *kernels = r.member(doc, "top level", "kernels", Value::Type::Array, true);
  if (!kernels)
    return false;
  for (size_t i = 0; i < kernels->array.size(); ++i) {
    KernelSpec k;
    if (!parseKernel(r, kernels->array[i], "kernels[" + std::to_string(i) + "]", k))
      return false;
    if (out.find(k.name))
      return r.fail("kernels[" + std::to_string(i) + "]",
                    "duplicate kernel name '" + k.name + "'");
    out.kernels.push_back(std::move(k));
  }
  if (const Value *p = r.member(doc, "top level", "programs", Value::Type::Array, false))
    return parsePrograms(r, *p, out);
  return error.empty();
}

bool loadManifest(const std::string &path, Manifest &out, std::string &error) {
  std::string text;
  if (!readFile(path, text, error))
    return false;
  std::string dir = ".";
  size_t slash = path.find_last_of('/');
  if (slash != std::string::npos)
    dir = slash == 0 ? "/" : path.substr(0, slash);
  if (!parseManifest(text, dir, out, error)) {
    error = path + ": " + error;
    return false;
  }
  return true;
}

} // namespace coat::rt

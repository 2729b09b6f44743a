//===- Manifest.cpp - manifest.json model and launch-argument packing -----===//

#include "coat/Runtime/Manifest.h"

#include "Json.h"

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
    k += a.kind == ArgSpec::Kind::Memref;
  return k;
}

size_t KernelSpec::numScalars() const { return args.size() - numMemrefs(); }

const KernelSpec *Manifest::find(const std::string &name) const {
  for (const auto &k : kernels)
    if (k.name == name)
      return &k;
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

/// Reads fields of one JSON object, accumulating the first error with a path
/// such as "kernels[0].launch.block".
struct Reader {
  std::string &error;

  bool fail(const std::string &where, const std::string &what) {
    if (error.empty())
      error = "manifest: " + where + ": " + what;
    return false;
  }

  const Value *member(const Value &obj, const std::string &where,
                      const std::string &key, Value::Type type,
                      bool required) {
    const Value *v = obj.get(key);
    if (!v) {
      if (required)
        fail(where, "missing required field '" + key + "'");
      return nullptr;
    }
    if (v->type != type) {
      fail(where + "." + key, std::string("expected ") + json::typeName(type) +
                                  ", got " + json::typeName(v->type));
      return nullptr;
    }
    return v;
  }

  bool string(const Value &obj, const std::string &where,
              const std::string &key, std::string &out, bool required) {
    const Value *v = member(obj, where, key, Value::Type::String, required);
    if (v)
      out = v->string;
    return v || (!required && !obj.get(key));
  }

  bool integer(const Value &obj, const std::string &where,
               const std::string &key, int64_t &out, bool required,
               int64_t min) {
    const Value *v = member(obj, where, key, Value::Type::Number, required);
    if (!v)
      return !required && !obj.get(key);
    return toInt(*v, where + "." + key, out, min);
  }

  bool toInt(const Value &v, const std::string &where, int64_t &out,
             int64_t min) {
    if (!v.isNumber() || std::floor(v.number) != v.number ||
        v.number < double(min) || v.number > 9.0e15)
      return fail(where, "expected an integer >= " + std::to_string(min));
    out = static_cast<int64_t>(v.number);
    return true;
  }
};

bool isMemrefDtype(const std::string &d) { return dtypeSize(d) != 0; }
bool isScalarDtype(const std::string &d) {
  return d == "i64" || d == "i32" || d == "f32";
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

  if (const Value *gpu = r.member(k, where, "gpu", Value::Type::Object, false)) {
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

  if (const Value *cfg = r.member(k, where, "config", Value::Type::Object, false)) {
    if (!r.integer(*cfg, where + ".config", "group_size", out.groupSize, false, 1))
      return false;
  } else if (!r.error.empty()) {
    return false;
  }

  const Value *launch = r.member(k, where, "launch", Value::Type::Object, true);
  if (!launch)
    return false;
  std::string lw = where + ".launch";
  const Value *block = r.member(*launch, lw, "block", Value::Type::Array, true);
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
  if (!r.integer(*launch, lw, "elements_per_block", out.elementsPerBlock, true, 1) ||
      !r.integer(*launch, lw, "shared_bytes", shared, false, 0))
    return false;
  if (shared > int64_t(std::numeric_limits<unsigned>::max()))
    return r.fail(lw + ".shared_bytes", "too large");
  out.sharedBytes = unsigned(shared);

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
      } else if (ext->isNumber()) {
        spec.extent = ArgSpec::Extent::Fixed;
        if (!r.toInt(*ext, aw + ".extent", spec.fixedExtent, 0))
          return false;
      } else {
        return r.fail(aw + ".extent", "expected \"n\", \"groups\" or an integer");
      }
    } else if (kind == "scalar") {
      spec.kind = ArgSpec::Kind::Scalar;
      if (!isScalarDtype(spec.dtype))
        return r.fail(aw, "unsupported scalar dtype '" + spec.dtype +
                              "' (expected i64, i32 or f32)");
    } else {
      return r.fail(aw + ".kind", "expected \"memref\" or \"scalar\", got \"" +
                                      kind + "\"");
    }
    out.args.push_back(std::move(spec));
  }
  if (needsGroups && out.groupSize <= 0)
    return r.fail(where, "an argument has extent \"groups\" but config.group_size "
                         "is missing");
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
  if (const Value *t = r.member(doc, "top level", "target", Value::Type::Object, false)) {
    if (!r.string(*t, "target", "chip", out.chip, false) ||
        !r.string(*t, "target", "features", out.features, false))
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
  return true;
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

bool packLaunch(const KernelSpec &kernel, int64_t n, const uint64_t *buffers,
                int nbuf, const double *scalars, int nscalar,
                PackedLaunch &out, std::string &error) {
  const std::string who = "kernel '" + kernel.name + "': ";
  if (n < 0) {
    error = who + "n must be >= 0, got " + std::to_string(n);
    return false;
  }
  size_t wantBuf = kernel.numMemrefs(), wantScalar = kernel.numScalars();
  if (nbuf < 0 || size_t(nbuf) != wantBuf || (nbuf > 0 && !buffers)) {
    error = who + "expected " + std::to_string(wantBuf) +
            " buffer pointers (one per memref argument), got " +
            std::to_string(nbuf);
    return false;
  }
  if (nscalar < 0 || size_t(nscalar) != wantScalar || (nscalar > 0 && !scalars)) {
    error = who + "expected " + std::to_string(wantScalar) +
            " scalars (one per scalar argument), got " + std::to_string(nscalar);
    return false;
  }
  int64_t groups = kernel.groupSize > 0 ? (n + kernel.groupSize - 1) / kernel.groupSize : 0;
  uint64_t gridX = (uint64_t(n) + uint64_t(kernel.elementsPerBlock) - 1) /
                   uint64_t(kernel.elementsPerBlock);
  if (gridX > uint64_t(std::numeric_limits<int32_t>::max())) {
    error = who + "n = " + std::to_string(n) + " needs " + std::to_string(gridX) +
            " blocks, more than gridDim.x allows";
    return false;
  }

  out = PackedLaunch();
  out.storage.reserve(wantBuf * 5 + wantScalar);
  int bi = 0, si = 0;
  for (const auto &a : kernel.args) {
    if (a.kind == ArgSpec::Kind::Memref) {
      uint64_t ptr = buffers[bi++];
      int64_t extent = a.extent == ArgSpec::Extent::N        ? n
                       : a.extent == ArgSpec::Extent::Groups ? groups
                                                             : a.fixedExtent;
      if (ptr == 0 && extent > 0) {
        error = who + "buffer for memref argument '" + a.name + "' is null";
        return false;
      }
      if (ptr % kBufferAlignment != 0) {
        char hex[32];
        std::snprintf(hex, sizeof hex, "0x%llx", (unsigned long long)ptr);
        error = who + "buffer for memref argument '" + a.name + "' (" + hex +
                ") is not " + std::to_string(kBufferAlignment) + "-byte aligned";
        return false;
      }
      out.storage.push_back(ptr);            // allocated
      out.storage.push_back(ptr);            // aligned
      out.storage.push_back(0);              // offset
      out.storage.push_back(uint64_t(extent)); // size
      out.storage.push_back(1);              // stride
    } else {
      double v = scalars[si++];
      uint64_t slot = 0;
      if (a.dtype == "f32") {
        float f = static_cast<float>(v);
        if (std::isfinite(v) && !std::isfinite(f)) {
          error = who + "scalar argument '" + a.name + "' = " + std::to_string(v) +
                  " overflows f32";
          return false;
        }
        std::memcpy(&slot, &f, sizeof f);
      } else {
        double lo = a.dtype == "i32" ? -2147483648.0 : -9223372036854775808.0;
        double hi = a.dtype == "i32" ? 2147483648.0 : 9223372036854775808.0;
        if (!(v >= lo && v < hi) || std::floor(v) != v) {
          error = who + "scalar argument '" + a.name + "' (" + a.dtype +
                  ") must be an integer in range, got " + std::to_string(v);
          return false;
        }
        if (a.dtype == "i32") {
          int32_t i = static_cast<int32_t>(v);
          std::memcpy(&slot, &i, sizeof i);
        } else {
          int64_t i = static_cast<int64_t>(v);
          std::memcpy(&slot, &i, sizeof i);
        }
        if (a.name == "n" && static_cast<int64_t>(v) != n) {
          error = who + "scalar argument 'n' = " + std::to_string(int64_t(v)) +
                  " differs from the launch size n = " + std::to_string(n);
          return false;
        }
      }
      out.storage.push_back(slot);
    }
  }
  out.params.reserve(out.storage.size());
  for (auto &slot : out.storage)
    out.params.push_back(&slot);
  out.grid = {unsigned(gridX), 1, 1};
  out.block = kernel.block;
  out.sharedBytes = kernel.sharedBytes;
  return true;
}

} // namespace coat::rt

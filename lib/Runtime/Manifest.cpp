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
    if (!r.integer(*cfg, where + ".config", "group_size", out.groupSize, false, 1) ||
        !r.integer(*cfg, where + ".config", "max_cols", out.maxCols, false, 1))
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
  if (const Value *tiles = launch->get("grid_tiles")) {
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
  if (const Value *persistent = launch->get("persistent")) {
    if (!persistent->isBool())
      return r.fail(lw + ".persistent", "expected true or false");
    if (persistent->boolean && out.gridTiles.empty())
      return r.fail(lw + ".persistent", "needs grid_tiles");
    out.persistent = persistent->boolean;
  }
  if (!r.integer(*launch, lw, "elements_per_block", out.elementsPerBlock,
                 out.gridTiles.empty(), 1) ||
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
  for (const auto &a : out.args) {
    for (const auto &f : a.extentFactors) {
      // "rows/128": ceil(rows / 128), the count of 128-row blocks.
      size_t slash = f.find('/');
      std::string name = f.substr(0, slash);
      bool divisorOk = true;
      if (slash != std::string::npos) {
        std::string d = f.substr(slash + 1);
        divisorOk = !d.empty() && d.size() < 10 &&
                    d.find_first_not_of("0123456789") == std::string::npos &&
                    std::stoll(d) > 0;
      }
      if (!divisorOk || (name != "groups" && !isScalarArg(name)) ||
          (name == "groups" && slash != std::string::npos))
        return r.fail(where, "extent of '" + a.name + "': expected \"n\", "
                             "\"groups\" or an integer, or a product of scalar "
                             "arguments like \"m*n\" or \"rows/128*cols/128\" ('" +
                             f + "' is not a scalar argument or one divided by "
                             "a positive integer)");
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
  // Scalar values by name (integers only) for products, dims and grid tiles.
  std::vector<std::pair<std::string, double>> named;
  {
    int si = 0;
    for (const auto &a : kernel.args)
      if (a.kind == ArgSpec::Kind::Scalar)
        named.push_back({a.name, scalars[si++]});
  }
  auto scalarValue = [&](const std::string &name) -> int64_t {
    if (!name.empty() && name[0] >= '0' && name[0] <= '9')
      return std::stoll(name);
    for (const auto &kv : named)
      if (kv.first == name)
        return int64_t(kv.second);
    return 0;
  };
  std::array<unsigned, 3> grid = {0, 1, 1};
  uint64_t gridX = 0;
  if (kernel.gridTiles.empty()) {
    gridX = (uint64_t(n) + uint64_t(kernel.elementsPerBlock) - 1) /
            uint64_t(kernel.elementsPerBlock);
  } else {
    for (size_t i = 0; i < kernel.gridTiles.size(); ++i) {
      int64_t v = scalarValue(kernel.gridTiles[i].first);
      if (v < 0) {
        error = who + "scalar '" + kernel.gridTiles[i].first + "' must be >= 0";
        return false;
      }
      uint64_t g = (uint64_t(v) + kernel.gridTiles[i].second - 1) /
                   uint64_t(kernel.gridTiles[i].second);
      if (g > (i == 0 ? uint64_t(std::numeric_limits<int32_t>::max()) : 65535u)) {
        error = who + "grid dimension " + std::to_string(i) + " too large";
        return false;
      }
      grid[i] = unsigned(g);
    }
    gridX = grid[0];
    for (unsigned g : grid)
      if (g == 0)
        gridX = 0;
  }
  if (gridX > uint64_t(std::numeric_limits<int32_t>::max())) {
    error = who + "n = " + std::to_string(n) + " needs " + std::to_string(gridX) +
            " blocks, more than gridDim.x allows";
    return false;
  }

  out = PackedLaunch();
  out.storage.reserve(wantBuf * 5 + wantScalar);
  int64_t rows = 0, cols = 0; // 2-D kernels: n is rows * cols
  bool hasRows = false, hasCols = false;
  // Parameter i is storage slot `slots[i]` (>= 0) or tensormap -1 - slots[i].
  std::vector<long> slots;
  int bi = 0, si = 0;
  for (const auto &a : kernel.args) {
    if (a.kind == ArgSpec::Kind::TensorMap) {
      TensorMapRequest req;
      req.name = a.name;
      req.dtype = a.dtype;
      req.address = buffers[bi++];
      req.swizzle = a.swizzle;
      uint64_t stride = uint64_t(dtypeSize(a.dtype));
      for (size_t d = 0; d < a.mapDims.size(); ++d) {
        int64_t v = scalarValue(a.mapDims[d]);
        if (v <= 0) {
          error = who + "tensormap '" + a.name + "': dim " + std::to_string(d) +
                  " ('" + a.mapDims[d] + "') must be > 0, got " + std::to_string(v);
          return false;
        }
        req.dims.push_back(uint64_t(v));
        req.box.push_back(uint32_t(a.mapBox[d]));
        if (d > 0)
          req.strides.push_back(stride);
        stride *= uint64_t(v);
      }
      for (uint64_t st : req.strides)
        if (st % 16 != 0) {
          error = who + "tensormap '" + a.name + "': row stride " +
                  std::to_string(st) + " bytes is not a multiple of 16 (TMA)";
          return false;
        }
      if (req.address == 0 || req.address % kBufferAlignment != 0) {
        error = who + "buffer for tensormap argument '" + a.name +
                "' is null or not 16-byte aligned";
        return false;
      }
      slots.push_back(-1 - long(out.tensorMaps.size()));
      out.tensorMaps.push_back(std::move(req));
      continue;
    }
    slots.push_back(long(out.storage.size()));
    if (a.kind == ArgSpec::Kind::Memref) {
      uint64_t ptr = buffers[bi++];
      int64_t extent = a.extent == ArgSpec::Extent::N        ? n
                       : a.extent == ArgSpec::Extent::Groups ? groups
                                                             : a.fixedExtent;
      if (a.extent == ArgSpec::Extent::Product) {
        extent = 1;
        for (const auto &f : a.extentFactors) {
          size_t slash = f.find('/');
          if (slash == std::string::npos) {
            extent *= f == "groups" ? groups : scalarValue(f);
            continue;
          }
          int64_t v = scalarValue(f.substr(0, slash));
          int64_t d = std::stoll(f.substr(slash + 1));
          extent *= v <= 0 ? 0 : (v + d - 1) / d;
        }
      }
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
        if (a.name == "rows") {
          rows = static_cast<int64_t>(v);
          hasRows = true;
        }
        if (a.name == "cols") {
          cols = static_cast<int64_t>(v);
          hasCols = true;
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
  if (hasRows && hasCols) {
    bool ok = rows >= 0 && cols >= 0 &&
              (cols == 0 ? n == 0 : n % cols == 0 && n / cols == rows);
    if (!ok) {
      error = who + "rows * cols = " + std::to_string(rows) + " * " +
              std::to_string(cols) + " differs from the launch size n = " +
              std::to_string(n);
      return false;
    }
    if (kernel.groupSize > 0 && cols % kernel.groupSize != 0) {
      error = who + "cols = " + std::to_string(cols) +
              " is not a multiple of the group size " +
              std::to_string(kernel.groupSize);
      return false;
    }
    if (kernel.maxCols > 0 && cols > kernel.maxCols) {
      error = who + "cols = " + std::to_string(cols) +
              " exceeds the kernel's max_cols = " + std::to_string(kernel.maxCols);
      return false;
    }
  }
  out.tensorMapStorage.resize(out.tensorMaps.size());
  out.params.reserve(out.storage.size() + out.tensorMaps.size());
  // A memref's or scalar's slots run up to the next storage-backed argument.
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i] < 0) {
      out.params.push_back(out.tensorMapStorage[size_t(-1 - slots[i])].bytes);
      continue;
    }
    size_t end = out.storage.size();
    for (size_t j = i + 1; j < slots.size(); ++j)
      if (slots[j] >= 0) {
        end = size_t(slots[j]);
        break;
      }
    for (size_t k = size_t(slots[i]); k < end; ++k)
      out.params.push_back(&out.storage[k]);
  }
  out.grid = kernel.gridTiles.empty() ? std::array<unsigned, 3>{unsigned(gridX), 1, 1}
                                      : grid;
  out.block = kernel.block;
  out.sharedBytes = kernel.sharedBytes;
  return true;
}

} // namespace coat::rt

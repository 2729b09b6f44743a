//===- LaunchArgs.cpp - launch-argument rules and packing -----------------===//
//
// The rules of one kernel call (docs/manifest.md, "Argument passing"): each
// buffer's extent, the scalars' conversion, the 2-D shape rules, the grid;
// and the expansion into the launch parameters of the memref calling
// convention. The GPU runtime, the CPU twins' callers and the program plans
// (Plan.cpp) all check launches here. No CUDA dependency.
//
//===----------------------------------------------------------------------===//

#include "coat/Runtime/Manifest.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>

namespace coat::rt {

namespace {

std::string who(const KernelSpec &kernel) {
  return "kernel '" + kernel.name + "': ";
}

/// The shortest decimal text that reads back as `v`.
std::string formatNumber(double v) {
  char buf[32];
  for (int digits = 15; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v)
      break;
  }
  return buf;
}

std::optional<int64_t> lookup(const NamedScalars &named,
                              const std::string &name) {
  for (const auto &[key, value] : named)
    if (key == name)
      return value;
  return std::nullopt;
}

bool isInteger(const std::string &s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

/// What an extent is, for messages.
std::string extentText(const KernelSpec &kernel, const ArgSpec &arg) {
  auto join = [](const std::vector<std::string> &parts) {
    std::string out;
    for (const auto &p : parts)
      out += (out.empty() ? "" : "*") + p;
    return out;
  };
  if (arg.kind == ArgSpec::Kind::TensorMap)
    return join(arg.mapDims);
  switch (arg.extent) {
  case ArgSpec::Extent::N:
    return "n";
  case ArgSpec::Extent::Groups:
    return "ceil(n / " + std::to_string(kernel.groupSize) + ")";
  case ArgSpec::Extent::Fixed:
    return "fixed";
  case ArgSpec::Extent::Product:
    return join(arg.extentFactors);
  }
  return "?";
}

bool checkCounts(const KernelSpec &kernel, int nbuf, bool haveBuffers,
                 int nscalar, bool haveScalars, std::string &error) {
  size_t wantBuf = kernel.numMemrefs(), wantScalar = kernel.numScalars();
  if (nbuf < 0 || size_t(nbuf) != wantBuf || (nbuf > 0 && !haveBuffers)) {
    error = who(kernel) + "expected " + std::to_string(wantBuf) +
            " buffer pointers (one per memref argument), got " +
            std::to_string(nbuf);
    return false;
  }
  if (nscalar < 0 || size_t(nscalar) != wantScalar ||
      (nscalar > 0 && !haveScalars)) {
    error = who(kernel) + "expected " + std::to_string(wantScalar) +
            " scalars (one per scalar argument), got " + std::to_string(nscalar);
    return false;
  }
  return true;
}

} // namespace

bool argumentExtent(const KernelSpec &kernel, const ArgSpec &arg, int64_t n,
                    const NamedScalars &named, int64_t &out,
                    std::string &error) {
  auto value = [&](const std::string &name, int64_t &v) {
    if (isInteger(name)) {
      v = std::stoll(name);
      return true;
    }
    std::optional<int64_t> found = lookup(named, name);
    if (!found) {
      error = who(kernel) + "the extent of '" + arg.name +
              "' needs the scalar '" + name + "'";
      return false;
    }
    v = *found;
    return true;
  };
  int64_t groups =
      kernel.groupSize > 0 ? (n + kernel.groupSize - 1) / kernel.groupSize : 0;
  if (arg.kind == ArgSpec::Kind::TensorMap) {
    out = 1;
    for (const auto &d : arg.mapDims) {
      int64_t v;
      if (!value(d, v))
        return false;
      out *= v;
    }
    return true;
  }
  switch (arg.extent) {
  case ArgSpec::Extent::N:
    out = n;
    return true;
  case ArgSpec::Extent::Groups:
    out = groups;
    return true;
  case ArgSpec::Extent::Fixed:
    out = arg.fixedExtent;
    return true;
  case ArgSpec::Extent::Product:
    break;
  }
  out = 1;
  for (const auto &f : arg.extentFactors) {
    // "rows/128": ceil(rows / 128), the count of 128-row blocks.
    size_t slash = f.find('/');
    int64_t v;
    if (f == "groups") {
      v = groups;
    } else if (!value(f.substr(0, slash), v)) {
      return false;
    } else if (slash != std::string::npos) {
      int64_t d = std::stoll(f.substr(slash + 1));
      v = v <= 0 ? 0 : (v + d - 1) / d;
    }
    out *= v;
  }
  return true;
}

int64_t launchSize(const KernelSpec &kernel, const NamedScalars &named,
                   const int64_t *numels) {
  if (std::optional<int64_t> n = lookup(named, "n"))
    return *n;
  size_t b = 0;
  for (const auto &a : kernel.args) {
    if (a.kind == ArgSpec::Kind::Scalar)
      continue;
    if (numels && a.kind == ArgSpec::Kind::Memref &&
        a.extent == ArgSpec::Extent::N && numels[b] >= 0)
      return numels[b];
    ++b;
  }
  return lookup(named, "cols").value_or(-1);
}

bool convertScalars(const KernelSpec &kernel, const double *scalars,
                    int nscalar, NamedScalars &named, std::string &error) {
  named.clear();
  int si = 0;
  for (const auto &a : kernel.args) {
    if (a.kind != ArgSpec::Kind::Scalar)
      continue;
    if (si >= nscalar)
      break;
    double v = scalars[si++];
    std::string what = who(kernel) + "scalar argument '" + a.name + "'";
    if (a.dtype == "f32") {
      if (std::isfinite(v) && !std::isfinite(static_cast<float>(v))) {
        error = what + " = " + formatNumber(v) + " overflows f32";
        return false;
      }
      continue;
    }
    // Integers travel as doubles: an i64 beyond +-2^53 may have been
    // rounded on the way, so it is refused rather than trusted.
    double lo = a.dtype == "i32" ? -0x1p31 : -0x1p53;
    double hi = a.dtype == "i32" ? 0x1p31 - 1 : 0x1p53;
    what += " (" + a.dtype + ")";
    if (!(v >= lo && v <= hi)) {
      error = what + ": " + formatNumber(v) + " out of range [" +
              formatNumber(lo) + ", " + formatNumber(hi) + "]";
      return false;
    }
    if (std::floor(v) != v) {
      error = what + " must be an integer, got " + formatNumber(v);
      return false;
    }
    named.push_back({a.name, static_cast<int64_t>(v)});
  }
  return true;
}

bool checkLaunchShape(const KernelSpec &kernel, int64_t n,
                      const NamedScalars &named, std::string &error) {
  if (n < 0) {
    error = who(kernel) + "n must be >= 0, got " + std::to_string(n);
    return false;
  }
  std::optional<int64_t> scalarN = lookup(named, "n");
  if (scalarN && *scalarN != n) {
    error = who(kernel) + "scalar argument 'n' = " + std::to_string(*scalarN) +
            " differs from the launch size n = " + std::to_string(n);
    return false;
  }
  std::optional<int64_t> rows = lookup(named, "rows");
  std::optional<int64_t> cols = lookup(named, "cols");
  if (!rows || !cols)
    return true;
  int64_t r = *rows, c = *cols;
  if (r < 0 || c < 0 || (c == 0 ? n != 0 : n % c != 0 || n / c != r)) {
    error = who(kernel) + "rows * cols = " + std::to_string(r) + " * " +
            std::to_string(c) + " differs from the launch size n = " +
            std::to_string(n);
    return false;
  }
  if (kernel.groupSize > 0 && c % kernel.groupSize != 0) {
    error = who(kernel) + "cols = " + std::to_string(c) +
            " is not a multiple of the group size " +
            std::to_string(kernel.groupSize);
    return false;
  }
  if (kernel.cols > 0 && c != kernel.cols) {
    error = who(kernel) + "cols = " + std::to_string(c) +
            " differs from the kernel's cols = " + std::to_string(kernel.cols) +
            " (its row length is compiled in)";
    return false;
  }
  if (kernel.maxCols > 0 && c > kernel.maxCols) {
    error = who(kernel) + "cols = " + std::to_string(c) +
            " exceeds the kernel's max_cols = " + std::to_string(kernel.maxCols);
    return false;
  }
  return true;
}

bool checkLaunch(const KernelSpec &kernel, int64_t &n, bool inferN,
                 const int64_t *numels, int nbuf, double *scalars, int nscalar,
                 std::string &error) {
  if (!checkCounts(kernel, nbuf, numels, nscalar, scalars, error))
    return false;
  // The scalar "n" is the launch size: when that is inferred, its slot is
  // filled in below.
  long slotN = -1;
  for (size_t i = 0, si = 0; i < kernel.args.size(); ++i)
    if (kernel.args[i].kind == ArgSpec::Kind::Scalar) {
      if (kernel.args[i].name == "n")
        slotN = long(si);
      ++si;
    }
  if (inferN && slotN >= 0)
    scalars[slotN] = 0;
  NamedScalars named;
  if (!convertScalars(kernel, scalars, nscalar, named, error))
    return false;
  if (inferN) {
    for (auto it = named.begin(); it != named.end(); ++it)
      if (it->first == "n") {
        named.erase(it);
        break;
      }
    n = launchSize(kernel, named, numels);
    if (n < 0) {
      error = who(kernel) + "pass n (no buffer has extent n)";
      return false;
    }
    if (slotN >= 0) {
      scalars[slotN] = double(n);
      named.push_back({"n", n});
    }
  }
  if (!checkLaunchShape(kernel, n, named, error))
    return false;
  size_t b = 0;
  for (const auto &a : kernel.args) {
    if (a.kind == ArgSpec::Kind::Scalar)
      continue;
    int64_t extent;
    if (!argumentExtent(kernel, a, n, named, extent, error))
      return false;
    if (numels[b] != extent) {
      error = who(kernel) + "argument '" + a.name + "': has " +
              std::to_string(numels[b]) + " elements, expected " +
              std::to_string(extent) + " (extent " + extentText(kernel, a) +
              ", n = " + std::to_string(n) + ")";
      return false;
    }
    ++b;
  }
  return true;
}

bool launchGrid(const KernelSpec &kernel, int64_t n, const NamedScalars &named,
                std::array<unsigned, 3> &grid, std::string &error) {
  if (kernel.gridTiles.empty()) {
    uint64_t x = (uint64_t(n) + uint64_t(kernel.elementsPerBlock) - 1) /
                 uint64_t(kernel.elementsPerBlock);
    if (x > uint64_t(std::numeric_limits<int32_t>::max())) {
      error = who(kernel) + "n = " + std::to_string(n) + " needs " +
              std::to_string(x) + " blocks, more than gridDim.x allows";
      return false;
    }
    grid = {unsigned(x), 1, 1};
    return true;
  }
  grid = {1, 1, 1};
  uint64_t tiles = 1;
  for (size_t i = 0; i < kernel.gridTiles.size(); ++i) {
    const auto &[name, tile] = kernel.gridTiles[i];
    int64_t v = lookup(named, name).value_or(0);
    if (v < 0) {
      error = who(kernel) + "scalar '" + name + "' must be >= 0";
      return false;
    }
    uint64_t g = (uint64_t(v) + uint64_t(tile) - 1) / uint64_t(tile);
    if (g > (i == 0 ? uint64_t(std::numeric_limits<int32_t>::max()) : 65535u)) {
      error = who(kernel) + "grid dimension " + std::to_string(i) + " too large";
      return false;
    }
    grid[i] = unsigned(g);
    tiles *= g;
  }
  // A persistent kernel strides over its tiles: the runtime launches at most
  // one CTA per multiprocessor along x.
  if (kernel.persistent) {
    if (tiles > uint64_t(std::numeric_limits<int32_t>::max())) {
      error = who(kernel) + std::to_string(tiles) + " tiles, more than gridDim.x allows";
      return false;
    }
    grid = {unsigned(tiles), 1, 1};
  }
  return true;
}

bool packLaunch(const KernelSpec &kernel, int64_t n, const uint64_t *buffers,
                int nbuf, const double *scalars, int nscalar,
                PackedLaunch &out, std::string &error) {
  if (n < 0) {
    error = who(kernel) + "n must be >= 0, got " + std::to_string(n);
    return false;
  }
  if (!checkCounts(kernel, nbuf, buffers, nscalar, scalars, error))
    return false;
  NamedScalars named;
  if (!convertScalars(kernel, scalars, nscalar, named, error) ||
      !checkLaunchShape(kernel, n, named, error))
    return false;
  auto scalarValue = [&](const std::string &name) -> int64_t {
    return isInteger(name) ? std::stoll(name) : lookup(named, name).value_or(0);
  };
  std::array<unsigned, 3> grid;
  if (!launchGrid(kernel, n, named, grid, error))
    return false;

  out = PackedLaunch();
  out.storage.reserve(kernel.numMemrefs() * 5 + kernel.numScalars());
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
          error = who(kernel) + "tensormap '" + a.name + "': dim " +
                  std::to_string(d) + " ('" + a.mapDims[d] +
                  "') must be > 0, got " + std::to_string(v);
          return false;
        }
        // TMA coordinates are signed 32-bit: a longer dimension has elements
        // no tile can reach.
        if (v > int64_t(std::numeric_limits<int32_t>::max())) {
          error = who(kernel) + "tensormap '" + a.name + "': dim " +
                  std::to_string(d) + " ('" + a.mapDims[d] + "') = " +
                  std::to_string(v) +
                  " exceeds 2^31 - 1, the largest extent TMA coordinates reach";
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
          error = who(kernel) + "tensormap '" + a.name + "': row stride " +
                  std::to_string(st) + " bytes is not a multiple of 16 (TMA)";
          return false;
        }
      if (req.address == 0 || req.address % kBufferAlignment != 0) {
        error = who(kernel) + "buffer for tensormap argument '" + a.name +
                "' is null or not 16-byte aligned";
        return false;
      }
      slots.push_back(-1 - long(out.tensorMaps.size()));
      out.bufferSlots.push_back(slots.back());
      out.tensorMaps.push_back(std::move(req));
      continue;
    }
    slots.push_back(long(out.storage.size()));
    if (a.kind == ArgSpec::Kind::Memref) {
      out.bufferSlots.push_back(slots.back());
      uint64_t ptr = buffers[bi++];
      int64_t extent;
      if (!argumentExtent(kernel, a, n, named, extent, error))
        return false;
      if (ptr == 0 && extent > 0) {
        error = who(kernel) + "buffer for memref argument '" + a.name + "' is null";
        return false;
      }
      if (ptr % kBufferAlignment != 0) {
        char hex[32];
        std::snprintf(hex, sizeof hex, "0x%llx", (unsigned long long)ptr);
        error = who(kernel) + "buffer for memref argument '" + a.name + "' (" +
                hex + ") is not " + std::to_string(kBufferAlignment) +
                "-byte aligned";
        return false;
      }
      out.storage.push_back(ptr);              // allocated
      out.storage.push_back(ptr);              // aligned
      out.storage.push_back(0);                // offset
      out.storage.push_back(uint64_t(extent)); // size
      out.storage.push_back(1);                // stride
      continue;
    }
    // convertScalars checked the value against its dtype.
    double v = scalars[si++];
    uint64_t slot = 0;
    if (a.dtype == "f32") {
      float f = static_cast<float>(v);
      std::memcpy(&slot, &f, sizeof f);
    } else if (a.dtype == "i32") {
      int32_t i = static_cast<int32_t>(v);
      std::memcpy(&slot, &i, sizeof i);
    } else {
      int64_t i = static_cast<int64_t>(v);
      std::memcpy(&slot, &i, sizeof i);
    }
    out.storage.push_back(slot);
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
  out.grid = grid;
  out.block = kernel.block;
  out.sharedBytes = kernel.sharedBytes;
  return true;
}

} // namespace coat::rt

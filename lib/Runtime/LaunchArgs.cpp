//===- LaunchArgs.cpp - launch-argument packing for manifest kernels ------===//
//
// Expands one kernel call into the launch parameters of the memref calling
// convention (docs/manifest.md). Parsing and validating the manifest itself
// is ManifestParse.cpp. No CUDA dependency.
//
//===----------------------------------------------------------------------===//

#include "coat/Runtime/Manifest.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace coat::rt {

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
        // TMA coordinates are signed 32-bit: a longer dimension has elements
        // no tile can reach.
        if (v > int64_t(std::numeric_limits<int32_t>::max())) {
          error = who + "tensormap '" + a.name + "': dim " + std::to_string(d) +
                  " ('" + a.mapDims[d] + "') = " + std::to_string(v) +
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
      out.bufferSlots.push_back(slots.back());
      out.tensorMaps.push_back(std::move(req));
      continue;
    }
    slots.push_back(long(out.storage.size()));
    if (a.kind == ArgSpec::Kind::Memref) {
      out.bufferSlots.push_back(slots.back());
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
        // Integers travel as doubles: an i64 beyond +-2^53 may have been
        // rounded on the way, so it is refused rather than trusted.
        double lo = a.dtype == "i32" ? -0x1p31 : -0x1p53;
        double hi = a.dtype == "i32" ? 0x1p31 - 1 : 0x1p53;
        if (!(v >= lo && v <= hi) || std::floor(v) != v) {
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

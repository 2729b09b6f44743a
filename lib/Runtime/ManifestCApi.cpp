//===- ManifestCApi.cpp - coat_manifest.h: the validated manifest as JSON -===//
//
// Serializes the Manifest model of ManifestParse.cpp into the normalized
// document coat_manifest.h describes. No CUDA dependency.
//
//===----------------------------------------------------------------------===//

#include "coat/Runtime/coat_manifest.h"

#include "coat/Runtime/Manifest.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace coat::rt;

namespace {

void putString(std::string &o, const std::string &s) {
  o += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += char(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else {
      o += char(c);
    }
  }
  o += '"';
}

void putNumber(std::string &o, double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  o += buf;
}

void key(std::string &o, const char *k) {
  putString(o, k);
  o += ':';
}

void field(std::string &o, const char *k, const std::string &v) {
  key(o, k);
  putString(o, v);
  o += ',';
}

void field(std::string &o, const char *k, int64_t v) {
  key(o, k);
  o += std::to_string(v);
  o += ',';
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
    putString(o, product);
  }
  o += ",\"dims\":[";
  for (const auto &d : a.mapDims) {
    if (isInteger(d))
      o += d;
    else
      putString(o, d);
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
    putString(o, b);
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
  o += "\"block\":[" + std::to_string(k.block[0]) + "," +
       std::to_string(k.block[1]) + "," + std::to_string(k.block[2]) + "],";
  field(o, "elements_per_block", k.elementsPerBlock);
  field(o, "shared_bytes", int64_t(k.sharedBytes));
  field(o, "group_size", k.groupSize);
  field(o, "max_cols", k.maxCols);
  o += "\"grid_tiles\":[";
  for (const auto &[name, tile] : k.gridTiles) {
    o += '[';
    putString(o, name);
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

std::string normalize(const Manifest &m) {
  std::string o = "{";
  field(o, "version", int64_t(m.version));
  field(o, "chip", m.chip);
  field(o, "features", m.features);
  o += "\"formats\":{";
  for (const auto &f : m.formats) {
    putString(o, f.name);
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
  o += '}';
  return o;
}

void setError(char *errbuf, size_t errlen, const std::string &msg) {
  if (!errbuf || errlen == 0)
    return;
  size_t n = msg.size() < errlen - 1 ? msg.size() : errlen - 1;
  std::memcpy(errbuf, msg.data(), n);
  errbuf[n] = '\0';
}

} // namespace

extern "C" {

int coat_manifest_abi_version(void) { return COAT_MANIFEST_ABI_VERSION; }

char *coat_manifest_normalize(const char *text, size_t len, char *errbuf,
                              size_t errlen) {
  if (!text && len) {
    setError(errbuf, errlen, "manifest: null text");
    return nullptr;
  }
  Manifest m;
  std::string error;
  if (!parseManifest(std::string(text ? text : "", len), ".", m, error)) {
    setError(errbuf, errlen, error);
    return nullptr;
  }
  std::string doc = normalize(m);
  char *out = static_cast<char *>(std::malloc(doc.size() + 1));
  if (!out) {
    setError(errbuf, errlen, "manifest: out of memory");
    return nullptr;
  }
  std::memcpy(out, doc.c_str(), doc.size() + 1);
  setError(errbuf, errlen, "");
  return out;
}

void coat_manifest_free(char *doc) { std::free(doc); }

} // extern "C"

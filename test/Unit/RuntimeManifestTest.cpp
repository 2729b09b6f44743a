//===- RuntimeManifestTest.cpp - manifest parsing and launch packing ------===//

#include "coat/Runtime/Manifest.h"
#include "coat/Runtime/coat_manifest.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace coat::rt;

namespace {

// A hand-written fixture in the shape of docs/manifest.md (not compiler output).
const char *kManifest = R"({
  "format": "coat-manifest", "version": 1,
  "target": {"chip": "sm_90a", "features": "+ptx80"},
  "kernels": [{
    "name": "k", "op": "adamw_step", "module": "m",
    "gpu": {"cubin": "m.cubin", "ptx": "m.ptx"},
    "cpu": {"object": "m.cpu.o", "symbol": "k_cpu"},
    "config": {"group_size": 128},
    "launch": {"block": [256, 1, 1], "elements_per_block": 2048, "shared_bytes": 0},
    "args": [
      {"name": "param", "kind": "memref", "dtype": "f32", "extent": "n"},
      {"name": "m_scale", "kind": "memref", "dtype": "f32", "extent": "groups"},
      {"name": "n", "kind": "scalar", "dtype": "i64"},
      {"name": "lr", "kind": "scalar", "dtype": "f32"}
    ]}]})";

Manifest parseOk(const std::string &text) {
  Manifest m;
  std::string err;
  EXPECT_TRUE(parseManifest(text, "/d", m, err)) << err;
  return m;
}

std::string parseErr(std::string text, const std::string &from,
                     const std::string &to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  Manifest m;
  std::string err;
  EXPECT_FALSE(parseManifest(text, "/d", m, err));
  return err;
}

TEST(RuntimeManifest, ParsesTheDocumentedShape) {
  Manifest m = parseOk(kManifest);
  ASSERT_EQ(m.kernels.size(), 1u);
  const KernelSpec &k = m.kernels[0];
  EXPECT_EQ(m.chip, "sm_90a");
  EXPECT_EQ(k.cubin, "m.cubin");
  EXPECT_EQ(k.cpuSymbol, "k_cpu");
  EXPECT_EQ(k.block[0], 256u);
  EXPECT_EQ(k.elementsPerBlock, 2048);
  EXPECT_EQ(k.groupSize, 128);
  EXPECT_EQ(k.numMemrefs(), 2u);
  EXPECT_EQ(k.numScalars(), 2u);
  EXPECT_EQ(k.args[1].extent, ArgSpec::Extent::Groups);
}

TEST(RuntimeManifest, ReportsErrorsWithTheirPath) {
  EXPECT_NE(parseErr(kManifest, "\"dtype\": \"f32\", \"extent\": \"n\"",
                     "\"dtype\": \"f64\", \"extent\": \"n\"")
                .find("kernels[0].args[0] ('param'): unknown memref dtype 'f64'"),
            std::string::npos);
  EXPECT_NE(parseErr(kManifest, "\"elements_per_block\": 2048,", "")
                .find("missing required field 'elements_per_block'"),
            std::string::npos);
  EXPECT_NE(parseErr(kManifest, "\"config\": {\"group_size\": 128},", "")
                .find("config.group_size is missing"),
            std::string::npos);
  EXPECT_NE(parseErr(kManifest, "\"version\": 1", "\"version\": 2")
                .find("unsupported manifest version 2"),
            std::string::npos);
  EXPECT_NE(parseErr(kManifest, "\"kind\": \"scalar\", \"dtype\": \"f32\"",
                     "\"kind\": \"scalar\", \"dtype\": \"bf16\"")
                .find("unsupported scalar dtype 'bf16'"),
            std::string::npos);
  std::string jsonErr = parseErr(kManifest, "\"version\": 1,", "\"version\": 1");
  EXPECT_NE(jsonErr.find("manifest: JSON parse error at line 3, column 3"),
            std::string::npos) << jsonErr;
  EXPECT_NE(jsonErr.find("expected ',' or '}' in object"), std::string::npos) << jsonErr;
}

TEST(RuntimeManifest, JsonEscapesAndNumbers) {
  Manifest m = parseOk(std::string(kManifest).replace(
      std::string(kManifest).find("\"name\": \"k\""), 11,
      "\"name\": \"k\\u00e9\\n\""));
  EXPECT_EQ(m.kernels[0].name, "k\xC3\xA9\n");
}

TEST(RuntimeManifest, PacksTheMemrefConvention) {
  Manifest m = parseOk(kManifest);
  uint64_t bufs[2] = {0x1000, 0x2000};
  double scalars[2] = {300, 0.5};
  PackedLaunch p;
  std::string err;
  ASSERT_TRUE(packLaunch(m.kernels[0], 300, bufs, 2, scalars, 2, p, err)) << err;
  ASSERT_EQ(p.params.size(), 12u);
  const uint64_t want[10] = {0x1000, 0x1000, 0, 300, 1, 0x2000, 0x2000, 0, 3, 1};
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(*static_cast<uint64_t *>(p.params[i]), want[i]) << i;
  EXPECT_EQ(*static_cast<int64_t *>(p.params[10]), 300);
  float lr;
  std::memcpy(&lr, p.params[11], 4);
  EXPECT_EQ(lr, 0.5f);
  EXPECT_EQ(p.grid[0], 1u); // ceil(300 / 2048)
  EXPECT_EQ(p.block[0], 256u);
  // Where a bound launch writes each buffer's address: storage slots 0 and
  // 5 (allocated, aligned), with the extent three slots on.
  ASSERT_EQ(p.bufferSlots, (std::vector<long>{0, 5}));
  EXPECT_EQ(p.storage[size_t(p.bufferSlots[1]) + 3], 3u);
}

TEST(RuntimeManifest, RejectsBadLaunchArguments) {
  Manifest m = parseOk(kManifest);
  const KernelSpec &k = m.kernels[0];
  uint64_t bufs[2] = {0x1000, 0x2000};
  double scalars[2] = {4096, 0.5};
  PackedLaunch p;
  std::string err;
  EXPECT_FALSE(packLaunch(k, 4096, bufs, 1, scalars, 2, p, err));
  EXPECT_NE(err.find("expected 2 buffer pointers"), std::string::npos) << err;
  uint64_t misaligned[2] = {0x1008, 0x2000};
  EXPECT_FALSE(packLaunch(k, 4096, misaligned, 2, scalars, 2, p, err));
  EXPECT_NE(err.find("'param' (0x1008) is not 16-byte aligned"), std::string::npos) << err;
  uint64_t null[2] = {0, 0x2000};
  EXPECT_FALSE(packLaunch(k, 4096, null, 2, scalars, 2, p, err));
  EXPECT_NE(err.find("'param' is null"), std::string::npos) << err;
  double wrongN[2] = {4095, 0.5};
  EXPECT_FALSE(packLaunch(k, 4096, bufs, 2, wrongN, 2, p, err));
  EXPECT_NE(err.find("differs from the launch size"), std::string::npos) << err;
  double fracN[2] = {4096.5, 0.5};
  EXPECT_FALSE(packLaunch(k, 4096, bufs, 2, fracN, 2, p, err));
  EXPECT_NE(err.find("must be an integer"), std::string::npos) << err;
  double hugeLr[2] = {4096, 1e300};
  EXPECT_FALSE(packLaunch(k, 4096, bufs, 2, hugeLr, 2, p, err));
  EXPECT_NE(err.find("overflows f32"), std::string::npos) << err;
  EXPECT_FALSE(packLaunch(k, -1, bufs, 2, scalars, 2, p, err));
  ASSERT_TRUE(packLaunch(k, 4097, bufs, 2, (double[]){4097, 0.5}, 2, p, err)) << err;
  EXPECT_EQ(p.grid[0], 3u);
}

} // namespace

namespace {
// The GEMM shape of docs/manifest.md: tensormap arguments and grid_tiles.
const char *kGemmManifest = R"({
  "format": "coat-manifest", "version": 1,
  "kernels": [{
    "name": "g", "op": "linear", "gpu": {"cubin": "g.cubin"},
    "launch": {"block": [256, 1, 1], "grid_tiles": [["n", 256], ["m", 128]],
               "shared_bytes": 197696},
    "args": [
      {"name": "a", "kind": "tensormap", "dtype": "e4m3", "dims": ["k", "m"],
       "box": [128, 128], "swizzle": "128b"},
      {"name": "b", "kind": "tensormap", "dtype": "e4m3", "dims": ["k", "n"],
       "box": [128, 256], "swizzle": "128b"},
      {"name": "out", "kind": "memref", "dtype": "bf16", "extent": "m*n"},
      {"name": "a_scale", "kind": "memref", "dtype": "f32", "extent": 1},
      {"name": "m", "kind": "scalar", "dtype": "i64"},
      {"name": "n", "kind": "scalar", "dtype": "i64"},
      {"name": "k", "kind": "scalar", "dtype": "i64"}
    ]}]})";
} // namespace

TEST(RuntimeManifest, PacksTensorMapsAndTileGrids) {
  Manifest m = parseOk(kGemmManifest);
  const KernelSpec &k = m.kernels[0];
  EXPECT_EQ(k.numMemrefs(), 4u); // two tensormaps take buffers too
  EXPECT_EQ(k.numScalars(), 3u);
  uint64_t bufs[4] = {0x1000, 0x2000, 0x3000, 0x4000};
  double scalars[3] = {300, 200, 4112};
  PackedLaunch p;
  std::string err;
  ASSERT_TRUE(packLaunch(k, 200, bufs, 4, scalars, 3, p, err)) << err;
  EXPECT_EQ(p.grid[0], 1u); // ceil(200 / 256)
  EXPECT_EQ(p.grid[1], 3u); // ceil(300 / 128)
  ASSERT_EQ(p.tensorMaps.size(), 2u);
  EXPECT_EQ(p.tensorMaps[0].dims, (std::vector<uint64_t>{4112, 300}));
  EXPECT_EQ(p.tensorMaps[0].strides, (std::vector<uint64_t>{4112}));
  EXPECT_EQ(p.tensorMaps[1].box, (std::vector<uint32_t>{128, 256}));
  // 2 maps + 2 memrefs x 5 + 3 scalars, maps passed by address of their bytes.
  ASSERT_EQ(p.params.size(), 15u);
  EXPECT_EQ(p.params[0], p.tensorMapStorage[0].bytes);
  EXPECT_EQ(p.params[1], p.tensorMapStorage[1].bytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p.params[0]) % 64, 0u);
  EXPECT_EQ(*static_cast<uint64_t *>(p.params[2]), 0x3000u);
  EXPECT_EQ(*static_cast<uint64_t *>(p.params[5]), 60000u); // m*n
  EXPECT_EQ(*static_cast<uint64_t *>(p.params[14]), 4112u);
  // Bound launches: buffers 0 and 1 are tensormaps 0 and 1 (-1 - index),
  // buffers 2 and 3 memrefs at storage slots 0 and 5.
  ASSERT_EQ(p.bufferSlots, (std::vector<long>{-1, -2, 0, 5}));
  EXPECT_EQ(p.tensorMaps[1].address, 0x2000u);
  EXPECT_EQ(p.storage[size_t(p.bufferSlots[2]) + 3], 60000u);
  // TMA needs 16-byte row strides.
  double odd[3] = {300, 200, 100};
  EXPECT_FALSE(packLaunch(k, 200, bufs, 4, odd, 3, p, err));
  EXPECT_NE(err.find("multiple of 16"), std::string::npos) << err;
  // TMA coordinates are 32-bit: a dimension of 2^31 is refused before launch.
  double tall[3] = {300, 200, 2147483648.0};
  EXPECT_FALSE(packLaunch(k, 200, bufs, 4, tall, 3, p, err));
  EXPECT_NE(err.find("exceeds 2^31 - 1"), std::string::npos) << err;
  double justFits[3] = {300, 200, 2147483632.0};
  EXPECT_TRUE(packLaunch(k, 200, bufs, 4, justFits, 3, p, err)) << err;
}

namespace {
// A per_block<128x128> quantize: the scale extent divides scalars, rounding up.
const char *kBlockManifest = R"({
  "format": "coat-manifest", "version": 1,
  "kernels": [{
    "name": "qb", "op": "quantize", "gpu": {"cubin": "q.cubin"},
    "config": {"scaling": "per_block", "block": 128},
    "launch": {"block": [256, 1, 1], "elements_per_block": 16384},
    "args": [
      {"name": "input", "kind": "memref", "dtype": "bf16", "extent": "n"},
      {"name": "scale", "kind": "memref", "dtype": "f32", "extent": "rows/128*cols/128"},
      {"name": "rows", "kind": "scalar", "dtype": "i64"},
      {"name": "cols", "kind": "scalar", "dtype": "i64"}
    ]}]})";
} // namespace

TEST(RuntimeManifest, BlockScaleExtentsRoundUp) {
  Manifest m = parseOk(kBlockManifest);
  uint64_t bufs[2] = {0x1000, 0x2000};
  double scalars[2] = {257, 129};
  PackedLaunch p;
  std::string err;
  ASSERT_TRUE(packLaunch(m.kernels[0], 257 * 129, bufs, 2, scalars, 2, p, err))
      << err;
  EXPECT_EQ(*static_cast<uint64_t *>(p.params[8]), 6u); // 3 x 2 blocks
  EXPECT_NE(parseErr(kBlockManifest, "rows/128*", "rows/0*").find("extent"),
            std::string::npos);
  EXPECT_NE(parseErr(kBlockManifest, "rows/128*", "depth/128*").find("extent"),
            std::string::npos);
}

namespace {
// A rotary kernel (coat.rope): tables of a fixed row length ("rows*64"), a
// row length compiled in (config.cols), a grid of whole rows.
const char *kRopeManifest = R"({
  "format": "coat-manifest", "version": 1,
  "kernels": [{
    "name": "rope", "op": "rope", "gpu": {"cubin": "r.cubin"},
    "config": {"head_dim": 64, "rotated_heads": 2, "cols": 192, "in_place": true},
    "launch": {"block": [256, 1, 1], "grid_tiles": [["rows", 32]]},
    "args": [
      {"name": "x", "kind": "memref", "dtype": "bf16", "extent": "n"},
      {"name": "cos", "kind": "memref", "dtype": "f32", "extent": "rows*64"},
      {"name": "sin", "kind": "memref", "dtype": "f32", "extent": "rows*64"},
      {"name": "rows", "kind": "scalar", "dtype": "i64"},
      {"name": "cols", "kind": "scalar", "dtype": "i64"}
    ]}]})";
} // namespace

TEST(RuntimeManifest, FixedRowLengthsAndIntegerExtentFactors) {
  Manifest m = parseOk(kRopeManifest);
  const KernelSpec &k = m.kernels[0];
  EXPECT_EQ(k.cols, 192);
  uint64_t bufs[3] = {0x1000, 0x2000, 0x3000};
  double scalars[2] = {65, 192};
  PackedLaunch p;
  std::string err;
  ASSERT_TRUE(packLaunch(k, 65 * 192, bufs, 3, scalars, 2, p, err)) << err;
  EXPECT_EQ(*static_cast<uint64_t *>(p.params[8]), 65u * 64); // cos: rows*64
  EXPECT_EQ(p.grid[0], 3u);                                   // ceil(65 / 32)
  // Another row length is refused, whatever rows * cols gives.
  double wider[2] = {60, 208};
  EXPECT_FALSE(packLaunch(k, 60 * 208, bufs, 3, wider, 2, p, err));
  EXPECT_NE(err.find("cols = 208 differs from the kernel's cols = 192"),
            std::string::npos)
      << err;
  // A factor is a scalar argument or a positive integer.
  EXPECT_NE(parseErr(kRopeManifest, "\"rows*64\"", "\"rows*0\"").find("extent"),
            std::string::npos);
  EXPECT_NE(parseErr(kRopeManifest, "\"rows*64\"", "\"rows*-64\"").find("extent"),
            std::string::npos);
  EXPECT_NE(parseErr(kRopeManifest, "\"cols\": 192", "\"cols\": 0")
                .find("cols"),
            std::string::npos);
}

TEST(RuntimeManifest, CpuOnlyKernelsMayOmitTheLaunchRule) {
  // No "gpu" section: the launch rule is optional (one thread per group).
  std::string text = kManifest;
  std::string gpu = "\"gpu\": {\"cubin\": \"m.cubin\", \"ptx\": \"m.ptx\"},";
  text.replace(text.find(gpu), gpu.size(), "");
  std::string noLaunch = text;
  std::string launch = "\"launch\": {\"block\": [256, 1, 1], \"elements_per_block\": "
                       "2048, \"shared_bytes\": 0},";
  noLaunch.replace(noLaunch.find(launch), launch.size(), "");
  Manifest cpu = parseOk(noLaunch);
  EXPECT_EQ(cpu.kernels[0].elementsPerBlock, 128); // config.group_size
  EXPECT_EQ(cpu.kernels[0].block[0], 1u);
  // With GPU code the launch rule is required.
  EXPECT_NE(parseErr(kManifest, launch, "").find("missing required field 'launch'"),
            std::string::npos);
}

TEST(RuntimeManifest, BindingsAndFormats) {
  std::string text = kManifest;
  text.replace(text.find("\"kernels\""), 0,
               "\"formats\": {\"e4m3\": {\"mlir_type\": \"f8E4M3FN\", "
               "\"exponent_bits\": 4, \"mantissa_bits\": 3, \"exponent_bias\": 7, "
               "\"has_infinity\": false, \"max_finite\": 448.0, "
               "\"min_normal\": 0.015625, \"min_subnormal\": 0.001953125}},\n");
  std::string param = "{\"name\": \"param\", ";
  text.replace(text.find(param), param.size(), param + "\"bind\": [\"%0\", \"%1\"], ");
  Manifest m = parseOk(text);
  ASSERT_EQ(m.formats.size(), 1u);
  EXPECT_EQ(m.formats[0].mlirType, "f8E4M3FN");
  EXPECT_EQ(m.formats[0].maxFinite, 448.0);
  EXPECT_EQ(m.kernels[0].args[0].bind, (std::vector<std::string>{"%0", "%1"}));
  EXPECT_NE(parseErr(text, "[\"%0\", \"%1\"]", "[1]")
                .find("kernels[0].args[0] ('param').bind: expected a string or a "
                      "list of strings"),
            std::string::npos);
  EXPECT_NE(parseErr(text, "\"max_finite\": 448.0", "\"max_finite\": \"448\"")
                .find("formats.e4m3.max_finite: expected number, got string"),
            std::string::npos);
}

TEST(RuntimeManifest, CApiReturnsTheNormalizedDocument) {
  EXPECT_EQ(coat_manifest_abi_version(), COAT_MANIFEST_ABI_VERSION);
  char err[256] = "untouched";
  std::string text = kManifest;
  coat_manifest *m = nullptr;
  ASSERT_EQ(coat_manifest_open(text.data(), text.size(), &m, err, sizeof err),
            COAT_MANIFEST_OK)
      << err;
  std::string d = coat_manifest_document(m);
  coat_manifest_close(m);
  EXPECT_EQ(err[0], '\0');
  for (const char *part :
       {"\"version\":1,", "\"chip\":\"sm_90a\"", "\"block\":[256,1,1]",
        "\"elements_per_block\":2048", "\"group_size\":128", "\"persistent\":false",
        "{\"name\":\"m_scale\",\"kind\":\"memref\",\"dtype\":\"f32\","
        "\"extent\":\"groups\",\"dims\":[],\"box\":[],\"swizzle\":\"none\","
        "\"bind\":[]}",
        "\"extent\":null", "\"target\":{\"chip\":\"sm_90a\",\"features\":\"+ptx80\"}",
        "\"config\":{\"group_size\":128}", "\"programs\":[]", "\"source_key\":\"\""})
    EXPECT_NE(d.find(part), std::string::npos) << part << " in " << d;

  text.replace(text.find("\"version\": 1"), 12, "\"version\": 2");
  EXPECT_EQ(coat_manifest_open(text.data(), text.size(), &m, err, 16),
            COAT_MANIFEST_ERR_MANIFEST);
  EXPECT_EQ(m, nullptr);
  EXPECT_STREQ(err, "manifest: versi"); // truncated to errlen
}

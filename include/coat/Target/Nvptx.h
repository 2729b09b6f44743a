//===- Nvptx.h - NVPTX chip / PTX ISA facts ---------------------*- C++ -*-===//
//
// Which PTX ISA versions LLVM 22's NVPTX backend accepts for which chip, and
// where the FP8 conversions (cvt e4m3x2/e5m2x2) exist. LLVM aborts the process
// instead of diagnosing a violation, so the compiler (coat-verify-nvvm-target)
// and any host that compiles kernels check these facts first. No MLIR
// dependency. PTX versions are encoded like the `+ptxNN` features: 81 = 8.1.
//
// Measured with llc 22.1.8 (`-mcpu=<chip> -mattr=+ptxNN`) on an empty kernel
// and on one calling llvm.nvvm.ff.to.e4m3x2.rn / e4m3x2.to.f16x2.rn /
// f16x2.to.e5m2x2.rn.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_TARGET_NVPTX_H
#define COAT_TARGET_NVPTX_H

#include <optional>
#include <string_view>

namespace coat {

struct NvptxChipInfo {
  std::string_view chip; ///< "sm_90a"
  unsigned smVersion;    ///< 90
  unsigned minPtx;       ///< smallest PTX ISA LLVM accepts for the chip
};

/// Every chip LLVM 22 knows, with its minimum PTX ISA.
inline constexpr NvptxChipInfo kNvptxChips[] = {
    {"sm_20", 20, 32},   {"sm_21", 21, 32},   {"sm_30", 30, 32},
    {"sm_32", 32, 40},   {"sm_35", 35, 32},   {"sm_37", 37, 41},
    {"sm_50", 50, 40},   {"sm_52", 52, 41},   {"sm_53", 53, 42},
    {"sm_60", 60, 50},   {"sm_61", 61, 50},   {"sm_62", 62, 50},
    {"sm_70", 70, 60},   {"sm_72", 72, 61},   {"sm_75", 75, 63},
    {"sm_80", 80, 70},   {"sm_86", 86, 71},   {"sm_87", 87, 74},
    {"sm_88", 88, 90},   {"sm_89", 89, 78},   {"sm_90", 90, 78},
    {"sm_90a", 90, 80},  {"sm_100", 100, 86}, {"sm_100a", 100, 86},
    {"sm_100f", 100, 88}, {"sm_101", 101, 86}, {"sm_101a", 101, 86},
    {"sm_101f", 101, 88}, {"sm_103", 103, 88}, {"sm_103a", 103, 88},
    {"sm_103f", 103, 88}, {"sm_110", 110, 90}, {"sm_110a", 110, 90},
    {"sm_110f", 110, 90}, {"sm_120", 120, 87}, {"sm_120a", 120, 87},
    {"sm_120f", 120, 88}, {"sm_121", 121, 88}, {"sm_121a", 121, 88},
    {"sm_121f", 121, 88},
};

/// The facts of `chip`, or nullopt for a chip LLVM 22 does not know.
inline std::optional<NvptxChipInfo> lookupNvptxChip(std::string_view chip) {
  for (const NvptxChipInfo &info : kNvptxChips)
    if (info.chip == chip)
      return info;
  return std::nullopt;
}

/// The PTX ISA requested by a target feature string such as "+ptx80" or
/// "+ptx80,+ptx86" (LLVM takes the largest), or nullopt if none is given.
inline std::optional<unsigned> parsePtxFeature(std::string_view features) {
  std::optional<unsigned> best;
  constexpr std::string_view key = "+ptx";
  for (size_t pos = features.find(key); pos != std::string_view::npos;
       pos = features.find(key, pos + 1)) {
    size_t i = pos + key.size();
    unsigned v = 0, digits = 0;
    for (; i < features.size() && features[i] >= '0' && features[i] <= '9';
         ++i, ++digits)
      v = v * 10 + unsigned(features[i] - '0');
    if (digits != 2)
      continue;
    if (!best || v > *best)
      best = v;
  }
  return best;
}

/// The PTX ISA LLVM uses for `chip` with `features`: the requested one, or the
/// chip's minimum when none is requested. nullopt for an unknown chip without
/// a requested version.
inline std::optional<unsigned> getEffectivePtx(std::string_view chip,
                                               std::string_view features) {
  if (std::optional<unsigned> v = parsePtxFeature(features))
    return v;
  if (std::optional<NvptxChipInfo> info = lookupNvptxChip(chip))
    return info->minPtx;
  return std::nullopt;
}

/// The smallest PTX ISA with which LLVM selects the FP8 conversions
/// (cvt.rn.satfinite.{e4m3x2,e5m2x2}.{f32,f16x2}, cvt.rn.f16x2.{e4m3x2,e5m2x2})
/// on `chip`, or nullopt if the chip has none (below sm_89, or unknown).
inline std::optional<unsigned> getMinPtxForFp8Cvt(std::string_view chip) {
  std::optional<NvptxChipInfo> info = lookupNvptxChip(chip);
  if (!info || info->smVersion < 89)
    return std::nullopt;
  unsigned isaMin = info->smVersion == 89 ? 81 : 78;
  return info->minPtx > isaMin ? info->minPtx : isaMin;
}

} // namespace coat

#endif // COAT_TARGET_NVPTX_H

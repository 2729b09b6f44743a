//===- Fp8.h - FP8 format facts shared by compiler, runtime and tests -----===//
//
// The single source of truth for the FP8 formats COAT uses. This header has no
// MLIR dependency: the dialect verifiers, the lowerings, the runtime and the
// reference library all include it.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_NUMERICS_FP8_H
#define COAT_NUMERICS_FP8_H

#include <cstdint>
#include <optional>
#include <string_view>

namespace coat {

/// The two FP8 formats of Hopper tensor cores (OCP FP8: E4M3 is the "fn"
/// variant without infinities, E5M2 is IEEE-like).
enum class Fp8Format : uint8_t { E4M3, E5M2 };

/// Static facts about an FP8 format.
struct Fp8Traits {
  const char *name;      ///< "e4m3" / "e5m2"
  const char *mlirType;  ///< "f8E4M3FN" / "f8E5M2"
  int exponentBits;
  int mantissaBits;
  int exponentBias;
  bool hasInfinity;
  float maxFinite;       ///< largest finite magnitude (448 / 57344)
  float minNormal;       ///< 2^-6 / 2^-14
  float minSubnormal;    ///< 2^-9 / 2^-16
};

constexpr Fp8Traits getFp8Traits(Fp8Format f) {
  return f == Fp8Format::E4M3
             ? Fp8Traits{"e4m3", "f8E4M3FN", 4, 3, 7, false, 448.0f,
                         0.015625f, 0.001953125f}
             : Fp8Traits{"e5m2", "f8E5M2", 5, 2, 15, true, 57344.0f,
                         6.103515625e-05f, 1.52587890625e-05f};
}

/// The NaN code PTX `cvt.rn.satfinite` writes for any NaN input, in both
/// formats (E4M3: the only NaN magnitude; E5M2: the all-ones quiet NaN).
inline constexpr uint8_t kFp8CanonicalNaN = 0x7F;

/// The largest finite code's magnitude bits (0x7E for E4M3, 0x7B for E5M2):
/// IEEE-like formats lose the whole top binade to inf/NaN, the "fn" formats
/// only the all-ones pattern.
constexpr uint8_t fp8MaxFiniteCode(Fp8Format f) {
  Fp8Traits t = getFp8Traits(f);
  unsigned allOnes = (1u << (t.exponentBits + t.mantissaBits)) - 1;
  unsigned topBinade = ((1u << t.exponentBits) - 1) << t.mantissaBits;
  return static_cast<uint8_t>(t.hasInfinity ? topBinade - 1 : allOnes - 1);
}

/// Parses "e4m3"/"e5m2" (also the MLIR spellings "f8E4M3FN"/"f8E5M2").
inline std::optional<Fp8Format> parseFp8Format(std::string_view s) {
  if (s == "e4m3" || s == "E4M3" || s == "f8E4M3FN")
    return Fp8Format::E4M3;
  if (s == "e5m2" || s == "E5M2" || s == "f8E5M2")
    return Fp8Format::E5M2;
  return std::nullopt;
}

/// Epsilons COAT adds to an absolute maximum before dividing by fp8max
/// (COAT.md §1.2).
inline constexpr float kActivationScaleEps = 1e-10f;
inline constexpr float kOptimizerScaleEps = 1e-20f;
inline constexpr float kExpansionEps = 1e-30f;

} // namespace coat

#endif // COAT_NUMERICS_FP8_H

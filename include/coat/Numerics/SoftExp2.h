//===- SoftExp2.h - 2^x on the FMA units ------------------------*- C++ -*-===//
//
// The sequence coat-expand-soft-exp2 emits for an `ex2` that should not use
// the special function unit (SFU-bound kernels trade one SFU operation for
// a dozen FMA-unit ones), as constants and as a host function that performs
// the same f32 operations in the same order (test/Unit/SoftExp2Test.cpp
// bounds its error).
//
//   x' = max(min(x, 128), -126.5)       (NaN-propagating: NaN stays NaN)
//   t  = (x' - 1/2) + 1.5 * 2^23         (the integer n = floor(x') in t's
//   f  = x' - (t - 1.5 * 2^23)            low bits, up to ties: f in [0, 1],
//                                         exact)
//   p  = c0 + f (c1 + f (... + f c6))    (fused multiply-adds)
//   s  = bits((bits(t) << 23) + (127 << 23)) = 2^n  (0 for n = -127,
//                                                     +inf for n = 128)
//   2^x ~ p * s
//
// c are a relative-error fit of 2^f on [0, 1] (error below 2e-9); in f32
// the result is within about one ulp of 2^x wherever 2^x is at least
// 2^-126. Below that it is 0 or subnormal (the SFU's ex2.approx.ftz gives
// 0); 2^x past f32's range is +inf, as there.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_NUMERICS_SOFTEXP2_H
#define COAT_NUMERICS_SOFTEXP2_H

#include "coat/Numerics/Bits.h"

#include <cmath>
#include <cstdint>

namespace coat {

inline constexpr float kSoftExp2Max = 128.0f;
inline constexpr float kSoftExp2Min = -126.5f;
/// 1.5 * 2^23: adding it rounds to an integer kept in the low mantissa bits.
inline constexpr float kSoftExp2Shifter = 12582912.0f;
/// c0 .. c6.
inline constexpr float kSoftExp2Coefficients[] = {
    1.0f,
    0.6931470036506653f,
    0.24022985994815826f,
    0.05548322945833206f,
    0.009679067879915237f,
    0.0012437602272257209f,
    0.00021709402790293097f};
inline constexpr int kSoftExp2Degree = 6;

/// The emitted sequence on the host (fmaf for the fused multiply-adds).
inline float softExp2(float x) {
  // min/max that keep NaN, like arith.minimumf/maximumf.
  float xc = std::isnan(x) ? x
                           : std::fmax(std::fmin(x, kSoftExp2Max), kSoftExp2Min);
  float t = (xc - 0.5f) + kSoftExp2Shifter;
  float f = xc - (t - kSoftExp2Shifter);
  float p = kSoftExp2Coefficients[kSoftExp2Degree];
  for (int k = kSoftExp2Degree - 1; k >= 0; --k)
    p = std::fma(p, f, kSoftExp2Coefficients[k]);
  return p * bitsFloat((floatBits(t) << 23) + (uint32_t(127) << 23));
}

} // namespace coat

#endif // COAT_NUMERICS_SOFTEXP2_H

//===- SoftLog.h - ln(x) from IEEE operations -------------------*- C++ -*-===//
//
// A natural logarithm built from operations that are correctly rounded on
// every target (integer bit operations, IEEE add, multiply, divide, fused
// multiply-add), so a GPU kernel and the host compute it bit for bit alike:
// coat-lower-cross-entropy emits this sequence for the row's log-sum-exp, and
// the reference library calls the host function below.
//
//   x = 2^e * m, m in [1, 2)            (exponent and mantissa bits)
//   m > sqrt(2): m = m / 2, e = e + 1   (m in [0.707, 1.414), exact)
//   z = (m - 1) / (m + 1)               (|z| <= 0.1716)
//   ln m = 2 atanh z = t + (t z^2) q,   t = 2z,
//          q = 1/3 + z^2 (1/5 + z^2 (1/7 + z^2 / 9))  (fused multiply-adds)
//   ln x = fma(e, ln 2, ln m)
//
// The series' truncation is below 2^-28 relative, so the result is within
// about one ulp of ln x. Defined for x = 0 (-inf), +inf (+inf), NaN (NaN)
// and positive normal x; other x (negative, subnormal) are outside its
// contract (a sum of exponentials is 0 or at least 1).
//
//===----------------------------------------------------------------------===//

#ifndef COAT_NUMERICS_SOFTLOG_H
#define COAT_NUMERICS_SOFTLOG_H

#include "coat/Numerics/Bits.h"

#include <cmath>
#include <cstdint>
#include <limits>

namespace coat {

/// sqrt(2) rounded to f32: mantissas above it are halved.
inline constexpr float kSoftLogSqrt2 = 1.41421353816986083984375f;
inline constexpr float kSoftLogLn2 = 0.693147182464599609375f;
/// The odd-series coefficients 1/3, 1/5, 1/7, 1/9 (q's, innermost last).
inline constexpr float kSoftLogCoefficients[] = {
    0.3333333432674407958984375f, 0.20000000298023223876953125f,
    0.14285714924335479736328125f, 0.111111111938953399658203125f};
inline constexpr int kSoftLogTerms = 4;

/// The emitted sequence on the host (fmaf for the fused multiply-adds).
inline float softLog(float x) {
  uint32_t bits = floatBits(x);
  int32_t e = static_cast<int32_t>(bits >> 23) - 127;
  float m = bitsFloat((bits & 0x007FFFFFu) | 0x3F800000u);
  bool halve = m > kSoftLogSqrt2;
  m = halve ? m * 0.5f : m;
  e = halve ? e + 1 : e;
  float z = (m - 1.0f) / (m + 1.0f);
  float z2 = z * z;
  float q = kSoftLogCoefficients[kSoftLogTerms - 1];
  for (int k = kSoftLogTerms - 2; k >= 0; --k)
    q = std::fma(q, z2, kSoftLogCoefficients[k]);
  float t = z + z;
  float lnm = std::fma(t * z2, q, t);
  float r = std::fma(static_cast<float>(e), kSoftLogLn2, lnm);
  if (x == 0.0f)
    return -std::numeric_limits<float>::infinity();
  if (x == std::numeric_limits<float>::infinity())
    return x;
  return std::isnan(x) ? x : r;
}

} // namespace coat

#endif // COAT_NUMERICS_SOFTLOG_H

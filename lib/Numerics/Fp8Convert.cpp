//===- Fp8Convert.cpp - f32 <-> FP8 / bf16 conversions --------------------===//
//
// Integer rounding on the f32 bit pattern, so the result does not depend on
// the host's floating-point environment. The overflow rules follow the CUDA
// conversion (`__nv_cvt_float_to_fp8`, PTX cvt.rn.satfinite) and torch's
// `.to(float8_*)` respectively.
//
//===----------------------------------------------------------------------===//

#include "coat/Numerics/Bits.h"
#include "coat/Numerics/Reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace coat::ref {
namespace {

uint8_t mantissaMask(const Fp8Traits &t) {
  return static_cast<uint8_t>((1u << t.mantissaBits) - 1);
}

/// Exponent field of all ones (E5M2's inf/NaN).
uint8_t topExponentField(const Fp8Traits &t) {
  return static_cast<uint8_t>((1u << t.exponentBits) - 1);
}

uint8_t infCode(const Fp8Traits &t) {
  return static_cast<uint8_t>(topExponentField(t) << t.mantissaBits);
}

} // namespace

bool isFp8NaN(uint8_t code, Fp8Format format) {
  Fp8Traits t = getFp8Traits(format);
  uint8_t mag = code & 0x7F;
  if (t.hasInfinity)
    return (mag >> t.mantissaBits) == topExponentField(t) &&
           (mag & mantissaMask(t)) != 0;
  return mag == 0x7F;
}

bool isFp8Inf(uint8_t code, Fp8Format format) {
  Fp8Traits t = getFp8Traits(format);
  return t.hasInfinity && (code & 0x7F) == infCode(t);
}

uint8_t encodeFp8(float x, Fp8Format format, Fp8Overflow overflow) {
  const Fp8Traits t = getFp8Traits(format);
  const uint32_t bits = floatBits(x);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  const uint32_t absBits = bits & 0x7FFFFFFFu;
  const bool saturate = overflow == Fp8Overflow::SatFinite;

  // The CUDA conversion canonicalises NaN (sign dropped); torch keeps it.
  if (absBits > 0x7F800000u)
    return saturate ? kFp8CanonicalNaN
                    : static_cast<uint8_t>(kFp8CanonicalNaN | sign);

  auto overflowed = [&]() -> uint8_t {
    if (saturate)
      return static_cast<uint8_t>(fp8MaxFiniteCode(format) | sign);
    return static_cast<uint8_t>((t.hasInfinity ? infCode(t) : 0x7F) | sign);
  };
  if (absBits == 0x7F800000u)
    return overflowed();

  const int exp32 = static_cast<int>(absBits >> 23);
  // f32 zeros and subnormals are below 2^-126, far under half the smallest
  // FP8 subnormal, so they round to (signed) zero.
  if (exp32 == 0)
    return sign;

  const uint32_t significand = (absBits & 0x7FFFFFu) | 0x800000u;
  const int unbiased = exp32 - 127;
  const int minNormalExp = 1 - t.exponentBias;
  // Below the normal range the quantum stays that of the smallest binade.
  const int targetExp = std::max(unbiased, minNormalExp);
  const int shift = 23 - t.mantissaBits + (targetExp - unbiased);

  uint32_t rounded = 0;
  if (shift <= 24) {
    rounded = significand >> shift;
    const uint32_t rest = significand & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (rounded & 1u)))
      ++rounded;
  }
  // `rounded` counts quanta of 2^(targetExp - mantissaBits). Adding it to the
  // exponent field below the implicit bit lets a carry (subnormal -> normal,
  // binade -> next binade) fall out of the integer addition.
  const int64_t code =
      (static_cast<int64_t>(targetExp + t.exponentBias - 1) << t.mantissaBits) +
      rounded;
  if (code > fp8MaxFiniteCode(format))
    return overflowed();
  return static_cast<uint8_t>(code | sign);
}

float decodeFp8(uint8_t code, Fp8Format format) {
  const Fp8Traits t = getFp8Traits(format);
  if (isFp8NaN(code, format))
    return std::numeric_limits<float>::quiet_NaN();
  const bool negative = (code & 0x80) != 0;
  if (isFp8Inf(code, format))
    return negative ? -std::numeric_limits<float>::infinity()
                    : std::numeric_limits<float>::infinity();
  const int expField = (code & 0x7F) >> t.mantissaBits;
  const int mantissa = code & mantissaMask(t);
  const float magnitude =
      expField == 0
          ? std::ldexp(static_cast<float>(mantissa),
                       1 - t.exponentBias - t.mantissaBits)
          : std::ldexp(static_cast<float>((1 << t.mantissaBits) + mantissa),
                       expField - t.exponentBias - t.mantissaBits);
  return negative ? -magnitude : magnitude;
}

uint16_t encodeBf16(float x) {
  uint32_t bits = floatBits(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u)
    return static_cast<uint16_t>((bits >> 16) | 0x0040u); // keep it quiet
  const uint32_t lsb = (bits >> 16) & 1u;
  bits += 0x7FFFu + lsb;
  return static_cast<uint16_t>(bits >> 16);
}

float decodeBf16(uint16_t bits) {
  return bitsFloat(static_cast<uint32_t>(bits) << 16);
}

} // namespace coat::ref

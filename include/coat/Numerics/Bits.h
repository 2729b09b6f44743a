//===- Bits.h - f32 <-> bit pattern -----------------------------*- C++ -*-===//
//
// The host numerics reinterpret f32 values as their IEEE bit patterns (FP8
// and bf16 encoding, stochastic rounding, the FMA-unit 2^x); this is the one
// place that does it.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_NUMERICS_BITS_H
#define COAT_NUMERICS_BITS_H

#include <cstdint>
#include <cstring>

namespace coat {

inline uint32_t floatBits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

inline float bitsFloat(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

} // namespace coat

#endif // COAT_NUMERICS_BITS_H

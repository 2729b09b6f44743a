//===- StochasticRounding.h - counter-based stochastic rounding -*- C++ -*-===//
//
// The stochastic rounding of coat.adamw_step (docs/optimizer-numerics.md §5):
// the random bits of an element are a function of (seed, step, element
// index, stream) alone, so a step is reproducible from its seed on any
// target and launch shape, and the kernels read no random state from memory.
// The reference library evaluates these functions; the kernel lowering emits
// the same integer operations from the same constants.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_NUMERICS_STOCHASTICROUNDING_H
#define COAT_NUMERICS_STOCHASTICROUNDING_H

#include "coat/Numerics/Bits.h"
#include "coat/Numerics/Fp8.h"

#include <cmath>
#include <cstdint>

namespace coat {

/// What a random word rounds: the bf16 parameter, or a moment's FP8 codes.
enum class RandomStream : unsigned { Param = 0, M = 1, V = 2 };

/// Elements that share one hashed word; element j of a block multiplies it
/// by its stream's j-th odd constant (a bijection of the word, so each
/// element's bits are uniform whenever the word is).
inline constexpr int64_t kRandomBlockElements = 8;
inline constexpr uint32_t kStreamMultipliers[3][kRandomBlockElements] = {
    {0xbb08d0ddu, 0x7d81d545u, 0x1534f73bu, 0x2c21a4b7u, 0x8f6d470du,
     0x34262e59u, 0x8d2ab541u, 0xa484f175u},
    {0x55dc1ef1u, 0x5f27112bu, 0x1376fc15u, 0x5f3d5013u, 0xb0ecd31fu,
     0x802afab3u, 0x8d43c943u, 0x323b0ef9u},
    {0x90acc7a9u, 0x4bfa8823u, 0xe47be023u, 0x449c96c5u, 0xc8f1b0e5u,
     0x29aaf9b1u, 0x92b043d3u, 0x332b333du}};

/// The finalizer of MurmurHash3 (a bijection with full avalanche).
inline constexpr uint32_t kMixMultiplier1 = 0x85ebca6bu;
inline constexpr uint32_t kMixMultiplier2 = 0xc2b2ae35u;
inline constexpr int kMixShift1 = 16, kMixShift2 = 13, kMixShift3 = 16;
constexpr uint32_t mix32(uint32_t x) {
  x ^= x >> kMixShift1;
  x *= kMixMultiplier1;
  x ^= x >> kMixShift2;
  x *= kMixMultiplier2;
  x ^= x >> kMixShift3;
  return x;
}

/// The key of one step: the seed's two halves, then the step's f32 bits.
inline uint32_t stochasticStepKey(uint64_t seed, float step) {
  uint32_t k = mix32(mix32(static_cast<uint32_t>(seed)) ^
                     static_cast<uint32_t>(seed >> 32));
  return mix32(k ^ floatBits(step));
}

/// The hashed word of the block holding `element`.
constexpr uint32_t stochasticBlockWord(uint32_t key, uint64_t element) {
  uint64_t block = element / kRandomBlockElements;
  return mix32(mix32(key ^ static_cast<uint32_t>(block >> 32)) ^
               static_cast<uint32_t>(block));
}

/// The 32 random bits of `element` in `stream`.
constexpr uint32_t stochasticBits(uint32_t key, uint64_t element,
                                  RandomStream stream) {
  return stochasticBlockWord(key, element) *
         kStreamMultipliers[static_cast<unsigned>(stream)]
                           [element % kRandomBlockElements];
}

/// Bits of an f32 below an FP8 format's last mantissa bit.
constexpr int fp8DroppedBits(Fp8Format f) {
  return 23 - getFp8Traits(f).mantissaBits;
}

/// `x` rounded to one of the two FP8 values (of format `f`) around it, the
/// upper with probability (x - lower) / (upper - lower) in steps of
/// 2^-(23 - mantissa bits): the top bits of `bits` are added below the
/// format's last mantissa bit and the sum truncated. Below the smallest
/// normal the magnitude is first lifted by minNormal, which puts the FP8
/// subnormal grid on the same bit position (the lift rounds bits below
/// 2^-23 minNormal to nearest), and lowered again exactly afterwards.
/// Returns an f32 that the RNE-saturating conversion keeps as is (or
/// saturates: values past fp8max may round up past it). Non-finite values
/// are returned unchanged.
inline float stochasticRoundToFp8(float x, Fp8Format f, uint32_t bits) {
  if (!(std::fabs(x) < INFINITY))
    return x;
  const int drop = fp8DroppedBits(f);
  const float a = std::fabs(x);
  const float lift = a < getFp8Traits(f).minNormal
                         ? getFp8Traits(f).minNormal
                         : 0.0f;
  const uint32_t low = (uint32_t(1) << drop) - 1;
  uint32_t u = floatBits(a + lift);
  u = (u + (bits >> (32 - drop))) & ~low;
  return std::copysign(bitsFloat(u) - lift, x);
}

/// `x` rounded to bf16 the same way (16 random bits below bf16's last
/// mantissa bit); the result is an f32 exact in bf16. A finite value within
/// an ulp of f32's maximum may round up to infinity, as RNE rounds values
/// past bf16's maximum. Non-finite values are returned unchanged.
inline float stochasticRoundToBf16(float x, uint32_t bits) {
  if (!(std::fabs(x) < INFINITY))
    return x;
  return bitsFloat((floatBits(x) + (bits >> 16)) & 0xffff0000u);
}

} // namespace coat

#endif // COAT_NUMERICS_STOCHASTICROUNDING_H

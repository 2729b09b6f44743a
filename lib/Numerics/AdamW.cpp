//===- AdamW.cpp - Dynamic Range Expansion and the FP8 AdamW step ---------===//
//
// Implements docs/optimizer-numerics.md. `reference` mode reproduces the
// official CUDA kernel literally (COAT.md §2.5-2.6), including its partly
// zero-skipping warp-shuffle minimum, unclamped k and the NaN codes that
// follow from k = +inf; only the transcendental functions come from the host
// libm instead of CUDA's. `fixed` mode is the contract's section 3.
//
//===----------------------------------------------------------------------===//

#include "coat/Numerics/Reference.h"
#include "coat/Numerics/StochasticRounding.h"

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace coat::ref {
namespace {

constexpr int kWarpSize = 32;
/// Warp 0's lanes without a warp result in the kernel's second stage.
constexpr float kSecondStageMinSentinel = 1e9f;
constexpr float kSecondStageMaxSentinel = 0.0f;

using Lanes = std::array<float, kWarpSize>;

/// One shfl_down tree (offsets 16..1) over a warp. All lanes read before any
/// writes, as the shuffle does; a source lane beyond 31 yields the reader's
/// own value. Returns lane 0.
template <typename Fold> float shuffleDownTree(Lanes lanes, Fold fold) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    Lanes incoming;
    for (int lane = 0; lane < kWarpSize; ++lane)
      incoming[lane] =
          lane + offset < kWarpSize ? lanes[lane + offset] : lanes[lane];
    for (int lane = 0; lane < kWarpSize; ++lane)
      lanes[lane] = fold(lanes[lane], incoming[lane]);
  }
  return lanes[0];
}

/// Warp trees, then a tree over the warp results in warp 0.
template <typename Fold>
float twoStageShuffle(const float *laneStart, int64_t groupSize,
                      float sentinel, Fold fold) {
  const int64_t numWarps = groupSize / kWarpSize;
  Lanes warpResults;
  warpResults.fill(sentinel);
  for (int64_t w = 0; w < numWarps; ++w) {
    Lanes lanes;
    std::copy(laneStart + w * kWarpSize, laneStart + (w + 1) * kWarpSize,
              lanes.begin());
    warpResults[w] = shuffleDownTree(lanes, fold);
  }
  return shuffleDownTree(warpResults, fold);
}

float signOf(float x) { return std::signbit(x) ? -1.0f : 1.0f; }

float fp8MaxOf(const MomentFormat &fmt) {
  return getFp8Traits(fmt.format).maxFinite;
}

/// The expansion `sgn(x) * (|x|/c)^k` (m) or `(x/c)^k` (v).
float expandValue(float x, float c, float k, bool isSigned) {
  return isSigned ? signOf(x) * std::pow(std::fabs(x) / c, k)
                  : std::pow(x / c, k);
}

GroupMeta quantizeGroupReference(const float *x, int64_t nValid,
                                 const MomentFormat &fmt,
                                 const MomentQuantConfig &cfg,
                                 uint8_t *codes) {
  const int64_t groupSize = cfg.groupSize;
  const float fp8max = fp8MaxOf(fmt);
  // Tail lanes: 0 for the max, FLT_MAX for the min.
  std::vector<float> maxStart(groupSize, 0.0f), minStart(groupSize, FLT_MAX);
  for (int64_t i = 0; i < nValid; ++i)
    maxStart[i] = minStart[i] = std::fabs(x[i]);
  const float absMax = referenceShuffleMax(maxStart.data(), groupSize);

  if (!fmt.expand) {
    const float scale = (absMax + kOptimizerScaleEps) / fp8max;
    for (int64_t i = 0; i < nValid; ++i)
      codes[i] = encodeFp8(x[i] / scale, fmt.format);
    return {scale, 1.0f, 1.0f};
  }

  const float top = absMax + kExpansionEps;
  const float bottom =
      referenceShuffleMin(minStart.data(), groupSize) + kExpansionEps;
  const float c = std::sqrt(top) * std::sqrt(bottom);
  const float k = expansionExponent(top / bottom, fmt.format, cfg.expandMin);
  const float scale = std::pow(top / c, k) / fp8max;
  for (int64_t i = 0; i < nValid; ++i)
    codes[i] =
        encodeFp8(expandValue(x[i], c, k, fmt.isSigned) / scale, fmt.format);
  return {scale, k, c};
}

/// `randomBits` (null: round to nearest even) holds each element's bits for
/// stochastic rounding.
GroupMeta quantizeGroupFixed(const float *x, int64_t nValid,
                             const MomentFormat &fmt,
                             const MomentQuantConfig &cfg, uint8_t *codes,
                             const uint32_t *randomBits = nullptr) {
  const float fp8max = fp8MaxOf(fmt);
  // True zero-skipping statistics over the finite elements.
  float absMax = 0.0f;
  float minNonZero = std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < nValid; ++i) {
    const float a = std::fabs(x[i]);
    if (!std::isfinite(a))
      continue;
    absMax = std::max(absMax, a);
    if (a > 0.0f)
      minNonZero = std::min(minNonZero, a);
  }

  GroupMeta meta;
  if (!fmt.expand)
    meta.scale = absMax / fp8max;
  // A group whose plain scale underflows (absmax < fp8max * 2^-150) is
  // treated as all-zero too: dividing by a zero scale would make 0/0 NaNs.
  const bool allZero = absMax == 0.0f || (!fmt.expand && meta.scale == 0.0f);
  if (allZero) {
    for (int64_t i = 0; i < nValid; ++i)
      codes[i] = std::isfinite(x[i]) ? 0 : kFp8CanonicalNaN;
    return {0.0f, 1.0f, 1.0f};
  }

  if (fmt.expand) {
    const float ratio = absMax / minNonZero;
    const float minK = 1.0f / static_cast<float>(cfg.expandMin);
    meta.k = ratio <= 1.0f
                 ? 1.0f
                 : std::clamp(expansionExponent(ratio, fmt.format,
                                                cfg.expandMin),
                              minK, cfg.maxK);
    meta.c = std::sqrt(absMax) * std::sqrt(minNonZero);
    meta.scale = std::pow(absMax / meta.c, meta.k) / fp8max;
  }
  for (int64_t i = 0; i < nValid; ++i) {
    if (!std::isfinite(x[i])) {
      codes[i] = kFp8CanonicalNaN;
      continue;
    }
    const float e =
        fmt.expand ? expandValue(x[i], meta.c, meta.k, fmt.isSigned) : x[i];
    const float scaled = e / meta.scale;
    codes[i] = encodeFp8(randomBits ? stochasticRoundToFp8(scaled, fmt.format,
                                                           randomBits[i])
                                    : scaled,
                         fmt.format);
  }
  return meta;
}

bool isPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

float loadFloat(HostFloat type, const void *data, int64_t i) {
  if (type == HostFloat::F32)
    return static_cast<const float *>(data)[i];
  return decodeBf16(static_cast<const uint16_t *>(data)[i]);
}

void storeFloat(HostFloat type, void *data, int64_t i, float value) {
  if (type == HostFloat::F32)
    static_cast<float *>(data)[i] = value;
  else
    static_cast<uint16_t *>(data)[i] = encodeBf16(value);
}

GroupMeta loadMeta(const MomentState &s, int64_t group) {
  GroupMeta meta;
  meta.scale = s.scale[group];
  if (s.format.expand) {
    meta.k = s.k[group];
    meta.c = s.c[group];
  }
  return meta;
}

void storeMeta(const MomentState &s, int64_t group, const GroupMeta &meta) {
  s.scale[group] = meta.scale;
  if (s.format.expand) {
    s.k[group] = meta.k;
    s.c[group] = meta.c;
  }
}

std::optional<std::string> checkMomentState(const MomentState &s,
                                            const char *name) {
  if (!s.codes || !s.scale)
    return std::string(name) + ": codes and scale must be non-null";
  if (s.format.expand && (!s.k || !s.c))
    return std::string(name) + ": an expanded moment needs k and c arrays";
  return std::nullopt;
}

} // namespace

std::optional<std::string>
verifyMomentQuantConfig(const MomentQuantConfig &cfg) {
  if (!isPowerOfTwo(cfg.groupSize) || cfg.groupSize < kWarpSize ||
      cfg.groupSize > kWarpSize * kWarpSize)
    return "group size must be a power of two in [32, 1024], got " +
           std::to_string(cfg.groupSize);
  if (cfg.expandMin < 1)
    return "expand_min must be >= 1, got " + std::to_string(cfg.expandMin);
  if (!(cfg.maxK >= 1.0f / static_cast<float>(cfg.expandMin)))
    return "max_k must be >= 1/expand_min";
  return std::nullopt;
}

float referenceShuffleMin(const float *laneStart, int64_t groupSize) {
  return twoStageShuffle(laneStart, groupSize, kSecondStageMinSentinel,
                         [](float own, float incoming) {
                           // Zero partials are skipped; the lane's own value
                           // is never tested, so a zero start value sticks.
                           const float a = std::fabs(incoming);
                           return a > 0.0f ? std::fmin(own, a) : own;
                         });
}

float referenceShuffleMax(const float *laneStart, int64_t groupSize) {
  return twoStageShuffle(laneStart, groupSize, kSecondStageMaxSentinel,
                         [](float own, float incoming) {
                           return std::fmax(own, incoming);
                         });
}

float expansionExponent(float ratio, Fp8Format format, int64_t expandMin) {
  const float fp8max = getFp8Traits(format).maxFinite;
  const float upperBound = fp8max * fp8max / 2.0f; // COAT's UB, 100352 for E4M3
  const float steps = static_cast<float>(expandMin);
  return std::floor(std::log2(upperBound) / std::log2(ratio) * steps) / steps;
}

GroupMeta quantizeMomentGroup(const float *x, int64_t nValid,
                              const MomentFormat &fmt,
                              const MomentQuantConfig &cfg, uint8_t *codes) {
  return cfg.mode == AdamWMode::Reference
             ? quantizeGroupReference(x, nValid, fmt, cfg, codes)
             : quantizeGroupFixed(x, nValid, fmt, cfg, codes);
}

float dequantizeMomentElement(uint8_t code, const GroupMeta &meta,
                              const MomentFormat &fmt) {
  const float y = decodeFp8(code, fmt.format) * meta.scale;
  if (!fmt.expand)
    return y;
  const float inverseK = 1.0f / meta.k;
  if (fmt.isSigned)
    return signOf(y) * std::pow(std::fabs(y), inverseK) * meta.c;
  return std::pow(y, inverseK) * meta.c;
}

std::optional<std::string> quantizeMoment(const float *x, int64_t n,
                                          const MomentFormat &fmt,
                                          const MomentQuantConfig &cfg,
                                          uint8_t *codes, float *scale,
                                          float *k, float *c) {
  if (auto err = verifyMomentQuantConfig(cfg))
    return err;
  MomentState state{codes, scale, k, c, fmt};
  if (auto err = checkMomentState(state, "moment"))
    return err;
  for (int64_t base = 0, g = 0; base < n; base += cfg.groupSize, ++g) {
    const int64_t nValid = std::min(cfg.groupSize, n - base);
    storeMeta(state, g,
              quantizeMomentGroup(x + base, nValid, fmt, cfg, codes + base));
  }
  return std::nullopt;
}

std::optional<std::string> dequantizeMoment(const uint8_t *codes,
                                            const float *scale, const float *k,
                                            const float *c, int64_t n,
                                            const MomentFormat &fmt,
                                            int64_t groupSize, float *out) {
  if (groupSize <= 0)
    return std::string("group size must be positive");
  if (fmt.expand && (!k || !c))
    return std::string("an expanded moment needs k and c arrays");
  for (int64_t i = 0; i < n; ++i) {
    const int64_t g = i / groupSize;
    GroupMeta meta{scale[g], fmt.expand ? k[g] : 1.0f,
                   fmt.expand ? c[g] : 1.0f};
    out[i] = dequantizeMomentElement(codes[i], meta, fmt);
  }
  return std::nullopt;
}

std::optional<std::string> adamwStep(int64_t n, HostFloat paramType,
                                     void *param, HostFloat gradType,
                                     const void *grad, MomentState m,
                                     MomentState v,
                                     const MomentQuantConfig &cfg,
                                     const AdamWHyper &hyper,
                                     const AdamWRounding &rounding) {
  if (auto err = verifyMomentQuantConfig(cfg))
    return err;
  const bool stochastic =
      rounding.stochasticParam || rounding.stochasticMoments;
  if (stochastic && cfg.mode != AdamWMode::Fixed)
    return std::string("stochastic rounding needs mode fixed");
  if (rounding.stochasticParam && paramType != HostFloat::BF16)
    return std::string("stochastic rounding of the parameter needs bf16 "
                       "parameters (f32 ones are not rounded)");
  if (n < 0)
    return std::string("element count must be non-negative");
  if (n > 0 && (!param || !grad))
    return std::string("param and grad must be non-null");
  if (auto err = checkMomentState(m, "m"))
    return err;
  if (auto err = checkMomentState(v, "v"))
    return err;
  m.format.isSigned = true;
  v.format.isSigned = false;

  const float b1 = hyper.beta1, b2 = hyper.beta2;
  // Bias corrections as the kernel forms them: bc1 = 1 - b1^t,
  // bc2s = sqrt(1 - b2^t).
  const float biasCorrection1 = 1.0f - std::pow(b1, hyper.step);
  const float biasCorrection2Sqrt = std::sqrt(1.0f - std::pow(b2, hyper.step));

  const uint32_t key = stochasticStepKey(rounding.seed, hyper.step);
  std::vector<float> newM(cfg.groupSize), newV(cfg.groupSize);
  std::vector<uint32_t> bitsM(cfg.groupSize), bitsV(cfg.groupSize);
  for (int64_t base = 0, g = 0; base < n; base += cfg.groupSize, ++g) {
    const int64_t nValid = std::min(cfg.groupSize, n - base);
    const GroupMeta metaM = loadMeta(m, g), metaV = loadMeta(v, g);
    for (int64_t j = 0; j < nValid; ++j) {
      const int64_t i = base + j;
      const float mOld = dequantizeMomentElement(m.codes[i], metaM, m.format);
      const float vOld = dequantizeMomentElement(v.codes[i], metaV, v.format);
      const float gradient = loadFloat(gradType, grad, i) * hyper.gradScale;
      const float p = loadFloat(paramType, param, i);
      const float mNew = b1 * mOld + (1.0f - b1) * gradient;
      const float vNew = b2 * vOld + ((1.0f - b2) * gradient) * gradient;
      const float denom =
          (std::sqrt(vNew) / biasCorrection2Sqrt + hyper.eps) * biasCorrection1;
      const float update = mNew / denom + hyper.weightDecay * p;
      float newP = p - hyper.lr * update;
      if (rounding.stochasticParam)
        newP = stochasticRoundToBf16(
            newP, stochasticBits(key, i, RandomStream::Param));
      storeFloat(paramType, param, i, newP);
      newM[j] = mNew;
      newV[j] = vNew;
      if (rounding.stochasticMoments) {
        bitsM[j] = stochasticBits(key, i, RandomStream::M);
        bitsV[j] = stochasticBits(key, i, RandomStream::V);
      }
    }
    // Stochastic rounding is fixed-mode only (checked above), so a group
    // with random bits takes the fixed-mode quantizer with them.
    auto requantize = [&](const MomentState &s, const std::vector<float> &x,
                          const std::vector<uint32_t> &bits) {
      uint8_t *codes = s.codes + base;
      storeMeta(s, g,
                rounding.stochasticMoments
                    ? quantizeGroupFixed(x.data(), nValid, s.format, cfg,
                                         codes, bits.data())
                    : quantizeMomentGroup(x.data(), nValid, s.format, cfg,
                                          codes));
    };
    requantize(m, newM, bitsM);
    requantize(v, newV, bitsV);
  }
  return std::nullopt;
}

} // namespace coat::ref

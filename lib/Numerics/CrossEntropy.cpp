//===- CrossEntropy.cpp - reference numerics of the softmax cross-entropy -===//
//
// coat.cross_entropy from its definition: log-sum-exp and softmax of each
// row with the exponential and logarithm every target computes alike
// (SoftExp2.h, SoftLog.h), in the order the op fixes.
//
//===----------------------------------------------------------------------===//

#include "coat/Numerics/Reference.h"
#include "coat/Numerics/SoftExp2.h"
#include "coat/Numerics/SoftLog.h"

#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

namespace coat::ref {

namespace {

constexpr float kLog2e = 1.44269504088896340736f;

/// e^d as the kernels take it: 2^(d * log2 e) on the FMA units.
float expOf(float d) { return softExp2(d * kLog2e); }

/// A running maximum and the sum of e^(x - maximum) of what it has seen.
struct Online {
  float max = -FLT_MAX; // a -inf logit then adds e^-inf = 0
  float sum = 0.0f;
};

/// Two partial states as one; the same bits whichever comes first.
Online combine(Online a, Online b) {
  float m = std::fmax(a.max, b.max);
  return {m, a.sum * expOf(a.max - m) + b.sum * expOf(b.max - m)};
}

} // namespace

std::optional<std::string> crossEntropy(const uint16_t *logits,
                                        const int64_t *targets, int64_t rows,
                                        int64_t vocab, int64_t ignoreIndex,
                                        int64_t threads, float *loss,
                                        uint16_t *dlogits) {
  if (rows < 0 || vocab < 1)
    return "cross_entropy: rows " + std::to_string(rows) + ", vocab " +
           std::to_string(vocab) + ": rows must be >= 0 and vocab >= 1";
  if (threads < 32 || threads % 32 != 0)
    return "cross_entropy: threads " + std::to_string(threads) +
           " is not a positive multiple of 32";
  const int64_t C = kCrossEntropyChunk;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<Online> team(static_cast<size_t>(threads));
  std::vector<float> x(static_cast<size_t>(vocab));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < vocab; ++i)
      x[i] = decodeBf16(logits[r * vocab + i]);
    // Chunk c holds row positions [C*c - head, C*c - head + C) of the row.
    int64_t head = (r * vocab) % C;
    int64_t chunks = (head + vocab + C - 1) / C;
    for (int64_t j = 0; j < threads; ++j) {
      Online s;
      for (int64_t c = j; c < chunks; c += threads) {
        int64_t lo = std::max<int64_t>(C * c - head, 0);
        int64_t hi = std::min<int64_t>(C * c - head + C, vocab);
        float chunkMax = -std::numeric_limits<float>::infinity();
        for (int64_t i = lo; i < hi; ++i)
          chunkMax = std::fmax(chunkMax, x[i]);
        float m = std::fmax(s.max, chunkMax);
        s.sum = s.sum * expOf(s.max - m);
        for (int64_t i = lo; i < hi; ++i)
          s.sum = s.sum + expOf(x[i] - m);
        s.max = m;
      }
      team[j] = s;
    }
    // The warps' butterflies (partners 16, 8, ... 1 apart: a halving tree
    // reaches every lane's value), then the warps in order.
    Online all;
    for (int64_t w = 0; w < threads / 32; ++w) {
      Online *lane = &team[32 * w];
      for (int64_t offset = 16; offset >= 1; offset /= 2)
        for (int64_t i = 0; i < offset; ++i)
          lane[i] = combine(lane[i], lane[i + offset]);
      all = w == 0 ? lane[0] : combine(all, lane[0]);
    }
    int64_t t = targets[r];
    bool ignored = t == ignoreIndex;
    bool inRange = t >= 0 && t < vocab;
    float rowLoss = 0.0f, scale = 0.0f;
    if (!ignored) {
      rowLoss = inRange ? (all.max - x[t]) + softLog(all.sum) : nan;
      scale = inRange ? 1.0f / all.sum : nan;
    }
    loss[r] = rowLoss;
    for (int64_t i = 0; i < vocab; ++i) {
      float g = expOf(x[i] - all.max) * scale;
      if (i == t)
        g = g - 1.0f;
      dlogits[r * vocab + i] = encodeBf16(ignored ? 0.0f : g);
    }
  }
  return std::nullopt;
}

} // namespace coat::ref

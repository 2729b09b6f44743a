//===- Reference.h - Host reference numerics for COAT FP8 training --------===//
//
// The oracle every later test compares against: FP8/bf16 conversion,
// quantizers for all scaling granularities, Dynamic Range Expansion, the FP8
// AdamW step of docs/optimizer-numerics.md (`fixed` and `reference` modes) and
// the activation-operator formulas of COAT.md §3.4. Plain C++17 on the host, no
// MLIR. Built with -ffp-contract=off so every a*b+c rounds twice, as written.
//
// FP8 format facts come from Fp8.h; scale-tensor shapes from Layout.h.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_NUMERICS_REFERENCE_H
#define COAT_NUMERICS_REFERENCE_H

#include "coat/Numerics/Fp8.h"
#include "coat/Numerics/Layout.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace coat::ref {

//===----------------------------------------------------------------------===//
// Scalar conversions
//===----------------------------------------------------------------------===//

/// What an f32 -> FP8 conversion does with values beyond the format's range.
enum class Fp8Overflow : uint8_t {
  /// PTX `cvt.rn.satfinite` (what COAT's CUDA and Triton kernels use):
  /// finite overflow and +-inf clamp to +-fp8max, any NaN becomes the
  /// canonical positive NaN (kFp8CanonicalNaN).
  SatFinite,
  /// torch `.to(float8_*)`: overflow becomes NaN (E4M3) or +-inf (E5M2), a
  /// NaN keeps its sign bit (0x7F / 0xFF).
  NonSaturating,
};

/// Rounds `x` to the nearest FP8 value, ties to even; subnormals are kept.
uint8_t encodeFp8(float x, Fp8Format format,
                  Fp8Overflow overflow = Fp8Overflow::SatFinite);

/// Exact value of an FP8 code. NaN codes decode to the canonical positive
/// quiet NaN, as the CUDA conversion (through f16) does.
float decodeFp8(uint8_t code, Fp8Format format);

bool isFp8NaN(uint8_t code, Fp8Format format);
bool isFp8Inf(uint8_t code, Fp8Format format);

using ::coat::fp8MaxFiniteCode;

/// f32 -> bf16 bits, round to nearest even; NaN stays a (quiet) NaN with its
/// sign, overflow rounds to inf as IEEE prescribes.
uint16_t encodeBf16(float x);
float decodeBf16(uint16_t bits);
inline float roundToBf16(float x) { return decodeBf16(encodeBf16(x)); }

//===----------------------------------------------------------------------===//
// Quantizers (COAT.md §1.2, §3.1)
//===----------------------------------------------------------------------===//

struct QuantizeOptions {
  Fp8Format format = Fp8Format::E4M3;
  /// Added to the absolute maximum before dividing by fp8max.
  float eps = kActivationScaleEps;
  /// COAT stores activation scales in bf16 and divides by the rounded value.
  bool bf16Scale = false;
  Fp8Overflow overflow = Fp8Overflow::SatFinite;
};

/// `(absMax + eps) / fp8max`, then optionally rounded to bf16.
float scaleFromAbsMax(float absMax, const QuantizeOptions &opts);

/// Index of the scale entry that covers the element at row-major position
/// `linearIndex` of a tensor of `shape` (all extents static).
int64_t scaleIndexOf(const std::vector<int64_t> &shape, const Scaling &scaling,
                     int64_t linearIndex);

/// Per-scale-entry absolute maxima of `x` (NaN elements ignored, as the GPU's
/// max.f32 does; an infinity propagates).
std::vector<float> groupAbsMax(const float *x, const std::vector<int64_t> &shape,
                               const Scaling &scaling);

/// Quantizes `x` with one scale per entry of `scaleShape(shape, scaling)`:
/// `scales[j] = scaleFromAbsMax(absmax_j)`, `codes[i] = encode(x[i] / s)`.
/// Returns an error message if `scaling` does not fit `shape`.
std::optional<std::string> quantize(const float *x,
                                    const std::vector<int64_t> &shape,
                                    const Scaling &scaling,
                                    const QuantizeOptions &opts,
                                    uint8_t *codes, float *scales);

/// `out[i] = decode(codes[i]) * scales[scaleIndexOf(i)]`.
std::optional<std::string> dequantize(const uint8_t *codes, const float *scales,
                                      const std::vector<int64_t> &shape,
                                      const Scaling &scaling, Fp8Format format,
                                      float *out);

/// `codes[i] = encode(x[i] / scale)` with a given scale (COAT's fp8_division).
void quantizeWithScale(const float *x, int64_t n, float scale, Fp8Format format,
                       Fp8Overflow overflow, uint8_t *codes);

/// COAT's two-stage "group scaling" per-tensor scale: the bf16 per-group
/// scales of `groupScaling` (per_group<G>, or per_group<N> for per-row), then
/// their maximum. `opts.bf16Scale` is honoured as given (COAT sets it).
float twoStageTensorScale(const float *x, const std::vector<int64_t> &shape,
                          const Scaling &groupScaling,
                          const QuantizeOptions &opts);

//===----------------------------------------------------------------------===//
// Dynamic Range Expansion and the FP8 AdamW step (docs/optimizer-numerics.md)
//===----------------------------------------------------------------------===//

enum class AdamWMode : uint8_t { Fixed, Reference };

/// Storage type of parameters and gradients.
enum class HostFloat : uint8_t { F32, BF16 };

/// How one moment is stored.
struct MomentFormat {
  Fp8Format format = Fp8Format::E4M3;
  bool expand = true;
  /// `m` is signed (sgn handling on (un)expansion), `v` is not.
  bool isSigned = true;
};

/// Group-quantization settings shared by both moments.
struct MomentQuantConfig {
  int64_t groupSize = 128; ///< power of two in [32, 1024]
  int64_t expandMin = 16;  ///< k is a multiple of 1/expandMin
  float maxK = 16.0f;      ///< upper clamp of k (fixed mode only)
  AdamWMode mode = AdamWMode::Fixed;
};

/// Per-group metadata written by the re-quantization.
struct GroupMeta {
  float scale = 0.0f;
  float k = 1.0f;
  float c = 1.0f;
};

/// Checks a MomentQuantConfig. Returns an error message.
std::optional<std::string> verifyMomentQuantConfig(const MomentQuantConfig &cfg);

/// The official kernel's min reduction over one group (COAT.md §2.6): a
/// lane-by-lane simulation of `groupSize / 32` warps reducing with
/// shfl_down at offsets 16, 8, 4, 2, 1, where a lane folds an incoming partial
/// only if it is non-zero (`fminf(own, |in|)`) and never drops its own start
/// value, then a second such tree over the warp results in which lanes
/// >= groupSize/32 hold 1e9. `laneStart` holds |x| of every lane (FLT_MAX for
/// tail lanes). `groupSize` must satisfy verifyMomentQuantConfig.
float referenceShuffleMin(const float *laneStart, int64_t groupSize);

/// The matching max reduction (fmaxf, second-stage sentinel 0).
float referenceShuffleMax(const float *laneStart, int64_t groupSize);

/// `floor(log2(UB) / log2(ratio) * expandMin) / expandMin` with
/// `UB = fp8max^2 / 2`, host log2f/floorf; unclamped.
float expansionExponent(float ratio, Fp8Format format, int64_t expandMin);

/// Re-quantizes one group of an f32 moment (`nValid <= groupSize` valid
/// elements) per the config's mode; writes `nValid` codes.
GroupMeta quantizeMomentGroup(const float *x, int64_t nValid,
                              const MomentFormat &fmt,
                              const MomentQuantConfig &cfg, uint8_t *codes);

/// Dequantizes (and un-expands) one element with its group's metadata.
float dequantizeMomentElement(uint8_t code, const GroupMeta &meta,
                              const MomentFormat &fmt);

/// Whole flat tensor versions (flat_group<G>, partial last group). `k`/`c`
/// may be null for a non-expanded moment.
std::optional<std::string> quantizeMoment(const float *x, int64_t n,
                                          const MomentFormat &fmt,
                                          const MomentQuantConfig &cfg,
                                          uint8_t *codes, float *scale,
                                          float *k, float *c);
std::optional<std::string> dequantizeMoment(const uint8_t *codes,
                                            const float *scale, const float *k,
                                            const float *c, int64_t n,
                                            const MomentFormat &fmt,
                                            int64_t groupSize, float *out);

/// Mutable storage of one quantized moment (`k`/`c` only when expanded).
struct MomentState {
  uint8_t *codes = nullptr;
  float *scale = nullptr;
  float *k = nullptr;
  float *c = nullptr;
  MomentFormat format;
};

struct AdamWHyper {
  float step = 1.0f; ///< t, already incremented
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weightDecay = 1e-2f;
  /// Every gradient is multiplied by it in f32 as it is loaded (global
  /// gradient-norm clipping), not rounded back to the gradient's type.
  float gradScale = 1.0f;
};

/// Which results of a step round stochastically (docs/optimizer-numerics.md
/// §5, coat/Numerics/StochasticRounding.h); the rest round to nearest even.
/// Fixed mode only.
struct AdamWRounding {
  bool stochasticParam = false;   ///< bf16 parameters (f32 ones are exact)
  bool stochasticMoments = false; ///< the FP8 codes of m and v
  uint64_t seed = 0;
};

/// One fused FP8 AdamW step over a flat tensor of `n` elements: dequantize
/// with the previous metadata, update in f32 (COAT.md §2.4), write the
/// parameter (rounded to bf16 once if stored as bf16), re-quantize m and v.
/// `param`/`grad` point to float or uint16_t (bf16 bits) per their HostFloat.
std::optional<std::string> adamwStep(int64_t n, HostFloat paramType,
                                     void *param, HostFloat gradType,
                                     const void *grad, MomentState m,
                                     MomentState v,
                                     const MomentQuantConfig &cfg,
                                     const AdamWHyper &hyper,
                                     const AdamWRounding &rounding = {});

//===----------------------------------------------------------------------===//
// Activation operators (COAT.md §3.4), f32 math with IEEE division
//===----------------------------------------------------------------------===//

inline constexpr float kNormEps = 1e-5f;

void siluForward(const float *x, int64_t n, float *y);
/// dx = g * (sig + x*sig*(1-sig))
void siluBackward(const float *x, const float *g, int64_t n, float *dx);

/// Exact-erf GELU: y = x * (1 + erf(x/sqrt2)) / 2.
void geluForward(const float *x, int64_t n, float *y);
/// dx = g * (Phi + x*exp(-x^2/2)/sqrt(2*pi))
void geluBackward(const float *x, const float *g, int64_t n, float *dx);

/// The constants of GELU's tanh form, as f32: sqrt(2/pi) and the cubic
/// coefficient (the kernels' lowering uses these values too).
inline constexpr float kGeluTanhScale = 0.7978845608028654f;
inline constexpr float kGeluTanhCubic = 0.044715f;

/// GELU's tanh form (torch's `gelu(approximate="tanh")`, GPT-2's
/// `gelu_new`): y = x * (1 + t) / 2, t = tanh(sqrt(2/pi) (x + 0.044715 x^3)),
/// evaluated as (0.5f * x) * (1 + t) in f32 with libm tanhf.
void geluTanhForward(const float *x, int64_t n, float *y);
/// dx = g * ((1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2))
void geluTanhBackward(const float *x, const float *g, int64_t n, float *dx);

/// SwiGLU product y = x1 * x2 and its gradients g1 = g*x2, g2 = g*x1.
void swigluMulForward(const float *x1, const float *x2, int64_t n, float *y);
void swigluMulBackward(const float *x1, const float *x2, const float *g,
                       int64_t n, float *g1, float *g2);

/// Row-wise RMSNorm over `cols`: rstd = 1/sqrt(sum(x^2)/N + eps),
/// y = x*rstd*w. `rstd` (one per row) may be null.
void rmsNormForward(const float *x, const float *w, int64_t rows, int64_t cols,
                    float eps, float *y, float *rstd);
/// dx = (w*dy - xh*mean(xh*w*dy)) * rstd, dw = sum_rows dy*xh.
void rmsNormBackward(const float *x, const float *w, const float *dy,
                     int64_t rows, int64_t cols, float eps, float *dx,
                     float *dw);

/// Row-wise LayerNorm; `w`/`b` null means no affine transform. `mean`/`rstd`
/// may be null.
void layerNormForward(const float *x, const float *w, const float *b,
                      int64_t rows, int64_t cols, float eps, float *y,
                      float *mean, float *rstd);
/// dx = (w*dy - (xh*mean(xh*w*dy) + mean(w*dy))) * rstd (w = 1 without
/// affine); dw = sum dy*xh, db = sum dy (skipped when null).
void layerNormBackward(const float *x, const float *w, const float *dy,
                       int64_t rows, int64_t cols, float eps, float *dx,
                       float *dw, float *db);

/// COAT's residual add with dual output: s = r + b in f32, returned as bf16
/// bits (the new residual stream) and as per_group<G> FP8 of the f32 sum with
/// bf16 scales (eps 1e-10), the next norm's input.
std::optional<std::string>
residualAddForward(const float *residual, const float *branch, int64_t rows,
                   int64_t cols, int64_t groupSize, Fp8Format format,
                   uint16_t *sumBf16, uint8_t *codes, float *scales);

//===----------------------------------------------------------------------===//
// Linear layers with a bias (coat.linear forward, coat.bias_grad)
//===----------------------------------------------------------------------===//

/// The epilogue of a per-tensor forward GEMM with a bias: `out[r, c] =
/// acc[r, c] * scale + bias[c]`, a product then a sum, each rounded to f32
/// (no fused multiply-add), where `acc` is the f32 accumulator A·B and
/// `scale` = s_A * s_B. The kernel then rounds `out` to bf16, or quantizes it
/// 1x16 (quantize per_group<16>, bf16 scales, eps 1e-10): the bias is in the
/// values the group maxima are taken of.
void linearBiasEpilogue(const float *acc, int64_t rows, int64_t cols,
                        float scale, const float *bias, float *out);

/// `db[c] = sum over rows r of dy[r, c]` of a row-major [rows, cols] tensor,
/// in f32 in the order of coat/Numerics/ColumnSums.h with `partials`
/// partial sums (any positive count; the kernels take ceil(rows /
/// rows_per_partial)). NaN and infinities propagate as IEEE sums do.
void biasGradient(const float *dy, int64_t rows, int64_t cols,
                  int64_t partials, float *db);
/// Rotary position embedding (coat.rope) of a [rows, cols] matrix of heads
/// of `headDim` columns, Hugging Face layout: each of the first
/// `rotatedHeads` heads x = [x1, x2] of row r becomes y1 = x1*c1 - x2*s1,
/// y2 = x2*c2 + x1*s2, with [c1, c2] = cos[r, :], [s1, s2] = sin[r, :]
/// (tables [rows, headDim]); the other columns are copied. Each product and
/// the sum are single f32 operations (no fused multiply-add).
std::optional<std::string> ropeForward(const float *x, const float *cos,
                                       const float *sin, int64_t rows,
                                       int64_t cols, int64_t headDim,
                                       int64_t rotatedHeads, float *y);
/// Its gradient (coat.rope_grad): dx1 = dy1*c1 + dy2*s2,
/// dx2 = dy2*c2 - dy1*s1 on the rotated heads, dy copied elsewhere.
std::optional<std::string> ropeBackward(const float *dy, const float *cos,
                                        const float *sin, int64_t rows,
                                        int64_t cols, int64_t headDim,
                                        int64_t rotatedHeads, float *dx);


//===----------------------------------------------------------------------===//
// Softmax cross-entropy (coat.cross_entropy)
//===----------------------------------------------------------------------===//

/// Aligned chunks of this many elements: the 16-byte bf16 loads the kernel
/// takes a row in.
inline constexpr int64_t kCrossEntropyChunk = 8;

/// coat.cross_entropy over the row-major [rows, vocab] bf16 `logits` (bits;
/// element 0 at a 16-byte boundary) and `targets`: per row r the loss
/// `logsumexp(x) - x[t]` and the bf16 gradient `softmax(x) - onehot(t)` (a
/// zero loss and gradient for t = ignoreIndex; NaN ones for any other t
/// outside [0, vocab)). The sums run in the op's order for a team of
/// `threads` (a multiple of 32): the row's aligned chunks of
/// kCrossEntropyChunk elements go round-robin to the threads, each keeps an
/// online (maximum, sum), the pairs combine by a butterfly in each warp
/// and then across warps in order. `dlogits` may be `logits`.
std::optional<std::string> crossEntropy(const uint16_t *logits,
                                        const int64_t *targets, int64_t rows,
                                        int64_t vocab, int64_t ignoreIndex,
                                        int64_t threads, float *loss,
                                        uint16_t *dlogits);

} // namespace coat::ref

#endif // COAT_NUMERICS_REFERENCE_H

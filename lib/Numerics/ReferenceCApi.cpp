//===- ReferenceCApi.cpp - C interface of the reference numerics ----------===//
//
// Thin argument translation: ids -> enums, (shape, rank) -> vectors, error
// strings -> a thread-local message plus a non-zero return.
//
//===----------------------------------------------------------------------===//

#include "coat/Numerics/ReferenceCApi.h"
#include "coat/Numerics/Reference.h"

#include <algorithm>
#include <limits>
#include <string>

using namespace coat;
using namespace coat::ref;

namespace {

thread_local std::string lastError;

int32_t fail(std::string message) {
  lastError = std::move(message);
  return 1;
}

int32_t result(const std::optional<std::string> &err) {
  if (err)
    return fail(*err);
  lastError.clear();
  return 0;
}

std::optional<Fp8Format> formatOf(int32_t id) {
  if (id == COAT_REF_E4M3)
    return Fp8Format::E4M3;
  if (id == COAT_REF_E5M2)
    return Fp8Format::E5M2;
  lastError = "unknown FP8 format id " + std::to_string(id);
  return std::nullopt;
}

std::optional<HostFloat> hostFloatOf(int32_t id) {
  if (id == COAT_REF_F32)
    return HostFloat::F32;
  if (id == COAT_REF_BF16)
    return HostFloat::BF16;
  lastError = "unknown float dtype id " + std::to_string(id);
  return std::nullopt;
}

std::optional<Scaling> scalingOf(int32_t kind, int64_t groupSize,
                                 int64_t blockRows, int64_t blockCols) {
  switch (kind) {
  case COAT_REF_PER_TENSOR:
    return Scaling::perTensor();
  case COAT_REF_PER_GROUP:
    return Scaling::perGroup(groupSize);
  case COAT_REF_FLAT_GROUP:
    return Scaling::flatGroup(groupSize);
  case COAT_REF_PER_BLOCK:
    return Scaling::perBlock(blockRows, blockCols);
  default:
    lastError = "unknown scaling kind " + std::to_string(kind);
    return std::nullopt;
  }
}

std::vector<int64_t> shapeOf(const int64_t *shape, int32_t rank) {
  return rank > 0 ? std::vector<int64_t>(shape, shape + rank)
                  : std::vector<int64_t>{};
}

Fp8Overflow overflowOf(int32_t saturate) {
  return saturate ? Fp8Overflow::SatFinite : Fp8Overflow::NonSaturating;
}

std::optional<AdamWMode> modeOf(int32_t id) {
  if (id == COAT_REF_MODE_FIXED)
    return AdamWMode::Fixed;
  if (id == COAT_REF_MODE_REFERENCE)
    return AdamWMode::Reference;
  lastError = "unknown optimizer mode id " + std::to_string(id);
  return std::nullopt;
}

} // namespace

extern "C" {

int32_t coat_ref_abi_version(void) { return COAT_REF_ABI_VERSION; }

const char *coat_ref_last_error(void) { return lastError.c_str(); }

int32_t coat_ref_fp8_encode(const float *x, int64_t n, int32_t format,
                            int32_t saturate, uint8_t *codes) {
  auto fmt = formatOf(format);
  if (!fmt)
    return 1;
  for (int64_t i = 0; i < n; ++i)
    codes[i] = encodeFp8(x[i], *fmt, overflowOf(saturate));
  return 0;
}

int32_t coat_ref_fp8_decode(const uint8_t *codes, int64_t n, int32_t format,
                            float *out) {
  auto fmt = formatOf(format);
  if (!fmt)
    return 1;
  for (int64_t i = 0; i < n; ++i)
    out[i] = decodeFp8(codes[i], *fmt);
  return 0;
}

void coat_ref_bf16_encode(const float *x, int64_t n, uint16_t *bits) {
  for (int64_t i = 0; i < n; ++i)
    bits[i] = encodeBf16(x[i]);
}

void coat_ref_bf16_decode(const uint16_t *bits, int64_t n, float *out) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = decodeBf16(bits[i]);
}

int64_t coat_ref_num_scales(const int64_t *shape, int32_t rank, int32_t kind,
                            int64_t group_size, int64_t block_rows,
                            int64_t block_cols) {
  auto scaling = scalingOf(kind, group_size, block_rows, block_cols);
  if (!scaling)
    return -1;
  std::vector<int64_t> dims = shapeOf(shape, rank);
  if (auto err = verifyScalingForShape(dims, *scaling)) {
    lastError = *err;
    return -1;
  }
  return numScales(dims, *scaling);
}

int32_t coat_ref_scale_shape(const int64_t *shape, int32_t rank, int32_t kind,
                             int64_t group_size, int64_t block_rows,
                             int64_t block_cols, int64_t *out_shape) {
  auto scaling = scalingOf(kind, group_size, block_rows, block_cols);
  if (!scaling)
    return -1;
  std::vector<int64_t> dims = shapeOf(shape, rank);
  if (auto err = verifyScalingForShape(dims, *scaling)) {
    lastError = *err;
    return -1;
  }
  std::vector<int64_t> out = scaleShape(dims, *scaling);
  std::copy(out.begin(), out.end(), out_shape);
  return static_cast<int32_t>(out.size());
}

int32_t coat_ref_quantize(const float *x, const int64_t *shape, int32_t rank,
                          int32_t kind, int64_t group_size, int64_t block_rows,
                          int64_t block_cols, int32_t format, float eps,
                          int32_t bf16_scale, int32_t saturate, uint8_t *codes,
                          float *scales) {
  auto scaling = scalingOf(kind, group_size, block_rows, block_cols);
  auto fmt = formatOf(format);
  if (!scaling || !fmt)
    return 1;
  QuantizeOptions opts;
  opts.format = *fmt;
  opts.eps = eps;
  opts.bf16Scale = bf16_scale != 0;
  opts.overflow = overflowOf(saturate);
  return result(
      quantize(x, shapeOf(shape, rank), *scaling, opts, codes, scales));
}

int32_t coat_ref_dequantize(const uint8_t *codes, const float *scales,
                            const int64_t *shape, int32_t rank, int32_t kind,
                            int64_t group_size, int64_t block_rows,
                            int64_t block_cols, int32_t format, float *out) {
  auto scaling = scalingOf(kind, group_size, block_rows, block_cols);
  auto fmt = formatOf(format);
  if (!scaling || !fmt)
    return 1;
  return result(
      dequantize(codes, scales, shapeOf(shape, rank), *scaling, *fmt, out));
}

int32_t coat_ref_quantize_with_scale(const float *x, int64_t n, float scale,
                                     int32_t format, int32_t saturate,
                                     uint8_t *codes) {
  auto fmt = formatOf(format);
  if (!fmt)
    return 1;
  quantizeWithScale(x, n, scale, *fmt, overflowOf(saturate), codes);
  return 0;
}

int32_t coat_ref_two_stage_tensor_scale(const float *x, const int64_t *shape,
                                        int32_t rank, int64_t group_size,
                                        int32_t format, float eps,
                                        int32_t bf16_scale, float *scale) {
  auto fmt = formatOf(format);
  if (!fmt)
    return 1;
  std::vector<int64_t> dims = shapeOf(shape, rank);
  Scaling groups = Scaling::perGroup(group_size);
  if (auto err = verifyScalingForShape(dims, groups))
    return fail(*err);
  QuantizeOptions opts;
  opts.format = *fmt;
  opts.eps = eps;
  opts.bf16Scale = bf16_scale != 0;
  *scale = twoStageTensorScale(x, dims, groups, opts);
  return result(std::nullopt);
}

int32_t coat_ref_moment_quantize(const float *x, int64_t n, int32_t format,
                                 int32_t expand, int32_t is_signed,
                                 int64_t group_size, int64_t expand_min,
                                 float max_k, int32_t mode, uint8_t *codes,
                                 float *scale, float *k, float *c) {
  auto fmt = formatOf(format);
  auto optimizerMode = modeOf(mode);
  if (!fmt || !optimizerMode)
    return 1;
  MomentQuantConfig cfg{group_size, expand_min, max_k, *optimizerMode};
  MomentFormat momentFormat{*fmt, expand != 0, is_signed != 0};
  return result(
      quantizeMoment(x, n, momentFormat, cfg, codes, scale, k, c));
}

int32_t coat_ref_moment_dequantize(const uint8_t *codes, const float *scale,
                                   const float *k, const float *c, int64_t n,
                                   int32_t format, int32_t expand,
                                   int32_t is_signed, int64_t group_size,
                                   float *out) {
  auto fmt = formatOf(format);
  if (!fmt)
    return 1;
  MomentFormat momentFormat{*fmt, expand != 0, is_signed != 0};
  return result(dequantizeMoment(codes, scale, k, c, n, momentFormat,
                                 group_size, out));
}

/// The simulation covers whole warps and at most 32 of them.
static bool validShuffleGroup(int64_t groupSize) {
  MomentQuantConfig cfg;
  cfg.groupSize = groupSize;
  if (auto err = verifyMomentQuantConfig(cfg)) {
    lastError = *err;
    return false;
  }
  lastError.clear(); // a NaN result is then the data's, not an error
  return true;
}

float coat_ref_shuffle_min(const float *lane_start, int64_t group_size) {
  if (!validShuffleGroup(group_size))
    return std::numeric_limits<float>::quiet_NaN();
  return referenceShuffleMin(lane_start, group_size);
}

float coat_ref_shuffle_max(const float *lane_start, int64_t group_size) {
  if (!validShuffleGroup(group_size))
    return std::numeric_limits<float>::quiet_NaN();
  return referenceShuffleMax(lane_start, group_size);
}

int32_t coat_ref_adamw_step(
    int64_t n, int32_t param_dtype, void *param, int32_t grad_dtype,
    const void *grad, uint8_t *m_codes, float *m_scale, float *m_k, float *m_c,
    int32_t m_format, int32_t m_expand, uint8_t *v_codes, float *v_scale,
    float *v_k, float *v_c, int32_t v_format, int32_t v_expand,
    int64_t group_size, int64_t expand_min, float max_k, int32_t mode,
    float step, float lr, float beta1, float beta2, float eps,
    float weight_decay, float grad_scale, int32_t stochastic, uint64_t seed) {
  auto paramType = hostFloatOf(param_dtype);
  auto gradType = hostFloatOf(grad_dtype);
  auto mFormat = formatOf(m_format);
  auto vFormat = formatOf(v_format);
  auto optimizerMode = modeOf(mode);
  if (!paramType || !gradType || !mFormat || !vFormat || !optimizerMode)
    return 1;
  MomentState m{m_codes, m_scale, m_k, m_c, {*mFormat, m_expand != 0, true}};
  MomentState v{v_codes, v_scale, v_k, v_c, {*vFormat, v_expand != 0, false}};
  MomentQuantConfig cfg{group_size, expand_min, max_k, *optimizerMode};
  AdamWHyper hyper{step, lr, beta1, beta2, eps, weight_decay, grad_scale};
  if (stochastic & ~(COAT_REF_STOCHASTIC_PARAM | COAT_REF_STOCHASTIC_MOMENTS))
    return result(std::string("unknown stochastic rounding bits ") +
                  std::to_string(stochastic));
  AdamWRounding rounding{(stochastic & COAT_REF_STOCHASTIC_PARAM) != 0,
                         (stochastic & COAT_REF_STOCHASTIC_MOMENTS) != 0,
                         seed};
  return result(adamwStep(n, *paramType, param, *gradType, grad, m, v, cfg,
                          hyper, rounding));
}

void coat_ref_silu_fwd(const float *x, int64_t n, float *y) {
  siluForward(x, n, y);
}
void coat_ref_silu_bwd(const float *x, const float *g, int64_t n, float *dx) {
  siluBackward(x, g, n, dx);
}
void coat_ref_gelu_fwd(const float *x, int64_t n, float *y) {
  geluForward(x, n, y);
}
void coat_ref_gelu_bwd(const float *x, const float *g, int64_t n, float *dx) {
  geluBackward(x, g, n, dx);
}
void coat_ref_gelu_tanh_fwd(const float *x, int64_t n, float *y) {
  geluTanhForward(x, n, y);
}
void coat_ref_gelu_tanh_bwd(const float *x, const float *g, int64_t n,
                            float *dx) {
  geluTanhBackward(x, g, n, dx);
}
void coat_ref_swiglu_mul_fwd(const float *x1, const float *x2, int64_t n,
                             float *y) {
  swigluMulForward(x1, x2, n, y);
}
void coat_ref_swiglu_mul_bwd(const float *x1, const float *x2, const float *g,
                             int64_t n, float *g1, float *g2) {
  swigluMulBackward(x1, x2, g, n, g1, g2);
}
void coat_ref_rmsnorm_fwd(const float *x, const float *w, int64_t rows,
                          int64_t cols, float eps, float *y, float *rstd) {
  rmsNormForward(x, w, rows, cols, eps, y, rstd);
}
void coat_ref_rmsnorm_bwd(const float *x, const float *w, const float *dy,
                          int64_t rows, int64_t cols, float eps, float *dx,
                          float *dw) {
  rmsNormBackward(x, w, dy, rows, cols, eps, dx, dw);
}
void coat_ref_layernorm_fwd(const float *x, const float *w, const float *b,
                            int64_t rows, int64_t cols, float eps, float *y,
                            float *mean, float *rstd) {
  layerNormForward(x, w, b, rows, cols, eps, y, mean, rstd);
}
void coat_ref_layernorm_bwd(const float *x, const float *w, const float *dy,
                            int64_t rows, int64_t cols, float eps, float *dx,
                            float *dw, float *db) {
  layerNormBackward(x, w, dy, rows, cols, eps, dx, dw, db);
}
int32_t coat_ref_residual_add_fwd(const float *residual, const float *branch,
                                  int64_t rows, int64_t cols,
                                  int64_t group_size, int32_t format,
                                  uint16_t *sum_bf16, uint8_t *codes,
                                  float *scales) {
  auto fmt = formatOf(format);
  if (!fmt)
    return 1;
  return result(residualAddForward(residual, branch, rows, cols, group_size,
                                   *fmt, sum_bf16, codes, scales));
}
int32_t coat_ref_rope_fwd(const float *x, const float *cos, const float *sin,
                          int64_t rows, int64_t cols, int64_t head_dim,
                          int64_t rotated_heads, float *y) {
  return result(
      ropeForward(x, cos, sin, rows, cols, head_dim, rotated_heads, y));
}
int32_t coat_ref_rope_bwd(const float *dy, const float *cos, const float *sin,
                          int64_t rows, int64_t cols, int64_t head_dim,
                          int64_t rotated_heads, float *dx) {
  return result(
      ropeBackward(dy, cos, sin, rows, cols, head_dim, rotated_heads, dx));
}

void coat_ref_linear_bias_epilogue(const float *acc, int64_t rows,
                                   int64_t cols, float scale,
                                   const float *bias, float *out) {
  linearBiasEpilogue(acc, rows, cols, scale, bias, out);
}
int32_t coat_ref_bias_grad(const float *dy, int64_t rows, int64_t cols,
                           int64_t partials, float *db) {
  if (rows < 0 || cols < 0 || partials < 1)
    return fail("bias_grad: rows " + std::to_string(rows) + ", cols " +
                std::to_string(cols) + ", partials " +
                std::to_string(partials) +
                ": extents must be >= 0 and partials >= 1");
  biasGradient(dy, rows, cols, partials, db);
  lastError.clear();
  return 0;
}

int32_t coat_ref_cross_entropy(const uint16_t *logits, const int64_t *targets,
                               int64_t rows, int64_t vocab,
                               int64_t ignore_index, int64_t threads,
                               float *loss, uint16_t *dlogits) {
  return result(crossEntropy(logits, targets, rows, vocab, ignore_index,
                             threads, loss, dlogits));
}

} // extern "C"

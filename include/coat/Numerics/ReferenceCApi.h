/*===- ReferenceCApi.h - C interface of the COAT reference numerics -------===*\
|*                                                                            *|
|* Plain C over coat/Numerics/Reference.h, exported by libcoat_reference.so   *|
|* for python/coat/reference.py (ctypes) and any other non-C++ client.        *|
|* Arrays are contiguous; functions returning int32_t give 0 on success and   *|
|* non-zero on invalid arguments, with the message in coat_ref_last_error().  *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

#ifndef COAT_NUMERICS_REFERENCECAPI_H
#define COAT_NUMERICS_REFERENCECAPI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a signature below changes. */
#define COAT_REF_ABI_VERSION 4

/* FP8 formats. */
#define COAT_REF_E4M3 0
#define COAT_REF_E5M2 1
/* Storage of parameters and gradients. */
#define COAT_REF_F32 0
#define COAT_REF_BF16 1
/* Scaling kinds (coat::ScalingKind). */
#define COAT_REF_PER_TENSOR 0
#define COAT_REF_PER_GROUP 1
#define COAT_REF_FLAT_GROUP 2
#define COAT_REF_PER_BLOCK 3
/* coat.adamw_step modes. */
#define COAT_REF_MODE_FIXED 0
#define COAT_REF_MODE_REFERENCE 1
/* Bits of coat_ref_adamw_step's `stochastic`: which results round
 * stochastically (docs/optimizer-numerics.md §5). */
#define COAT_REF_STOCHASTIC_PARAM 1
#define COAT_REF_STOCHASTIC_MOMENTS 2

int32_t coat_ref_abi_version(void);
/* Message of the last failed call on this thread ("" if none). */
const char *coat_ref_last_error(void);

/* --- Conversions. saturate != 0: PTX cvt.rn.satfinite; 0: torch .to(). --- */
int32_t coat_ref_fp8_encode(const float *x, int64_t n, int32_t format,
                            int32_t saturate, uint8_t *codes);
int32_t coat_ref_fp8_decode(const uint8_t *codes, int64_t n, int32_t format,
                            float *out);
void coat_ref_bf16_encode(const float *x, int64_t n, uint16_t *bits);
void coat_ref_bf16_decode(const uint16_t *bits, int64_t n, float *out);

/* --- Quantizers. group_size for PER_GROUP/FLAT_GROUP, block_* for
 * PER_BLOCK; unused sizes are ignored. --- */
/* Number of scale entries, or -1 on error. */
int64_t coat_ref_num_scales(const int64_t *shape, int32_t rank, int32_t kind,
                            int64_t group_size, int64_t block_rows,
                            int64_t block_cols);
/* Writes the scale tensor's shape (coat::scaleShape) into out_shape, which
 * must hold max(rank, 1) entries; returns its rank, or -1 on error. */
int32_t coat_ref_scale_shape(const int64_t *shape, int32_t rank, int32_t kind,
                             int64_t group_size, int64_t block_rows,
                             int64_t block_cols, int64_t *out_shape);
int32_t coat_ref_quantize(const float *x, const int64_t *shape, int32_t rank,
                          int32_t kind, int64_t group_size, int64_t block_rows,
                          int64_t block_cols, int32_t format, float eps,
                          int32_t bf16_scale, int32_t saturate, uint8_t *codes,
                          float *scales);
int32_t coat_ref_dequantize(const uint8_t *codes, const float *scales,
                            const int64_t *shape, int32_t rank, int32_t kind,
                            int64_t group_size, int64_t block_rows,
                            int64_t block_cols, int32_t format, float *out);
int32_t coat_ref_quantize_with_scale(const float *x, int64_t n, float scale,
                                     int32_t format, int32_t saturate,
                                     uint8_t *codes);
/* COAT's two-stage per-tensor scale: max of per_group<group_size> scales
 * (bf16-rounded when bf16_scale != 0). */
int32_t coat_ref_two_stage_tensor_scale(const float *x, const int64_t *shape,
                                        int32_t rank, int64_t group_size,
                                        int32_t format, float eps,
                                        int32_t bf16_scale, float *scale);

/* --- Optimizer moments (flat_group<group_size>, partial last group). k and c
 * may be NULL when expand == 0. --- */
int32_t coat_ref_moment_quantize(const float *x, int64_t n, int32_t format,
                                 int32_t expand, int32_t is_signed,
                                 int64_t group_size, int64_t expand_min,
                                 float max_k, int32_t mode, uint8_t *codes,
                                 float *scale, float *k, float *c);
int32_t coat_ref_moment_dequantize(const uint8_t *codes, const float *scale,
                                   const float *k, const float *c, int64_t n,
                                   int32_t format, int32_t expand,
                                   int32_t is_signed, int64_t group_size,
                                   float *out);
/* The official kernel's reductions over one group's lane start values
 * (group_size a power of two in [32, 1024]; NaN and an error otherwise). */
float coat_ref_shuffle_min(const float *lane_start, int64_t group_size);
float coat_ref_shuffle_max(const float *lane_start, int64_t group_size);

/* One FP8 AdamW step (docs/optimizer-numerics.md), updating param, the codes
 * and the per-group scale/k/c arrays in place. param/grad are float* or
 * uint16_t* (bf16 bits) per their dtype; each gradient is multiplied by
 * `grad_scale` in f32 as it is loaded (1: unscaled). `stochastic` is 0 or an
 * OR of COAT_REF_STOCHASTIC_*, whose random bits derive from `seed`. */
int32_t coat_ref_adamw_step(
    int64_t n, int32_t param_dtype, void *param, int32_t grad_dtype,
    const void *grad, uint8_t *m_codes, float *m_scale, float *m_k, float *m_c,
    int32_t m_format, int32_t m_expand, uint8_t *v_codes, float *v_scale,
    float *v_k, float *v_c, int32_t v_format, int32_t v_expand,
    int64_t group_size, int64_t expand_min, float max_k, int32_t mode,
    float step, float lr, float beta1, float beta2, float eps,
    float weight_decay, float grad_scale, int32_t stochastic, uint64_t seed);

/* --- Activation operators (COAT.md §3.4). Null w/b: no affine. --- */
void coat_ref_silu_fwd(const float *x, int64_t n, float *y);
void coat_ref_silu_bwd(const float *x, const float *g, int64_t n, float *dx);
void coat_ref_gelu_fwd(const float *x, int64_t n, float *y);
void coat_ref_gelu_bwd(const float *x, const float *g, int64_t n, float *dx);
void coat_ref_gelu_tanh_fwd(const float *x, int64_t n, float *y);
void coat_ref_gelu_tanh_bwd(const float *x, const float *g, int64_t n,
                            float *dx);
void coat_ref_swiglu_mul_fwd(const float *x1, const float *x2, int64_t n,
                             float *y);
void coat_ref_swiglu_mul_bwd(const float *x1, const float *x2, const float *g,
                             int64_t n, float *g1, float *g2);
void coat_ref_rmsnorm_fwd(const float *x, const float *w, int64_t rows,
                          int64_t cols, float eps, float *y, float *rstd);
void coat_ref_rmsnorm_bwd(const float *x, const float *w, const float *dy,
                          int64_t rows, int64_t cols, float eps, float *dx,
                          float *dw);
void coat_ref_layernorm_fwd(const float *x, const float *w, const float *b,
                            int64_t rows, int64_t cols, float eps, float *y,
                            float *mean, float *rstd);
void coat_ref_layernorm_bwd(const float *x, const float *w, const float *dy,
                            int64_t rows, int64_t cols, float eps, float *dx,
                            float *dw, float *db);
int32_t coat_ref_residual_add_fwd(const float *residual, const float *branch,
                                  int64_t rows, int64_t cols,
                                  int64_t group_size, int32_t format,
                                  uint16_t *sum_bf16, uint8_t *codes,
                                  float *scales);
/* Rotary position embedding (coat.rope) of the first rotated_heads heads of
 * head_dim columns of each row of x [rows, cols], tables [rows, head_dim];
 * coat_ref_rope_bwd is its gradient (coat.rope_grad). */
int32_t coat_ref_rope_fwd(const float *x, const float *cos, const float *sin,
                          int64_t rows, int64_t cols, int64_t head_dim,
                          int64_t rotated_heads, float *y);
int32_t coat_ref_rope_bwd(const float *dy, const float *cos, const float *sin,
                          int64_t rows, int64_t cols, int64_t head_dim,
                          int64_t rotated_heads, float *dx);

/* --- Linear layers with a bias (coat.linear forward, coat.bias_grad). --- */
void coat_ref_linear_bias_epilogue(const float *acc, int64_t rows,
                                   int64_t cols, float scale,
                                   const float *bias, float *out);
/* Fails (1) for partials < 1 or negative extents. */
int32_t coat_ref_bias_grad(const float *dy, int64_t rows, int64_t cols,
                           int64_t partials, float *db);

/* --- Softmax cross-entropy (coat.cross_entropy): bf16 logits as bits,
 * [rows, vocab], the sums in the order of a team of `threads` (the kernel's
 * config.threads). dlogits may alias logits. Fails (1) for bad extents. --- */
int32_t coat_ref_cross_entropy(const uint16_t *logits, const int64_t *targets,
                               int64_t rows, int64_t vocab,
                               int64_t ignore_index, int64_t threads,
                               float *loss, uint16_t *dlogits);

#ifdef __cplusplus
}
#endif

#endif /* COAT_NUMERICS_REFERENCECAPI_H */

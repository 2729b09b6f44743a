//===- GroupKernel.h - shared scaffolding of grouped kernels ----*- C++ -*-===//
//
// Kernels over groups of consecutive elements (optimizer groups, activation
// groups) share one shape: a "lane" holds E consecutive elements, L lanes form
// a group, and per-group statistics combine across those L lanes. On the GPU
// a lane is a thread and lanes of a group are adjacent threads of one warp; on
// the CPU a lane is a loop iteration holding the whole group (L = 1). The
// element math is emitted once against this interface.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_CONVERSION_GROUPKERNEL_H
#define COAT_CONVERSION_GROUPKERNEL_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/Support/Alignment.h"

namespace mlir::coat {

enum class GroupReduceKind { MaxNum, MinNum, MinUnsigned, BitOr };

/// One lane of a grouped kernel: which elements it holds and how it reaches
/// the other lanes of its group.
struct GroupLane {
  int64_t elementsPerLane = 1; ///< E
  int64_t lanesPerGroup = 1;   ///< L (power of two, <= 32)
  int64_t groupSize = 1;       ///< G = E * L
  Value group;                 ///< index of the group
  Value laneInGroup;           ///< index in [0, L)
  Value firstElement;          ///< flat index of this lane's first element
  bool onGpu = false;

  /// Combines `v` (f32 or i32) over the lanes of the group (or over aligned
  /// clusters of `clusterLanes` lanes inside it) by a butterfly of warp
  /// shuffles; every lane receives the result. Identity on the CPU.
  Value allReduce(ImplicitLocOpBuilder &b, Value v, GroupReduceKind kind,
                  int64_t clusterLanes = 0) const;
};

/// Lane `laneIndex` of flat groups of E * L consecutive elements: it holds
/// elements [E * laneIndex, E * laneIndex + E) of group laneIndex / L.
GroupLane makeFlatLane(ImplicitLocOpBuilder &b, int64_t elementsPerLane,
                       int64_t lanesPerGroup, Value laneIndex, bool onGpu);

/// Small helpers for emitting scalar f32 arithmetic. With `approx`, divisions
/// and the special functions carry `afn`, which the NVVM lowering maps to the
/// hardware approximations (ex2/lg2/rcp/sqrt .approx).
struct F32Emitter {
  ImplicitLocOpBuilder &b;
  bool approx = false;
  /// With `approx`, whether the approximations may flush subnormal inputs
  /// and results to zero (the bare SFU instructions). Otherwise the ops are
  /// marked `coat.keep_subnormals` and get the subnormal-safe variants.
  bool flushSubnormals = true;
  Value c(double v);
  Value add(Value x, Value y);
  Value sub(Value x, Value y);
  Value mul(Value x, Value y);
  Value div(Value x, Value y);
  Value fma(Value x, Value y, Value z);
  Value abs(Value x);
  Value sqrt(Value x);
  Value exp2(Value x);
  Value log2(Value x);
  Value floor(Value x);
  Value pow(Value x, Value y);
  Value copysign(Value mag, Value sign);
  Value maxnum(Value x, Value y);
  Value minnum(Value x, Value y);
  Value select(Value cond, Value x, Value y);
  Value lt(Value x, Value y);
  Value le(Value x, Value y);
  Value gt(Value x, Value y);
  Value eq(Value x, Value y);
  /// True for finite values (not NaN, not +-inf).
  Value isFinite(Value x);
  /// Correctly rounded on neither target: libm `expf`/`erff`/`tanhf` on the
  /// CPU, libdevice `__nv_expf`/`__nv_erff`/`__nv_tanhf` on the GPU (within
  /// 2 ulp).
  Value exp(Value x);
  Value erf(Value x);
  Value tanh(Value x);
  /// `x` rounded to the narrower float type `t` (RNE) and widened back.
  Value roundTo(Value x, Type t);
};

/// Loads buffer[idx] of a scale-like buffer (f32, or a narrower float stored
/// as `laneStorageType`) as f32.
Value loadScalarF32(ImplicitLocOpBuilder &b, Value buffer, Type logical,
                    Value idx);
/// Stores an f32 value that is exact in `logical` to buffer[idx].
void storeScalarF32(OpBuilder &b, Location loc, Value buffer, Type logical,
                    Value v, Value idx);

/// Finiteness flags (`coat.finite_flag`): i1, whether any of `xs` is
/// stored as a NaN or an infinity once rounded to `stored` (f32, bf16,
/// f16), i.e. is NaN or at least the least magnitude that rounds to
/// infinity there. Values whose entry in `valid` (i1s, one per value; empty:
/// all valid) is false are not stored and do not count.
Value storesNonFinite(F32Emitter &f, ArrayRef<Value> xs, Type stored,
                      ArrayRef<Value> valid = {});
/// The same for a vector of f32 values as one i1 (`valid`, an i1 for the
/// whole vector, or null).
Value vectorStoresNonFinite(ImplicitLocOpBuilder &b, Value values, Type stored,
                            Value valid = {});
/// Writes 1 to flag[0] where `bad` holds. Every writer writes the same
/// value, so plain stores suffice; a finite kernel never writes the flag.
void raiseFiniteFlag(ImplicitLocOpBuilder &b, Value bad, Value flag);
/// The ABI argument holding the flag of the output argument `out`.
std::string finiteFlagArgName(StringRef out);

/// `max |x|` over the values of the lane's group (NaN is skipped, as fmax
/// does; an all-NaN group gives 0); every lane receives it.
Value groupMaxAbs(F32Emitter &f, const GroupLane &lane, ArrayRef<Value> xs);

/// How a group's values are divided by its scale before the FP8 conversion.
enum class ScaleDivision {
  /// The IEEE quotient x / s (emitSharedDivisions): COAT's codes.
  Exact,
  /// x * RN(1/s): one multiply per element, the same on both targets. The
  /// product is within 1.5 ulp of x / s, so a code can move by one FP8 step
  /// only where x / s lies within 2^-22.4 of a rounding boundary.
  Reciprocal,
  /// x * rcp.approx(s) on the GPU (codes may move by one FP8 step).
  Approximate,
};

/// How COAT derives a 1xG scale and the values to convert to FP8
/// (COAT.md §1.2, §3.1).
struct GroupQuantization {
  float eps;       ///< added to the group maximum (1e-10 for activations)
  float fp8Max;    ///< largest finite value of the FP8 format
  Type scaleType;  ///< f32 or bf16: the stored scale is rounded to it
  ScaleDivision division = ScaleDivision::Exact;
};

/// The group's scale and a lane's values divided by it.
struct QuantizedLane {
  Value scale;                ///< f32, exact in the scale type
  SmallVector<Value> scaled;  ///< x / scale, for the RNE-saturating cvt
};

/// `s = round((max_group |x| + eps) / fp8max)` with IEEE division (the scale
/// is stored, so both targets must agree on it), then `x / s` with the
/// rounded `s`, as `q.division` says.
/// Truncating `scaled` to the FP8 type gives COAT's codes.
QuantizedLane quantizeGroup(F32Emitter &f, const GroupLane &lane,
                            ArrayRef<Value> x, const GroupQuantization &q);

/// `x_i / s` for values sharing one divisor, with one IEEE reciprocal
/// `r = RN(1/s)` and per element three operations (Markstein's correction):
///
///   q = RN(x * r);  n = fma(q, s, -x);  q' = fma(-n, r, q)
///
/// (n is the exact residual x - q*s negated, so that x = -0 gives -0.) For
/// 2^-126 <= s <= 2^126, q' is the IEEE quotient RN(x/s) whenever
/// |x| >= 2^-102 (the residual does not underflow) and 2^-126 <= |x/s| <
/// 2^127, and for x = +-0 (Markstein 1990; Muller et al., Handbook of
/// Floating-Point Arithmetic, 2nd ed., §5.3: with r within 1/2 ulp of 1/s
/// and q within one ulp of x/s the residual is exact and one rounding of
/// q - n*r is correct). Tinier dividends and subnormal quotients keep the
/// sign and stay within one ulp. s = +inf and NaN stay on this path and give
/// x/s (r = 0 makes q = x * 0; the correction multiplies by 0, not inf), for
/// finite or NaN x; any other s (<= 0, subnormal, above 2^126) takes a branch
/// of IEEE divisions. Overflowing quotients and infinite x over finite s are
/// outside the contract. test/Unit/DivisionTest.cpp checks all of this on
/// the same sequence in C++, exhaustively over bf16 divisors on request.
///
/// For the quantizer (s = bf16((max|x| + 1e-10) / fp8max) >= 2^-50, |x/s| <
/// 450, s = inf when the group holds an inf) this gives the codes of the
/// IEEE quotient in every FP8 format: results can differ only below 2^-17,
/// where both round to the same signed zero.
///
/// With DivisionUse::Fp8Codes the quotients are read only by a saturating
/// FP8 conversion (`cvt.rn.satfinite`), and the codes are those of the IEEE
/// quotient for every x and s, not only the quantizer's: the per-tensor
/// quantizers divide by a scale they are given. The fast path then takes
/// 2^-80 <= s <= 2^126 (a dividend below 2^-102 has a quotient below 2^-22,
/// a signed zero in every format), and a quotient that overflows to +-inf
/// (x = +-inf, or |x/s| at f32's limit) is kept from the first product
/// instead of the correction's NaN: it saturates, as the IEEE one does.
enum class DivisionUse { Exact, Fp8Codes };
SmallVector<Value> divideBySharedDivisor(F32Emitter &f, ArrayRef<Value> x,
                                         Value s,
                                         DivisionUse use = DivisionUse::Exact);

/// divideBySharedDivisor's fast path alone, no branch: for emitters whose
/// divisor is known to lie in its range (2^-126, Fp8Codes: 2^-80, <= s <=
/// 2^126, +inf or NaN), so that many groups' divisions can share one basic
/// block. A constant s makes r a constant.
SmallVector<Value> divideByDivisorInRange(F32Emitter &f, ArrayRef<Value> x,
                                          Value s,
                                          DivisionUse use = DivisionUse::Exact);

/// What kernel emitters call instead: `x_i / s` as IEEE `arith.divf`s, one
/// after the other, each marked `coat.shared_divisor = "exact"` or
/// `"fp8_codes"` (the contract above that its results need).
/// coat-expand-shared-divisions turns such a run into divideBySharedDivisor's
/// sequence; without that pass the divisions stay IEEE divisions, which
/// meet either contract.
SmallVector<Value> emitSharedDivisions(F32Emitter &f, ArrayRef<Value> x,
                                       Value s,
                                       DivisionUse use = DivisionUse::Exact);
inline constexpr llvm::StringLiteral kSharedDivisorAttr = "coat.shared_divisor";
/// The mark's spelling of a contract ("exact", "fp8_codes") and back.
StringRef stringifyDivisionUse(DivisionUse use);
std::optional<DivisionUse> parseDivisionUse(StringRef spelling);


/// How a buffer of float type `logical` is declared in a kernel: f32 as
/// itself, narrower floats (bf16, f16, FP8) as same-width integers that are
/// reinterpreted right after loading. (LLVM has no f8, and CPU backends
/// without native bf16 would route bf16 vectors through library calls.)
Type laneStorageType(Type logical);

/// Vector access to the E consecutive elements a lane holds in a 1-D buffer
/// whose element type is `laneStorageType(logical)`. When `full` (i1) holds,
/// one vector access with the given alignment; otherwise a masked access of
/// the elements below `limit` (i64), which every target lowers (masked-off
/// elements load as zero and are not stored). Without `limit` a lane is
/// whole or idle: an idle one loads zeros and stores nothing.
struct LaneAccess {
  ImplicitLocOpBuilder &b;
  Value first;      ///< index of the lane's first element
  int64_t elements; ///< E
  Value full;       ///< i1: all E elements are below `limit`
  Value limit;      ///< i64: number of valid elements of the buffer, or null

  /// Loads and widens to f32.
  SmallVector<Value> loadF32(Value buffer, Type logical,
                             llvm::MaybeAlign align) const;
  /// Narrows E f32 values to `logical` and stores them.
  void storeF32(Value buffer, ArrayRef<Value> values, Type logical,
                llvm::MaybeAlign align) const;
  /// `first + i < limit` for i in [0, E), as vector<E x i1>.
  Value tailMask(OpBuilder &nb, Location loc) const;
};

} // namespace mlir::coat

#endif // COAT_CONVERSION_GROUPKERNEL_H

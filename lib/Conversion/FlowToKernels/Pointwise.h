//===- Pointwise.h - the pointwise flow-op kernel family --------*- C++ -*-===//
//
// One parameterized lowering for COAT's pointwise non-linear operators
// (COAT.md §3.4): the op table, each op's roles and f32 math
// (PointwiseOps.cpp), what a spec means and its ABI (PointwiseSpec.cpp), the
// lanes of the GPU kernel and the CPU twin (PointwiseEmitter.cpp), and the
// pass (PointwiseToKernels.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef COAT_LIB_CONVERSION_FLOWTOKERNELS_POINTWISE_H
#define COAT_LIB_CONVERSION_FLOWTOKERNELS_POINTWISE_H

#include "coat/Conversion/GroupKernel.h"
#include "coat/Conversion/KernelDriver.h"
#include "coat/Dialect/CoatDialect.h"
#include "coat/Numerics/Fp8.h"

#include <functional>
#include <optional>
#include <string>

namespace mlir::coat {

//===----------------------------------------------------------------------===//
// What each op contributes (PointwiseOps.cpp)
//===----------------------------------------------------------------------===//

/// The formulas of the special functions, in one of two forms (the pass's
/// `exact-math` option):
///
/// - exact: the reference library's (lib/Numerics/Activations.cpp) formulas
///   in its evaluation order, IEEE divisions, expf/erff (libm on the CPU, so
///   the CPU twin agrees with the library bit for bit; libdevice on the GPU);
/// - fast: no IEEE division and no libdevice call. sigmoid(x) =
///   rcp(1 + ex2(-x log2 e)); Phi(x) = erfc(-x/sqrt 2)/2 with erfc(z) =
///   t exp(-z^2 + P(t)), t = 1/(1 + z/2): Numerical Recipes' erfcc (Press
///   et al., Numerical Recipes in C, 2nd ed., §6.2: degree-9 P, relative
///   error < 1.2e-7) in gelu_grad, a degree-5 P in gelu. ex2 and rcp are
///   the SFU approximations on the GPU (afn, coat-fast-nvvm-math) and libm
///   exp2f / IEEE division on the CPU. GELU's tanh form takes
///   |tanh(u)| = 1 - 2 rcp(1 + ex2(2 |u| log2 e)) with the sign of u, which
///   rounds to 1 where the library's tanhf does. The pass description has
///   the error bounds.
struct ActivationMath {
  F32Emitter &f;
  bool exact;
  /// Fast forms: 2^x on the FMA units (math.exp2 marked coat.soft_exp2).
  bool softExp2 = false;

  Value neg(Value x);
  /// The fast forms' 2^x: the SFU's, or marked for coat-expand-soft-exp2.
  Value ex2(Value x);
  Value sigmoid(Value x);
  /// x sigmoid(x), and its derivative s + x s (1 - s), in coat.silu's and
  /// coat.silu_grad's order.
  Value silu(Value x);
  Value siluDerivative(Value x);
  /// Phi(x) = (1 + erf(x / sqrt 2)) / 2; with `gauss`, also exp(-x^2 / 2).
  /// `refine` (fast form) adds one Newton step to the SFU reciprocal, for
  /// the cancellation of the GELU derivative.
  Value geluCdf(Value x, Value *gauss = nullptr, bool refine = false);
  /// t = tanh(sqrt(2/pi) (x + 0.044715 x^3)) of GELU's tanh form, the
  /// argument formed in the library's order.
  Value geluTanh(Value x);

  static constexpr double kLog2e = 1.44269504088896340736;
};

/// The f32 element math of an op: operand values -> one value per entry of
/// `PointwiseOpInfo::results` (a quantized copy repeats its source value).
using ElementMath =
    std::function<SmallVector<Value>(ActivationMath &, ArrayRef<Value>)>;

struct NamedValue {
  Value value;
  StringRef name; ///< the ABI name
  /// A rotary op's table: [rows, d], read at the columns of a head.
  bool table = false;
};

/// The heads of a rotary op (coat.rope, coat.rope_grad): its first operand
/// and its results are [rows, heads * d] matrices. Its math then takes each
/// operand as two values, an element of the first half of a head and its
/// partner d/2 columns on (a table's at the same positions of the token's
/// row), and returns each result as two values likewise. On the heads past
/// `rotatedHeads` the results are the first operand.
struct RotaryHeads {
  int64_t headDim;
  int64_t heads;
  int64_t rotatedHeads;
};

/// A value the kernel derives from one operand, element by element, and
/// quantizes 1xG in registers in that operand's FP8 type, as the op that
/// would otherwise write it does (coat.silu, folded by coat-fuse-silu). The
/// op's math takes its dequantized value after the operands.
struct RequantizedValue {
  unsigned operand;
  ElementMath math;
};

/// An op's kernel-facing description: operand and result roles in order,
/// and its math. Results include the optional ones that are present; those
/// that are transposed copies are listed in `transposed`.
struct PointwiseOpInfo {
  SmallVector<NamedValue> operands;
  SmallVector<NamedValue> results;
  ElementMath math;
  /// Whether the math calls a special function (exp, erf).
  bool special = false;
  SmallVector<Value> transposed = {};
  StringRef opName = {}; ///< the manifest's `op`, from the op table
  /// Entries the op adds to its manifest record's `config` (GELU's
  /// `approximate = "tanh"`).
  SmallVector<std::pair<StringRef, StringRef>> configEntries = {};
  std::optional<RotaryHeads> rotary = {};
  std::optional<RequantizedValue> requantized = {};
};

/// The description of `op` if the op table holds it.
std::optional<PointwiseOpInfo> describePointwiseOp(Operation *op);

/// The ops of the table as diagnostics list them: "coat.silu, silu_grad, ...".
std::string listPointwiseOps();

//===----------------------------------------------------------------------===//
// The kernel spec (PointwiseSpec.cpp)
//===----------------------------------------------------------------------===//

/// An operand as the kernel reads it: 1xG FP8 codes + scales, or values
/// (ABI arguments `name` and `name`_scale).
struct KernelInput {
  std::string name;
  Type type;                    ///< the element type in memory (fp8 or hp)
  bool fp8 = false;
  ::coat::Fp8Format format = ::coat::Fp8Format::E4M3;
  Type scaleType;
  bool table = false;           ///< a rotary table, [rows, d]
};

/// A result as the kernel writes it: values, or 1xG codes + scales (ABI
/// arguments `name` and `name`_scale), and its epilogue maxima.
struct KernelOutput {
  std::string name;
  Type type; ///< the element type in memory (fp8 or hp)
  bool fp8 = false;
  ::coat::Fp8Format format = ::coat::Fp8Format::E4M3;
  Type scaleType;
  unsigned mathIndex = 0;
  SmallVector<std::string> absmaxArgs; ///< epilogue maxima of this result
  std::string finiteFlagArg; ///< its finiteness flag; "" when not flagged
};

struct PointwiseSpec {
  PointwiseOpInfo info;
  SmallVector<KernelInput> inputs;
  SmallVector<KernelOutput> outputs;
  int64_t groupSize = 0; ///< G shared by all grouped arguments; 0: none
  SmallVector<AbiArg> abi; ///< bound to the spec
  /// Rotary kernels: the result is written into the first operand's buffer
  /// (a `coat.writable` argument).
  bool inPlace = false;

  bool hasFp8Output() const {
    return llvm::any_of(outputs, [](const KernelOutput &o) { return o.fp8; });
  }
  bool hasMaxima() const {
    return llvm::any_of(outputs, [](const KernelOutput &o) {
      return !o.absmaxArgs.empty();
    });
  }
  bool hasFiniteFlags() const {
    return llvm::any_of(outputs, [](const KernelOutput &o) {
      return !o.finiteFlagArg.empty();
    });
  }
  /// The heads a rotary kernel's lanes visit: all of them, but only the
  /// rotated ones when it writes in place and neither maxima nor a
  /// finiteness flag need the others.
  int64_t visitedHeads() const {
    const RotaryHeads &r = *info.rotary;
    return inPlace && !hasMaxima() && !hasFiniteFlags() ? r.rotatedHeads
                                                        : r.heads;
  }
};

/// E elements per lane and L lanes per group.
struct LaneShape {
  int64_t elementsPerLane;
  int64_t lanesPerGroup;
};

/// How a rotary kernel's lanes tile a row: a lane holds E elements of the
/// first half of a head and their E partners; `chunks` lanes cover a head,
/// `lanesPerRow` the heads it visits. On the GPU a block takes
/// `rowsPerBlock` rows in `steps` sweeps of its threads.
struct RotaryTiling {
  LaneShape lane;
  int64_t chunks;
  int64_t lanesPerRow;
  int64_t rowsPerBlock;
  int64_t steps;
};

/// The kernel-lowering hooks of coat-lower-pointwise.
class PointwiseLowering
    : public KernelLowering<PointwiseLowering, PointwiseSpec> {
public:
  PointwiseLowering(int64_t blockSize, int64_t lanesPerThread, bool exactMath,
                    bool softExp2, bool reciprocalDivision, int64_t minCtas)
      : KernelLowering({"coat-lower-pointwise", "coat_flow_kernels"}),
        blockSize(blockSize), lanesPerThread(lanesPerThread),
        exactMath(exactMath), softExp2(softExp2),
        reciprocalDivision(reciprocalDivision), minCtas(minCtas) {}

  bool isSpecOp(Operation *op) const {
    // A rope in a GEMM's epilogue is coat-lower-linear's.
    if (auto rope = dyn_cast<RopeOp>(op); rope && rope.getEpilogue())
      return false;
    return describePointwiseOp(op).has_value();
  }
  LogicalResult checkOptions(Operation *anchor) const;

  FailureOr<PointwiseSpec> analyze(func::FuncOp fn) const;
  // analyze, declare, record: PointwiseSpec.cpp; emitGpu, emitCpu:
  // PointwiseEmitter.cpp.
  COAT_KERNEL_LOWERING_HOOKS(PointwiseSpec)

  /// A lane moves 16 FP8 codes (16 bytes) or a group, if smaller; the CPU
  /// twin holds a whole group per iteration.
  LaneShape laneShape(const PointwiseSpec &spec) const;
  /// A rotary kernel's lanes: 16 bytes of the first operand a half (at most
  /// d/2 elements and a group, a power of two dividing both); the CPU twin
  /// holds a whole group, or up to 16 elements.
  RotaryTiling rotaryTiling(const PointwiseSpec &spec) const;

  /// How FP8 results are divided by their scales: by the reciprocal only in
  /// the special-function kernels (already within the fast forms' bounds of
  /// the library); the others keep the library's codes bit for bit.
  ScaleDivision scaleDivision(const PointwiseSpec &spec) const {
    return reciprocalDivision && spec.info.special ? ScaleDivision::Reciprocal
                                                   : ScaleDivision::Exact;
  }

private:
  int64_t blockSize;
  int64_t lanesPerThread;
  bool exactMath;
  bool softExp2;
  bool reciprocalDivision;
  int64_t minCtas;
};

} // namespace mlir::coat

#endif // COAT_LIB_CONVERSION_FLOWTOKERNELS_POINTWISE_H

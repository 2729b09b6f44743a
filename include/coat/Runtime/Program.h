//===- Program.h - launch plans of compiled programs ----------------------===//
//
// The `programs` section of docs/manifest.md as the reader validates it, and
// the plan of one call for a token count: which kernels run with which sizes
// and scalars, and which buffer each argument is. An executor (the Python
// package) allocates what the plan says and launches; every rule of the
// bindings lives here. No MLIR and no CUDA dependency.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_RUNTIME_PROGRAM_H
#define COAT_RUNTIME_PROGRAM_H

#include "coat/Numerics/Layout.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace coat::rt {

struct KernelSpec;
struct Manifest;

/// A value of a kernel-spec call: `in<i>` (argument i) or `out<i>` (result
/// i), whole or one part of a `!coat.qtensor`.
struct ValueRef {
  enum class Part { Whole, Codes, Scale };
  bool result = false;
  unsigned index = 0;
  Part part = Part::Whole;
};

/// `rows(R)`, `cols(R)` or `numel(R)` of a call's value, then `ceildiv` by
/// each divisor in turn.
struct ExtentExpr {
  enum class Measure { Rows, Cols, Numel };
  Measure measure = Measure::Numel;
  ValueRef of;
  std::vector<int64_t> divisors;
};

/// What one kernel argument is at a call (docs/manifest.md, "Bindings").
struct Binding {
  enum class Kind {
    Buffer,  ///< one buffer under one or more value names
    Scratch, ///< a zeroed workspace, one per argument name and call
    Extent,  ///< a scalar computed from the call's shapes
    Free,    ///< a scalar the executor picks (a norm backward's partials)
    Flag     ///< `finite(out<i>)`: the finiteness flag of a returned value
  };
  Kind kind = Kind::Buffer;
  std::vector<ValueRef> names; ///< Buffer; Flag: the one flagged result
  ExtentExpr extent;           ///< Extent
};

/// A program value: a tensor, or a qtensor's codes plus its scale tensor,
/// whose shape Layout.h derives. Extents of -1 are the token count.
struct ValueType {
  bool quantized = false;
  std::vector<int64_t> shape;
  std::string dtype; ///< a tensor's elements, a qtensor's codes
  Scaling scaling;   ///< qtensor only
  std::string scaleDtype;
};

/// The kernels one call runs, with each argument's parsed binding.
struct CallKernel {
  size_t kernel = 0; ///< index into Manifest::kernels
  std::vector<Binding> bindings; ///< one per kernel argument
};

/// When a call runs, and when an output is there: `forward` and `backward`
/// as autograd runs them; `recompute` between the two, on demand, for a
/// caller that dropped a forward output and asks for it again.
enum class Phase { Forward, Recompute, Backward };

struct ProgramStep {
  std::string spec;
  Phase phase = Phase::Forward;
  std::vector<int64_t> operands, results; ///< value ids
  std::vector<CallKernel> kernels; ///< the spec's own, then `config.of` ones
};

struct ProgramInput {
  enum class Role { Activation, Weight, Gradient };
  int64_t value = 0;
  Role role = Role::Activation;
  int64_t gradOf = -1; ///< output index, -1 when absent
  /// The caller gives the buffer up: a kernel may write its result there.
  bool writable = false;
};

struct ProgramOutput {
  int64_t value = 0;
  Phase phase = Phase::Forward;
  int64_t gradOf = -1;      ///< input index, -1 when absent
  int64_t recomputeOf = -1; ///< recompute: the forward output it copies
};

struct Program {
  std::string name;
  std::vector<ValueType> values;
  std::vector<ProgramInput> inputs;
  std::vector<ProgramStep> steps;
  std::vector<ProgramOutput> outputs;
  std::vector<int64_t> saved;
};

/// Where a plan takes one buffer from.
struct BufferSource {
  enum class Kind { Value, Alloc, Scratch, Flag };
  Kind kind = Kind::Value;
  /// Value: value id; Alloc, Scratch: index into allocs / scratch; Flag:
  /// the flagged value's index in the program's outputs (the executor's
  /// flag words are one i32 per output).
  int64_t index = 0;
  ValueRef::Part part = ValueRef::Part::Whole; ///< Value only
};

/// A buffer the executor allocates: a call's result (or part), or a zeroed
/// workspace (rank 1).
struct PlannedBuffer {
  std::vector<int64_t> shape;
  std::string dtype;
};

struct PlannedLaunch {
  size_t kernel = 0; ///< index into Manifest::kernels
  int64_t n = 0;
  std::vector<int64_t> scalars;      ///< every scalar argument, in order
  std::vector<BufferSource> buffers; ///< every memref/tensormap, in order
};

/// One call for one token count.
struct StepPlan {
  std::vector<PlannedBuffer> allocs;
  std::vector<PlannedBuffer> scratch;
  std::vector<PlannedLaunch> launches;
  /// Per result value: its buffer, or a qtensor's codes and scale.
  std::vector<std::pair<int64_t, std::vector<BufferSource>>> results;
};

/// CTAs of a kernel that the device holds at once (0 or less: unknown, an
/// error). The CPU twins count kCpuResidentBlocks.
using ResidentBlocks = std::function<int64_t(const KernelSpec &)>;
inline constexpr int64_t kCpuResidentBlocks = 256;

/// A norm backward's `partials` (the rows of its f32 column-sum workspace)
/// for `rows` rows: one wave of the row kernel's teams, `residentBlocks`
/// CTAs of `config.rows_per_block` rows, at least 1 and at most `rows`. Any
/// value gives correct sums; the value fixes their order.
int64_t defaultPartials(const KernelSpec &rowKernel, int64_t rows,
                        int64_t residentBlocks);

/// The plan of step `step` of `program` for `tokens` tokens, every launch
/// checked as a launch of its buffers' sizes would be (packLaunch's rules).
/// `resident` answers for kernels whose scalars are `free` (null: the CPU
/// twins). On failure returns false and sets `error`.
bool planStep(const Manifest &manifest, const Program &program, size_t step,
              int64_t tokens, const ResidentBlocks &resident, StepPlan &out,
              std::string &error);

/// The shape of a value's part as the manifest records it: -1 for an extent
/// that depends on the token count; a scale's from Layout.h.
std::vector<int64_t> recordedShape(const ValueType &type, ValueRef::Part part);

/// The shape of a value (or part) for `tokens` tokens; a scale's from
/// Layout.h. False with `error` when the scaling does not fit the shape.
bool partShape(const ValueType &type, ValueRef::Part part, int64_t tokens,
               std::vector<int64_t> &shape, std::string &error);

} // namespace coat::rt

#endif // COAT_RUNTIME_PROGRAM_H

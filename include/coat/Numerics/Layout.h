//===- Layout.h - Scale-tensor shapes derived from a scaling granularity --===//
//
// How a quantized tensor's scale (and expansion k/c) tensors are shaped follows
// from its logical shape and its granularity alone. This is the one place that
// derivation lives; the `!coat.qtensor` verifier, the lowerings, the manifest
// writer and (through the manifest) the Python side use it. No MLIR dependency.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_NUMERICS_LAYOUT_H
#define COAT_NUMERICS_LAYOUT_H

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace coat {

/// Marks an extent unknown until run time (equal to mlir::ShapedType::kDynamic).
inline constexpr int64_t kDynamicExtent = std::numeric_limits<int64_t>::min();

enum class ScalingKind : uint8_t {
  /// One scale for the whole tensor.
  PerTensor,
  /// One scale per G consecutive elements of the innermost dimension; G must
  /// divide that dimension (COAT's 1xG activation groups).
  PerGroup,
  /// One scale per G consecutive elements of the row-major flattened tensor;
  /// groups may straddle rows and the last group may be partial (COAT's
  /// optimizer-state groups).
  FlatGroup,
  /// One scale per RxC block of the two innermost dimensions; edge blocks may
  /// be partial (DeepSeek-style 128x128 weight blocks).
  PerBlock,
};

/// A scaling granularity: the kind plus its sizes.
struct Scaling {
  ScalingKind kind = ScalingKind::PerTensor;
  int64_t groupSize = 0; ///< PerGroup / FlatGroup
  int64_t blockRows = 0; ///< PerBlock
  int64_t blockCols = 0; ///< PerBlock

  static Scaling perTensor() { return {}; }
  static Scaling perGroup(int64_t g) { return {ScalingKind::PerGroup, g, 0, 0}; }
  static Scaling flatGroup(int64_t g) { return {ScalingKind::FlatGroup, g, 0, 0}; }
  static Scaling perBlock(int64_t r, int64_t c) {
    return {ScalingKind::PerBlock, 0, r, c};
  }
  bool isGrouped() const {
    return kind == ScalingKind::PerGroup || kind == ScalingKind::FlatGroup;
  }
  bool operator==(const Scaling &o) const {
    return kind == o.kind && groupSize == o.groupSize &&
           blockRows == o.blockRows && blockCols == o.blockCols;
  }
  bool operator!=(const Scaling &o) const { return !(*this == o); }
};

/// Returns "per_tensor", "per_group<16>", "flat_group<128>", "per_block<128x128>".
std::string toString(const Scaling &s);

/// The inverse of toString (the form the kernel manifest records), or nothing
/// for any other text. Sizes are not checked: see verifyScaling.
std::optional<Scaling> parseScaling(const std::string &text);

/// Checks a granularity on its own (positive sizes). Returns an error message.
std::optional<std::string> verifyScaling(const Scaling &s);

/// Checks that `s` can describe a tensor of `shape` (rank, divisibility of
/// static extents). Returns an error message, or nothing when it fits.
std::optional<std::string> verifyScalingForShape(const std::vector<int64_t> &shape,
                                                 const Scaling &s);

/// The shape of the scale tensor (and of the k and c tensors of an expanded
/// tensor). Dynamic input extents give dynamic output extents.
std::vector<int64_t> scaleShape(const std::vector<int64_t> &shape,
                                const Scaling &s);

/// Number of scale entries for a fully static `shape` (product of scaleShape).
int64_t numScales(const std::vector<int64_t> &shape, const Scaling &s);

/// ceil(a / b) for positive b, kDynamicExtent-preserving.
inline int64_t ceilDivExtent(int64_t a, int64_t b) {
  return a == kDynamicExtent ? kDynamicExtent : (a + b - 1) / b;
}

} // namespace coat

#endif // COAT_NUMERICS_LAYOUT_H

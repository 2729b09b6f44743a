//===- Quantize.h - the activation quantization kernel family ---*- C++ -*-===//
//
// Lowers kernel-spec functions holding one activation op (coat.quantize,
// coat.dequantize, coat.absmax; coat.quantize + coat.transpose; a
// requantize: coat.dequantize + a coat.quantize of it) on a 2-D
// [rows, cols] tensor into a GPU kernel and a CPU twin with the same ABI.
// A per-tensor quantize + transpose spec that returns only the transposed
// copy writes only that layout.
// Grouped kernels are flat: a per_group<G> group (G divides cols) is G
// consecutive elements of the row-major tensor, so the lanes of GroupLane
// cover rows*cols elements with one masked tail. Tile kernels (quantize +
// transpose, and per_block<BxB> quantize) take one T x T tile per CTA
// iteration and move the transposed copy through workgroup memory.
//
//
// What a spec means, its ABI and record: QuantizeSpec.cpp; the flat and
// tile kernels and their CPU twins: QuantizeEmitter.cpp; the pass:
// QuantizeToKernels.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_LIB_CONVERSION_QUANTIZETOKERNELS_QUANTIZE_H
#define COAT_LIB_CONVERSION_QUANTIZETOKERNELS_QUANTIZE_H

#include "coat/Conversion/KernelDriver.h"
#include "coat/Numerics/Fp8.h"

namespace mlir::coat {

enum class ActKind { QuantizeGroup, QuantizeScaled, QuantizeBlock,
                     QuantizeTranspose, Dequantize, AbsMax, Requantize };

/// Everything the element math needs, fixed per kernel.
struct ActSpec {
  ActKind kind;
  Type hpType;              ///< the bf16/f16/f32 side (input or output)
  ::coat::Fp8Format format = ::coat::Fp8Format::E4M3;
  bool perTensor = false;   ///< one scale (given, or of a per_tensor input)
  int64_t groupSize = 0;    ///< G of grouped kinds
  int64_t blockEdge = 0;    ///< B of per_block<BxB> kinds
  Type scaleType;           ///< f32 or bf16
  float eps = ::coat::kActivationScaleEps;
  /// Requantize: the 1xG codes read (the result's are `format`), and their
  /// group scales' type (the given per-tensor scale's is `scaleType`).
  ::coat::Fp8Format sourceFormat = ::coat::Fp8Format::E4M3;
  Type sourceScaleType;
  /// QuantizeTranspose: whether the row-major codes are written too (the
  /// spec returns both layouts) or only q^T.
  bool rowMajorCodes = true;

  bool grouped() const { return groupSize > 0; }
  bool blocked() const { return blockEdge > 0; }
  /// Kinds that run as T x T tiles (emitTileGpu).
  bool tiled() const {
    return kind == ActKind::QuantizeTranspose || kind == ActKind::QuantizeBlock;
  }
  StringRef opName() const {
    switch (kind) {
    case ActKind::QuantizeGroup:
    case ActKind::QuantizeScaled:
    case ActKind::QuantizeBlock:
      return "quantize";
    case ActKind::QuantizeTranspose:
      return rowMajorCodes ? "quantize_transpose" : "quantize_transposed_only";
    case ActKind::Dequantize:
      return "dequantize";
    case ActKind::AbsMax:
      return "absmax";
    case ActKind::Requantize:
      return "requantize";
    }
    return "";
  }
  float fp8Max() const { return ::coat::getFp8Traits(format).maxFinite; }
};

/// Flat kernels: E elements per lane, L lanes per group.
struct FlatShape {
  int64_t elementsPerLane;
  int64_t lanesPerGroup;
  int64_t groupSize; ///< G, or E for element-wise kernels
};

/// Tile kernels: T x T tiles.
struct TileShape {
  int64_t tile;       ///< T
  int64_t blockSize;  ///< threads
  int64_t inVector;   ///< input elements per row-major access (16 bytes)
  /// Tiles a block takes in turn (the launch rule's share); above 1 the
  /// next tile's loads are issued before the current tile is processed.
  int64_t tilesPerBlock = 1;
};

/// An activation spec and the shape of its kernel under the pass options.
struct ActPlan {
  ActSpec spec;
  FlatShape flat{1, 1, 1};
  TileShape tiles;
  int64_t elementsPerBlock = 0;
  int64_t threads = 0; ///< GPU threads per block of this kernel
};

/// The kernel-lowering hooks of coat-lower-activations.
class QuantizeLowering : public KernelLowering<QuantizeLowering, ActPlan> {
public:
  QuantizeLowering(int64_t blockSize, int64_t tileBlockSize,
                   int64_t elementsPerThread, int64_t tile,
                   bool approxDivision, int64_t tileMinCtas,
                   int64_t flatMinCtas, int64_t tilesPerBlock)
      : KernelLowering({"coat-lower-activations", "coat_activation_kernels"}),
        blockSize(blockSize), tileBlockSize(tileBlockSize),
        elementsPerThread(elementsPerThread), tile(tile),
        approxDivision(approxDivision), tileMinCtas(tileMinCtas),
        flatMinCtas(flatMinCtas), tilesPerBlock(tilesPerBlock) {}

  bool isSpecOp(Operation *op) const;
  LogicalResult checkOptions(Operation *anchor) const;
  bool takesSpec(func::FuncOp fn) const;
  FailureOr<ActPlan> analyze(func::FuncOp fn) const;
  SpecBindings bindings(func::FuncOp fn, const ActPlan &plan) const;
  // All but emitGpu, emitCpu: QuantizeSpec.cpp; those: QuantizeEmitter.cpp.
  COAT_KERNEL_LOWERING_HOOKS(ActPlan)

private:
  int64_t blockSize;
  int64_t tileBlockSize; ///< 0: by tile bytes, at least blockSize
  int64_t elementsPerThread;
  int64_t tile;
  bool approxDivision;
  int64_t tileMinCtas;
  int64_t flatMinCtas;
  int64_t tilesPerBlock; ///< 0: by tile bytes
};

} // namespace mlir::coat

#endif // COAT_LIB_CONVERSION_QUANTIZETOKERNELS_QUANTIZE_H

//===- CoatTypes.td - coat types --------------------------------*- tablegen -*-===//

#ifndef COAT_TYPES_TD
#define COAT_TYPES_TD

include "coat/Dialect/CoatAttrs.td"
include "mlir/IR/BuiltinTypeInterfaces.td"

def Coat_QTensorType : TypeDef<Coat_Dialect, "QTensor", [
    DeclareTypeInterfaceMethods<ShapedTypeInterface, ["cloneWith"]>]> {
  let mnemonic = "qtensor";
  let summary = "An FP8 tensor with the metadata that gives its bytes meaning";
  let description = [{
    A quantized tensor: FP8 data of a logical shape plus its scales, and for
    range-expanded tensors the per-group exponent `k` and centre `c`.

    Syntax: `!coat.qtensor<SHAPE x FP8, SCALING [, scale = T] [, expand]>`

    - FP8 is `f8E4M3FN` or `f8E5M2`.
    - SCALING is `per_tensor`, `per_group<G>`, `flat_group<G>` or
      `per_block<RxC>` (see `#coat.scaling`).
    - `scale = T` is the scale element type, `f32` (default) or `bf16`.
    - `expand` marks Dynamic Range Expansion: the data holds
      `sign(x) * (|x| / c)^k / s` per group, with f32 `k` and `c` tensors
      shaped like the scale tensor. Only grouped scalings can carry it.

    Dequantization multiplies: `x = f32(q) * s` (un-expanded:
    `x = sign(y) * |y|^(1/k) * c` with `y = f32(q) * s`).

    ```mlir
    !coat.qtensor<8192x4096xf8E4M3FN, per_tensor>
    !coat.qtensor<8192x4096xf8E4M3FN, per_group<16>, scale = bf16>
    !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
    ```
  }];
  let parameters = (ins ArrayRefParameter<"int64_t">:$shape,
                        "::mlir::FloatType":$elementType,
                        "::mlir::coat::ScalingAttr":$scaling,
                        "::mlir::FloatType":$scaleType,
                        "bool":$expanded);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let skipDefaultBuilders = 1;
  let builders = [
    TypeBuilderWithInferredContext<(ins "::llvm::ArrayRef<int64_t>":$shape,
        "::mlir::FloatType":$elementType, "::mlir::coat::ScalingAttr":$scaling,
        CArg<"::mlir::FloatType", "{}">:$scaleType,
        CArg<"bool", "false">:$expanded)>
  ];
  let extraClassDeclaration = [{
    using ::mlir::ShapedType::Trait<QTensorType>::getRank;
    using ::mlir::ShapedType::Trait<QTensorType>::getNumElements;
    using ::mlir::ShapedType::Trait<QTensorType>::hasStaticShape;
    using ::mlir::ShapedType::Trait<QTensorType>::getDimSize;

    ::coat::Fp8Format getFormat() const;
    ::coat::Scaling getScalingValue() const { return getScaling().getValue(); }
    /// `tensor<SHAPE x FP8>`: the codes.
    ::mlir::RankedTensorType getDataType() const;
    /// The scale tensor type (rank 0 for per_tensor); shape from
    /// coat::scaleShape.
    ::mlir::RankedTensorType getScaleTensorType() const;
    /// f32 tensor shaped like the scales, for `k` and `c` of expanded tensors.
    ::mlir::RankedTensorType getExpansionTensorType() const;
    /// The same quantized tensor with a different shape (used by transpose).
    QTensorType cloneWithShape(::llvm::ArrayRef<int64_t> shape) const;
  }];
}

def Coat_UnresolvedType : TypeDef<Coat_Dialect, "Unresolved", [
    DeclareTypeInterfaceMethods<ShapedTypeInterface, ["cloneWith"]>]> {
  let mnemonic = "unresolved";
  let summary = "An FP8 copy of a tensor whose format and granularity are not chosen yet";
  let description = [{
    The result of `coat.quantize_auto`: the promise of an FP8 copy of a
    high-precision tensor of this shape and element type, whose FP8 format
    and scaling granularity `coat-mixed-granularity` chooses from the
    consumers (COAT.md §3.8). FP8 consumers (`coat.linear`, `coat.transpose`
    and the precision-flow ops) accept it in place of a `!coat.qtensor`; their
    verifiers then check shapes only. No lowering accepts it: the pass
    replaces every value of this type by `!coat.qtensor` values.

    Syntax: `!coat.unresolved<SHAPE x T>`, T the source type (f32, bf16, f16).

    ```mlir
    !coat.unresolved<4096x11008xbf16>
    ```
  }];
  let parameters = (ins ArrayRefParameter<"int64_t">:$shape,
                        "::mlir::Type":$elementType);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    using ::mlir::ShapedType::Trait<UnresolvedType>::getRank;
    using ::mlir::ShapedType::Trait<UnresolvedType>::getDimSize;
  }];
}

#endif // COAT_TYPES_TD

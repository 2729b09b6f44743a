//===- CoatAttrs.td - coat attributes ---------------------------*- tablegen -*-===//

#ifndef COAT_ATTRS_TD
#define COAT_ATTRS_TD

include "coat/Dialect/CoatBase.td"

class Coat_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Coat_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Coat_ScalingAttr : Coat_Attr<"Scaling", "scaling"> {
  let summary = "Scaling granularity of a quantized tensor";
  let description = [{
    How many elements share one scale:

    - `per_tensor`: one scale for the whole tensor.
    - `per_group<G>`: one scale per G consecutive elements of the innermost
      dimension; G must divide it (COAT's 1x16 activation groups).
    - `flat_group<G>`: one scale per G consecutive elements of the row-major
      flattened tensor; groups may straddle rows and the last may be partial
      (COAT's 128-element optimizer-state groups).
    - `per_block<RxC>`: one scale per RxC block of the two innermost
      dimensions; edge blocks may be partial (DeepSeek-style weights).

    ```mlir
    #coat.scaling<per_group<16>>
    #coat.scaling<per_block<128x128>>
    ```
  }];
  let parameters = (ins "::coat::Scaling":$value);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    ::coat::ScalingKind getKind() const { return getValue().kind; }
    bool isPerTensor() const {
      return getKind() == ::coat::ScalingKind::PerTensor;
    }
    bool isGrouped() const { return getValue().isGrouped(); }
    /// Parses the body (`per_group<16>` etc.) as used inside other types.
    static ::mlir::FailureOr<::coat::Scaling>
    parseBody(::mlir::AsmParser &parser);
    static void printBody(::mlir::AsmPrinter &printer, const ::coat::Scaling &s);
  }];
}

def Coat_LinearKind : I32EnumAttr<"LinearKind", "which GEMM of a linear layer", [
    I32EnumAttrCase<"forward", 0>, I32EnumAttrCase<"dgrad", 1>,
    I32EnumAttrCase<"wgrad", 2>]> {
  let cppNamespace = "::mlir::coat";
  let genSpecializedAttr = 0;
}
def Coat_LinearKindAttr : EnumAttr<Coat_Dialect, Coat_LinearKind, "linear_kind"> {
  let assemblyFormat = "`<` $value `>`";
}

def Coat_OptimizerMode : I32EnumAttr<"OptimizerMode",
    "numerics of the FP8 optimizer", [
    I32EnumAttrCase<"fixed", 0>, I32EnumAttrCase<"reference", 1>]> {
  let cppNamespace = "::mlir::coat";
  let genSpecializedAttr = 0;
}
def Coat_OptimizerModeAttr
    : EnumAttr<Coat_Dialect, Coat_OptimizerMode, "optimizer_mode"> {
  let assemblyFormat = "`<` $value `>`";
}

def Coat_FlowDirection : I32EnumAttr<"FlowDirection",
    "whether a tensor belongs to the forward or the backward pass", [
    I32EnumAttrCase<"forward", 0>, I32EnumAttrCase<"backward", 1>]> {
  let cppNamespace = "::mlir::coat";
  let genSpecializedAttr = 0;
}
def Coat_FlowDirectionAttr
    : EnumAttr<Coat_Dialect, Coat_FlowDirection, "direction"> {
  let assemblyFormat = "`<` $value `>`";
}

#endif // COAT_ATTRS_TD

//===- KernelRecord.cpp - the coat.kernel manifest record of a kernel -----===//

#include "coat/Conversion/KernelRecord.h"
#include "coat/Dialect/CoatDialect.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace mlir::coat;

std::string mlir::coat::manifestDtype(Type t) {
  if (t.isF32())
    return "f32";
  if (t.isBF16())
    return "bf16";
  if (t.isF16())
    return "f16";
  if (auto f = getFp8Format(t))
    return ::coat::getFp8Traits(*f).name;
  if (t.isInteger(32))
    return "i32";
  return "i64";
}

std::string SpecRefs::ref(Value v, StringRef part) const {
  std::string name;
  if (auto arg = dyn_cast<BlockArgument>(v);
      arg && arg.getOwner()->getParentOp() == spec.getOperation()) {
    name = "in" + std::to_string(arg.getArgNumber());
  } else {
    auto ret = cast<func::ReturnOp>(spec.getBody().front().getTerminator());
    auto it = llvm::find(ret.getOperands(), v);
    if (it == ret.getOperands().end())
      return ""; // computed and consumed inside the spec
    name = "out" + std::to_string(it - ret.getOperands().begin());
  }
  if (!part.empty())
    name += "." + part.str();
  return name;
}

DictionaryAttr mlir::coat::buildKernelRecord(MLIRContext *ctx, StringRef name,
                                             StringRef op,
                                             ArrayRef<NamedAttribute> config,
                                             ArrayRef<AbiArg> abi,
                                             std::optional<LaunchRule> launch) {
  Builder b(ctx);
  auto str = [&](StringRef s) { return b.getStringAttr(s); };
  SmallVector<Attribute> args;
  for (const AbiArg &a : abi) {
    SmallVector<NamedAttribute> rec = {b.getNamedAttr("name", str(a.name))};
    bool isBuffer = isa<MemRefType>(a.type);
    rec.push_back(b.getNamedAttr("kind", str(isBuffer ? "memref" : "scalar")));
    rec.push_back(b.getNamedAttr("dtype", str(a.dtype)));
    if (isBuffer) {
      int64_t fixed;
      if (!StringRef(a.extent).getAsInteger(10, fixed))
        rec.push_back(b.getNamedAttr("extent", b.getI64IntegerAttr(fixed)));
      else
        rec.push_back(b.getNamedAttr("extent", str(a.extent)));
    }
    SmallVector<Attribute> refs;
    for (const std::string &r : a.bind)
      if (!r.empty() && r.find("()") == std::string::npos)
        refs.push_back(str(r));
    if (isBuffer && !refs.empty())
      rec.push_back(b.getNamedAttr("bind", b.getArrayAttr(refs)));
    else if (refs.size() == 1)
      rec.push_back(b.getNamedAttr("bind", refs.front()));
    args.push_back(b.getDictionaryAttr(rec));
  }
  SmallVector<NamedAttribute> record = {
      b.getNamedAttr("name", str(name)), b.getNamedAttr("op", str(op)),
      b.getNamedAttr("config", b.getDictionaryAttr(config)),
      b.getNamedAttr("args", b.getArrayAttr(args))};
  if (launch) {
    SmallVector<NamedAttribute> rule = {
        b.getNamedAttr("block", b.getI64ArrayAttr({launch->blockSize, 1, 1})),
        b.getNamedAttr("shared_bytes",
                       b.getI64IntegerAttr(launch->sharedBytes))};
    if (launch->gridTiles.empty()) {
      rule.push_back(b.getNamedAttr(
          "elements_per_block", b.getI64IntegerAttr(launch->elementsPerBlock)));
    } else {
      SmallVector<Attribute> tiles;
      for (const auto &[scalar, tile] : launch->gridTiles)
        tiles.push_back(
            b.getArrayAttr({str(scalar), b.getI64IntegerAttr(tile)}));
      rule.push_back(b.getNamedAttr("grid_tiles", b.getArrayAttr(tiles)));
    }
    record.push_back(
        b.getNamedAttr("launch", b.getDictionaryAttr(rule)));
  }
  return b.getDictionaryAttr(record);
}

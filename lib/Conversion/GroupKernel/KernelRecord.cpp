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

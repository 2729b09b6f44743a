//===- ExportArtifacts.cpp - manifest.json and binaries out of the IR -----===//
//
// The manifest is derived from the IR: lowerings attach a `coat.kernel`
// dictionary to each kernel they generate, and this pass serialises them.
//
//===----------------------------------------------------------------------===//

#include "coat/Conversion/Passes.h"
#include "coat/Dialect/CoatDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATEXPORTMANIFEST
#define GEN_PASS_DEF_COATEXPORTBINARIES
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;

namespace {

llvm::json::Value toJson(Attribute attr) {
  if (auto d = dyn_cast<DictionaryAttr>(attr)) {
    llvm::json::Object o;
    for (NamedAttribute na : d)
      o[na.getName().str()] = toJson(na.getValue());
    return o;
  }
  if (auto a = dyn_cast<ArrayAttr>(attr)) {
    llvm::json::Array arr;
    for (Attribute e : a)
      arr.push_back(toJson(e));
    return arr;
  }
  if (auto s = dyn_cast<StringAttr>(attr))
    return s.str();
  if (auto b = dyn_cast<BoolAttr>(attr))
    return b.getValue();
  if (auto i = dyn_cast<IntegerAttr>(attr))
    return i.getInt();
  if (auto f = dyn_cast<FloatAttr>(attr))
    return f.getValueAsDouble();
  std::string s;
  llvm::raw_string_ostream os(s);
  attr.print(os);
  return s;
}

LogicalResult writeFile(Operation *op, StringRef path, StringRef bytes) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_None);
  if (ec)
    return op->emitError("cannot write '") << path << "': " << ec.message();
  os << bytes;
  return success();
}

struct CoatExportManifestPass
    : mlir::coat::impl::CoatExportManifestBase<CoatExportManifestPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    // The lowerings have run: a coat op still in a function is a kernel spec
    // none of them took, which would otherwise fail later without a word
    // about why.
    WalkResult leftover = module.walk([&](Operation *op) {
      if (!isa_and_nonnull<mlir::coat::CoatDialect>(op->getDialect()))
        return WalkResult::advance();
      auto fn = op->getParentOfType<func::FuncOp>();
      op->emitError("no lowering takes this op")
          << (fn ? " in kernel-spec function @" + fn.getSymName().str() : "")
          << ": it has no kernel in this build or this form";
      return WalkResult::interrupt();
    });
    if (leftover.wasInterrupted())
      return signalPassFailure();
    if (std::error_code ec = llvm::sys::fs::create_directories(dir)) {
      module.emitError("cannot create '") << dir << "': " << ec.message();
      return signalPassFailure();
    }
    SmallString<256> path(dir);
    llvm::sys::path::append(path, "manifest.json");

    // Start from the existing manifest so GPU and CPU runs combine.
    llvm::json::Object manifest;
    if (auto buf = llvm::MemoryBuffer::getFile(path)) {
      llvm::Expected<llvm::json::Value> old =
          llvm::json::parse((*buf)->getBuffer());
      if (!old) {
        module.emitError("existing '")
            << path << "' is not valid JSON: " << llvm::toString(old.takeError());
        return signalPassFailure();
      }
      if (auto *o = old->getAsObject())
        manifest = std::move(*o);
    }
    manifest["format"] = "coat-manifest";
    manifest["version"] = 1;
    llvm::json::Array kernels;
    if (auto *old = manifest.getArray("kernels"))
      kernels = std::move(*old);
    auto findKernel = [&](StringRef name) -> llvm::json::Object * {
      for (llvm::json::Value &k : kernels)
        if (auto *o = k.getAsObject())
          if (o->getString("name") == name)
            return o;
      return nullptr;
    };
    auto merge = [&](DictionaryAttr record, StringRef section,
                     llvm::json::Object where) {
      llvm::json::Object fresh = std::move(*toJson(record).getAsObject());
      StringRef name = record.getAs<StringAttr>("name").getValue();
      llvm::json::Object *entry = findKernel(name);
      if (!entry) {
        kernels.push_back(llvm::json::Object{});
        entry = kernels.back().getAsObject();
      }
      // The GPU kernel and its CPU twin share an entry: objects (config,
      // launch) merge key by key, so a fact only one target records (the
      // GPU's launch, its row prefetch) survives the other's export.
      for (auto &kv : fresh) {
        llvm::json::Object *into = entry->getObject(kv.first);
        llvm::json::Object *from = kv.second.getAsObject();
        if (into && from) {
          for (auto &field : *from)
            (*into)[field.first] = std::move(field.second);
          continue;
        }
        (*entry)[kv.first] = std::move(kv.second);
      }
      (*entry)[section] = std::move(where);
    };

    module.walk([&](gpu::GPUModuleOp gm) {
      manifest["target"] =
          llvm::json::Object{{"chip", chip}, {"features", features}};
      if (ArrayAttr targets = gm.getTargetsAttr())
        for (Attribute t : targets)
          if (auto nvvm = dyn_cast<NVVM::NVVMTargetAttr>(t))
            manifest["target"] = llvm::json::Object{
                {"chip", nvvm.getChip().str()},
                {"features", nvvm.getFeatures().str()}};
      for (auto fn : gm.getOps<gpu::GPUFuncOp>())
        if (auto rec = fn->getAttrOfType<DictionaryAttr>("coat.kernel"))
          merge(rec, "gpu",
                llvm::json::Object{{"module", gm.getName().str()},
                                   {"cubin", (gm.getName() + ".cubin").str()},
                                   {"ptx", (gm.getName() + ".ptx").str()}});
    });
    for (auto fn : module.getOps<func::FuncOp>())
      if (auto rec = fn->getAttrOfType<DictionaryAttr>("coat.kernel"))
        merge(rec, "cpu",
              llvm::json::Object{{"symbol", fn.getSymName().str()},
                                 {"object", "coat_cpu.o"},
                                 {"library", "coat_cpu.so"}});
    manifest["kernels"] = std::move(kernels);

    std::string text;
    llvm::raw_string_ostream os(text);
    os << llvm::formatv("{0:2}", llvm::json::Value(std::move(manifest)))
       << "\n";
    if (failed(writeFile(module, path, text)))
      return signalPassFailure();
  }
};

struct CoatExportBinariesPass
    : mlir::coat::impl::CoatExportBinariesBase<CoatExportBinariesPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (std::error_code ec = llvm::sys::fs::create_directories(dir)) {
      module.emitError("cannot create '") << dir << "': " << ec.message();
      return signalPassFailure();
    }
    WalkResult r = module.walk([&](gpu::BinaryOp bin) {
      for (Attribute a : bin.getObjects()) {
        auto obj = cast<gpu::ObjectAttr>(a);
        StringRef ext = "fatbin";
        switch (obj.getFormat()) {
        case gpu::CompilationTarget::Assembly:
          ext = "ptx";
          break;
        case gpu::CompilationTarget::Binary:
          ext = "cubin";
          break;
        case gpu::CompilationTarget::Offload:
          ext = "bc";
          break;
        default:
          break;
        }
        SmallString<256> path(dir);
        llvm::sys::path::append(path, (bin.getName() + "." + ext).str());
        if (failed(writeFile(bin, path, obj.getObject().getValue())))
          return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (r.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace

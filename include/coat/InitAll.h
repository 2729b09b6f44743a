//===- InitAll.h - register every coat dialect and pass ---------*- C++ -*-===//

#ifndef COAT_INITALL_H
#define COAT_INITALL_H

namespace mlir {
class DialectRegistry;
namespace coat {
/// Registers the coat dialect and the dialects its pipelines produce.
void registerCoatDialects(DialectRegistry &registry);
/// Registers every coat pass and pipeline with the global pass registry.
void registerCoatPasses();
} // namespace coat
} // namespace mlir

#endif // COAT_INITALL_H

//===- SanitizerOptions.h - ASan defaults for the coat tools ------*- C++ -*-===//
//
// Included once by each tool's main file. In a sanitized build our code is
// instrumented but libMLIR.so is not. LLVM's BumpPtrAllocator poisons the
// slabs it starts from instrumented code and unpoisons allocations only
// there, so a slab started by our code and then used by libMLIR.so reads as
// poisoned: false reports. User poisoning is therefore off; real
// out-of-bounds accesses are still caught by the instrumentation.
// LeakSanitizer is off because MLIR keeps process-lifetime registries.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_TOOLS_SANITIZEROPTIONS_H
#define COAT_TOOLS_SANITIZEROPTIONS_H

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
extern "C" const char *__asan_default_options() {
  return "allow_user_poisoning=0:detect_leaks=0";
}
#endif
#endif

#endif // COAT_TOOLS_SANITIZEROPTIONS_H

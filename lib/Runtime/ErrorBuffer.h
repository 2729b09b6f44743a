//===- ErrorBuffer.h - the C ABIs' error messages ---------------*- C++ -*-===//
//
// Both C ABIs of the runtime (coat_runtime.h, coat_manifest.h) report a
// failure as a status and a message copied into the caller's buffer.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_RUNTIME_ERRORBUFFER_H
#define COAT_RUNTIME_ERRORBUFFER_H

#include <cstddef>
#include <cstring>
#include <string>

namespace coat::rt {

/// Copies `msg` into `errbuf` (truncated, NUL-terminated; nothing when the
/// buffer is absent) and returns `status`.
inline int reportStatus(char *errbuf, size_t errlen, int status,
                        const std::string &msg) {
  if (errbuf && errlen > 0) {
    size_t n = msg.size() < errlen - 1 ? msg.size() : errlen - 1;
    std::memcpy(errbuf, msg.data(), n);
    errbuf[n] = '\0';
  }
  return status;
}

} // namespace coat::rt

#endif // COAT_RUNTIME_ERRORBUFFER_H

//===- InputNesting.h - how deep the tools' input nests brackets -*- C++ -*-===//
//
// MLIR's parser recurses once per nesting level of `(`, `[`, `{` and `<` and
// has no depth limit: a few thousand levels overflow the stack inside
// libMLIR.so (stock mlir-opt crashes the same way). No real IR nests more
// than a few dozen levels, so the tools measure their input first and refuse
// text that nests deeper than they can parse.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_TOOLS_INPUTNESTING_H
#define COAT_TOOLS_INPUTNESTING_H

#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <cstddef>
#include <optional>

namespace mlir::coat {

/// The offset of the first bracket at which `text` nests deeper than
/// `limit` levels, if it does. Brackets in string literals and in `//`
/// comments do not count, and the `>` of `->` closes nothing.
inline std::optional<size_t> findNestingBeyond(llvm::StringRef text,
                                               int limit) {
  int depth = 0;
  for (size_t i = 0, e = text.size(); i < e; ++i) {
    char c = text[i];
    switch (c) {
    case '"': // a string literal, with backslash escapes
      for (++i; i < e && text[i] != '"' && text[i] != '\n'; ++i)
        if (text[i] == '\\')
          ++i;
      break;
    case '/':
      if (i + 1 < e && text[i + 1] == '/')
        i = std::min(text.find('\n', i), e);
      break;
    case '(':
    case '[':
    case '{':
    case '<':
      if (++depth > limit)
        return i;
      break;
    case '>':
      if (i > 0 && text[i - 1] == '-')
        break;
      [[fallthrough]];
    case ')':
    case ']':
    case '}':
      if (depth > 0)
        --depth;
      break;
    default:
      break;
    }
  }
  return std::nullopt;
}

} // namespace mlir::coat

#endif // COAT_TOOLS_INPUTNESTING_H

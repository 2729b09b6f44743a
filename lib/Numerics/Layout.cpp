//===- Layout.cpp - Scale-tensor shapes derived from a granularity --------===//

#include "coat/Numerics/Layout.h"

namespace coat {

std::string toString(const Scaling &s) {
  switch (s.kind) {
  case ScalingKind::PerTensor:
    return "per_tensor";
  case ScalingKind::PerGroup:
    return "per_group<" + std::to_string(s.groupSize) + ">";
  case ScalingKind::FlatGroup:
    return "flat_group<" + std::to_string(s.groupSize) + ">";
  case ScalingKind::PerBlock:
    return "per_block<" + std::to_string(s.blockRows) + "x" +
           std::to_string(s.blockCols) + ">";
  }
  return "?";
}

namespace {
/// Reads the decimal integer at `text[pos]` (at most 18 digits).
std::optional<int64_t> readSize(const std::string &text, size_t &pos) {
  size_t start = pos;
  int64_t v = 0;
  while (pos < text.size() && pos - start < 18 && text[pos] >= '0' &&
         text[pos] <= '9')
    v = v * 10 + (text[pos++] - '0');
  if (pos == start)
    return std::nullopt;
  return v;
}
} // namespace

std::optional<Scaling> parseScaling(const std::string &text) {
  if (text == "per_tensor")
    return Scaling::perTensor();
  size_t open = text.find('<');
  if (open == std::string::npos || text.back() != '>')
    return std::nullopt;
  std::string kind = text.substr(0, open);
  size_t pos = open + 1;
  std::optional<int64_t> first = readSize(text, pos);
  if (!first)
    return std::nullopt;
  std::optional<Scaling> out;
  if (kind == "per_block" && pos < text.size() && text[pos] == 'x') {
    ++pos;
    if (std::optional<int64_t> second = readSize(text, pos))
      out = Scaling::perBlock(*first, *second);
  } else if (kind == "per_group") {
    out = Scaling::perGroup(*first);
  } else if (kind == "flat_group") {
    out = Scaling::flatGroup(*first);
  }
  if (pos + 1 != text.size())
    return std::nullopt;
  return out;
}

std::optional<std::string> verifyScaling(const Scaling &s) {
  switch (s.kind) {
  case ScalingKind::PerTensor:
    return std::nullopt;
  case ScalingKind::PerGroup:
  case ScalingKind::FlatGroup:
    if (s.groupSize <= 0)
      return "group size must be positive, got " + std::to_string(s.groupSize);
    return std::nullopt;
  case ScalingKind::PerBlock:
    if (s.blockRows <= 0 || s.blockCols <= 0)
      return "block sizes must be positive, got " + std::to_string(s.blockRows) +
             "x" + std::to_string(s.blockCols);
    return std::nullopt;
  }
  return "unknown scaling kind";
}

std::optional<std::string>
verifyScalingForShape(const std::vector<int64_t> &shape, const Scaling &s) {
  if (auto err = verifyScaling(s))
    return err;
  for (int64_t d : shape)
    if (d != kDynamicExtent && d <= 0)
      return "dimension sizes must be positive, got " + std::to_string(d);
  switch (s.kind) {
  case ScalingKind::PerTensor:
  case ScalingKind::FlatGroup:
    return std::nullopt;
  case ScalingKind::PerGroup: {
    if (shape.empty())
      return std::string("per_group scaling needs a tensor of rank >= 1");
    int64_t inner = shape.back();
    if (inner != kDynamicExtent && inner % s.groupSize != 0)
      return "group size " + std::to_string(s.groupSize) +
             " does not divide the innermost dimension " + std::to_string(inner);
    return std::nullopt;
  }
  case ScalingKind::PerBlock:
    if (shape.size() < 2)
      return std::string("per_block scaling needs a tensor of rank >= 2");
    return std::nullopt;
  }
  return std::nullopt;
}

std::vector<int64_t> scaleShape(const std::vector<int64_t> &shape,
                                const Scaling &s) {
  switch (s.kind) {
  case ScalingKind::PerTensor:
    return {};
  case ScalingKind::PerGroup: {
    std::vector<int64_t> out = shape;
    out.back() = out.back() == kDynamicExtent ? kDynamicExtent
                                              : out.back() / s.groupSize;
    return out;
  }
  case ScalingKind::FlatGroup: {
    int64_t n = 1;
    for (int64_t d : shape) {
      if (d == kDynamicExtent)
        return {kDynamicExtent};
      n *= d;
    }
    return {ceilDivExtent(n, s.groupSize)};
  }
  case ScalingKind::PerBlock: {
    std::vector<int64_t> out = shape;
    size_t r = out.size();
    out[r - 2] = ceilDivExtent(out[r - 2], s.blockRows);
    out[r - 1] = ceilDivExtent(out[r - 1], s.blockCols);
    return out;
  }
  }
  return {};
}

int64_t numScales(const std::vector<int64_t> &shape, const Scaling &s) {
  int64_t n = 1;
  for (int64_t d : scaleShape(shape, s))
    n *= d;
  return n;
}

} // namespace coat

//===- ManifestReader.h - field readers shared by the manifest parsers ----===//
//
// Private to lib/Runtime: ManifestParse.cpp (kernels) and ProgramParse.cpp
// (programs) read their JSON through it, so every message has one form,
// "manifest: <where>: <what>".
//
//===----------------------------------------------------------------------===//

#ifndef COAT_RUNTIME_MANIFESTREADER_H
#define COAT_RUNTIME_MANIFESTREADER_H

#include "Json.h"

#include "coat/Runtime/Manifest.h"

#include <cmath>
#include <cstdint>
#include <string>

namespace coat::rt {

/// Reads fields of one JSON object, accumulating the first error with a path
/// such as "kernels[0].launch.block".
struct Reader {
  using Value = json::Value;

  std::string &error;

  bool fail(const std::string &where, const std::string &what) {
    if (error.empty())
      error = "manifest: " + where + ": " + what;
    return false;
  }

  const Value *member(const Value &obj, const std::string &where,
                      const std::string &key, Value::Type type,
                      bool required) {
    const Value *v = obj.get(key);
    if (!v) {
      if (required)
        fail(where, "missing required field '" + key + "'");
      return nullptr;
    }
    if (v->type != type) {
      fail(where + "." + key, std::string("expected ") + json::typeName(type) +
                                  ", got " + json::typeName(v->type));
      return nullptr;
    }
    return v;
  }

  bool string(const Value &obj, const std::string &where,
              const std::string &key, std::string &out, bool required) {
    const Value *v = member(obj, where, key, Value::Type::String, required);
    if (v)
      out = v->string;
    return v || (!required && !obj.get(key));
  }

  bool integer(const Value &obj, const std::string &where,
               const std::string &key, int64_t &out, bool required,
               int64_t min) {
    const Value *v = member(obj, where, key, Value::Type::Number, required);
    if (!v)
      return !required && !obj.get(key);
    return toInt(*v, where + "." + key, out, min);
  }

  bool toInt(const Value &v, const std::string &where, int64_t &out,
             int64_t min) {
    if (!v.isNumber() || std::floor(v.number) != v.number ||
        v.number < double(min) || v.number > 9.0e15)
      return fail(where, "expected an integer >= " + std::to_string(min));
    out = static_cast<int64_t>(v.number);
    return true;
  }
};

/// Validates the "programs" section against the kernels already read
/// (ProgramParse.cpp).
bool parsePrograms(Reader &r, const json::Value &programs, Manifest &out);

} // namespace coat::rt

#endif // COAT_RUNTIME_MANIFESTREADER_H

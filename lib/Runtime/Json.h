//===- Json.h - A minimal JSON reader for the runtime ---------------------===//
//
// Just enough JSON (RFC 8259) to read manifest.json (and write parts of it back) without external
// dependencies and without exceptions (the main build may disable them).
//
//===----------------------------------------------------------------------===//

#ifndef COAT_RUNTIME_JSON_H
#define COAT_RUNTIME_JSON_H

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace coat::rt::json {

/// A parsed JSON value. Objects keep their members in document order.
struct Value {
  enum class Type { Null, Bool, Number, String, Array, Object };
  Type type = Type::Null;
  bool boolean = false;
  double number = 0;
  std::string string; ///< a string's text; a number's as written

  std::vector<Value> array;
  std::vector<std::pair<std::string, Value>> object;

  bool isNull() const { return type == Type::Null; }
  bool isBool() const { return type == Type::Bool; }
  bool isNumber() const { return type == Type::Number; }
  bool isString() const { return type == Type::String; }
  bool isArray() const { return type == Type::Array; }
  bool isObject() const { return type == Type::Object; }

  /// Member `key` of an object, or nullptr (also for non-objects).
  const Value *get(const std::string &key) const;
};

/// Parses `text` as one JSON document. On failure returns false and sets
/// `error` to a message with the line and column.
bool parse(const std::string &text, Value &out, std::string &error);

/// "object", "array", ... for messages.
const char *typeName(Value::Type t);

/// Appends `s` as a JSON string literal.
void quote(std::string &out, const std::string &s);

/// Appends `v` as compact JSON; numbers as they were written, so a document
/// passes through unchanged.
void write(std::string &out, const Value &v);

} // namespace coat::rt::json

#endif // COAT_RUNTIME_JSON_H

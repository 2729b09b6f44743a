//===- Json.cpp - A minimal JSON reader for the runtime -------------------===//

#include "Json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace coat::rt::json {

const Value *Value::get(const std::string &key) const {
  if (type != Type::Object)
    return nullptr;
  for (const auto &kv : object)
    if (kv.first == key)
      return &kv.second;
  return nullptr;
}

const char *typeName(Value::Type t) {
  switch (t) {
  case Value::Type::Null: return "null";
  case Value::Type::Bool: return "boolean";
  case Value::Type::Number: return "number";
  case Value::Type::String: return "string";
  case Value::Type::Array: return "array";
  case Value::Type::Object: return "object";
  }
  return "?";
}

namespace {

class Parser {
public:
  explicit Parser(const std::string &text) : s(text) {}

  bool parseDocument(Value &out, std::string &error) {
    skipWs();
    if (!parseValue(out, 0)) {
      error = message();
      return false;
    }
    skipWs();
    if (pos != s.size()) {
      fail("trailing characters after the JSON document");
      error = message();
      return false;
    }
    return true;
  }

private:
  // Deep enough for any manifest, shallow enough to never overflow the stack.
  static constexpr int kMaxDepth = 64;

  const std::string &s;
  size_t pos = 0;
  std::string err;
  size_t errPos = 0;

  bool fail(const std::string &what) {
    if (err.empty()) {
      err = what;
      errPos = pos;
    }
    return false;
  }

  std::string message() const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < errPos && i < s.size(); ++i) {
      if (s[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return "JSON parse error at line " + std::to_string(line) + ", column " +
           std::to_string(col) + ": " + err;
  }

  void skipWs() {
    while (pos < s.size() &&
           (s[pos] == ' ' || s[pos] == '\t' || s[pos] == '\n' || s[pos] == '\r'))
      ++pos;
  }

  bool literal(const char *word) {
    size_t len = std::strlen(word);
    if (s.compare(pos, len, word) != 0)
      return fail(std::string("invalid literal, expected '") + word + "'");
    pos += len;
    return true;
  }

  bool parseValue(Value &out, int depth) {
    if (depth > kMaxDepth)
      return fail("nesting deeper than 64 levels");
    if (pos >= s.size())
      return fail("unexpected end of input");
    char c = s[pos];
    switch (c) {
    case '{': return parseObject(out, depth);
    case '[': return parseArray(out, depth);
    case '"':
      out.type = Value::Type::String;
      return parseString(out.string);
    case 't':
      out.type = Value::Type::Bool;
      out.boolean = true;
      return literal("true");
    case 'f':
      out.type = Value::Type::Bool;
      out.boolean = false;
      return literal("false");
    case 'n':
      out.type = Value::Type::Null;
      return literal("null");
    default:
      if (c == '-' || (c >= '0' && c <= '9'))
        return parseNumber(out);
      return fail(std::string("unexpected character '") + c + "'");
    }
  }

  bool parseNumber(Value &out) {
    size_t start = pos;
    if (s[pos] == '-')
      ++pos;
    auto digits = [&] {
      size_t d = pos;
      while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9')
        ++pos;
      return pos - d;
    };
    if (pos < s.size() && s[pos] == '0')
      ++pos;
    else if (digits() == 0)
      return fail("invalid number");
    if (pos < s.size() && s[pos] == '.') {
      ++pos;
      if (digits() == 0)
        return fail("invalid number: digits expected after '.'");
    }
    if (pos < s.size() && (s[pos] == 'e' || s[pos] == 'E')) {
      ++pos;
      if (pos < s.size() && (s[pos] == '+' || s[pos] == '-'))
        ++pos;
      if (digits() == 0)
        return fail("invalid number: digits expected in the exponent");
    }
    std::string tok = s.substr(start, pos - start);
    out.type = Value::Type::Number;
    out.number = std::strtod(tok.c_str(), nullptr);
    out.string = std::move(tok);
    return true;
  }

  static void appendUtf8(std::string &o, unsigned cp) {
    if (cp < 0x80) {
      o += char(cp);
    } else if (cp < 0x800) {
      o += char(0xC0 | (cp >> 6));
      o += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      o += char(0xE0 | (cp >> 12));
      o += char(0x80 | ((cp >> 6) & 0x3F));
      o += char(0x80 | (cp & 0x3F));
    } else {
      o += char(0xF0 | (cp >> 18));
      o += char(0x80 | ((cp >> 12) & 0x3F));
      o += char(0x80 | ((cp >> 6) & 0x3F));
      o += char(0x80 | (cp & 0x3F));
    }
  }

  bool hex4(unsigned &v) {
    if (pos + 4 > s.size())
      return fail("truncated \\u escape");
    v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s[pos++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= unsigned(c - '0');
      else if (c >= 'a' && c <= 'f') v |= unsigned(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= unsigned(c - 'A' + 10);
      else return fail("invalid hex digit in \\u escape");
    }
    return true;
  }

  bool parseString(std::string &out) {
    ++pos; // opening quote
    out.clear();
    while (true) {
      if (pos >= s.size())
        return fail("unterminated string");
      char c = s[pos++];
      if (c == '"')
        return true;
      if (static_cast<unsigned char>(c) < 0x20)
        return fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos >= s.size())
        return fail("unterminated escape");
      char e = s[pos++];
      switch (e) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        unsigned cp;
        if (!hex4(cp))
          return false;
        if (cp >= 0xD800 && cp < 0xDC00) {
          unsigned lo;
          if (s.compare(pos, 2, "\\u") != 0)
            return fail("unpaired surrogate in \\u escape");
          pos += 2;
          if (!hex4(lo))
            return false;
          if (lo < 0xDC00 || lo >= 0xE000)
            return fail("invalid low surrogate in \\u escape");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        appendUtf8(out, cp);
        break;
      }
      default:
        return fail(std::string("invalid escape '\\") + e + "'");
      }
    }
  }

  bool parseArray(Value &out, int depth) {
    out.type = Value::Type::Array;
    ++pos;
    skipWs();
    if (pos < s.size() && s[pos] == ']') {
      ++pos;
      return true;
    }
    while (true) {
      out.array.emplace_back();
      skipWs();
      if (!parseValue(out.array.back(), depth + 1))
        return false;
      skipWs();
      if (pos >= s.size())
        return fail("unterminated array");
      if (s[pos] == ',') {
        ++pos;
        continue;
      }
      if (s[pos] == ']') {
        ++pos;
        return true;
      }
      return fail("expected ',' or ']' in array");
    }
  }

  bool parseObject(Value &out, int depth) {
    out.type = Value::Type::Object;
    ++pos;
    skipWs();
    if (pos < s.size() && s[pos] == '}') {
      ++pos;
      return true;
    }
    while (true) {
      skipWs();
      if (pos >= s.size() || s[pos] != '"')
        return fail("expected a string key in object");
      std::string key;
      if (!parseString(key))
        return false;
      skipWs();
      if (pos >= s.size() || s[pos] != ':')
        return fail("expected ':' after object key");
      ++pos;
      skipWs();
      out.object.emplace_back(std::move(key), Value());
      if (!parseValue(out.object.back().second, depth + 1))
        return false;
      skipWs();
      if (pos >= s.size())
        return fail("unterminated object");
      if (s[pos] == ',') {
        ++pos;
        continue;
      }
      if (s[pos] == '}') {
        ++pos;
        return true;
      }
      return fail("expected ',' or '}' in object");
    }
  }
};

} // namespace

void quote(std::string &out, const std::string &s) {
  out += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  out += '"';
}

void write(std::string &out, const Value &v) {
  switch (v.type) {
  case Value::Type::Null: out += "null"; return;
  case Value::Type::Bool: out += v.boolean ? "true" : "false"; return;
  case Value::Type::Number: out += v.string; return;
  case Value::Type::String: quote(out, v.string); return;
  case Value::Type::Array:
    out += '[';
    for (size_t i = 0; i < v.array.size(); ++i) {
      if (i)
        out += ',';
      write(out, v.array[i]);
    }
    out += ']';
    return;
  case Value::Type::Object:
    out += '{';
    for (size_t i = 0; i < v.object.size(); ++i) {
      if (i)
        out += ',';
      quote(out, v.object[i].first);
      out += ':';
      write(out, v.object[i].second);
    }
    out += '}';
    return;
  }
}

bool parse(const std::string &text, Value &out, std::string &error) {
  out = Value();
  Parser p(text);
  return p.parseDocument(out, error);
}

} // namespace coat::rt::json

// core/tokenizer/jinja_value.cpp — Python semantics of template values: truth, equality,
// str(), repr() and json.dumps().
#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "tokenizer/utf8.h"

namespace colibri::tokenizer::jinja {

Value Value::from_list(ListItems items) {
  Value v = of_type(Type::List);
  for (const Value &item : items) {
    v.depth = std::max(v.depth, item.depth);
    v.bytes += item.bytes + kItemBytes;
    v.holds_namespace = v.holds_namespace || item.is_namespace || item.holds_namespace;
  }
  ++v.depth;
  v.list = std::make_shared<ListItems>(std::move(items));
  return v;
}

Value Value::from_dict(DictItems items) {
  Value v = of_type(Type::Dict);
  for (const auto &[key, item] : items) {
    v.depth = std::max(v.depth, item.depth);
    v.bytes += key.size() + item.bytes + kItemBytes;
    v.holds_namespace = v.holds_namespace || item.is_namespace || item.holds_namespace;
  }
  ++v.depth;
  v.dict = std::make_shared<DictItems>(std::move(items));
  return v;
}

const Value *Value::find(const std::string &key) const {
  if (!dict) return nullptr;
  for (const auto &[k, v] : *dict)
    if (k == key) return &v;
  return nullptr;
}

bool truthy(const Value &v) {
  switch (v.type) {
    case Value::Type::Undefined:
    case Value::Type::None: return false;
    case Value::Type::Bool: return v.boolean;
    case Value::Type::Int: return v.integer != 0;
    case Value::Type::Float: return v.real != 0.0;
    case Value::Type::String: return !v.string.empty();
    case Value::Type::List: return !v.list->empty();
    case Value::Type::Dict: return !v.dict->empty();
  }
  return false;
}

namespace {
double as_double(const Value &v) {
  if (v.type == Value::Type::Float) return v.real;
  if (v.type == Value::Type::Bool) return v.boolean ? 1.0 : 0.0;
  return static_cast<double>(v.integer);
}
}  // namespace

bool equal(const Value &a, const Value &b) {
  if (a.is_number() && b.is_number()) {
    if (a.type != Value::Type::Float && b.type != Value::Type::Float) {
      const int64_t x = a.type == Value::Type::Bool ? a.boolean : a.integer;
      const int64_t y = b.type == Value::Type::Bool ? b.boolean : b.integer;
      return x == y;
    }
    return as_double(a) == as_double(b);
  }
  if (a.type != b.type) return false;
  switch (a.type) {
    case Value::Type::Undefined:
    case Value::Type::None: return true;
    case Value::Type::String: return a.string == b.string;
    case Value::Type::List:
      if (a.list->size() != b.list->size()) return false;
      for (size_t i = 0; i < a.list->size(); ++i)
        if (!equal((*a.list)[i], (*b.list)[i])) return false;
      return true;
    case Value::Type::Dict:
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto &[k, v] : *a.dict) {
        const Value *other = b.find(k);
        if (other == nullptr || !equal(v, *other)) return false;
      }
      return true;
    default: return false;
  }
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0.0) return std::signbit(d) ? "-0.0" : "0.0";
  // The shortest digits that read back as the same double (Python's repr rule).
  char buffer[40];
  int precision = 1;
  for (; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof buffer, "%.*e", precision - 1, d);
    if (std::strtod(buffer, nullptr) == d) break;
  }
  std::string text(buffer);  // "-d.ddde+XX"
  const size_t e = text.find('e');
  const int exponent = std::atoi(text.c_str() + e + 1);
  std::string sign = text[0] == '-' ? "-" : "";
  std::string digits;
  for (size_t i = sign.size(); i < e; ++i)
    if (text[i] != '.') digits.push_back(text[i]);
  if (exponent < -4 || exponent >= 16) {
    std::string mantissa = digits.substr(0, 1);
    if (digits.size() > 1) {
      mantissa.push_back('.');
      mantissa.append(digits, 1, std::string::npos);
    }
    char exp_text[16];
    std::snprintf(exp_text, sizeof exp_text, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return sign + mantissa + exp_text;
  }
  if (exponent < 0) return sign + "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  const auto int_digits = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= int_digits) return sign + digits + std::string(int_digits - digits.size(), '0') + ".0";
  return sign + digits.substr(0, int_digits) + "." + digits.substr(int_digits);
}

namespace {

std::string repr_string(const std::string &s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(quote)) out += std::string("\\") + quote;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  out.push_back(quote);
  return out;
}

void json_string(const std::string &s, std::string *out) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "\\u%04x", c);
          *out += hex;
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

struct JsonWriter {
  int64_t indent;
  bool sort_keys;
  uint64_t max_bytes;
  std::string *out;
  bool too_large = false;

  bool newline(uint64_t level) {
    if (indent < 0) return true;
    // Checked before appending: indent * level spaces could be anything a template asks for.
    const uint64_t spaces = static_cast<uint64_t>(indent) * level;
    if (static_cast<uint64_t>(indent) > max_bytes || spaces > max_bytes || out->size() + 1 + spaces > max_bytes) {
      too_large = true;
      return false;
    }
    out->push_back('\n');
    out->append(static_cast<size_t>(spaces), ' ');
    return true;
  }
  bool value(const Value &v, uint64_t depth);
};

bool JsonWriter::value(const Value &v, uint64_t depth) {
  if (out->size() > max_bytes) {
    too_large = true;
    return false;
  }
  const char *item_separator = indent < 0 ? ", " : ",";
  switch (v.type) {
    case Value::Type::Undefined: return false;
    case Value::Type::None: *out += "null"; return true;
    case Value::Type::Bool: *out += v.boolean ? "true" : "false"; return true;
    case Value::Type::Int: *out += std::to_string(v.integer); return true;
    case Value::Type::Float:
      if (std::isnan(v.real)) *out += "NaN";
      else if (std::isinf(v.real)) *out += v.real > 0 ? "Infinity" : "-Infinity";
      else *out += float_repr(v.real);
      return true;
    case Value::Type::String: json_string(v.string, out); return true;
    case Value::Type::List:
      if (v.list->empty()) {
        *out += "[]";
        return true;
      }
      out->push_back('[');
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i) *out += item_separator;
        if (!newline(depth + 1) || !value((*v.list)[i], depth + 1)) return false;
      }
      if (!newline(depth)) return false;
      out->push_back(']');
      return true;
    case Value::Type::Dict: {
      if (v.dict->empty()) {
        *out += "{}";
        return true;
      }
      std::vector<const std::pair<std::string, Value> *> items;
      for (const auto &item : *v.dict) items.push_back(&item);
      if (sort_keys)
        std::sort(items.begin(), items.end(), [](auto *a, auto *b) { return a->first < b->first; });
      out->push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) *out += item_separator;
        if (!newline(depth + 1)) return false;
        json_string(items[i]->first, out);
        *out += ": ";
        if (!value(items[i]->second, depth + 1)) return false;
      }
      if (!newline(depth)) return false;
      out->push_back('}');
      return true;
    }
  }
  return false;
}

}  // namespace

std::string to_repr(const Value &v) {
  switch (v.type) {
    case Value::Type::String: return repr_string(v.string);
    case Value::Type::List: {
      std::string out = "[";
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i) out += ", ";
        out += to_repr((*v.list)[i]);
      }
      return out + "]";
    }
    case Value::Type::Dict: {
      if (v.is_namespace) return "<Namespace>";
      std::string out = "{";
      bool first = true;
      for (const auto &[k, item] : *v.dict) {
        if (!first) out += ", ";
        first = false;
        out += repr_string(k) + ": " + to_repr(item);
      }
      return out + "}";
    }
    default: return to_str(v);
  }
}

std::string to_str(const Value &v) {
  switch (v.type) {
    case Value::Type::Undefined: return "";
    case Value::Type::None: return "None";
    case Value::Type::Bool: return v.boolean ? "True" : "False";
    case Value::Type::Int: return std::to_string(v.integer);
    case Value::Type::Float: return float_repr(v.real);
    case Value::Type::String: return v.string;
    default: return to_repr(v);
  }
}

bool to_json(const Value &v, int64_t indent, bool sort_keys, uint64_t max_bytes, std::string *out, bool *too_large) {
  out->clear();
  JsonWriter writer{indent, sort_keys, max_bytes, out};
  const bool ok = writer.value(v, 0) && out->size() <= max_bytes;
  *too_large = writer.too_large || out->size() > max_bytes;
  return ok;
}

const char *type_name(const Value &v) {
  switch (v.type) {
    case Value::Type::Undefined: return "Undefined";
    case Value::Type::None: return "NoneType";
    case Value::Type::Bool: return "bool";
    case Value::Type::Int: return "int";
    case Value::Type::Float: return "float";
    case Value::Type::String: return "str";
    case Value::Type::List: return "list";
    case Value::Type::Dict: return v.is_namespace ? "Namespace" : "dict";
  }
  return "?";
}

}  // namespace colibri::tokenizer::jinja

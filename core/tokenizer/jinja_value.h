// core/tokenizer/jinja_value.h — the values a chat template computes with.
//
// Jinja evaluates Python objects; chat templates only need Python's None, bool, int, float,
// str, list (and tuple), dict, plus Jinja's Undefined. Lists and dicts are shared by
// reference like Python's (a namespace() is a dict whose attributes can be set). Dicts keep
// insertion order, as Python's do, because tojson and iteration show it.
//
// Every value knows its nesting depth and its size in bytes (set when it is made), so the
// renderer can bound both (ChatTemplateLimits) before anything walks a value recursively.
// Lists and dicts never change after they are made; only a namespace()'s attributes are
// assigned, and the renderer refuses to put a namespace inside a list, dict or namespace,
// so the recorded depth and size stay true and no value can contain itself.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace colibri::tokenizer::jinja {

struct Value;
using ListItems = std::vector<Value>;
using DictItems = std::vector<std::pair<std::string, Value>>;

struct Value {
  enum class Type { Undefined, None, Bool, Int, Float, String, List, Dict };
  Type type = Type::Undefined;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0.0;
  std::string string;
  std::shared_ptr<ListItems> list;
  std::shared_ptr<DictItems> dict;
  bool is_namespace = false;  // a namespace(): attributes may be assigned
  bool holds_namespace = false;  // a list or dict with a namespace among its items
  uint32_t depth = 0;  // 0 for a scalar; a list or dict: 1 + its deepest item's
  uint64_t bytes = 0;  // a string's size; a list or dict: its items' (and keys') bytes + kItemBytes each
  std::string undefined_name;  // for "'x' is undefined" messages

  static Value undefined(std::string name = {}) {
    Value v;
    v.undefined_name = std::move(name);
    return v;
  }
  static Value none() { return of_type(Type::None); }
  static Value from_bool(bool b) {
    Value v = of_type(Type::Bool);
    v.boolean = b;
    return v;
  }
  static Value from_int(int64_t i) {
    Value v = of_type(Type::Int);
    v.integer = i;
    return v;
  }
  static Value from_float(double d) {
    Value v = of_type(Type::Float);
    v.real = d;
    return v;
  }
  static Value from_string(std::string s) {
    Value v = of_type(Type::String);
    v.string = std::move(s);
    v.bytes = v.string.size();
    return v;
  }
  static Value from_list(ListItems items);
  static Value from_dict(DictItems items);

  bool is_undefined() const { return type == Type::Undefined; }
  bool is_none() const { return type == Type::None; }
  bool is_string() const { return type == Type::String; }
  bool is_number() const { return type == Type::Int || type == Type::Float || type == Type::Bool; }
  bool is_list() const { return type == Type::List; }
  bool is_dict() const { return type == Type::Dict; }

  // A dict entry, or nullptr.
  const Value *find(const std::string &key) const;

 private:
  static Value of_type(Type t) {
    Value v;
    v.type = t;
    return v;
  }
};

// What each item of a list or dict counts in Value::bytes besides its own contents.
inline constexpr uint64_t kItemBytes = sizeof(Value);

// Python truthiness (Undefined is false).
bool truthy(const Value &v);
// Python ==, with 1 == 1.0 == True; Undefined equals only Undefined.
bool equal(const Value &a, const Value &b);
// Python str(): what {{ value }} prints (Undefined prints nothing).
std::string to_str(const Value &v);
// Python repr(): how items print inside a printed list or dict.
std::string to_repr(const Value &v);
// json.dumps(v, ensure_ascii=False, indent=indent (negative: none), sort_keys=sort_keys):
// transformers' own tojson filter. Returns false for a value JSON cannot hold, and, with
// *too_large set, when the text would pass max_bytes (it stops there).
bool to_json(const Value &v, int64_t indent, bool sort_keys, uint64_t max_bytes, std::string *out, bool *too_large);
// Python's repr of a float ("1.0", "0.30000000000000004", "1e+20").
std::string float_repr(double d);
const char *type_name(const Value &v);

}  // namespace colibri::tokenizer::jinja

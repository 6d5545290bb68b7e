// core/tokenizer/jinja_eval.cpp — the interpreter of the chat-template subset.
//
// Semantics are Jinja 2 (3.1.6) in transformers' ImmutableSandboxedEnvironment: Python
// values and operators, Undefined that prints as nothing and is false, but fails on
// attribute access or arithmetic; a for loop runs each iteration in its own scope (a `set`
// inside does not survive the iteration: templates use namespace() for that); tojson is
// transformers' json.dumps(ensure_ascii=False).
#include "tokenizer/jinja_eval.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utf8proc.h>

#include "tokenizer/utf8.h"
#include "util/strings.h"

namespace colibri::tokenizer::jinja {

namespace {

std::vector<uint32_t> code_points(const std::string &s) {
  std::vector<uint32_t> out;
  for (size_t pos = 0; pos < s.size();) {
    size_t n = 0;
    out.push_back(utf8_decode(s, pos, &n));
    pos += n;
  }
  return out;
}

std::string from_code_points(const std::vector<uint32_t> &cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) utf8_append(&out, cps[i]);
  return out;
}

// Python str.strip / lstrip / rstrip: whitespace, or any of `chars`.
std::string strip(const std::string &s, const Value *chars, bool left, bool right) {
  const std::vector<uint32_t> cps = code_points(s);
  std::vector<uint32_t> set;
  if (chars && chars->is_string()) set = code_points(chars->string);
  auto stripped = [&](uint32_t c) {
    if (chars && chars->is_string()) return std::find(set.begin(), set.end(), c) != set.end();
    return is_python_space(c);
  };
  size_t begin = 0;
  size_t end = cps.size();
  if (left)
    while (begin < end && stripped(cps[begin])) ++begin;
  if (right)
    while (end > begin && stripped(cps[end - 1])) --end;
  return from_code_points(cps, begin, end);
}

std::string map_case(const std::string &s, int mode /* 0 lower, 1 upper, 2 title, 3 capitalize */) {
  std::string out;
  bool previous_cased = false;
  bool first = true;
  for (uint32_t c : code_points(s)) {
    const auto cp = static_cast<utf8proc_int32_t>(c);
    utf8proc_int32_t mapped = cp;
    if (mode == 0) mapped = utf8proc_tolower(cp);
    else if (mode == 1) mapped = utf8proc_toupper(cp);
    else if (mode == 2) mapped = previous_cased ? utf8proc_tolower(cp) : utf8proc_totitle(cp);
    else mapped = first ? utf8proc_totitle(cp) : utf8proc_tolower(cp);
    // Python's title(): a letter starts a word when the previous character is not cased.
    const utf8proc_category_t category = utf8proc_category(cp);
    previous_cased = category == UTF8PROC_CATEGORY_LU || category == UTF8PROC_CATEGORY_LL ||
                     category == UTF8PROC_CATEGORY_LT;
    first = false;
    utf8_append(&out, static_cast<uint32_t>(mapped));
  }
  return out;
}

std::string replace_all(const std::string &s, const std::string &from, const std::string &to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between characters
    const std::vector<uint32_t> cps = code_points(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (i < cps.size()) utf8_append(&out, cps[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  for (size_t hit = s.find(from); hit != std::string::npos && (count < 0 || done < count); hit = s.find(from, pos)) {
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::vector<std::string> split(const std::string &s, const Value *separator, int64_t max_split) {
  std::vector<std::string> out;
  if (separator == nullptr || separator->is_none()) {
    // Python str.split(): runs of whitespace, no empty strings.
    const std::vector<uint32_t> cps = code_points(s);
    size_t i = 0;
    int64_t splits = 0;
    while (i < cps.size()) {
      while (i < cps.size() && is_python_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (max_split >= 0 && splits >= max_split) {
        out.push_back(from_code_points(cps, i, cps.size()));  // the rest, trailing spaces kept
        break;
      }
      size_t j = i;
      while (j < cps.size() && !is_python_space(cps[j])) ++j;
      out.push_back(from_code_points(cps, i, j));
      ++splits;
      i = j;
    }
    return out;
  }
  const std::string &sep = separator->string;
  size_t pos = 0;
  int64_t splits = 0;
  for (size_t hit = s.find(sep); hit != std::string::npos && (max_split < 0 || splits < max_split);
       hit = s.find(sep, pos)) {
    out.push_back(s.substr(pos, hit - pos));
    pos = hit + sep.size();
    ++splits;
  }
  out.push_back(s.substr(pos));
  return out;
}

// Python slice indices for a sequence of `size` items.
std::vector<size_t> slice_indices(int64_t size, const Value *start, const Value *stop, const Value *step_value) {
  const int64_t step = step_value && !step_value->is_none() ? step_value->integer : 1;
  auto clamp = [&](const Value *v, int64_t fallback) -> int64_t {
    if (v == nullptr || v->is_none()) return fallback;
    int64_t i = v->integer;
    if (i < 0) i += size;
    if (step > 0) return std::clamp<int64_t>(i, 0, size);
    return std::clamp<int64_t>(i, -1, size - 1);
  };
  std::vector<size_t> out;
  if (step > 0) {
    const int64_t b = clamp(start, 0);
    const int64_t e = clamp(stop, size);
    for (int64_t i = b; i < e; i += step) out.push_back(static_cast<size_t>(i));
  } else {
    const int64_t b = clamp(start, size - 1);
    const int64_t e = clamp(stop, -1);
    for (int64_t i = b; i > e; i += step) out.push_back(static_cast<size_t>(i));
  }
  return out;
}

class Renderer {
 public:
  explicit Renderer(const std::vector<std::pair<std::string, Value>> &globals) { scopes_.push_back(globals); }

  Error run(const Body &body, std::string *out) {
    out_ = out;
    return exec(body);
  }

 private:
  enum class Flow { Normal, Break, Continue };
  using Scope = std::vector<std::pair<std::string, Value>>;

  static Error fail(int line, const std::string &message) {
    return make_error(ErrorKind::InvalidArgument, util::strprintf("chat template: line %d: %s", line, message.c_str()));
  }
  static Error undefined_error(int line, const Value &v) {
    if (v.undefined_name.empty()) return fail(line, "a value is undefined");
    return fail(line, v.undefined_name + " is undefined");
  }

  Value lookup(const std::string &name) const {
    for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope)
      for (auto it = scope->rbegin(); it != scope->rend(); ++it)
        if (it->first == name) return it->second;
    return Value::undefined("'" + name + "'");
  }
  void assign(const std::string &name, Value value) {
    Scope &scope = scopes_.back();
    for (auto &[k, v] : scope) {
      if (k == name) {
        v = std::move(value);
        return;
      }
    }
    scope.emplace_back(name, std::move(value));
  }

  Error exec(const Body &body) {
    for (const StmtPtr &stmt : body) {
      if (Error e = exec(*stmt)) return e;
      if (flow_ != Flow::Normal) return {};
    }
    return {};
  }

  Error exec(const Stmt &stmt) {
    switch (stmt.kind) {
      case Stmt::Kind::Text: *out_ += stmt.text; return {};
      case Stmt::Kind::Output: {
        Value v;
        if (Error e = eval(*stmt.expr, &v)) return e;
        *out_ += to_str(v);
        return {};
      }
      case Stmt::Kind::If:
        for (const auto &[condition, branch] : stmt.branches) {
          Value v;
          if (Error e = eval(*condition, &v)) return e;
          if (truthy(v)) return exec(branch);
        }
        return exec(stmt.else_body);
      case Stmt::Kind::For: return exec_for(stmt);
      case Stmt::Kind::Set: {
        Value v;
        if (Error e = eval(*stmt.expr, &v)) return e;
        if (stmt.set_attribute.empty()) {
          assign(stmt.targets[0], std::move(v));
          return {};
        }
        Value target = lookup(stmt.targets[0]);
        if (!target.is_dict() || !target.is_namespace)
          return fail(stmt.line, "cannot assign attribute on non-namespace object '" + stmt.targets[0] + "'");
        for (auto &[k, existing] : *target.dict) {
          if (k == stmt.set_attribute) {
            existing = std::move(v);
            return {};
          }
        }
        target.dict->emplace_back(stmt.set_attribute, std::move(v));
        return {};
      }
      case Stmt::Kind::SetBlock: {
        std::string captured;
        std::string *saved = out_;
        out_ = &captured;
        Error e = exec(stmt.body);
        out_ = saved;
        if (e) return e;
        assign(stmt.targets[0], Value::from_string(std::move(captured)));
        return {};
      }
      case Stmt::Kind::Break: flow_ = Flow::Break; return {};
      case Stmt::Kind::Continue: flow_ = Flow::Continue; return {};
    }
    return {};
  }

  Error iterable_items(const Value &v, int line, std::vector<Value> *items) {
    items->clear();
    switch (v.type) {
      case Value::Type::Undefined: return {};  // iterating Undefined yields nothing
      case Value::Type::List: *items = *v.list; return {};
      case Value::Type::Dict:
        for (const auto &[k, item] : *v.dict) items->push_back(Value::from_string(k));
        return {};
      case Value::Type::String:
        for (uint32_t c : code_points(v.string)) {
          std::string s;
          utf8_append(&s, c);
          items->push_back(Value::from_string(std::move(s)));
        }
        return {};
      default: return fail(line, std::string("'") + type_name(v) + "' object is not iterable");
    }
  }

  Error bind_targets(const Stmt &stmt, const Value &item) {
    if (stmt.targets.size() == 1) {
      assign(stmt.targets[0], item);
      return {};
    }
    std::vector<Value> parts;
    if (Error e = iterable_items(item, stmt.line, &parts)) return e;
    if (parts.size() != stmt.targets.size())
      return fail(stmt.line, util::strprintf("cannot unpack %zu values into %zu loop variables", parts.size(),
                                             stmt.targets.size()));
    for (size_t i = 0; i < parts.size(); ++i) assign(stmt.targets[i], parts[i]);
    return {};
  }

  Error exec_for(const Stmt &stmt) {
    Value iterable;
    if (Error e = eval(*stmt.expr, &iterable)) return e;
    std::vector<Value> all;
    if (Error e = iterable_items(iterable, stmt.line, &all)) return e;
    std::vector<Value> items;
    if (stmt.filter) {
      // `for x in xs if cond`: the condition sees the loop variables, not `loop`.
      for (const Value &item : all) {
        scopes_.emplace_back();
        Error e = bind_targets(stmt, item);
        Value keep;
        if (!e) e = eval(*stmt.filter, &keep);
        scopes_.pop_back();
        if (e) return e;
        if (truthy(keep)) items.push_back(item);
      }
    } else {
      items = std::move(all);
    }
    const auto length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      scopes_.emplace_back();
      DictItems loop = {
          {"index", Value::from_int(i + 1)},
          {"index0", Value::from_int(i)},
          {"revindex", Value::from_int(length - i)},
          {"revindex0", Value::from_int(length - i - 1)},
          {"first", Value::from_bool(i == 0)},
          {"last", Value::from_bool(i == length - 1)},
          {"length", Value::from_int(length)},
          {"depth", Value::from_int(1)},
          {"depth0", Value::from_int(0)},
          {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("'loop.previtem'")},
          {"nextitem", i + 1 < length ? items[static_cast<size_t>(i + 1)] : Value::undefined("'loop.nextitem'")},
      };
      assign("loop", Value::from_dict(std::move(loop)));
      Error e = bind_targets(stmt, items[static_cast<size_t>(i)]);
      if (!e) e = exec(stmt.body);
      scopes_.pop_back();
      if (e) return e;
      if (flow_ == Flow::Break) {
        flow_ = Flow::Normal;
        break;
      }
      flow_ = Flow::Normal;
    }
    if (length == 0) return exec(stmt.else_body);
    return {};
  }

  // ---- expressions ----

  Error eval(const Expr &expr, Value *out) {
    switch (expr.kind) {
      case Expr::Kind::Literal: *out = expr.literal; return {};
      case Expr::Kind::Name: *out = lookup(expr.name); return {};
      case Expr::Kind::GetAttr: {
        Value object;
        if (Error e = eval(*expr.a, &object)) return e;
        if (object.is_undefined()) return undefined_error(expr.line, object);
        const Value *found = object.is_dict() ? object.find(expr.name) : nullptr;
        *out = found ? *found
                     : Value::undefined(std::string("'") + type_name(object) + " object' has no attribute '" +
                                        expr.name + "', so it");
        return {};
      }
      case Expr::Kind::GetItem: {
        Value object, key;
        if (Error e = eval(*expr.a, &object)) return e;
        if (Error e = eval(*expr.b, &key)) return e;
        return get_item(expr.line, object, key, out);
      }
      case Expr::Kind::Slice: return eval_slice(expr, out);
      case Expr::Kind::Call: return eval_call(expr, out);
      case Expr::Kind::Filter: return eval_filter(expr, out);
      case Expr::Kind::Test: {
        bool result = false;
        if (Error e = eval_test(expr, &result)) return e;
        *out = Value::from_bool(expr.negated ? !result : result);
        return {};
      }
      case Expr::Kind::Unary: {
        Value v;
        if (Error e = eval(*expr.a, &v)) return e;
        if (expr.name == "not") {
          *out = Value::from_bool(!truthy(v));
          return {};
        }
        if (v.type == Value::Type::Float) {
          *out = Value::from_float(expr.name == "-" ? -v.real : v.real);
          return {};
        }
        if (v.type == Value::Type::Int || v.type == Value::Type::Bool) {
          const int64_t i = v.type == Value::Type::Bool ? v.boolean : v.integer;
          *out = Value::from_int(expr.name == "-" ? -i : i);
          return {};
        }
        if (v.is_undefined()) return undefined_error(expr.line, v);
        return fail(expr.line, "bad operand type for unary " + expr.name + ": '" + type_name(v) + "'");
      }
      case Expr::Kind::Binary: return eval_binary(expr, out);
      case Expr::Kind::Conditional: {
        Value condition;
        if (Error e = eval(*expr.b, &condition)) return e;
        if (truthy(condition)) return eval(*expr.a, out);
        if (expr.c) return eval(*expr.c, out);
        *out = Value::undefined();
        return {};
      }
      case Expr::Kind::ListLiteral: {
        ListItems items;
        for (const ExprPtr &item : expr.args) {
          Value v;
          if (Error e = eval(*item, &v)) return e;
          items.push_back(std::move(v));
        }
        *out = Value::from_list(std::move(items));
        return {};
      }
      case Expr::Kind::DictLiteral: {
        DictItems items;
        for (const auto &[key_expr, value_expr] : expr.items) {
          Value key, value;
          if (Error e = eval(*key_expr, &key)) return e;
          if (Error e = eval(*value_expr, &value)) return e;
          if (!key.is_string()) return fail(expr.line, "only string keys are supported in dict literals");
          auto it = std::find_if(items.begin(), items.end(), [&](const auto &kv) { return kv.first == key.string; });
          if (it != items.end()) it->second = std::move(value);
          else items.emplace_back(key.string, std::move(value));
        }
        *out = Value::from_dict(std::move(items));
        return {};
      }
    }
    return fail(expr.line, "unknown expression");
  }

  Error get_item(int line, const Value &object, const Value &key, Value *out) {
    if (object.is_undefined()) return undefined_error(line, object);
    if (object.is_dict()) {
      const Value *found = key.is_string() ? object.find(key.string) : nullptr;
      *out = found ? *found : Value::undefined("'dict object' has no attribute " + to_repr(key) + ", so it");
      return {};
    }
    if ((object.is_list() || object.is_string()) && (key.type == Value::Type::Int || key.type == Value::Type::Bool)) {
      int64_t index = key.type == Value::Type::Bool ? key.boolean : key.integer;
      if (object.is_list()) {
        const auto size = static_cast<int64_t>(object.list->size());
        if (index < 0) index += size;
        *out = index >= 0 && index < size ? (*object.list)[static_cast<size_t>(index)]
                                          : Value::undefined("list index out of range, so the item");
        return {};
      }
      const std::vector<uint32_t> cps = code_points(object.string);
      const auto size = static_cast<int64_t>(cps.size());
      if (index < 0) index += size;
      if (index < 0 || index >= size) {
        *out = Value::undefined("string index out of range, so the item");
        return {};
      }
      *out = Value::from_string(from_code_points(cps, static_cast<size_t>(index), static_cast<size_t>(index) + 1));
      return {};
    }
    *out = Value::undefined(std::string("'") + type_name(object) + " object' has no item " + to_repr(key) + ", so it");
    return {};
  }

  Error eval_slice(const Expr &expr, Value *out) {
    Value object, parts[3];
    if (Error e = eval(*expr.a, &object)) return e;
    const ExprPtr *bounds[3] = {&expr.b, &expr.c, &expr.d};
    for (int i = 0; i < 3; ++i) {
      if (!*bounds[i]) {
        parts[i] = Value::none();
        continue;
      }
      if (Error e = eval(**bounds[i], &parts[i])) return e;
      if (!parts[i].is_none() && parts[i].type != Value::Type::Int)
        return fail(expr.line, "slice indices must be integers or None");
    }
    if (!parts[2].is_none() && parts[2].integer == 0) return fail(expr.line, "slice step cannot be zero");
    if (object.is_list()) {
      ListItems items;
      for (size_t i : slice_indices(static_cast<int64_t>(object.list->size()), &parts[0], &parts[1], &parts[2]))
        items.push_back((*object.list)[i]);
      *out = Value::from_list(std::move(items));
      return {};
    }
    if (object.is_string()) {
      const std::vector<uint32_t> cps = code_points(object.string);
      std::string s;
      for (size_t i : slice_indices(static_cast<int64_t>(cps.size()), &parts[0], &parts[1], &parts[2]))
        utf8_append(&s, cps[i]);
      *out = Value::from_string(std::move(s));
      return {};
    }
    if (object.is_undefined()) return undefined_error(expr.line, object);
    return fail(expr.line, std::string("'") + type_name(object) + "' object cannot be sliced");
  }

  Error eval_arguments(const Expr &expr, std::vector<Value> *args, std::vector<std::pair<std::string, Value>> *kwargs) {
    for (const ExprPtr &arg : expr.args) {
      Value v;
      if (Error e = eval(*arg, &v)) return e;
      args->push_back(std::move(v));
    }
    for (const auto &[name, arg] : expr.kwargs) {
      Value v;
      if (Error e = eval(*arg, &v)) return e;
      kwargs->emplace_back(name, std::move(v));
    }
    return {};
  }

  // Argument `index` by position or by keyword `name`, or nullptr.
  static const Value *argument(const std::vector<Value> &args, const std::vector<std::pair<std::string, Value>> &kwargs,
                               size_t index, const char *name) {
    if (index < args.size()) return &args[index];
    for (const auto &[k, v] : kwargs)
      if (k == name) return &v;
    return nullptr;
  }

  Error eval_call(const Expr &expr, Value *out) {
    std::vector<Value> args;
    std::vector<std::pair<std::string, Value>> kwargs;
    if (expr.a->kind == Expr::Kind::Name) {
      if (Error e = eval_arguments(expr, &args, &kwargs)) return e;
      const std::string &fn = expr.a->name;
      if (fn == "raise_exception") {
        // transformers raises TemplateError(message): the caller gets exactly the message.
        return make_error(ErrorKind::InvalidArgument, args.empty() ? std::string() : to_str(args[0]));
      }
      if (fn == "range") {
        int64_t start = 0, stop = 0, step = 1;
        for (const Value &a : args)
          if (a.type != Value::Type::Int) return fail(expr.line, "range() arguments must be integers");
        if (args.size() == 1) stop = args[0].integer;
        else if (args.size() >= 2) start = args[0].integer, stop = args[1].integer;
        if (args.size() == 3) step = args[2].integer;
        if (args.empty() || args.size() > 3 || step == 0) return fail(expr.line, "range() takes 1 to 3 integers, step != 0");
        if ((stop - start) / step > 100000) return fail(expr.line, "range() longer than 100000 items");
        ListItems items;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) items.push_back(Value::from_int(i));
        *out = Value::from_list(std::move(items));
        return {};
      }
      // namespace(...) and dict(...): keyword arguments (and an optional dict) become entries.
      DictItems entries;
      if (!args.empty()) {
        if (args.size() > 1 || !args[0].is_dict()) return fail(expr.line, fn + "() takes keyword arguments or one dict");
        entries = *args[0].dict;
      }
      for (auto &[k, v] : kwargs) entries.emplace_back(k, std::move(v));
      *out = Value::from_dict(std::move(entries));
      out->is_namespace = fn == "namespace";
      return {};
    }
    // A method: expr.a is GetAttr(object, method).
    Value object;
    if (Error e = eval(*expr.a->a, &object)) return e;
    if (Error e = eval_arguments(expr, &args, &kwargs)) return e;
    return call_method(expr.line, object, expr.a->name, args, kwargs, out);
  }

  Error call_method(int line, const Value &object, const std::string &method, const std::vector<Value> &args,
                    const std::vector<std::pair<std::string, Value>> &kwargs, Value *out) {
    if (object.is_undefined()) return undefined_error(line, object);
    auto no_method = [&] {
      return fail(line, std::string("'") + type_name(object) + "' object has no attribute '" + method + "'");
    };
    if (object.is_string()) {
      const std::string &s = object.string;
      const Value *a0 = argument(args, kwargs, 0, method == "split" ? "sep" : "chars");
      if (method == "strip") *out = Value::from_string(strip(s, a0, true, true));
      else if (method == "lstrip") *out = Value::from_string(strip(s, a0, true, false));
      else if (method == "rstrip") *out = Value::from_string(strip(s, a0, false, true));
      else if (method == "upper") *out = Value::from_string(map_case(s, 1));
      else if (method == "lower") *out = Value::from_string(map_case(s, 0));
      else if (method == "title") *out = Value::from_string(map_case(s, 2));
      else if (method == "capitalize") *out = Value::from_string(map_case(s, 3));
      else if (method == "split") {
        const Value *max_split = argument(args, kwargs, 1, "maxsplit");
        if (a0 && !a0->is_none() && (!a0->is_string() || a0->string.empty()))
          return fail(line, "split() separator must be a non-empty string or None");
        ListItems parts;
        for (std::string &part : split(s, a0, max_split ? max_split->integer : -1))
          parts.push_back(Value::from_string(std::move(part)));
        *out = Value::from_list(std::move(parts));
      } else if (method == "startswith" || method == "endswith") {
        const Value *what = argument(args, kwargs, 0, "prefix");
        std::vector<std::string> candidates;
        if (what && what->is_string()) candidates.push_back(what->string);
        else if (what && what->is_list())
          for (const Value &v : *what->list) candidates.push_back(v.string);
        else return fail(line, method + "() needs a string or a tuple of strings");
        bool result = false;
        for (const std::string &c : candidates) {
          if (c.size() > s.size()) continue;
          result = result || (method == "startswith" ? s.compare(0, c.size(), c) == 0
                                                     : s.compare(s.size() - c.size(), c.size(), c) == 0);
        }
        *out = Value::from_bool(result);
      } else if (method == "replace") {
        const Value *from = argument(args, kwargs, 0, "old");
        const Value *to = argument(args, kwargs, 1, "new");
        const Value *count = argument(args, kwargs, 2, "count");
        if (!from || !to || !from->is_string() || !to->is_string()) return fail(line, "replace() needs two strings");
        *out = Value::from_string(replace_all(s, from->string, to->string, count ? count->integer : -1));
      } else {
        return no_method();
      }
      return {};
    }
    if (object.is_dict()) {
      if (method == "items" || method == "keys" || method == "values") {
        ListItems items;
        for (const auto &[k, v] : *object.dict) {
          if (method == "items") items.push_back(Value::from_list({Value::from_string(k), v}));
          else if (method == "keys") items.push_back(Value::from_string(k));
          else items.push_back(v);
        }
        *out = Value::from_list(std::move(items));
        return {};
      }
      if (method == "get") {
        const Value *key = argument(args, kwargs, 0, "key");
        const Value *fallback = argument(args, kwargs, 1, "default");
        const Value *found = key && key->is_string() ? object.find(key->string) : nullptr;
        *out = found ? *found : fallback ? *fallback : Value::none();
        return {};
      }
    }
    return no_method();
  }

  Error eval_filter(const Expr &expr, Value *out) {
    Value v;
    if (Error e = eval(*expr.a, &v)) return e;
    std::vector<Value> args;
    std::vector<std::pair<std::string, Value>> kwargs;
    if (Error e = eval_arguments(expr, &args, &kwargs)) return e;
    const std::string &f = expr.name;
    if (f == "safe") {
      *out = v;
    } else if (f == "default" || f == "d") {
      const Value *fallback = argument(args, kwargs, 0, "default_value");
      const Value *boolean = argument(args, kwargs, 1, "boolean");
      const bool use_fallback = v.is_undefined() || (boolean && truthy(*boolean) && !truthy(v));
      *out = use_fallback ? (fallback ? *fallback : Value::from_string("")) : v;
    } else if (f == "trim") {
      *out = Value::from_string(strip(to_str(v), argument(args, kwargs, 0, "chars"), true, true));
    } else if (f == "upper" || f == "lower" || f == "title" || f == "capitalize") {
      const int mode = f == "lower" ? 0 : f == "upper" ? 1 : f == "title" ? 2 : 3;
      *out = Value::from_string(map_case(to_str(v), mode));
    } else if (f == "length" || f == "count") {
      int64_t n = 0;
      if (v.is_string()) n = static_cast<int64_t>(code_points(v.string).size());
      else if (v.is_list()) n = static_cast<int64_t>(v.list->size());
      else if (v.is_dict()) n = static_cast<int64_t>(v.dict->size());
      else if (!v.is_undefined()) return fail(expr.line, std::string("object of type '") + type_name(v) + "' has no len()");
      *out = Value::from_int(n);
    } else if (f == "tojson") {
      const Value *indent = argument(args, kwargs, 0, "indent");
      const Value *sort_keys = argument(args, kwargs, 3, "sort_keys");
      std::string json;
      if (!to_json(v, indent && indent->type == Value::Type::Int ? static_cast<int>(indent->integer) : -1,
                   sort_keys && truthy(*sort_keys), &json))
        return fail(expr.line, std::string("tojson: object of type ") + type_name(v) + " is not JSON serializable");
      *out = Value::from_string(std::move(json));
    } else if (f == "first" || f == "last") {
      std::vector<Value> items;
      if (Error e = iterable_items(v, expr.line, &items)) return e;
      *out = items.empty() ? Value::undefined("'" + f + "' of an empty sequence")
                           : (f == "first" ? items.front() : items.back());
    } else if (f == "join") {
      const Value *separator = argument(args, kwargs, 0, "d");
      std::vector<Value> items;
      if (Error e = iterable_items(v, expr.line, &items)) return e;
      std::string joined;
      for (size_t i = 0; i < items.size(); ++i) {
        if (i && separator) joined += to_str(*separator);
        joined += to_str(items[i]);
      }
      *out = Value::from_string(std::move(joined));
    } else if (f == "list") {
      std::vector<Value> items;
      if (Error e = iterable_items(v, expr.line, &items)) return e;
      *out = Value::from_list(std::move(items));
    } else if (f == "reverse") {
      if (v.is_string()) {
        std::vector<uint32_t> cps = code_points(v.string);
        std::reverse(cps.begin(), cps.end());
        *out = Value::from_string(from_code_points(cps, 0, cps.size()));
      } else {
        std::vector<Value> items;
        if (Error e = iterable_items(v, expr.line, &items)) return e;
        std::reverse(items.begin(), items.end());
        *out = Value::from_list(std::move(items));
      }
    } else if (f == "items") {
      ListItems items;
      if (v.is_dict())
        for (const auto &[k, item] : *v.dict) items.push_back(Value::from_list({Value::from_string(k), item}));
      else if (!v.is_undefined()) return fail(expr.line, "items: the value is not a mapping");
      *out = Value::from_list(std::move(items));
    } else if (f == "string") {
      *out = Value::from_string(to_str(v));
    } else if (f == "int" || f == "float") {
      const Value *fallback = argument(args, kwargs, 0, "default");
      double number = 0;
      bool ok = true;
      if (v.is_number()) number = v.type == Value::Type::Float ? v.real : v.type == Value::Type::Bool ? v.boolean : static_cast<double>(v.integer);
      else if (v.is_string()) {
        const std::string text = strip(v.string, nullptr, true, true);
        char *end = nullptr;
        number = std::strtod(text.c_str(), &end);
        ok = !text.empty() && end == text.c_str() + text.size();
      } else ok = false;
      if (!ok) *out = fallback ? *fallback : (f == "int" ? Value::from_int(0) : Value::from_float(0.0));
      else if (f == "int") *out = v.type == Value::Type::Int ? v : Value::from_int(static_cast<int64_t>(number));
      else *out = Value::from_float(number);
    } else if (f == "replace") {
      const Value *from = argument(args, kwargs, 0, "old");
      const Value *to = argument(args, kwargs, 1, "new");
      const Value *count = argument(args, kwargs, 2, "count");
      if (!from || !to) return fail(expr.line, "replace needs two arguments");
      *out = Value::from_string(replace_all(to_str(v), to_str(*from), to_str(*to), count && !count->is_none() ? count->integer : -1));
    } else if (f == "abs") {
      if (v.type == Value::Type::Float) *out = Value::from_float(std::fabs(v.real));
      else if (v.type == Value::Type::Int) *out = Value::from_int(v.integer < 0 ? -v.integer : v.integer);
      else return fail(expr.line, std::string("bad operand type for abs(): '") + type_name(v) + "'");
    } else {
      return fail(expr.line, "filter \"" + f + "\" is not implemented");
    }
    return {};
  }

  Error eval_test(const Expr &expr, bool *result) {
    Value v;
    if (Error e = eval(*expr.a, &v)) return e;
    std::vector<Value> args;
    std::vector<std::pair<std::string, Value>> kwargs;
    if (Error e = eval_arguments(expr, &args, &kwargs)) return e;
    const std::string &t = expr.name;
    if (t == "defined") *result = !v.is_undefined();
    else if (t == "undefined") *result = v.is_undefined();
    else if (t == "none") *result = v.is_none();
    else if (t == "string") *result = v.is_string();
    else if (t == "number") *result = v.is_number();
    else if (t == "integer") *result = v.type == Value::Type::Int;
    else if (t == "float") *result = v.type == Value::Type::Float;
    else if (t == "boolean") *result = v.type == Value::Type::Bool;
    else if (t == "true") *result = v.type == Value::Type::Bool && v.boolean;
    else if (t == "false") *result = v.type == Value::Type::Bool && !v.boolean;
    else if (t == "mapping") *result = v.is_dict();
    else if (t == "sequence" || t == "iterable") *result = v.is_list() || v.is_string() || v.is_dict();
    else if (t == "even" || t == "odd" || t == "divisibleby") {
      if (v.type != Value::Type::Int) return fail(expr.line, "test '" + t + "' needs an integer");
      int64_t divisor = 2;
      if (t == "divisibleby") {
        if (args.empty() || args[0].type != Value::Type::Int || args[0].integer == 0)
          return fail(expr.line, "divisibleby needs a non-zero integer");
        divisor = args[0].integer;
      }
      const bool divisible = v.integer % divisor == 0;
      *result = t == "odd" ? !divisible : divisible;
    } else if (t == "eq" || t == "equalto" || t == "ne") {
      if (args.empty()) return fail(expr.line, "test '" + t + "' needs a value to compare with");
      *result = equal(v, args[0]) != (t == "ne");
    } else if (t == "lower" || t == "upper") {
      const std::string s = to_str(v);
      *result = map_case(s, t == "lower" ? 0 : 1) == s;
    } else {
      return fail(expr.line, "test \"" + t + "\" is not implemented");
    }
    return {};
  }

  static bool numeric(const Value &v) { return v.is_number(); }
  static double as_double(const Value &v) {
    return v.type == Value::Type::Float ? v.real : v.type == Value::Type::Bool ? v.boolean : static_cast<double>(v.integer);
  }
  static int64_t as_int(const Value &v) { return v.type == Value::Type::Bool ? v.boolean : v.integer; }

  Error eval_binary(const Expr &expr, Value *out) {
    const std::string &op = expr.name;
    Value a;
    if (Error e = eval(*expr.a, &a)) return e;
    if (op == "and" || op == "or") {  // Python: returns an operand, short-circuits
      if ((op == "and") != truthy(a)) {
        *out = a;
        return {};
      }
      return eval(*expr.b, out);
    }
    Value b;
    if (Error e = eval(*expr.b, &b)) return e;
    if (op == "==" || op == "!=") {
      *out = Value::from_bool(equal(a, b) == (op == "=="));
      return {};
    }
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.is_string()) {
        if (!a.is_string()) return fail(expr.line, "'in <string>' requires string as left operand");
        found = b.string.find(a.string) != std::string::npos;
      } else if (b.is_list()) {
        for (const Value &item : *b.list) found = found || equal(a, item);
      } else if (b.is_dict()) {
        found = a.is_string() && b.find(a.string) != nullptr;
      } else if (!b.is_undefined()) {
        return fail(expr.line, std::string("argument of type '") + type_name(b) + "' is not iterable");
      }
      *out = Value::from_bool(found == (op == "in"));
      return {};
    }
    if (op == "~") {
      *out = Value::from_string(to_str(a) + to_str(b));
      return {};
    }
    if (a.is_undefined()) return undefined_error(expr.line, a);
    if (b.is_undefined()) return undefined_error(expr.line, b);
    auto type_error = [&] {
      return fail(expr.line, std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) + "' and '" +
                                 type_name(b) + "'");
    };
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      int order = 0;
      if (numeric(a) && numeric(b)) order = as_double(a) < as_double(b) ? -1 : as_double(a) > as_double(b) ? 1 : 0;
      else if (a.is_string() && b.is_string()) order = a.string.compare(b.string) < 0 ? -1 : a.string == b.string ? 0 : 1;
      else return fail(expr.line, "'" + op + "' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
      const bool r = op == "<" ? order < 0 : op == "<=" ? order <= 0 : op == ">" ? order > 0 : order >= 0;
      *out = Value::from_bool(r);
      return {};
    }
    if (op == "+") {
      if (a.is_string() && b.is_string()) *out = Value::from_string(a.string + b.string);
      else if (a.is_list() && b.is_list()) {
        ListItems items = *a.list;
        items.insert(items.end(), b.list->begin(), b.list->end());
        *out = Value::from_list(std::move(items));
      } else if (a.is_string() || b.is_string()) {
        return fail(expr.line, std::string("can only concatenate str (not \"") + type_name(a.is_string() ? b : a) + "\") to str");
      } else if (!numeric(a) || !numeric(b)) {
        return type_error();
      } else if (a.type == Value::Type::Float || b.type == Value::Type::Float) {
        *out = Value::from_float(as_double(a) + as_double(b));
      } else {
        *out = Value::from_int(as_int(a) + as_int(b));
      }
      return {};
    }
    if (op == "*" && ((a.is_string() || a.is_list()) && b.type == Value::Type::Int)) {
      if (a.is_string()) {
        std::string s;
        for (int64_t i = 0; i < b.integer; ++i) s += a.string;
        *out = Value::from_string(std::move(s));
      } else {
        ListItems items;
        for (int64_t i = 0; i < b.integer; ++i) items.insert(items.end(), a.list->begin(), a.list->end());
        *out = Value::from_list(std::move(items));
      }
      return {};
    }
    if (op == "%" && a.is_string()) return fail(expr.line, "printf-style string formatting ('%') is not supported");
    if (!numeric(a) || !numeric(b)) return type_error();
    const bool floating = a.type == Value::Type::Float || b.type == Value::Type::Float;
    if (op == "-") {
      *out = floating ? Value::from_float(as_double(a) - as_double(b)) : Value::from_int(as_int(a) - as_int(b));
    } else if (op == "*") {
      *out = floating ? Value::from_float(as_double(a) * as_double(b)) : Value::from_int(as_int(a) * as_int(b));
    } else if (op == "/") {
      if (as_double(b) == 0.0) return fail(expr.line, "division by zero");
      *out = Value::from_float(as_double(a) / as_double(b));
    } else if (op == "//" || op == "%") {
      if (as_double(b) == 0.0) return fail(expr.line, "integer division or modulo by zero");
      if (floating) {
        const double q = std::floor(as_double(a) / as_double(b));
        *out = Value::from_float(op == "//" ? q : as_double(a) - q * as_double(b));
      } else {
        const int64_t x = as_int(a), y = as_int(b);
        int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --q;  // Python floors
        *out = Value::from_int(op == "//" ? q : x - q * y);
      }
    } else if (op == "**") {
      if (!floating && as_int(b) >= 0) {
        if (as_int(b) > 62) return fail(expr.line, "'**' exponent above 62 is not supported");
        int64_t r = 1;
        for (int64_t i = 0; i < as_int(b); ++i) r *= as_int(a);
        *out = Value::from_int(r);
      } else {
        *out = Value::from_float(std::pow(as_double(a), as_double(b)));
      }
    } else {
      return type_error();
    }
    return {};
  }

  std::vector<Scope> scopes_;
  std::string *out_ = nullptr;
  Flow flow_ = Flow::Normal;
};

}  // namespace

Error render(const Body &body, const std::vector<std::pair<std::string, Value>> &globals, std::string *out) {
  out->clear();
  Renderer renderer(globals);
  Error e = renderer.run(body, out);
  if (e) out->clear();
  return e;
}

}  // namespace colibri::tokenizer::jinja

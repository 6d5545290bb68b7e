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
#include <ctime>
#include <functional>
#include <utf8proc.h>

#include "tokenizer/jinja_parse.h"
#include "tokenizer/utf8.h"
#include "util/strings.h"

namespace colibri::tokenizer::jinja {

namespace {

// Macro calls nested in each other (a macro that calls itself would otherwise recurse until
// the stack ends; Jinja stops at Python's recursion limit). Real templates nest two or three;
// gpt-oss's renders a tool's JSON schema with a macro that calls itself once per level.
constexpr uint64_t kMaxMacroCallDepth = 32;
// Statements and expressions being evaluated inside each other, macro calls included: what
// bounds the renderer's stack. A level is one or two C++ frames: at most about 1.5 KB in a
// release build (exec_for and call_macro stay out of line so that exec's frame stays small)
// and 16 KB under ASan, so 256 levels stay under 0.5 MB and 4 MB of a default 8 MB thread
// stack. Without macros a render stays under 2 x max_nesting_depth (the parser's limit, 128
// by default), so only macro calls reach this; gpt-oss's schema macro uses about 8 a level.
constexpr uint32_t kMaxRenderDepth = 256;

// strftime_now(format): the format is at most this long.
constexpr size_t kMaxTimeFormatBytes = 256;

// range() makes a list of at most this many integers.
constexpr int64_t kMaxRangeItems = 100000;

// Needles longer than this are searched with Boyer-Moore (linear in the worst case);
// std::string::find is O(haystack * needle) on hostile input, which is fine when the needle is short.
constexpr size_t kShortNeedleBytes = 32;

class TextFinder {
 public:
  explicit TextFinder(const std::string &needle)
      : needle_(needle), searcher_(needle.size() > kShortNeedleBytes ? std::make_unique<Searcher>(needle.begin(), needle.end()) : nullptr) {}
  // The first occurrence at or after pos, or npos.
  size_t find(const std::string &haystack, size_t pos) const {
    if (!searcher_) return haystack.find(needle_, pos);
    if (pos > haystack.size()) return std::string::npos;
    const auto hit = (*searcher_)(haystack.begin() + static_cast<std::ptrdiff_t>(pos), haystack.end()).first;
    return hit == haystack.end() ? std::string::npos : static_cast<size_t>(hit - haystack.begin());
  }

 private:
  using Searcher = std::boyer_moore_searcher<std::string::const_iterator>;
  const std::string &needle_;
  std::unique_ptr<Searcher> searcher_;
};

// Number of code points of valid UTF-8.
size_t code_point_count(const std::string &s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

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
  std::sort(set.begin(), set.end());  // O(n log m) however long `chars` is
  auto stripped = [&](uint32_t c) {
    if (chars && chars->is_string()) return std::binary_search(set.begin(), set.end(), c);
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

// Python str.replace. Returns false (and stops) when the result would pass max_bytes.
bool replace_all(const std::string &s, const std::string &from, const std::string &to, int64_t count,
                 uint64_t max_bytes, std::string *out) {
  out->clear();
  if (from.empty()) {  // Python inserts `to` between characters
    const std::vector<uint32_t> cps = code_points(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        if (out->size() + to.size() > max_bytes) return false;
        *out += to;
        ++done;
      }
      if (i < cps.size()) utf8_append(out, cps[i]);
    }
    return out->size() <= max_bytes;
  }
  const TextFinder finder(from);
  size_t pos = 0;
  int64_t done = 0;
  for (size_t hit = finder.find(s, 0); hit != std::string::npos && (count < 0 || done < count);
       hit = finder.find(s, pos)) {
    if (out->size() + (hit - pos) + to.size() > max_bytes) return false;
    out->append(s, pos, hit - pos);
    *out += to;
    pos = hit + from.size();
    ++done;
  }
  if (out->size() + (s.size() - pos) > max_bytes) return false;
  out->append(s, pos, std::string::npos);
  return true;
}

// Python str.split. Returns false (and stops) past max_parts parts.
bool split(const std::string &s, const Value *separator, int64_t max_split, size_t max_parts,
           std::vector<std::string> *parts) {
  std::vector<std::string> &out = *parts;
  out.clear();
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
      if (out.size() >= max_parts) return false;
      out.push_back(from_code_points(cps, i, j));
      ++splits;
      i = j;
    }
    return true;
  }
  const std::string &sep = separator->string;
  const TextFinder finder(sep);
  size_t pos = 0;
  int64_t splits = 0;
  for (size_t hit = finder.find(s, 0); hit != std::string::npos && (max_split < 0 || splits < max_split);
       hit = finder.find(s, pos)) {
    if (out.size() >= max_parts) return false;
    out.push_back(s.substr(pos, hit - pos));
    pos = hit + sep.size();
    ++splits;
  }
  if (out.size() >= max_parts) return false;
  out.push_back(s.substr(pos));
  return true;
}

// Python slice indices for a sequence of `size` items.
std::vector<size_t> slice_indices(int64_t size, const Value *start, const Value *stop, const Value *step_value) {
  // A step past the size takes one item, like any step that large; clamping keeps i += step exact.
  const int64_t step = std::clamp<int64_t>(step_value && !step_value->is_none() ? step_value->integer : 1,
                                           -size - 1, size + 1);
  auto clamp = [&](const Value *v, int64_t fallback) -> int64_t {
    if (v == nullptr || v->is_none()) return fallback;
    int64_t i = std::clamp<int64_t>(v->integer, -size - 1, size + 1);
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
  Renderer(const std::vector<std::pair<std::string, Value>> &globals, const ChatTemplateLimits &limits)
      : limits_(limits) {
    scopes_.push_back(globals);
  }

  Error run(const Body &body, std::string *out) {
    out_ = out;
    return exec(body);
  }

  // True when the error came from raise_exception(msg): its message is exactly msg.
  bool raised() const { return raised_; }

 private:
  enum class Flow { Normal, Break, Continue };
  using Scope = std::vector<std::pair<std::string, Value>>;

  static Error too_deep(int line) {
    return make_error(ErrorKind::Unsupported,
                      util::strprintf("line %d: statements and expressions nested more than %llu deep while rendering "
                                      "(macros calling each other?)",
                                      line, static_cast<unsigned long long>(kMaxRenderDepth)));
  }

  static Error fail(int line, const std::string &message) {
    return make_error(ErrorKind::InvalidArgument, util::strprintf("line %d: %s", line, message.c_str()));
  }
  static Error over_limit(int line, const std::string &what, uint64_t limit, const char *field) {
    return make_error(ErrorKind::Unsupported,
                      util::strprintf("line %d: %s exceeds the limit of %llu (ChatTemplateLimits::%s)", line,
                                      what.c_str(), static_cast<unsigned long long>(limit), field));
  }

  // ---- budgets (ChatTemplateLimits) ----

  // One statement or expression evaluated, or `items` items walked.
  Error step(int line, uint64_t items = 1) {
    steps_ += items;
    if (steps_ > limits_.max_steps) return over_limit(line, "the render's evaluation steps", limits_.max_steps, "max_steps");
    return {};
  }
  // Bytes made, copied or compared.
  Error process(int line, uint64_t bytes) {
    processed_ += bytes;
    if (processed_ > limits_.max_bytes_processed)
      return over_limit(line, "the bytes the render makes, copies or compares", limits_.max_bytes_processed,
                        "max_bytes_processed");
    return {};
  }
  // Before making a value of `bytes` bytes.
  Error value_fits(int line, uint64_t bytes) const {
    if (bytes > limits_.max_value_bytes)
      return over_limit(line, util::strprintf("a value of %llu bytes", static_cast<unsigned long long>(bytes)),
                        limits_.max_value_bytes, "max_value_bytes");
    return {};
  }
  // Every value an expression yields.
  Error check_value(int line, const Value &v) {
    if (v.depth > limits_.max_nesting_depth)
      return over_limit(line, util::strprintf("a value nested %u levels deep", v.depth), limits_.max_nesting_depth,
                        "max_nesting_depth");
    if (Error e = value_fits(line, v.bytes)) return e;
    if (v.holds_namespace) return fail(line, "a namespace() cannot be put inside a list or dict");
    if (v.is_string()) return process(line, v.bytes);
    return {};
  }
  Error emit(int line, const std::string &text) {
    if (out_->size() + text.size() > limits_.max_output_bytes)
      return over_limit(line, "the rendered text", limits_.max_output_bytes, "max_output_bytes");
    if (Error e = process(line, text.size())) return e;
    *out_ += text;
    return {};
  }
  // The bytes of a list of `count` items whose contents take `content_bytes`.
  static uint64_t list_bytes(uint64_t count, uint64_t content_bytes) { return count * kItemBytes + content_bytes; }
  static Error integer_overflow(int line) {
    return make_error(ErrorKind::Unsupported,
                      util::strprintf("line %d: integer overflow (integers are 64-bit in this renderer)", line));
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
    if (Error e = step(stmt.line)) return e;
    const NestingGuard guard(&depth_);
    if (depth_ > kMaxRenderDepth) return too_deep(stmt.line);
    switch (stmt.kind) {
      case Stmt::Kind::Text: return emit(stmt.line, stmt.text);
      case Stmt::Kind::Output: {
        Value v;
        if (Error e = eval(*stmt.expr, &v)) return e;
        return emit(stmt.line, to_str(v));
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
        // A namespace holds no namespace (so no value can contain itself), and its attributes
        // stay within the nesting limit like any list or dict's items.
        if (v.is_namespace) return fail(stmt.line, "a namespace() cannot be put inside a namespace");
        if (v.depth + 1 > limits_.max_nesting_depth)
          return over_limit(stmt.line, util::strprintf("a value nested %u levels deep", v.depth + 1),
                            limits_.max_nesting_depth, "max_nesting_depth");
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
        if (Error e2 = value_fits(stmt.line, captured.size())) return e2;
        assign(stmt.targets[0], Value::from_string(std::move(captured)));
        return {};
      }
      case Stmt::Kind::Macro:
        // Defined where it runs (the top level or an {% if %} there: the parser allows no other
        // place); a later definition of the same name replaces it, as a Jinja assignment does.
        for (auto &[name, definition] : macros_) {
          if (name == stmt.targets[0]) {
            definition = &stmt;
            return {};
          }
        }
        macros_.emplace_back(stmt.targets[0], &stmt);
        return {};
      case Stmt::Kind::Break: flow_ = Flow::Break; return {};
      case Stmt::Kind::Continue: flow_ = Flow::Continue; return {};
    }
    return {};
  }

  // The items of a sequence, copied (charged as walked and copied, refused past the value limit).
  Error iterable_items(const Value &v, int line, std::vector<Value> *items) {
    items->clear();
    switch (v.type) {
      case Value::Type::Undefined: return {};  // iterating Undefined yields nothing
      case Value::Type::List:
        if (Error e = step(line, v.list->size())) return e;
        if (Error e = process(line, v.bytes)) return e;
        *items = *v.list;
        return {};
      case Value::Type::Dict:
        if (Error e = step(line, v.dict->size())) return e;
        if (Error e = process(line, v.bytes)) return e;
        for (const auto &[k, item] : *v.dict) items->push_back(Value::from_string(k));
        return {};
      case Value::Type::String:
        if (Error e = value_fits(line, list_bytes(code_point_count(v.string), v.string.size()))) return e;
        if (Error e = step(line, v.string.size())) return e;
        if (Error e = process(line, list_bytes(code_point_count(v.string), v.string.size()))) return e;
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

  // The `loop` variable of iteration i over items (out of line: its temporaries would
  // otherwise take kilobytes of every for-loop level's stack frame).
  [[gnu::noinline]] static Value loop_value(const std::vector<Value> &items, int64_t i) {
    const auto length = static_cast<int64_t>(items.size());
    DictItems loop;
    loop.reserve(11);
    loop.emplace_back("index", Value::from_int(i + 1));
    loop.emplace_back("index0", Value::from_int(i));
    loop.emplace_back("revindex", Value::from_int(length - i));
    loop.emplace_back("revindex0", Value::from_int(length - i - 1));
    loop.emplace_back("first", Value::from_bool(i == 0));
    loop.emplace_back("last", Value::from_bool(i == length - 1));
    loop.emplace_back("length", Value::from_int(length));
    loop.emplace_back("depth", Value::from_int(1));
    loop.emplace_back("depth0", Value::from_int(0));
    loop.emplace_back("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("'loop.previtem'"));
    loop.emplace_back("nextitem", i + 1 < length ? items[static_cast<size_t>(i + 1)] : Value::undefined("'loop.nextitem'"));
    return Value::from_dict(std::move(loop));
  }

  [[gnu::noinline]] Error exec_for(const Stmt &stmt) {
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
      if (++loop_iterations_ > limits_.max_loop_iterations)
        return over_limit(stmt.line, "the render's for-loop iterations", limits_.max_loop_iterations,
                          "max_loop_iterations");
      scopes_.emplace_back();
      assign("loop", loop_value(items, i));
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
    if (Error e = step(expr.line)) return e;
    const NestingGuard guard(&depth_);
    if (depth_ > kMaxRenderDepth) return too_deep(expr.line);
    if (Error e = eval_node(expr, out)) return e;
    return check_value(expr.line, *out);
  }

  Error eval_node(const Expr &expr, Value *out) {
    switch (expr.kind) {
      case Expr::Kind::Literal: *out = expr.literal; return {};
      case Expr::Kind::Name: *out = lookup(expr.name); return {};
      case Expr::Kind::GetAttr: {
        Value object;
        if (Error e = eval(*expr.a, &object)) return e;
        if (object.is_undefined()) return undefined_error(expr.line, object);
        if (object.is_dict())
          if (Error e = step(expr.line, object.dict->size())) return e;  // find() walks the keys
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
          if (expr.name == "-" && i == INT64_MIN) return integer_overflow(expr.line);
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
          if (Error e = step(expr.line, items.size())) return e;  // the duplicate search walks the items
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
      if (Error e = step(line, object.dict->size())) return e;
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
      if (Error e = process(line, object.string.size())) return e;
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
      if (Error e = step(expr.line, object.list->size())) return e;
      if (Error e = process(expr.line, object.bytes)) return e;
      ListItems items;
      for (size_t i : slice_indices(static_cast<int64_t>(object.list->size()), &parts[0], &parts[1], &parts[2]))
        items.push_back((*object.list)[i]);
      *out = Value::from_list(std::move(items));
      return {};
    }
    if (object.is_string()) {
      if (Error e = process(expr.line, object.string.size() * sizeof(uint32_t))) return e;
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
      if (const Stmt *macro = find_macro(fn)) return call_macro(expr.line, *macro, args, kwargs, out);
      if (!is_known_global_function(fn)) return fail(expr.line, "'" + fn + "' is undefined");  // a macro not yet defined
      if (fn == "strftime_now") return strftime_now(expr.line, args, out);
      if (fn == "raise_exception") {
        // transformers raises TemplateError(message): the caller gets exactly the message.
        raised_ = true;
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
        // The length in 128 bits: stop - start can pass int64 range.
        const __int128 span = static_cast<__int128>(stop) - start;
        const __int128 count = span == 0 || (span > 0) != (step > 0) ? 0 : (span + step + (step > 0 ? -1 : 1)) / step;
        if (count > kMaxRangeItems)
          return fail(expr.line, util::strprintf("range() longer than %lld items", static_cast<long long>(kMaxRangeItems)));
        if (Error e = this->step(expr.line, static_cast<uint64_t>(count))) return e;
        ListItems items;
        for (__int128 k = 0; k < count; ++k) items.push_back(Value::from_int(static_cast<int64_t>(start + k * step)));
        *out = Value::from_list(std::move(items));
        return {};
      }
      // namespace(...) and dict(...): keyword arguments (and an optional dict) become entries.
      DictItems entries;
      if (!args.empty()) {
        if (args.size() > 1 || !args[0].is_dict()) return fail(expr.line, fn + "() takes keyword arguments or one dict");
        if (Error e = step(expr.line, args[0].dict->size())) return e;
        if (Error e = process(expr.line, args[0].bytes)) return e;
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

  // transformers' strftime_now(format): datetime.now().strftime(format), the local time.
  // Python hands the format to the C library's strftime, as this does.
  static Error strftime_now(int line, const std::vector<Value> &args, Value *out) {
    if (args.size() != 1 || !args[0].is_string()) return fail(line, "strftime_now() takes one string, the format");
    const std::string &format = args[0].string;
    if (format.size() > kMaxTimeFormatBytes || format.find('\0') != std::string::npos)
      return fail(line, util::strprintf("strftime_now(): the format must be at most %zu bytes, without NUL",
                                        kMaxTimeFormatBytes));
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    if (localtime_r(&now, &local) == nullptr) return fail(line, "strftime_now(): the local time is unavailable");
    // 16 KiB holds any result but one padded by huge widths (%_9999Y), which comes back empty
    // (strftime's 0) instead of failing.
    std::string result(16384, '\0');
    const size_t n = format.empty() ? 0 : std::strftime(result.data(), result.size(), format.c_str(), &local);
    result.resize(n);
    if (!utf8_is_valid(result)) result = utf8_replace_invalid(result);
    *out = Value::from_string(std::move(result));
    return {};
  }

  const Stmt *find_macro(const std::string &name) const {
    for (const auto &[k, definition] : macros_)
      if (k == name) return definition;
    return nullptr;
  }

  // A macro call, as Jinja makes it: the body runs in a scope of its own that sees the
  // template's top-level variables (as they are now) and its parameters, not the caller's
  // loop variables; what it renders is the call's value, a string. Positional arguments fill
  // the parameters in order, keywords by name, then defaults (evaluated now, seeing the
  // parameters before them); a parameter left without any is undefined.
  [[gnu::noinline]] Error call_macro(int line, const Stmt &macro, const std::vector<Value> &args,
                   const std::vector<std::pair<std::string, Value>> &kwargs, Value *out) {
    const std::string &name = macro.targets[0];
    if (macro_depth_ >= kMaxMacroCallDepth)
      return make_error(ErrorKind::Unsupported,
                        util::strprintf("line %d: macro '%s': macro calls nested more than %llu deep (a macro that "
                                        "calls itself without end?)",
                                        line, name.c_str(), static_cast<unsigned long long>(kMaxMacroCallDepth)));
    if (args.size() > macro.params.size())
      return fail(line, util::strprintf("macro '%s' takes not more than %zu argument(s)", name.c_str(),
                                        macro.params.size()));
    for (const auto &[k, v] : kwargs) {
      bool known = false;
      for (size_t i = args.size(); i < macro.params.size(); ++i) known = known || macro.params[i].first == k;
      if (!known) return fail(line, "macro '" + name + "' takes no keyword argument '" + k + "'");
    }
    // The caller's scopes (all but the top level) step aside while the body runs.
    std::vector<Scope> caller_scopes(std::make_move_iterator(scopes_.begin() + 1), std::make_move_iterator(scopes_.end()));
    scopes_.resize(1);
    scopes_.emplace_back();
    std::string rendered;
    std::string *saved_out = out_;
    ++macro_depth_;
    Error e;
    for (size_t i = 0; i < macro.params.size() && !e; ++i) {
      const auto &[param, fallback] = macro.params[i];
      Value v = Value::undefined("'" + param + "'");
      const Value *given = argument(args, kwargs, i, param.c_str());
      if (given != nullptr) v = *given;
      else if (fallback) e = eval(*fallback, &v);
      if (!e) assign(param, std::move(v));
    }
    if (!e) {
      out_ = &rendered;
      e = exec(macro.body);
    }
    out_ = saved_out;
    flow_ = Flow::Normal;
    --macro_depth_;
    scopes_.resize(1);
    for (Scope &scope : caller_scopes) scopes_.push_back(std::move(scope));
    if (e) return e;
    if (Error fit = value_fits(line, rendered.size())) return fit;
    *out = Value::from_string(std::move(rendered));
    return {};
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
        if (Error e = step(line, s.size())) return e;
        std::vector<std::string> pieces;
        if (!split(s, a0, max_split ? max_split->integer : -1, limits_.max_value_bytes / kItemBytes, &pieces))
          return over_limit(line, "split()'s list of parts", limits_.max_value_bytes, "max_value_bytes");
        ListItems parts;
        for (std::string &part : pieces) parts.push_back(Value::from_string(std::move(part)));
        *out = Value::from_list(std::move(parts));
      } else if (method == "startswith" || method == "endswith") {
        const Value *what = argument(args, kwargs, 0, "prefix");
        std::vector<std::string> candidates;
        if (what && what->is_string()) candidates.push_back(what->string);
        else if (what && what->is_list())
          for (const Value &v : *what->list) candidates.push_back(v.string);
        else return fail(line, method + "() needs a string or a tuple of strings");
        bool result = false;
        if (Error e = step(line, candidates.size())) return e;
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
        std::string replaced;
        if (!replace_all(s, from->string, to->string, count ? count->integer : -1, limits_.max_value_bytes, &replaced))
          return over_limit(line, "replace()'s result", limits_.max_value_bytes, "max_value_bytes");
        *out = Value::from_string(std::move(replaced));
      } else {
        return no_method();
      }
      return {};
    }
    if (object.is_dict()) {
      if (method == "items" || method == "keys" || method == "values") {
        if (Error e = step(line, object.dict->size())) return e;
        if (Error e = value_fits(line, object.bytes + object.dict->size() * 3 * kItemBytes)) return e;
        if (Error e = process(line, object.bytes)) return e;
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
        if (Error e = step(line, object.dict->size())) return e;
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
      if (v.is_string()) n = static_cast<int64_t>(code_point_count(v.string));
      else if (v.is_list()) n = static_cast<int64_t>(v.list->size());
      else if (v.is_dict()) n = static_cast<int64_t>(v.dict->size());
      else if (!v.is_undefined()) return fail(expr.line, std::string("object of type '") + type_name(v) + "' has no len()");
      *out = Value::from_int(n);
    } else if (f == "tojson") {
      const Value *indent = argument(args, kwargs, 0, "indent");
      const Value *sort_keys = argument(args, kwargs, 3, "sort_keys");
      std::string json;
      bool too_large = false;
      if (!to_json(v, indent && indent->type == Value::Type::Int ? indent->integer : -1, sort_keys && truthy(*sort_keys),
                   limits_.max_value_bytes, &json, &too_large)) {
        if (too_large) return over_limit(expr.line, "tojson's text", limits_.max_value_bytes, "max_value_bytes");
        return fail(expr.line, std::string("tojson: object of type ") + type_name(v) + " is not JSON serializable");
      }
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
      const std::string glue = separator ? to_str(*separator) : std::string();
      for (size_t i = 0; i < items.size(); ++i) {
        const std::string piece = to_str(items[i]);
        if (joined.size() + glue.size() + piece.size() > limits_.max_value_bytes)
          return over_limit(expr.line, "join's result", limits_.max_value_bytes, "max_value_bytes");
        if (i) joined += glue;
        joined += piece;
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
      if (v.is_dict()) {
        if (Error e = step(expr.line, v.dict->size())) return e;
        if (Error e = value_fits(expr.line, v.bytes + v.dict->size() * 3 * kItemBytes)) return e;
        if (Error e = process(expr.line, v.bytes)) return e;
      }
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
      else if (f == "int") {
        if (v.type == Value::Type::Int) *out = v;
        // 2^63 is exact in a double; anything outside [-2^63, 2^63) (or NaN) has no int64.
        else if (!(number >= -9223372036854775808.0 && number < 9223372036854775808.0)) return integer_overflow(expr.line);
        else *out = Value::from_int(static_cast<int64_t>(number));
      }
      else *out = Value::from_float(number);
    } else if (f == "replace") {
      const Value *from = argument(args, kwargs, 0, "old");
      const Value *to = argument(args, kwargs, 1, "new");
      const Value *count = argument(args, kwargs, 2, "count");
      if (!from || !to) return fail(expr.line, "replace needs two arguments");
      std::string replaced;
      if (!replace_all(to_str(v), to_str(*from), to_str(*to), count && !count->is_none() ? count->integer : -1,
                       limits_.max_value_bytes, &replaced))
        return over_limit(expr.line, "replace's result", limits_.max_value_bytes, "max_value_bytes");
      *out = Value::from_string(std::move(replaced));
    } else if (f == "abs") {
      if (v.type == Value::Type::Float) *out = Value::from_float(std::fabs(v.real));
      else if (v.type == Value::Type::Int && v.integer == INT64_MIN) return integer_overflow(expr.line);
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
    if (Error e = process(expr.line, std::min(a.bytes, b.bytes))) return e;  // what a comparison may walk
    if (op == "==" || op == "!=") {
      *out = Value::from_bool(equal(a, b) == (op == "=="));
      return {};
    }
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.is_string()) {
        if (!a.is_string()) return fail(expr.line, "'in <string>' requires string as left operand");
        if (Error e = process(expr.line, b.string.size())) return e;
        found = TextFinder(a.string).find(b.string, 0) != std::string::npos;
      } else if (b.is_list()) {
        if (Error e = step(expr.line, b.list->size())) return e;
        if (Error e = process(expr.line, b.bytes)) return e;
        for (const Value &item : *b.list) found = found || equal(a, item);
      } else if (b.is_dict()) {
        if (Error e = step(expr.line, b.dict->size())) return e;
        found = a.is_string() && b.find(a.string) != nullptr;
      } else if (!b.is_undefined()) {
        return fail(expr.line, std::string("argument of type '") + type_name(b) + "' is not iterable");
      }
      *out = Value::from_bool(found == (op == "in"));
      return {};
    }
    if (op == "~") {
      if (Error e = value_fits(expr.line, a.bytes + b.bytes)) return e;
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
      if ((a.is_string() && b.is_string()) || (a.is_list() && b.is_list())) {
        if (Error e = value_fits(expr.line, a.bytes + b.bytes)) return e;
        if (Error e = process(expr.line, a.bytes + b.bytes)) return e;
      }
      int64_t sum = 0;
      if (a.is_string() && b.is_string()) *out = Value::from_string(a.string + b.string);
      else if (a.is_list() && b.is_list()) {
        if (Error e = step(expr.line, a.list->size() + b.list->size())) return e;
        ListItems items = *a.list;
        items.insert(items.end(), b.list->begin(), b.list->end());
        *out = Value::from_list(std::move(items));
      } else if (a.is_string() || b.is_string()) {
        return fail(expr.line, std::string("can only concatenate str (not \"") + type_name(a.is_string() ? b : a) + "\") to str");
      } else if (!numeric(a) || !numeric(b)) {
        return type_error();
      } else if (a.type == Value::Type::Float || b.type == Value::Type::Float) {
        *out = Value::from_float(as_double(a) + as_double(b));
      } else if (__builtin_add_overflow(as_int(a), as_int(b), &sum)) {
        return integer_overflow(expr.line);
      } else {
        *out = Value::from_int(sum);
      }
      return {};
    }
    if (op == "*" && ((a.is_string() || a.is_list()) && b.type == Value::Type::Int)) {
      // The size is known before anything is made: 'x' * 100000000000 is refused at once.
      const uint64_t times = b.integer > 0 ? static_cast<uint64_t>(b.integer) : 0;
      if (times > 0 && a.bytes > limits_.max_value_bytes / times)
        return over_limit(expr.line, util::strprintf("a value of %llu x %llu bytes", static_cast<unsigned long long>(a.bytes),
                                                     static_cast<unsigned long long>(times)),
                          limits_.max_value_bytes, "max_value_bytes");
      if (a.is_list() && !a.list->empty() && times > limits_.max_value_bytes / kItemBytes)
        return over_limit(expr.line, "a list of that many items", limits_.max_value_bytes, "max_value_bytes");
      if (Error e = process(expr.line, a.bytes * times)) return e;
      if (a.is_list())
        if (Error e = step(expr.line, a.list->size() * times)) return e;
      // An empty string or list times any count is empty: no loop (the size check above
      // passes for zero bytes, so '' * 10**18 would otherwise spin 10**18 times).
      const bool empty = a.is_string() ? a.string.empty() : a.list->empty();
      if (empty || times == 0) {
        *out = a.is_string() ? Value::from_string(std::string()) : Value::from_list(ListItems());
        return {};
      }
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
    int64_t result = 0;
    if (op == "-") {
      if (!floating && __builtin_sub_overflow(as_int(a), as_int(b), &result)) return integer_overflow(expr.line);
      *out = floating ? Value::from_float(as_double(a) - as_double(b)) : Value::from_int(result);
    } else if (op == "*") {
      if (!floating && __builtin_mul_overflow(as_int(a), as_int(b), &result)) return integer_overflow(expr.line);
      *out = floating ? Value::from_float(as_double(a) * as_double(b)) : Value::from_int(result);
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
        if (x == INT64_MIN && y == -1) return integer_overflow(expr.line);
        int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --q;  // Python floors
        *out = Value::from_int(op == "//" ? q : x - q * y);
      }
    } else if (op == "**") {
      if (!floating && as_int(b) >= 0) {
        if (as_int(b) > 62) return fail(expr.line, "'**' exponent above 62 is not supported");
        int64_t r = 1;
        for (int64_t i = 0; i < as_int(b); ++i)
          if (__builtin_mul_overflow(r, as_int(a), &r)) return integer_overflow(expr.line);
        *out = Value::from_int(r);
      } else {
        *out = Value::from_float(std::pow(as_double(a), as_double(b)));
      }
    } else {
      return type_error();
    }
    return {};
  }

  const ChatTemplateLimits &limits_;
  std::vector<Scope> scopes_;
  std::vector<std::pair<std::string, const Stmt *>> macros_;  // defined so far, by name
  uint64_t macro_depth_ = 0;
  uint32_t depth_ = 0;  // statements and expressions being evaluated (NestingGuard)
  std::string *out_ = nullptr;
  Flow flow_ = Flow::Normal;
  bool raised_ = false;
  uint64_t steps_ = 0;
  uint64_t processed_ = 0;
  uint64_t loop_iterations_ = 0;
};

}  // namespace

Error render(const Body &body, const std::vector<std::pair<std::string, Value>> &globals,
             const ChatTemplateLimits &limits, std::string_view name, std::string *out) {
  out->clear();
  Renderer renderer(globals, limits);
  Error e = renderer.run(body, out);
  if (e) {
    out->clear();
    if (!renderer.raised()) e.message = std::string(name) + ": " + e.message;
  }
  return e;
}

}  // namespace colibri::tokenizer::jinja

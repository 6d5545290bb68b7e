// core/tokenizer/jinja_ast.h — the parsed form of a chat template (Jinja subset).
//
// jinja_parse.cpp builds it from the template source, applying Jinja's whitespace rules
// (trim_blocks, lstrip_blocks, "-" / "+" markers) while lexing, so the tree holds the exact
// text to emit. jinja_eval.cpp walks it. Only constructs listed in chat_template.h exist
// here; the parser refuses the rest by name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace colibri::tokenizer::jinja {

// Counts one level of nesting for as long as it lives (the parser's recursion, the
// renderer's).
class NestingGuard {
 public:
  explicit NestingGuard(uint32_t *depth) : depth_(depth) { ++*depth_; }
  ~NestingGuard() { --*depth_; }
  NestingGuard(const NestingGuard &) = delete;
  NestingGuard &operator=(const NestingGuard &) = delete;

 private:
  uint32_t *depth_;
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,      // literal
    Name,         // name
    GetAttr,      // a.name
    GetItem,      // a[b]
    Slice,        // a[b:c:d] (any of b, c, d may be null)
    Call,         // a(args, kwargs)
    Filter,       // a | name(args, kwargs)
    Test,         // a is [not] name(args)
    Unary,        // name a   ("not", "-", "+")
    Binary,       // a name b ("or", "and", "==", "!=", "<", "<=", ">", ">=", "in", "not in",
                  //           "+", "-", "~", "*", "/", "//", "%", "**")
    Conditional,  // a if b else c (c may be null)
    ListLiteral,  // [args...] and tuples
    DictLiteral,  // {items...}
  };
  Kind kind = Kind::Literal;
  int line = 0;
  uint32_t depth = 1;  // 1 + the deepest child's (the parser bounds it)
  Value literal;
  std::string name;
  ExprPtr a, b, c, d;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
  bool negated = false;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    Text,      // text
    Output,    // {{ expr }}
    If,        // branches (condition, body)..., else_body
    For,       // for targets in expr [if filter] body [else else_body]
    Set,       // set targets[0] (or set_object.set_attribute) = expr
    SetBlock,  // set targets[0] %} body {% endset
    Macro,     // macro targets[0](params...) %} body {% endmacro
    Break,
    Continue,
  };
  Kind kind = Kind::Text;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  std::string set_attribute;  // non-empty: `set targets[0].set_attribute = expr`
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro: name and default (null: none)
};

}  // namespace colibri::tokenizer::jinja

// core/tokenizer/jinja_parse.cpp — lexer and recursive-descent parser for the Jinja subset.
//
// The lexer follows jinja2/lexer.py (3.1): data runs up to "{{", "{%" or "{#"; a "-" after
// the opening strips all whitespace before the tag; otherwise lstrip_blocks removes spaces
// and tabs between the line start and a block or comment tag; a "-" before the closing
// strips all whitespace after it; trim_blocks removes one "\n" after "%}" and "#}". The
// parser follows jinja2/parser.py's precedence: conditional < or < and < not < comparison <
// + - < ~ < * / // % < ** < unary < postfix (. [] call) and filters / tests.
#include "tokenizer/jinja_parse.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "tokenizer/utf8.h"
#include "util/strings.h"

namespace colibri::tokenizer::jinja {

namespace {

const char *const kSupportedStatements =
    "if/elif/else/endif, for/else/endfor, set, set/endset, macro/endmacro, break, continue";

Error syntax_error(int line, const std::string &message) {
  return make_error(ErrorKind::InvalidArgument, util::strprintf("line %d: %s", line, message.c_str()));
}
Error unsupported(int line, const std::string &message) {
  return make_error(ErrorKind::Unsupported, util::strprintf("line %d: %s", line, message.c_str()));
}
Error too_deep(int line, const char *what, uint32_t limit) {
  return unsupported(line, util::strprintf("%s nest deeper than the limit of %u levels "
                                           "(ChatTemplateLimits::max_nesting_depth)",
                                           what, limit));
}

// Python's str.isspace() for the character at text[pos] (valid UTF-8); *n its length.
bool is_space_at(std::string_view text, size_t pos, size_t *n) {
  const uint32_t cp = utf8_decode(text, pos, n);
  return is_python_space(cp);
}

std::string rstrip_python(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t n = 0;
    if (!is_space_at(text, start, &n)) break;
    end = start;
  }
  return std::string(text.substr(0, end));
}

size_t skip_space(std::string_view text, size_t pos) {
  while (pos < text.size()) {
    size_t n = 0;
    if (!is_space_at(text, pos, &n)) break;
    pos += n;
  }
  return pos;
}

// ---- tokens inside {{ }} and {% %} ----

struct Token {
  enum class Type { Name, String, Integer, Float, Operator, End };
  Type type = Type::End;
  std::string text;  // name, operator, or decoded string
  int64_t integer = 0;
  double real = 0.0;
  int line = 0;
};

// Python's unicode-escape decoding of a string literal's body (jinja2 lexer.py wrap()).
bool unescape(std::string_view body, std::string *out, std::string *problem) {
  out->clear();
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out->push_back(c);
      continue;
    }
    const char e = body[++i];
    auto hex = [&](size_t digits) -> bool {
      if (i + 1 + digits > body.size()) return false;
      uint32_t cp = 0;
      for (size_t k = 1; k <= digits; ++k) {
        const char h = body[i + k];
        cp <<= 4;
        if (h >= '0' && h <= '9') cp |= static_cast<uint32_t>(h - '0');
        else if (h >= 'a' && h <= 'f') cp |= static_cast<uint32_t>(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F') cp |= static_cast<uint32_t>(h - 'A' + 10);
        else return false;
      }
      if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
      utf8_append(out, cp);
      i += digits;
      return true;
    };
    switch (e) {
      case '\n': break;  // line continuation
      case '\\': out->push_back('\\'); break;
      case '\'': out->push_back('\''); break;
      case '"': out->push_back('"'); break;
      case 'a': out->push_back('\a'); break;
      case 'b': out->push_back('\b'); break;
      case 'f': out->push_back('\f'); break;
      case 'n': out->push_back('\n'); break;
      case 'r': out->push_back('\r'); break;
      case 't': out->push_back('\t'); break;
      case 'v': out->push_back('\v'); break;
      case 'x':
        if (!hex(2)) return *problem = "truncated \\xXX escape", false;
        break;
      case 'u':
        if (!hex(4)) return *problem = "truncated \\uXXXX escape", false;
        break;
      case 'U':
        if (!hex(8)) return *problem = "truncated \\UXXXXXXXX escape", false;
        break;
      case 'N': return *problem = "\\N{...} escapes are not supported", false;
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
            cp = cp * 8 + static_cast<uint32_t>(body[++i] - '0');
          utf8_append(out, cp);
        } else {
          out->push_back('\\');  // unknown escapes stay as written
          out->push_back(e);
        }
    }
  }
  return true;
}

class TagLexer {
 public:
  TagLexer(std::string_view source, size_t pos, int line) : src_(source), pos_(pos), line_(line) {}

  // Lexes tokens until the closing delimiter ("%}" for blocks, "}}" for outputs) at bracket
  // depth 0. On return pos() is just past the delimiter, strip_after() tells whether it was
  // "-%}" / "-}}", keep_after() whether it was "+%}".
  Error run(bool block, std::vector<Token> *tokens) {
    const std::string_view close = block ? "%}" : "}}";
    std::vector<char> brackets;
    while (true) {
      if (pos_ >= src_.size()) return syntax_error(line_, block ? "missing \"%}\"" : "missing \"}}\"");
      if (brackets.empty()) {
        if (src_[pos_] == '-' && src_.substr(pos_ + 1, 2) == close) {
          strip_after_ = true;
          pos_ += 3;
          break;
        }
        if (block && src_[pos_] == '+' && src_.substr(pos_ + 1, 2) == close) {
          keep_after_ = true;
          pos_ += 3;
          break;
        }
        if (src_.substr(pos_, 2) == close) {
          pos_ += 2;
          break;
        }
      }
      const char c = src_[pos_];
      size_t n = 0;
      if (is_space_at(src_, pos_, &n)) {
        if (c == '\n') ++line_;
        pos_ += n;
        continue;
      }
      Token token;
      token.line = line_;
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        const size_t start = pos_;
        while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
        token.type = Token::Type::Name;
        token.text = std::string(src_.substr(start, pos_ - start));
      } else if (c == '\'' || c == '"') {
        size_t end = pos_ + 1;
        while (end < src_.size() && src_[end] != c) end += src_[end] == '\\' ? 2 : 1;
        if (end >= src_.size()) return syntax_error(line_, "unterminated string");
        std::string problem;
        if (!unescape(src_.substr(pos_ + 1, end - pos_ - 1), &token.text, &problem)) return syntax_error(line_, problem);
        for (size_t k = pos_; k < end; ++k) line_ += src_[k] == '\n';
        token.type = Token::Type::String;
        pos_ = end + 1;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        const size_t start = pos_;
        bool is_float = false;
        while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
        if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
          is_float = true;
          ++pos_;
          while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
        }
        if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
          size_t k = pos_ + 1;
          if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
          if (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
            is_float = true;
            pos_ = k;
            while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) ++pos_;
          }
        }
        std::string digits;
        for (char d : src_.substr(start, pos_ - start))
          if (d != '_') digits.push_back(d);
        token.text = digits;
        if (is_float) {
          token.type = Token::Type::Float;
          token.real = std::strtod(digits.c_str(), nullptr);
        } else {
          token.type = Token::Type::Integer;
          token.integer = std::strtoll(digits.c_str(), nullptr, 10);
        }
      } else {
        static const char *const kOperators[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~",
                                                 "<",  ">",  "=",  "(",  ")",  "[", "]", "{", "}", ",", ".", ":",
                                                 "|",  ";"};
        const char *match = nullptr;
        for (const char *op : kOperators) {
          if (src_.substr(pos_, std::char_traits<char>::length(op)) == op) {
            match = op;
            break;
          }
        }
        if (match == nullptr) return syntax_error(line_, util::strprintf("unexpected character '%c'", c));
        token.type = Token::Type::Operator;
        token.text = match;
        pos_ += token.text.size();
        if (token.text == "(" || token.text == "[" || token.text == "{") {
          brackets.push_back(token.text[0]);
        } else if (token.text == ")" || token.text == "]" || token.text == "}") {
          const char open = token.text == ")" ? '(' : token.text == "]" ? '[' : '{';
          if (brackets.empty() || brackets.back() != open)
            return syntax_error(line_, "unbalanced '" + token.text + "'");
          brackets.pop_back();
        }
      }
      tokens->push_back(std::move(token));
    }
    Token end;
    end.line = line_;
    tokens->push_back(end);
    return {};
  }

  size_t pos() const { return pos_; }
  int line() const { return line_; }
  bool strip_after() const { return strip_after_; }
  bool keep_after() const { return keep_after_; }

 private:
  std::string_view src_;
  size_t pos_;
  int line_;
  bool strip_after_ = false;
  bool keep_after_ = false;
};

// ---- template segments ----

struct Segment {
  enum class Kind { Data, Output, Block };
  Kind kind = Kind::Data;
  std::string text;
  std::vector<Token> tokens;
  int line = 0;
};

Error lex_template(std::string_view raw, std::vector<Segment> *segments) {
  // Newlines normalised and one trailing newline dropped (lexer.py tokeniter).
  std::string src;
  src.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '\r') {
      src.push_back('\n');
      if (i + 1 < raw.size() && raw[i + 1] == '\n') ++i;
    } else {
      src.push_back(raw[i]);
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();

  size_t pos = 0;
  int line = 1;
  while (pos < src.size()) {
    size_t tag = std::string::npos;
    for (size_t k = src.find('{', pos); k != std::string::npos; k = src.find('{', k + 1)) {
      if (k + 1 < src.size() && (src[k + 1] == '{' || src[k + 1] == '%' || src[k + 1] == '#')) {
        tag = k;
        break;
      }
    }
    std::string data = src.substr(pos, tag == std::string::npos ? std::string::npos : tag - pos);
    const int data_line = line;
    line += static_cast<int>(std::count(data.begin(), data.end(), '\n'));
    if (tag == std::string::npos) {
      if (!data.empty()) segments->push_back(Segment{Segment::Kind::Data, std::move(data), {}, data_line});
      break;
    }
    const char kind = src[tag + 1];
    const char sign = tag + 2 < src.size() ? src[tag + 2] : '\0';
    if (sign == '-') {
      data = rstrip_python(data);
    } else if (sign != '+' && kind != '{') {
      // lstrip_blocks: whitespace alone between the line start and a block/comment tag.
      const size_t line_start = data.rfind('\n') == std::string::npos ? 0 : data.rfind('\n') + 1;
      const bool line_starting = pos == 0 || src[pos - 1] == '\n';
      if ((line_start > 0 || line_starting) && line_start < data.size() &&
          skip_space(data, line_start) == data.size())
        data.resize(line_start);
    }
    if (!data.empty()) segments->push_back(Segment{Segment::Kind::Data, std::move(data), {}, data_line});
    size_t after_open = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
    bool strip_after = false;
    bool keep_after = false;
    if (kind == '#') {
      const size_t close = src.find("#}", after_open);
      if (close == std::string::npos) return syntax_error(line, "missing end of comment tag");
      line += static_cast<int>(std::count(src.begin() + static_cast<std::ptrdiff_t>(tag),
                                          src.begin() + static_cast<std::ptrdiff_t>(close), '\n'));
      strip_after = close > after_open && src[close - 1] == '-';
      keep_after = close > after_open && src[close - 1] == '+';
      pos = close + 2;
    } else {
      TagLexer lexer(src, after_open, line);
      Segment segment;
      segment.kind = kind == '{' ? Segment::Kind::Output : Segment::Kind::Block;
      segment.line = line;
      if (Error e = lexer.run(kind == '%', &segment.tokens)) return e;
      if (segment.kind == Segment::Kind::Block && segment.tokens.size() == 1)
        return syntax_error(line, "empty block tag");
      if (segment.kind == Segment::Kind::Block && segment.tokens[0].type == Token::Type::Name &&
          segment.tokens[0].text == "raw")
        return unsupported(line, "{% raw %} is not supported");
      line = lexer.line();
      pos = lexer.pos();
      strip_after = lexer.strip_after();
      keep_after = lexer.keep_after();
      segments->push_back(std::move(segment));
    }
    if (strip_after) {
      const size_t next = skip_space(src, pos);
      line += static_cast<int>(std::count(src.begin() + static_cast<std::ptrdiff_t>(pos),
                                          src.begin() + static_cast<std::ptrdiff_t>(next), '\n'));
      pos = next;
    } else if (kind != '{' && !keep_after && pos < src.size() && src[pos] == '\n') {
      ++pos;  // trim_blocks
      ++line;
    }
  }
  return {};
}

// ---- expressions ----

class ExprParser {
 public:
  // `macros`: the names the template defines with {% macro %}, callable like functions.
  ExprParser(const std::vector<Token> &tokens, uint32_t max_depth, const std::set<std::string> *macros = nullptr)
      : tokens_(tokens), max_depth_(max_depth), macros_(macros) {}

  const Token &peek(size_t ahead = 0) const { return tokens_[std::min(index_ + ahead, tokens_.size() - 1)]; }
  bool at_end() const { return peek().type == Token::Type::End; }
  bool is_op(const char *op, size_t ahead = 0) const {
    return peek(ahead).type == Token::Type::Operator && peek(ahead).text == op;
  }
  bool is_name(const char *name, size_t ahead = 0) const {
    return peek(ahead).type == Token::Type::Name && peek(ahead).text == name;
  }
  const Token &next() { return tokens_[std::min(index_++, tokens_.size() - 1)]; }
  Error expect_op(const char *op) {
    if (!is_op(op)) return syntax_error(peek().line, util::strprintf("expected '%s', got %s", op, describe(peek()).c_str()));
    ++index_;
    return {};
  }
  Error expect_end() {
    if (!at_end()) return syntax_error(peek().line, "unexpected " + describe(peek()));
    return {};
  }
  static std::string describe(const Token &t) {
    switch (t.type) {
      case Token::Type::End: return "end of tag";
      case Token::Type::String: return "string";
      default: return "'" + t.text + "'";
    }
  }

  // parse_expression with the conditional (`a if b else c`) allowed.
  Error expression(ExprPtr *out) { return conditional(out); }
  // parse_tuple(with_condexpr=False): the iterable of a for loop.
  Error or_expression(ExprPtr *out) { return parse_or(out); }

 private:
  static ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b, int line) {
    ExprPtr e = make(Expr::Kind::Binary, line);
    e->name = std::move(op);
    e->a = std::move(a);
    e->b = std::move(b);
    return e;
  }

  // Sets a finished node's depth from its children's and refuses it past the limit. Every
  // node goes through here when it is complete, so the tree (which the evaluator and the
  // destructors walk recursively) is never deeper than max_depth_, whether it was built by
  // recursion ("((((1))))") or by the loops of left-associative operators ("1+1+1+...").
  Error finish(Expr *node) {
    uint32_t deepest = 0;
    auto see = [&](const ExprPtr &child) {
      if (child) deepest = std::max(deepest, child->depth);
    };
    see(node->a), see(node->b), see(node->c), see(node->d);
    for (const ExprPtr &arg : node->args) see(arg);
    for (const auto &kw : node->kwargs) see(kw.second);
    for (const auto &item : node->items) see(item.first), see(item.second);
    node->depth = deepest + 1;
    if (node->depth > max_depth_) return too_deep(node->line, "expressions", max_depth_);
    return {};
  }
  // Bounds the recursion itself (brackets that make no node, "not not not ...").
  Error enter(int line) const {
    if (depth_ > max_depth_) return too_deep(line, "expressions", max_depth_);
    return {};
  }

  Error conditional(ExprPtr *out) {
    NestingGuard guard(&depth_);
    if (Error e = enter(peek().line)) return e;
    if (Error e = parse_or(out)) return e;
    while (is_name("if")) {
      const int line = next().line;
      ExprPtr condition;
      if (Error e = parse_or(&condition)) return e;
      ExprPtr otherwise;
      if (is_name("else")) {
        next();
        if (Error e = conditional(&otherwise)) return e;
      }
      ExprPtr node = make(Expr::Kind::Conditional, line);
      node->a = std::move(*out);
      node->b = std::move(condition);
      node->c = std::move(otherwise);
      *out = std::move(node);
      if (Error e = finish(out->get())) return e;
    }
    return {};
  }

  Error parse_or(ExprPtr *out) {
    if (Error e = parse_and(out)) return e;
    while (is_name("or")) {
      const int line = next().line;
      ExprPtr right;
      if (Error e = parse_and(&right)) return e;
      *out = binary("or", std::move(*out), std::move(right), line);
      if (Error e = finish(out->get())) return e;
    }
    return {};
  }

  Error parse_and(ExprPtr *out) {
    if (Error e = parse_not(out)) return e;
    while (is_name("and")) {
      const int line = next().line;
      ExprPtr right;
      if (Error e = parse_not(&right)) return e;
      *out = binary("and", std::move(*out), std::move(right), line);
      if (Error e = finish(out->get())) return e;
    }
    return {};
  }

  Error parse_not(ExprPtr *out) {
    if (is_name("not")) {
      NestingGuard guard(&depth_);
      if (Error e = enter(peek().line)) return e;
      const int line = next().line;
      ExprPtr operand;
      if (Error e = parse_not(&operand)) return e;
      *out = make(Expr::Kind::Unary, line);
      (*out)->name = "not";
      (*out)->a = std::move(operand);
      return finish(out->get());
    }
    return compare(out);
  }

  Error compare(ExprPtr *out) {
    if (Error e = math1(out)) return e;
    while (true) {
      std::string op;
      if (is_op("==") || is_op("!=") || is_op("<") || is_op("<=") || is_op(">") || is_op(">=")) {
        op = peek().text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && is_name("in", 1)) {
        op = "not in";
        next();
        next();
      } else {
        return {};
      }
      ExprPtr right;
      const int line = peek().line;
      if (Error e = math1(&right)) return e;
      *out = binary(op, std::move(*out), std::move(right), line);
      if (Error e = finish(out->get())) return e;
    }
  }

  Error math1(ExprPtr *out) {
    if (Error e = concat(out)) return e;
    while (is_op("+") || is_op("-")) {
      const Token &op = next();
      ExprPtr right;
      if (Error e = concat(&right)) return e;
      *out = binary(op.text, std::move(*out), std::move(right), op.line);
      if (Error e = finish(out->get())) return e;
    }
    return {};
  }

  Error concat(ExprPtr *out) {
    if (Error e = math2(out)) return e;
    while (is_op("~")) {
      const int line = next().line;
      ExprPtr right;
      if (Error e = math2(&right)) return e;
      *out = binary("~", std::move(*out), std::move(right), line);
      if (Error e = finish(out->get())) return e;
    }
    return {};
  }

  Error math2(ExprPtr *out) {
    if (Error e = power(out)) return e;
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token &op = next();
      ExprPtr right;
      if (Error e = power(&right)) return e;
      *out = binary(op.text, std::move(*out), std::move(right), op.line);
      if (Error e = finish(out->get())) return e;
    }
    return {};
  }

  Error power(ExprPtr *out) {
    if (Error e = unary(out, true)) return e;
    while (is_op("**")) {
      const int line = next().line;
      ExprPtr right;
      if (Error e = unary(&right, true)) return e;
      *out = binary("**", std::move(*out), std::move(right), line);
      if (Error e = finish(out->get())) return e;
    }
    return {};
  }

  Error unary(ExprPtr *out, bool with_filter) {
    if (is_op("-") || is_op("+")) {
      NestingGuard guard(&depth_);
      if (Error e = enter(peek().line)) return e;
      const Token &op = next();
      ExprPtr operand;
      if (Error e = unary(&operand, false)) return e;
      *out = make(Expr::Kind::Unary, op.line);
      (*out)->name = op.text;
      (*out)->a = std::move(operand);
      if (Error e = finish(out->get())) return e;
    } else if (Error e = primary(out)) {
      return e;
    }
    if (Error e = postfix(out)) return e;
    if (with_filter)
      if (Error e = filters_and_tests(out)) return e;
    return {};
  }

  Error primary(ExprPtr *out) {
    const Token &t = peek();
    switch (t.type) {
      case Token::Type::Name: {
        next();
        if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
          *out = make(Expr::Kind::Literal, t.line);
          (*out)->literal = Value::from_bool(t.text[0] == 't' || t.text[0] == 'T');
        } else if (t.text == "none" || t.text == "None") {
          *out = make(Expr::Kind::Literal, t.line);
          (*out)->literal = Value::none();
        } else {
          *out = make(Expr::Kind::Name, t.line);
          (*out)->name = t.text;
        }
        return {};
      }
      case Token::Type::String: {
        std::string text;
        while (peek().type == Token::Type::String) text += next().text;  // adjacent strings join
        *out = make(Expr::Kind::Literal, t.line);
        (*out)->literal = Value::from_string(std::move(text));
        return {};
      }
      case Token::Type::Integer:
        next();
        *out = make(Expr::Kind::Literal, t.line);
        (*out)->literal = Value::from_int(t.integer);
        return {};
      case Token::Type::Float:
        next();
        *out = make(Expr::Kind::Literal, t.line);
        (*out)->literal = Value::from_float(t.real);
        return {};
      case Token::Type::Operator:
        if (t.text == "(") {
          next();
          if (is_op(")")) {  // empty tuple
            next();
            *out = make(Expr::Kind::ListLiteral, t.line);
            return {};
          }
          ExprPtr first;
          if (Error e = expression(&first)) return e;
          if (is_op(",")) {  // a tuple: evaluated as a list
            ExprPtr tuple = make(Expr::Kind::ListLiteral, t.line);
            tuple->args.push_back(std::move(first));
            while (is_op(",")) {
              next();
              if (is_op(")")) break;
              ExprPtr item;
              if (Error e = expression(&item)) return e;
              tuple->args.push_back(std::move(item));
            }
            first = std::move(tuple);
          }
          if (Error e = expect_op(")")) return e;
          *out = std::move(first);
          return finish(out->get());
        }
        if (t.text == "[") {
          next();
          ExprPtr list = make(Expr::Kind::ListLiteral, t.line);
          while (!is_op("]")) {
            ExprPtr item;
            if (Error e = expression(&item)) return e;
            list->args.push_back(std::move(item));
            if (!is_op(",")) break;
            next();
          }
          if (Error e = expect_op("]")) return e;
          *out = std::move(list);
          return finish(out->get());
        }
        if (t.text == "{") {
          next();
          ExprPtr dict = make(Expr::Kind::DictLiteral, t.line);
          while (!is_op("}")) {
            ExprPtr key, value;
            if (Error e = expression(&key)) return e;
            if (Error e = expect_op(":")) return e;
            if (Error e = expression(&value)) return e;
            dict->items.emplace_back(std::move(key), std::move(value));
            if (!is_op(",")) break;
            next();
          }
          if (Error e = expect_op("}")) return e;
          *out = std::move(dict);
          if (Error e = finish(out->get())) return e;
          return {};
        }
        break;
      default: break;
    }
    return syntax_error(t.line, "unexpected " + describe(t));
  }

  Error call_arguments(Expr *call) {
    if (Error e = expect_op("(")) return e;
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) return unsupported(peek().line, "*args / **kwargs in calls are not supported");
      if (peek().type == Token::Type::Name && is_op("=", 1)) {
        std::string key = next().text;
        next();
        ExprPtr value;
        if (Error e = expression(&value)) return e;
        call->kwargs.emplace_back(std::move(key), std::move(value));
      } else {
        if (!call->kwargs.empty()) return syntax_error(peek().line, "positional argument after keyword argument");
        ExprPtr value;
        if (Error e = expression(&value)) return e;
        call->args.push_back(std::move(value));
      }
      if (!is_op(",")) break;
      next();
    }
    return expect_op(")");
  }

  Error postfix(ExprPtr *out) {
    while (true) {
      if (is_op(".")) {
        const int line = next().line;
        const Token &attr = next();
        if (attr.type == Token::Type::Integer) {
          ExprPtr index = make(Expr::Kind::Literal, line);
          index->literal = Value::from_int(attr.integer);
          ExprPtr node = make(Expr::Kind::GetItem, line);
          node->a = std::move(*out);
          node->b = std::move(index);
          *out = std::move(node);
          if (Error e = finish(out->get())) return e;
          continue;
        }
        if (attr.type != Token::Type::Name) return syntax_error(line, "expected an attribute name after '.'");
        ExprPtr node = make(Expr::Kind::GetAttr, line);
        node->a = std::move(*out);
        node->name = attr.text;
        *out = std::move(node);
        if (Error e = finish(out->get())) return e;
      } else if (is_op("[")) {
        const int line = next().line;
        ExprPtr parts[3];
        int colons = 0;
        while (!is_op("]")) {
          if (is_op(":")) {
            if (++colons > 2) return syntax_error(line, "too many ':' in a slice");
            next();
            continue;
          }
          if (parts[colons]) return syntax_error(line, "expected ':' or ']' in a subscript");
          if (Error e = expression(&parts[colons])) return e;
        }
        next();
        if (colons == 0 && !parts[0]) return syntax_error(line, "empty subscript");
        ExprPtr node = make(colons == 0 ? Expr::Kind::GetItem : Expr::Kind::Slice, line);
        node->a = std::move(*out);
        node->b = std::move(parts[0]);
        node->c = std::move(parts[1]);
        node->d = std::move(parts[2]);
        *out = std::move(node);
        if (Error e = finish(out->get())) return e;
      } else if (is_op("(")) {
        const int line = peek().line;
        ExprPtr node = make(Expr::Kind::Call, line);
        if ((*out)->kind == Expr::Kind::Name) {
          const bool is_macro = macros_ != nullptr && macros_->count((*out)->name) != 0;
          if (!is_macro && !is_known_global_function((*out)->name))
            return unsupported(line, "function \"" + (*out)->name +
                                         "\" is not supported (supported: raise_exception, range, namespace, dict, "
                                         "strftime_now, and the template's own macros)");
        } else if ((*out)->kind == Expr::Kind::GetAttr) {
          if (!is_known_method((*out)->name))
            return unsupported(line, "method \"." + (*out)->name +
                                         "()\" is not supported (supported: strip, lstrip, rstrip, split, "
                                         "startswith, endswith, upper, lower, title, capitalize, replace, items, "
                                         "keys, values, get)");
        } else {
          return unsupported(line, "only named functions and methods can be called");
        }
        node->a = std::move(*out);
        if (Error e = call_arguments(node.get())) return e;
        *out = std::move(node);
        if (Error e = finish(out->get())) return e;
      } else {
        return {};
      }
    }
  }

  Error filters_and_tests(ExprPtr *out) {
    while (true) {
      if (is_op("|")) {
        const int line = next().line;
        if (peek().type != Token::Type::Name) return syntax_error(line, "expected a filter name after '|'");
        std::string name = next().text;
        if (!is_known_filter(name))
          return unsupported(line, "filter \"" + name +
                                       "\" is not supported (supported: abs, capitalize, count, d, default, first, "
                                       "float, int, items, join, last, length, list, lower, replace, reverse, safe, "
                                       "string, title, tojson, trim, upper)");
        ExprPtr node = make(Expr::Kind::Filter, line);
        node->name = std::move(name);
        node->a = std::move(*out);
        if (is_op("("))
          if (Error e = call_arguments(node.get())) return e;
        *out = std::move(node);
        if (Error e = finish(out->get())) return e;
      } else if (is_name("is")) {
        const int line = next().line;
        ExprPtr node = make(Expr::Kind::Test, line);
        if (is_name("not")) {
          next();
          node->negated = true;
        }
        if (peek().type != Token::Type::Name) return syntax_error(line, "expected a test name after 'is'");
        node->name = next().text;
        if (!is_known_test(node->name))
          return unsupported(line, "test \"" + node->name +
                                       "\" is not supported (supported: defined, undefined, none, string, number, "
                                       "integer, float, boolean, true, false, mapping, sequence, iterable, even, "
                                       "odd, divisibleby, eq, equalto, ne, lower, upper)");
        node->a = std::move(*out);
        if (is_op("(")) {
          if (Error e = call_arguments(node.get())) return e;
        } else {
          const Token &t = peek();
          const bool takes_argument =
              (t.type == Token::Type::Name || t.type == Token::Type::String || t.type == Token::Type::Integer ||
               t.type == Token::Type::Float || is_op("[") || is_op("{")) &&
              !is_name("else") && !is_name("or") && !is_name("and");
          if (takes_argument) {
            if (is_name("is")) return syntax_error(line, "'is' cannot follow a test");
            ExprPtr argument;
            if (Error e = primary(&argument)) return e;
            if (Error e = postfix(&argument)) return e;
            node->args.push_back(std::move(argument));
          }
        }
        *out = std::move(node);
        if (Error e = finish(out->get())) return e;
      } else {
        return {};
      }
    }
  }

  const std::vector<Token> &tokens_;
  size_t index_ = 0;
  uint32_t max_depth_;
  const std::set<std::string> *macros_;
  uint32_t depth_ = 0;  // current recursion depth of conditional() / parse_not() / unary()
};

// ---- statements ----

class StatementParser {
 public:
  StatementParser(std::vector<Segment> segments, uint32_t max_depth)
      : segments_(std::move(segments)), max_depth_(max_depth) {}

  Error parse(Body *out) {
    // A macro may be called before its definition in the source (from another macro's body,
    // say): the names are collected first, and a call that runs before the definition did is
    // the renderer's "'name' is undefined", as in Jinja.
    for (const Segment &segment : segments_) {
      if (segment.kind == Segment::Kind::Block && segment.tokens.size() >= 2 &&
          segment.tokens[0].type == Token::Type::Name && segment.tokens[0].text == "macro" &&
          segment.tokens[1].type == Token::Type::Name)
        macro_names_.insert(segment.tokens[1].text);
    }
    std::string terminator;
    if (Error e = body(out, {}, &terminator)) return e;
    return {};
  }

 private:
  // Parses statements until a block whose keyword is in `ends` (left unconsumed and named
  // in *terminator), or the end of the template (an error when `ends` is not empty).
  Error body(Body *out, const std::set<std::string> &ends, std::string *terminator) {
    while (index_ < segments_.size()) {
      Segment &segment = segments_[index_];
      if (segment.kind == Segment::Kind::Data) {
        auto stmt = std::make_unique<Stmt>();
        stmt->kind = Stmt::Kind::Text;
        stmt->line = segment.line;
        stmt->text = std::move(segment.text);
        out->push_back(std::move(stmt));
        ++index_;
        continue;
      }
      if (segment.kind == Segment::Kind::Output) {
        ExprParser p(segment.tokens, max_depth_, &macro_names_);
        auto stmt = std::make_unique<Stmt>();
        stmt->kind = Stmt::Kind::Output;
        stmt->line = segment.line;
        if (Error e = p.expression(&stmt->expr)) return e;
        if (Error e = p.expect_end()) return e;
        out->push_back(std::move(stmt));
        ++index_;
        continue;
      }
      const Token &keyword = segment.tokens[0];
      if (keyword.type != Token::Type::Name) return syntax_error(segment.line, "a block tag must start with a keyword");
      if (ends.count(keyword.text)) {
        *terminator = keyword.text;
        return {};
      }
      ++index_;
      StmtPtr stmt;
      if (Error e = statement(segment, &stmt)) return e;
      out->push_back(std::move(stmt));
    }
    if (!ends.empty()) {
      std::string expected;
      for (const std::string &end : ends) expected += (expected.empty() ? "" : " or ") + ("{% " + end + " %}");
      return syntax_error(segments_.empty() ? 1 : segments_.back().line, "missing " + expected);
    }
    return {};
  }

  Error statement(const Segment &segment, StmtPtr *out) {
    // Each statement that holds a body ({% if %}, {% for %}, {% set %}...{% endset %}) is one
    // level: body() and statement() recurse once per level.
    NestingGuard guard(&block_depth_);
    if (block_depth_ > max_depth_)
      return too_deep(segment.line, "blocks ({% if %}, {% for %}, {% set %})", max_depth_);
    ExprParser p(segment.tokens, max_depth_, &macro_names_);
    const std::string keyword = p.next().text;
    auto stmt = std::make_unique<Stmt>();
    stmt->line = segment.line;
    if (keyword == "if") {
      stmt->kind = Stmt::Kind::If;
      ExprPtr condition;
      if (Error e = p.expression(&condition)) return e;
      if (Error e = p.expect_end()) return e;
      while (true) {
        Body branch;
        std::string terminator;
        if (Error e = body(&branch, {"elif", "else", "endif"}, &terminator)) return e;
        stmt->branches.emplace_back(std::move(condition), std::move(branch));
        const Segment &end = segments_[index_++];
        ExprParser q(end.tokens, max_depth_, &macro_names_);
        q.next();
        if (terminator == "elif") {
          if (Error e = q.expression(&condition)) return e;
          if (Error e = q.expect_end()) return e;
          continue;
        }
        if (Error e = q.expect_end()) return e;
        if (terminator == "else") {
          if (Error e = body(&stmt->else_body, {"endif"}, &terminator)) return e;
          ExprParser r(segments_[index_++].tokens, max_depth_, &macro_names_);
          r.next();
          if (Error e = r.expect_end()) return e;
        }
        break;
      }
    } else if (keyword == "for") {
      stmt->kind = Stmt::Kind::For;
      while (true) {
        if (p.peek().type != Token::Type::Name) return syntax_error(segment.line, "expected a loop variable name");
        stmt->targets.push_back(p.next().text);
        if (!p.is_op(",")) break;
        p.next();
      }
      if (!p.is_name("in")) return syntax_error(segment.line, "expected 'in' in the for tag");
      p.next();
      if (Error e = p.or_expression(&stmt->expr)) return e;
      if (p.is_name("if")) {
        p.next();
        if (Error e = p.expression(&stmt->filter)) return e;
      }
      if (p.is_name("recursive")) return unsupported(segment.line, "recursive for loops are not supported");
      if (Error e = p.expect_end()) return e;
      std::string terminator;
      NestingGuard in_loop(&scope_depth_);
      if (Error e = body(&stmt->body, {"else", "endfor"}, &terminator)) return e;
      ++index_;
      if (terminator == "else") {
        if (Error e = body(&stmt->else_body, {"endfor"}, &terminator)) return e;
        ++index_;
      }
    } else if (keyword == "set") {
      if (p.peek().type != Token::Type::Name) return syntax_error(segment.line, "expected a variable name after set");
      stmt->targets.push_back(p.next().text);
      if (p.is_op(".")) {
        p.next();
        if (p.peek().type != Token::Type::Name) return syntax_error(segment.line, "expected an attribute name");
        stmt->set_attribute = p.next().text;
      }
      if (p.is_op(",")) return unsupported(segment.line, "set with several targets is not supported");
      if (p.at_end()) {
        if (!stmt->set_attribute.empty()) return unsupported(segment.line, "block set of an attribute is not supported");
        stmt->kind = Stmt::Kind::SetBlock;
        std::string terminator;
        NestingGuard in_block(&scope_depth_);
        if (Error e = body(&stmt->body, {"endset"}, &terminator)) return e;
        ++index_;
      } else {
        stmt->kind = Stmt::Kind::Set;
        if (Error e = p.expect_op("=")) return e;
        if (Error e = p.expression(&stmt->expr)) return e;
        if (p.is_op(",")) {  // `set x = a, b` makes a tuple
          ExprPtr tuple = std::make_unique<Expr>();
          tuple->kind = Expr::Kind::ListLiteral;
          tuple->line = segment.line;
          tuple->args.push_back(std::move(stmt->expr));
          while (p.is_op(",")) {
            p.next();
            ExprPtr item;
            if (Error e = p.expression(&item)) return e;
            tuple->args.push_back(std::move(item));
          }
          stmt->expr = std::move(tuple);
        }
        if (Error e = p.expect_end()) return e;
      }
    } else if (keyword == "macro") {
      if (Error e = macro(segment, &p, stmt.get())) return e;
    } else if (keyword == "break" || keyword == "continue") {
      stmt->kind = keyword == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue;
      if (Error e = p.expect_end()) return e;
    } else if (keyword == "elif" || keyword == "else" || keyword == "endif" || keyword == "endfor" ||
               keyword == "endset" || keyword == "endmacro") {
      return syntax_error(segment.line, "{% " + keyword + " %} without its opening tag");
    } else {
      return unsupported(segment.line, "{% " + keyword + " %} is not supported (supported: " +
                                           std::string(kSupportedStatements) + ")");
    }
    *out = std::move(stmt);
    return {};
  }

  // {% macro name(param, param=default, ...) %} body {% endmacro %}. Macros are defined
  // where the template's top-level variables live (at the top level or inside {% if %}), the
  // only place real templates define them; one inside a loop, a block set or another macro
  // would be local to it in Jinja, and is refused.
  Error macro(const Segment &segment, ExprParser *p, Stmt *stmt) {
    if (scope_depth_ > 0) {
      return unsupported(segment.line,
                         "{% macro %} inside a for loop, a block set or a macro is not supported (define it at the "
                         "top level)");
    }
    stmt->kind = Stmt::Kind::Macro;
    if (p->peek().type != Token::Type::Name) return syntax_error(segment.line, "expected a macro name");
    stmt->targets.push_back(p->next().text);
    if (Error e = p->expect_op("(")) return e;
    bool defaults = false;
    while (!p->is_op(")")) {
      if (p->peek().type != Token::Type::Name) return syntax_error(segment.line, "expected a parameter name");
      std::string name = p->next().text;
      for (const auto &existing : stmt->params)
        if (existing.first == name) return syntax_error(segment.line, "duplicate parameter '" + name + "'");
      ExprPtr fallback;
      if (p->is_op("=")) {
        p->next();
        if (Error e = p->expression(&fallback)) return e;
        defaults = true;
      } else if (defaults) {
        return syntax_error(segment.line, "a parameter without a default follows one with a default");
      }
      stmt->params.emplace_back(std::move(name), std::move(fallback));
      if (p->is_op(",")) {
        p->next();
      } else if (!p->is_op(")")) {
        return syntax_error(segment.line, "expected ',' or ')' in the macro's parameters");
      }
    }
    p->next();
    if (Error e = p->expect_end()) return e;
    std::string terminator;
    NestingGuard in_macro(&scope_depth_);
    if (Error e = body(&stmt->body, {"endmacro"}, &terminator)) return e;
    ExprParser end(segments_[index_++].tokens, max_depth_, &macro_names_);
    end.next();
    if (end.peek().type == Token::Type::Name && end.peek().text == stmt->targets[0]) end.next();  // {% endmacro name %}
    return end.expect_end();
  }

  std::vector<Segment> segments_;
  size_t index_ = 0;
  uint32_t max_depth_;
  uint32_t block_depth_ = 0;
  std::set<std::string> macro_names_;
  uint32_t scope_depth_ = 0;  // for loops, block sets and macro bodies around the current statement
};

}  // namespace

bool is_known_filter(const std::string &name) {
  static const std::set<std::string> kFilters = {"abs",   "capitalize", "count", "d",     "default", "first",
                                                 "float", "int",        "items", "join",  "last",    "length",
                                                 "list",  "lower",      "replace", "reverse", "safe", "string",
                                                 "title", "tojson",     "trim",  "upper"};
  return kFilters.count(name) != 0;
}

bool is_known_test(const std::string &name) {
  static const std::set<std::string> kTests = {"defined", "undefined", "none",    "string",   "number",      "integer",
                                               "float",   "boolean",   "true",    "false",    "mapping",     "sequence",
                                               "iterable", "even",     "odd",     "divisibleby", "eq",       "equalto",
                                               "ne",      "lower",     "upper"};
  return kTests.count(name) != 0;
}

bool is_known_global_function(const std::string &name) {
  return name == "raise_exception" || name == "range" || name == "namespace" || name == "dict" ||
         name == "strftime_now";
}

bool is_known_method(const std::string &name) {
  static const std::set<std::string> kMethods = {"strip", "lstrip", "rstrip", "split", "startswith", "endswith",
                                                 "upper", "lower",  "title",  "capitalize", "replace", "items",
                                                 "keys",  "values", "get"};
  return kMethods.count(name) != 0;
}

Error parse_template(std::string_view source, const ChatTemplateLimits &limits, Body *out) {
  out->clear();
  if (source.size() > limits.max_source_bytes)
    return make_error(ErrorKind::Unsupported,
                      util::strprintf("the source is %zu bytes, over the limit of %llu (ChatTemplateLimits::max_source_bytes)",
                                      source.size(), static_cast<unsigned long long>(limits.max_source_bytes)));
  if (!utf8_is_valid(source)) return make_error(ErrorKind::InvalidArgument, "the source is not valid UTF-8");
  std::vector<Segment> segments;
  if (Error e = lex_template(source, &segments)) return e;
  StatementParser parser(std::move(segments), limits.max_nesting_depth);
  return parser.parse(out);
}

}  // namespace colibri::tokenizer::jinja

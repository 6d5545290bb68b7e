// core/tokenizer/regex.cpp — PCRE2 wrapper (compile once, JIT, find all matches).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "tokenizer/utf8.h"
#include "util/strings.h"

namespace colibri::tokenizer {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof buffer) < 0) return util::strprintf("PCRE2 error %d", code);
  return reinterpret_cast<const char *>(buffer);
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data *data) const { pcre2_match_data_free(data); }
};

// ---- Oniguruma character classes -> PCRE2 ------------------------------------------------
// Oniguruma (what tokenizers compiles with) reads two class forms that PCRE2 10.42 reads
// differently without an error: a nested class, [a-z[0-9]] (union), and an intersection,
// [\p{L}&&[^\p{Han}]] (Kimi-K2's split pattern has it). PCRE2 takes the inner '[' and '&&' as
// literal characters and closes the class at the first ']', a different pattern. Classes that
// use either form are rewritten into groups that match the same single character: a union is
// an alternation of its parts, an intersection one lookahead per operand before the last, a
// negation a negative lookahead before "any character". Every other class is copied verbatim.

// A class read from the pattern: its operands (split at '&&'), each a run of plain class
// items (copied into one PCRE2 class) plus the translations of its nested classes.
struct ClassOperand {
  std::string items;                // plain items: literals, ranges, escapes, [:posix:]
  std::vector<std::string> nested;  // translated nested classes, each matching one character
};

class ClassTranslator {
 public:
  explicit ClassTranslator(std::string_view pattern) : p_(pattern) {}

  bool translate(std::string *out, std::string *why) {
    std::string result;
    result.reserve(p_.size());
    while (i_ < p_.size()) {
      const char c = p_[i_];
      if (c == '\\') {
        copy_escape(&result);
      } else if (c == '[') {
        ++i_;
        std::string cls;
        if (!read_class(0, &cls)) {
          *why = why_;
          return false;
        }
        result += cls;
      } else {
        result += c;
        ++i_;
      }
    }
    *out = std::move(result);
    return true;
  }

 private:
  static constexpr int kMaxDepth = 16;  // nested classes; real patterns use one level

  // Copies a backslash escape (\p{..}, \x{..} keep their braces) to `out`.
  void copy_escape(std::string *out) {
    *out += p_[i_++];
    if (i_ >= p_.size()) return;
    const char kind = p_[i_];
    *out += p_[i_++];
    if ((kind == 'p' || kind == 'P' || kind == 'x' || kind == 'o') && i_ < p_.size() && p_[i_] == '{') {
      while (i_ < p_.size()) {
        const char ch = p_[i_++];
        *out += ch;
        if (ch == '}') break;
      }
    }
  }

  // Reads a class whose '[' was consumed; writes its PCRE2 form (a class or a group).
  bool read_class(int depth, std::string *out) {
    if (depth >= kMaxDepth) {
      why_ = "character classes nested more than " + std::to_string(kMaxDepth) + " deep";
      return false;
    }
    const size_t open = i_ - 1;
    bool negated = false;
    if (i_ < p_.size() && p_[i_] == '^') {
      negated = true;
      ++i_;
    }
    std::vector<ClassOperand> operands(1);
    bool first = true;  // a ']' first in the class is a literal, in both engines
    bool rewritten = false;
    while (true) {
      if (i_ >= p_.size()) {
        // Unterminated: hand PCRE2 the rest as written, it reports the error.
        *out = std::string(p_.substr(open));
        return true;
      }
      const char c = p_[i_];
      if (c == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      if (c == '\\') {
        copy_escape(&operands.back().items);
      } else if (c == '[' && i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
        // A POSIX bracket, [:alpha:] or [:^alpha:]: copied to its closing ":]".
        const size_t close = p_.find(":]", i_ + 2);
        const size_t end = close == std::string_view::npos ? p_.size() : close + 2;
        operands.back().items += p_.substr(i_, end - i_);
        i_ = end;
      } else if (c == '[') {
        ++i_;
        std::string inner;
        if (!read_class(depth + 1, &inner)) return false;
        operands.back().nested.push_back(std::move(inner));
        rewritten = true;
      } else if (c == '&' && i_ + 1 < p_.size() && p_[i_ + 1] == '&') {
        i_ += 2;
        operands.emplace_back();
        rewritten = true;
      } else {
        operands.back().items += c;
        ++i_;
      }
    }
    if (!rewritten) {
      *out = std::string(p_.substr(open, i_ - open));
      return true;
    }
    // An empty operand ([a&&]) is an empty set in Oniguruma: it matches nothing.
    std::string positive = "(?:";
    for (size_t k = 0; k < operands.size(); ++k) {
      const std::string u = union_of(operands[k]);
      positive += k + 1 < operands.size() ? "(?=" + u + ")" : u;
    }
    positive += ")";
    *out = negated ? "(?:(?!" + positive + ")[\\s\\S])" : positive;
    return true;
  }

  static std::string union_of(const ClassOperand &operand) {
    std::vector<std::string> parts;
    if (!operand.items.empty()) parts.push_back("[" + operand.items + "]");
    for (const std::string &n : operand.nested) parts.push_back(n);
    if (parts.empty()) return "(?!)";
    if (parts.size() == 1) return parts[0];
    std::string u = "(?:";
    for (size_t k = 0; k < parts.size(); ++k) u += (k ? "|" : "") + parts[k];
    return u + ")";
  }

  std::string_view p_;
  size_t i_ = 0;
  std::string why_;
};

}  // namespace

std::string translate_oniguruma_classes(std::string_view pattern, Error *error) {
  std::string out, why;
  if (!ClassTranslator(pattern).translate(&out, &why)) {
    *error = make_error(ErrorKind::Unsupported, "regex /" + std::string(pattern) + "/: " + why);
    return {};
  }
  return out;
}

std::unique_ptr<Regex> Regex::compile(std::string_view pattern, std::string_view what, Error *error) {
  Error translate_error;
  const std::string pcre_pattern = translate_oniguruma_classes(pattern, &translate_error);
  if (translate_error) {
    *error = make_error(ErrorKind::Unsupported,
                        util::strprintf("tokenizer.json: %.*s: %s", static_cast<int>(what.size()), what.data(),
                                        translate_error.message.c_str()));
    return nullptr;
  }
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code *code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre_pattern.data()), pcre_pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    *error = make_error(ErrorKind::Unsupported,
                        util::strprintf("tokenizer.json: %.*s /%.*s/ does not compile with PCRE2 at offset %zu%s: %s",
                                        static_cast<int>(what.size()), what.data(), static_cast<int>(pattern.size()),
                                        pattern.data(), static_cast<size_t>(error_offset),
                                        pcre_pattern == pattern ? "" : " of its PCRE2 form", pcre2_message(error_code).c_str()));
    return nullptr;
  }
  // JIT is an optimisation only: when it is unavailable pcre2_match interprets the pattern.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  std::unique_ptr<Regex> regex(new Regex());
  regex->pattern_ = std::string(pattern);
  regex->what_ = std::string(what);
  regex->code_ = code;
  return regex;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code *>(code_)); }

Error Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>> *matches) const {
  matches->clear();
  return for_each_match(text, [matches](size_t start, size_t end) {
    matches->emplace_back(start, end);
    return Error();
  });
}

Error Regex::for_each_match(std::string_view text, const std::function<Error(size_t, size_t)> &on_match) const {
  auto *code = static_cast<pcre2_code *>(code_);
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> data(pcre2_match_data_create_from_pattern(code, nullptr));
  if (!data) return make_error(ErrorKind::OutOfMemory, "tokenizer: cannot allocate PCRE2 match data");
  const auto *subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t search_from = 0;
  size_t last_end = SIZE_MAX;
  while (search_from <= text.size()) {
    // The text was validated (or repaired) before it got here: skip PCRE2's own UTF check.
    int rc = pcre2_match(code, subject, text.size(), search_from, PCRE2_NO_UTF_CHECK, data.get(), nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // Very long runs can exhaust the JIT's default stack; the interpreter uses the heap.
      rc = pcre2_match(code, subject, text.size(), search_from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, data.get(),
                       nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return make_error(ErrorKind::Internal,
                        util::strprintf("tokenizer: matching the %s /%s/ failed at byte %zu: %s", what_.c_str(),
                                        pattern_.c_str(), search_from, pcre2_message(rc).c_str()));
    }
    const PCRE2_SIZE *ovector = pcre2_get_ovector_pointer(data.get());
    const size_t start = ovector[0];
    const size_t end = ovector[1];
    if (start == end && start == last_end) {
      // An empty match glued to the previous match: step over one character and retry.
      if (start >= text.size()) break;
      search_from = start + utf8_sequence_length(static_cast<unsigned char>(text[start]));
      continue;
    }
    if (Error e = on_match(start, end)) return e;
    last_end = end;
    if (end > start) {
      search_from = end;
    } else {
      if (end >= text.size()) break;
      search_from = end + utf8_sequence_length(static_cast<unsigned char>(text[end]));
    }
  }
  return {};
}

}  // namespace colibri::tokenizer

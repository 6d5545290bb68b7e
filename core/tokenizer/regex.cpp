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

}  // namespace

std::unique_ptr<Regex> Regex::compile(std::string_view pattern, std::string_view what, Error *error) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code *code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    *error = make_error(ErrorKind::Unsupported,
                        util::strprintf("tokenizer.json: %.*s /%.*s/ does not compile with PCRE2 at offset %zu: %s",
                                        static_cast<int>(what.size()), what.data(), static_cast<int>(pattern.size()),
                                        pattern.data(), static_cast<size_t>(error_offset),
                                        pcre2_message(error_code).c_str()));
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

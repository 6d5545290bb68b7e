// core/tokenizer/regex.h — the PCRE2 regular expressions of tokenizer.json files.
//
// Hugging Face `tokenizers` compiles its Split / Replace patterns with Oniguruma. We use
// PCRE2 in UTF mode with Unicode properties (PCRE2_UTF | PCRE2_UCP), which gives \p{L},
// \p{N}, Unicode \s and (?i:...) the same meaning for the patterns the supported families
// ship (GPT-2, Qwen2, Llama 3, DeepSeek-V3, GLM-4.5 and o200k style splits). Oniguruma's
// nested classes and class intersections ([x[y]], [x&&[^y]], Kimi-K2's split), which PCRE2
// would read as different patterns without an error, are rewritten first
// (translate_oniguruma_classes). Patterns are JIT-compiled when the platform allows it. A
// compiled Regex is immutable and may be used from several threads at once.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/error.h"

namespace colibri::tokenizer {

// The PCRE2 form of an Oniguruma pattern: each character class that nests a class or has a
// '&&' intersection becomes a group matching the same single character (a union an
// alternation, an intersection lookaheads, a negation a negative lookahead before any
// character); everything else is copied unchanged. Fails (Unsupported) only for classes nested
// past a fixed depth.
std::string translate_oniguruma_classes(std::string_view pattern, Error *error);

class Regex {
 public:
  // `what` names the pattern's owner in error messages ("pre_tokenizer Split pattern").
  static std::unique_ptr<Regex> compile(std::string_view pattern, std::string_view what, Error *error);
  ~Regex();
  Regex(const Regex &) = delete;
  Regex &operator=(const Regex &) = delete;

  // Every non-overlapping match in `text` (valid UTF-8), left to right, as [start, end) byte
  // offsets. Like Oniguruma's find_iter, an empty match right where the previous match ended
  // is skipped and the search moves on by one character.
  Error find_all(std::string_view text, std::vector<std::pair<size_t, size_t>> *matches) const;
  // The same matches handed one at a time to `on_match(start, end)`, which returns an Error
  // to stop early.
  Error for_each_match(std::string_view text, const std::function<Error(size_t, size_t)> &on_match) const;

  const std::string &pattern() const { return pattern_; }

 private:
  Regex() = default;
  std::string pattern_;
  std::string what_;
  void *code_ = nullptr;  // pcre2_code_8*
};

}  // namespace colibri::tokenizer

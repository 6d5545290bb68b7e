// core/tokenizer/added_tokens.h — finding added/special tokens in text before the model.
//
// Semantics from tokenizers/src/tokenizer/added_vocabulary.rs: tokens are found leftmost-
// longest (its Aho-Corasick MatchKind::LeftmostLongest); a match of a special token is
// passed over when special tokens are to be read as text, and so is a single_word token
// glued to a word character; lstrip/rstrip widen the match over neighbouring whitespace.
// Tokens with normalized=false are looked for in the raw text, the others in the
// normalized text (their content normalized the same way).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace colibri::tokenizer {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

class AddedTokenMatcher {
 public:
  struct Segment {
    size_t start;
    size_t end;
    int32_t id;  // -1: ordinary text
  };

  // `patterns[i]` is the text to look for on behalf of tokens[i] (its content, normalized
  // when the token is). `word_regex` (\w) is needed only when a token is single_word.
  void build(std::vector<const AddedToken *> tokens, std::vector<std::string> patterns,
             std::shared_ptr<const Regex> word_regex);
  bool empty() const { return entries_.empty(); }

  // Cuts `text` into ordinary text and tokens (tokens' segments may include stripped
  // whitespace). Empty ordinary segments are not emitted.
  void split(std::string_view text, bool parse_special, std::vector<Segment> *out) const;

 private:
  struct Entry {
    std::string pattern;
    const AddedToken *token;
  };
  bool is_word_char_before(std::string_view text, size_t pos) const;
  bool is_word_char_after(std::string_view text, size_t pos) const;

  std::vector<Entry> entries_;
  // For each first byte, indices into entries_ longest pattern first.
  std::array<std::vector<uint32_t>, 256> by_first_byte_;
  std::shared_ptr<const Regex> word_regex_;
};

}  // namespace colibri::tokenizer

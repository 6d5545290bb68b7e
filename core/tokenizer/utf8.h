// core/tokenizer/utf8.h — UTF-8 helpers shared by the tokenizer and the chat template.
//
// Invalid input is repaired the way Python's bytes.decode('utf-8', 'replace') and Rust's
// String::from_utf8_lossy do: one U+FFFD per *maximal subpart* of an ill-formed sequence
// (Unicode 15, §3.9 "U+FFFD Substitution of Maximal Subparts"). The tokenizer fixtures were
// generated from text repaired that way, and Hugging Face's decoders repair their output
// bytes the same way, so one routine serves both directions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace colibri::tokenizer {

inline constexpr uint32_t kReplacementChar = 0xFFFD;
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

// Byte length of the sequence a lead byte starts (1..4); 1 for a continuation or invalid byte.
inline size_t utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 1;
}

// Length of the well-formed sequence starting at text[pos], or 0 when the bytes there are
// ill-formed or truncated.
size_t utf8_valid_sequence_at(std::string_view text, size_t pos);

bool utf8_is_valid(std::string_view text);

// A copy of `bytes` with every maximal ill-formed subpart replaced by U+FFFD.
std::string utf8_replace_invalid(std::string_view bytes);

// Decodes the code point at text[pos] of VALID UTF-8; *length receives its byte length.
uint32_t utf8_decode(std::string_view text, size_t pos, size_t *length);

void utf8_append(std::string *out, uint32_t code_point);

// Unicode White_Space (what Rust's char::is_whitespace tests).
bool is_unicode_whitespace(uint32_t code_point);

// Python's str.isspace(): White_Space plus the information separators U+001C..U+001F
// (what Jinja's `trim` filter and `-` whitespace control strip).
bool is_python_space(uint32_t code_point);

}  // namespace colibri::tokenizer

// core/tokenizer/utf8.cpp — UTF-8 validation, repair and code point helpers.
#include "tokenizer/utf8.h"

namespace colibri::tokenizer {

namespace {

// The allowed range of the second byte for each lead byte (Unicode Table 3-7): this is what
// excludes overlong forms (E0 80..9F, F0 80..8F), surrogates (ED A0..BF) and > U+10FFFF.
void second_byte_range(unsigned char lead, unsigned char *low, unsigned char *high) {
  *low = 0x80;
  *high = 0xBF;
  if (lead == 0xE0) *low = 0xA0;
  else if (lead == 0xED) *high = 0x9F;
  else if (lead == 0xF0) *low = 0x90;
  else if (lead == 0xF4) *high = 0x8F;
}

// Number of bytes at text[pos] that form the longest prefix of a well-formed sequence
// (the "maximal subpart"), and whether that prefix is a complete sequence.
size_t maximal_subpart(std::string_view text, size_t pos, bool *complete) {
  const auto lead = static_cast<unsigned char>(text[pos]);
  const size_t need = utf8_sequence_length(lead);
  *complete = false;
  if (lead < 0x80) {
    *complete = true;
    return 1;
  }
  if (need == 1) return 1;  // continuation byte or C0, C1, F5..FF: a subpart of one byte
  size_t have = 1;
  unsigned char low = 0x80;
  unsigned char high = 0xBF;
  second_byte_range(lead, &low, &high);
  while (have < need && pos + have < text.size()) {
    const auto b = static_cast<unsigned char>(text[pos + have]);
    if (b < low || b > high) break;
    ++have;
    low = 0x80;
    high = 0xBF;
  }
  *complete = have == need;
  return have;
}

}  // namespace

size_t utf8_valid_sequence_at(std::string_view text, size_t pos) {
  bool complete = false;
  const size_t n = maximal_subpart(text, pos, &complete);
  return complete ? n : 0;
}

bool utf8_is_valid(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t n = utf8_valid_sequence_at(text, pos);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

std::string utf8_replace_invalid(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() + 8);
  size_t pos = 0;
  while (pos < bytes.size()) {
    bool complete = false;
    const size_t n = maximal_subpart(bytes, pos, &complete);
    if (complete) out.append(bytes.substr(pos, n));
    else out.append(kReplacementUtf8);
    pos += n;
  }
  return out;
}

uint32_t utf8_decode(std::string_view text, size_t pos, size_t *length) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  const size_t n = utf8_sequence_length(b0);
  *length = n;
  auto cont = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(text[pos + i]) & 0x3F); };
  switch (n) {
    case 2: return ((b0 & 0x1Fu) << 6) | cont(1);
    case 3: return ((b0 & 0x0Fu) << 12) | (cont(1) << 6) | cont(2);
    case 4: return ((b0 & 0x07u) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
    default: return b0;
  }
}

void utf8_append(std::string *out, uint32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_unicode_whitespace(uint32_t cp) {
  // PropList.txt White_Space (stable since Unicode 6.3).
  if (cp >= 0x09 && cp <= 0x0D) return true;
  switch (cp) {
    case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_python_space(uint32_t cp) {
  return is_unicode_whitespace(cp) || (cp >= 0x1C && cp <= 0x1F);
}

}  // namespace colibri::tokenizer

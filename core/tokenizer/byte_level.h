// core/tokenizer/byte_level.h — GPT-2's reversible byte <-> printable character map.
//
// Byte-level BPE (GPT-2, Qwen, OLMoE) never sees raw bytes: every byte is first replaced by
// a printable code point (`bytes_to_unicode()` in openai/gpt-2 encoder.py, `BYTES_CHAR` in
// tokenizers' byte_level.rs). Printable Latin-1 bytes map to themselves; the other 68 bytes
// map to U+0100.. in order. Space becomes "Ġ" (U+0120), newline "Ċ" (U+010A).
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace colibri::tokenizer {

class ByteLevelMap {
 public:
  static const ByteLevelMap &get();

  // The UTF-8 text (2 bytes at most) that stands for `byte`.
  const std::string &encode_byte(uint8_t byte) const { return byte_to_text_[byte]; }
  // The byte a code point stands for, or -1 when the code point is not part of the map.
  int decode_code_point(uint32_t code_point) const {
    return code_point < code_point_to_byte_.size() ? code_point_to_byte_[code_point] : -1;
  }

 private:
  ByteLevelMap();
  std::array<std::string, 256> byte_to_text_;
  std::array<int16_t, 324> code_point_to_byte_{};
};

}  // namespace colibri::tokenizer

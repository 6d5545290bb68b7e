// core/tokenizer/byte_level.cpp — builds GPT-2's bytes_to_unicode() table once.
#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace colibri::tokenizer {

const ByteLevelMap &ByteLevelMap::get() {
  static const ByteLevelMap map;
  return map;
}

ByteLevelMap::ByteLevelMap() {
  code_point_to_byte_.fill(-1);
  // Bytes that are printable in Latin-1 keep their own code point ('!'..'~', '¡'..'¬', '®'..'ÿ');
  // the rest take U+0100, U+0101, ... in byte order.
  auto keeps_itself = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
  uint32_t next_extra = 0x100;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = keeps_itself(b) ? static_cast<uint32_t>(b) : next_extra++;
    utf8_append(&byte_to_text_[static_cast<size_t>(b)], cp);
    code_point_to_byte_[cp] = static_cast<int16_t>(b);
  }
}

}  // namespace colibri::tokenizer

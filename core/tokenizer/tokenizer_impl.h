// core/tokenizer/tokenizer_impl.h — what a loaded Tokenizer holds (shared by the loader,
// tokenizer_json.cpp, and the encode/decode code, tokenizer.cpp). Not a public header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/components.h"
#include "tokenizer/tokenizer.h"

namespace colibri::tokenizer {

struct Tokenizer::Impl {
  BpeModel model;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  PostProcessor post_processor;
  Decoder decoder;

  std::vector<AddedToken> added_tokens;
  AddedTokenMatcher raw_matcher;         // added tokens with normalized=false
  AddedTokenMatcher normalized_matcher;  // added tokens with normalized=true
  TokenIndex added_index;                // content -> id

  // Per id, over [0, vocab_size): the token's text, whether the id exists, whether special.
  std::vector<std::string> id_text;
  std::vector<uint8_t> id_known;
  std::vector<uint8_t> id_special;
};

}  // namespace colibri::tokenizer

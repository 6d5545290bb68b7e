// core/tokenizer/tokenizer.h — text <-> token ids from a Hugging Face tokenizer.json.
//
// Owns: loading the `tokenizer.json` a checkpoint ships (the image embeds it verbatim),
// encoding text to ids and decoding ids to text with the same results as Hugging Face
// `tokenizers` 0.23 (tests/tokenizer/ compares against its committed output), and
// incremental decoding for streaming. Depends on: core/util, PCRE2, utf8proc, nlohmann-json.
//
// What is implemented (anything else in a tokenizer.json is refused at load with an error
// naming the component; nothing is approximated):
//   model           BPE (vocab; merges as "a b" strings or ["a", "b"] pairs; byte_fallback;
//                   unk_token + fuse_unk; ignore_merges; continuing_subword_prefix;
//                   end_of_word_suffix; dropout null or 0)
//   normalizer      Sequence, Prepend, Replace (String or Regex), NFC, NFD, NFKC, NFKD
//   pre_tokenizer   Sequence, ByteLevel (add_prefix_space, use_regex), Split (String or Regex
//                   pattern, all five behaviours, invert), Metaspace (replacement,
//                   prepend_scheme first/always/never or legacy add_prefix_space, split)
//   post_processor  TemplateProcessing (single), ByteLevel, RobertaProcessing, BertProcessing,
//                   Sequence
//   decoder         Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace
//   added_tokens    matched before the model, leftmost-longest, with single_word, lstrip,
//                   rstrip and normalized honoured
// `truncation` and `padding` are ignored: they are batch settings of the Python library
// (transformers turns them off too); the engine never truncates or pads a prompt.
//
// Text handling: encode() accepts any bytes. Ill-formed UTF-8 is first repaired with one
// U+FFFD per maximal ill-formed subpart (what Python's decode('utf-8', 'replace') does,
// which is how the fixtures' expected ids were made). decode() always returns valid UTF-8:
// byte sequences that do not form characters come out as U+FFFD, as in tokenizers.
//
// Thread safety: a Tokenizer is immutable after from_json() (its internal word cache is
// locked) and may be shared by any number of threads. A StreamDecoder is used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.h"

namespace colibri::tokenizer {

struct EncodeOptions {
  // Apply the post-processor's template (e.g. prepend BOS), as tokenizers'
  // encode(add_special_tokens=True) does.
  bool add_special_tokens = true;
  // Read special tokens written in the text ("<|im_end|>") as those tokens. Off by default:
  // user text is text, so a user cannot inject control tokens. Rendered chat templates need
  // it on. (tokenizers' default is on; its `encode_special_tokens=True` is our off.)
  // Added tokens that are not special are always matched, as in tokenizers.
  bool parse_special = false;
};

class Tokenizer {
 public:
  // Parses the text of a tokenizer.json. On failure returns null and sets *error (kind
  // Unsupported for a component this build lacks, Corrupt for malformed JSON or an
  // inconsistent vocabulary), with a message naming the component and field.
  static std::unique_ptr<Tokenizer> from_json(std::string_view json, Error *error);
  ~Tokenizer();
  Tokenizer(const Tokenizer &) = delete;
  Tokenizer &operator=(const Tokenizer &) = delete;

  // Replaces *ids with the ids of `text`.
  Error encode(std::string_view text, const EncodeOptions &options, std::vector<int32_t> *ids) const;

  // Replaces *text with the text of ids[0..n). skip_special drops special added tokens.
  // An id that is not in the vocabulary (above vocab_size(), or a gap in it) contributes no
  // text, as in tokenizers: models pad their vocabulary past the tokenizer's. A negative id
  // is an InvalidArgument error.
  Error decode(const int32_t *ids, size_t n, bool skip_special, std::string *text) const;

  // The vocabulary string of a token (e.g. "Ġworld", "▁the", "<0x0A>", "<|im_end|>"); empty
  // for an id that is not in the vocabulary. For an added token with normalized=true it is
  // the content normalized ("my token" -> "▁my▁token"), as tokenizers' id_to_token gives it
  // and decode() uses it.
  std::string_view token_text(int32_t id) const;
  // Largest id + 1, over the model vocabulary and the added tokens.
  size_t vocab_size() const;
  // The id of a vocabulary string or added token, or -1.
  int32_t token_id(std::string_view piece) const;
  // True for the ids decode's skip_special removes: special added tokens, by their string as
  // in tokenizers (so not a special token with normalized=true that its normalizer changes).
  bool is_special(int32_t id) const;

  struct Impl;  // tokenizer_impl.h

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Incremental decoding for streaming generation: push ids one at a time, get text pieces
// whose concatenation equals decode() of all ids pushed so far (once flushed).
//
// A piece never ends inside a character: while the decoded text ends in U+FFFD (an
// incomplete UTF-8 sequence, or a byte-fallback run not yet complete) the text is held back
// until a later id completes it, or until flush(). Decoders that depend on position (Strip
// and Metaspace drop the leading space of the whole text) are handled by decoding a small
// window of recent ids and emitting only the difference, the same method as tokenizers'
// DecodeStream, so the first piece has no spurious leading space and later pieces keep
// theirs. The tokenizer must outlive the decoder.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer &tokenizer, bool skip_special = false);

  // Adds one id. *out_piece receives the new text (often empty while bytes are pending).
  Error push(int32_t id, std::string *out_piece);
  // Emits whatever is held back (an incomplete sequence comes out as U+FFFD, as decode()
  // would give it) and resets the decoder for a new stream.
  Error flush(std::string *out_piece);

 private:
  const Tokenizer *tokenizer_;
  bool skip_special_;
  std::vector<int32_t> window_;  // ids whose text is partly or wholly emitted
  std::string prefix_;           // decode() of window_[0, prefix_index_)
  size_t prefix_index_ = 0;
  std::string scratch_;
};

}  // namespace colibri::tokenizer

// core/tokenizer/components.h — the pipeline stages a tokenizer.json declares, as data.
//
// Hugging Face `tokenizers` runs: added tokens -> normalizer -> pre-tokenizer -> model ->
// post-processor, and decodes with a decoder chain. Every stage here is a flat list of steps
// (a JSON "Sequence" is flattened at load), each step a plain struct whose fields are the
// JSON fields. tokenizer_json.cpp fills them and refuses what is not listed; the apply
// functions below reproduce tokenizers 0.23's semantics, citing its source files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"
#include "util/error.h"

namespace colibri::tokenizer {

// ---- normalizers (tokenizers/src/normalizers) ----------------------------------------------

struct NormalizerStep {
  enum class Kind { Prepend, ReplaceString, ReplaceRegex, Nfc, Nfd, Nfkc, Nfkd };
  Kind kind = Kind::Prepend;
  std::string pattern;                 // ReplaceString: the literal to find
  std::string content;                 // Prepend: the prefix; Replace*: the replacement
  std::shared_ptr<const Regex> regex;  // ReplaceRegex
};

struct Normalizer {
  std::vector<NormalizerStep> steps;
  Error apply(std::string *text) const;
};

// The Unicode versions behind the normal forms: utf8proc's (utf8proc_unicode_version()), the
// one whose newer characters normalizer_hf_unicode.inc lists (its table is complete for a
// utf8proc up to that version), and tokenizers' (whose normalization we reproduce).
const char *normalizer_unicode_version();
const char *normalizer_table_unicode_version();
const char *tokenizers_unicode_version();

// ---- pre-tokenizers (tokenizers/src/pre_tokenizers) ----------------------------------------

// tokenizers' SplitDelimiterBehavior.
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
enum class PrependScheme { First, Always, Never };

struct PreTokenizerStep {
  enum class Kind { ByteLevel, Split, Metaspace };
  Kind kind = Kind::ByteLevel;
  // ByteLevel
  bool add_prefix_space = false;
  std::shared_ptr<const Regex> regex;  // ByteLevel with use_regex (the GPT-2 split), or Split
  // Split
  std::string literal;  // Split with a String pattern (no regex)
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  // Metaspace
  std::string replacement;  // one character, UTF-8
  PrependScheme prepend_scheme = PrependScheme::Always;
  bool split = true;
};

// Receives each pre-token, in text order.
using PreTokenSink = std::function<Error(std::string_view pre_token)>;

struct PreTokenizer {
  std::vector<PreTokenizerStep> steps;
  // Pre-tokenizes `text` and hands every non-empty pre-token to `sink`, depth first (a
  // pre-token goes through all steps before the next one starts), so no list of all
  // pre-tokens of a long text is ever built. `at_input_start`: `text` begins at byte 0 of the
  // caller's text (what Metaspace's prepend_scheme "first" tests, through tokenizers'
  // offsets_original().0 == 0).
  Error run(std::string_view text, bool at_input_start, const PreTokenSink &sink) const;

 private:
  Error run_from(size_t step_index, std::string_view text, bool at_input_start, const PreTokenSink &sink) const;
};

// The [start, end) ranges that remain after splitting `text` at `matches` with `behavior`
// (tokenizers' NormalizedString::split). Exposed for tests.
std::vector<std::pair<size_t, size_t>> split_ranges(size_t text_size,
                                                    const std::vector<std::pair<size_t, size_t>> &matches,
                                                    SplitBehavior behavior, bool invert);

// ---- post-processors (tokenizers/src/processors) -------------------------------------------

struct PostProcessorStep {
  enum class Kind { Template, ByteLevel, ClsSep };
  Kind kind = Kind::Template;
  // Template: the "single" template; an item is either the sequence or special-token ids.
  struct Item {
    bool is_sequence = false;
    std::vector<int32_t> ids;
  };
  std::vector<Item> single;
  // ClsSep (RobertaProcessing, BertProcessing): cls ids, sep ids around the sequence.
  int32_t cls_id = -1;
  int32_t sep_id = -1;
};

struct PostProcessor {
  std::vector<PostProcessorStep> steps;
  // Adds the special tokens of a single sequence (called only when add_special_tokens).
  void apply(std::vector<int32_t> *ids) const;
};

// ---- decoders (tokenizers/src/decoders) ----------------------------------------------------

struct DecoderStep {
  enum class Kind { ByteLevel, ReplaceString, ReplaceRegex, ByteFallback, Fuse, Strip, Metaspace };
  Kind kind = Kind::Fuse;
  std::string pattern;                 // ReplaceString
  std::string content;                 // Replace*: replacement
  std::shared_ptr<const Regex> regex;  // ReplaceRegex
  uint32_t strip_char = ' ';           // Strip: the character removed
  size_t strip_start = 0;              // Strip: at most this many from the left of each token
  size_t strip_stop = 0;               // Strip: at most this many from the right
  uint32_t replacement = 0x2581;       // Metaspace: the "▁" character
  PrependScheme prepend_scheme = PrependScheme::Always;
};

struct Decoder {
  std::vector<DecoderStep> steps;
  bool present = false;  // without a decoder, tokens are joined with " " (tokenizers' default)
  // tokens -> text: runs the chain and concatenates the result.
  Error apply(std::vector<std::string> tokens, std::string *text) const;
};

}  // namespace colibri::tokenizer

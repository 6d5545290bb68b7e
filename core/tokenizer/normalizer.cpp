// core/tokenizer/normalizer.cpp — Prepend, Replace and the Unicode normal forms.
//
// The normal forms come from utf8proc (Debian libutf8proc-dev): it is small and has the
// composition tables; ICU would be 30 MB for the same four functions. tokenizers uses the
// unicode-normalization-alignments crate; both follow UAX #15, and results differ only for
// characters that one of the two Unicode versions does not know. tokenizers' tables are
// Unicode 9.0, utf8proc's newer: a character assigned since then (U+0EBA LAO SIGN PALI VIRAMA,
// Unicode 12) is to tokenizers a starter with no decomposition that composes with nothing, so
// its NFC does not reorder "\u0e81\u0ec8\u0eba" while utf8proc's does. The model was trained on
// tokenizers' ids, so we do as it does: the text between such characters is normalized piece
// by piece and they are copied unchanged (docs/tokenizer.md, "Unicode normalization").
#include "tokenizer/components.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>

#include <utf8proc.h>

#include "tokenizer/utf8.h"
#include "util/strings.h"

namespace colibri::tokenizer {

namespace {

struct CodePointRange {
  uint32_t first, last;
};
#include "tokenizer/normalizer_hf_unicode.inc"

bool unknown_to_tokenizers(uint32_t cp) {
  if (cp < kHfUnknownCodePoints[0].first) return false;  // the common case: Latin, Greek, Cyrillic ...
  const auto *end = std::end(kHfUnknownCodePoints);
  const auto *it = std::upper_bound(std::begin(kHfUnknownCodePoints), end, cp,
                                    [](uint32_t value, const CodePointRange &r) { return value < r.first; });
  return it != std::begin(kHfUnknownCodePoints) && cp <= std::prev(it)->last;
}

// Appends the normal form of `text` to *out.
Error utf8proc_form(std::string_view text, utf8proc_option_t options, const char *name, std::string *out) {
  if (text.empty()) return {};
  utf8proc_uint8_t *result = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t *>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &result,
                                          static_cast<utf8proc_option_t>(options | UTF8PROC_STABLE));
  if (n < 0) {
    return make_error(ErrorKind::Internal,
                      util::strprintf("tokenizer: %s normalization failed: %s", name, utf8proc_errmsg(n)));
  }
  out->append(reinterpret_cast<const char *>(result), static_cast<size_t>(n));
  std::free(result);
  return {};
}

bool is_ascii(std::string_view text) {
  for (char c : text)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

Error normal_form(std::string *text, utf8proc_option_t options, const char *name) {
  if (is_ascii(*text)) return {};  // every normal form leaves ASCII unchanged
  const std::string_view in = *text;
  std::string out;
  out.reserve(in.size());
  size_t piece = 0;  // start of the text not yet normalized
  for (size_t pos = 0; pos < in.size();) {
    size_t length = utf8_valid_sequence_at(in, pos);
    if (length == 0) {  // not reached from encode (it repairs the text first); utf8proc refuses it
      ++pos;
      continue;
    }
    if (length > 1 && unknown_to_tokenizers(utf8_decode(in, pos, &length))) {
      if (Error e = utf8proc_form(in.substr(piece, pos - piece), options, name, &out)) return e;
      out.append(in, pos, length);
      piece = pos + length;
    }
    pos += length;
  }
  if (piece == 0) {
    if (Error e = utf8proc_form(in, options, name, &out)) return e;
  } else if (piece < in.size()) {
    if (Error e = utf8proc_form(in.substr(piece), options, name, &out)) return e;
  }
  *text = std::move(out);
  return {};
}

void replace_literal(std::string *text, std::string_view pattern, std::string_view content) {
  if (pattern.empty() || text->find(pattern) == std::string::npos) return;
  std::string out;
  out.reserve(text->size());
  size_t pos = 0;
  for (size_t hit = text->find(pattern); hit != std::string::npos; hit = text->find(pattern, pos)) {
    out.append(*text, pos, hit - pos);
    out.append(content);
    pos = hit + pattern.size();
  }
  out.append(*text, pos, std::string::npos);
  *text = std::move(out);
}

Error replace_regex(std::string *text, const Regex &regex, std::string_view content) {
  std::vector<std::pair<size_t, size_t>> matches;
  if (Error e = regex.find_all(*text, &matches)) return e;
  if (matches.empty()) return {};
  std::string out;
  size_t pos = 0;
  for (const auto &[start, end] : matches) {
    out.append(*text, pos, start - pos);
    out.append(content);
    pos = end;
  }
  out.append(*text, pos, std::string::npos);
  *text = std::move(out);
  return {};
}

}  // namespace

const char *normalizer_unicode_version() { return utf8proc_unicode_version(); }
const char *normalizer_table_unicode_version() { return kHfUnknownCheckedAgainst; }
const char *tokenizers_unicode_version() { return kHfNormalizerUnicode; }

Error Normalizer::apply(std::string *text) const {
  for (const NormalizerStep &step : steps) {
    switch (step.kind) {
      case NormalizerStep::Kind::Prepend:
        // normalizers/prepend.rs: only a non-empty string gets the prefix.
        if (!text->empty()) text->insert(0, step.content);
        break;
      case NormalizerStep::Kind::ReplaceString:
        replace_literal(text, step.pattern, step.content);
        break;
      case NormalizerStep::Kind::ReplaceRegex:
        if (Error e = replace_regex(text, *step.regex, step.content)) return e;
        break;
      case NormalizerStep::Kind::Nfc:
        if (Error e = normal_form(text, UTF8PROC_COMPOSE, "NFC")) return e;
        break;
      case NormalizerStep::Kind::Nfd:
        if (Error e = normal_form(text, UTF8PROC_DECOMPOSE, "NFD")) return e;
        break;
      case NormalizerStep::Kind::Nfkc:
        if (Error e = normal_form(text, static_cast<utf8proc_option_t>(UTF8PROC_COMPOSE | UTF8PROC_COMPAT), "NFKC"))
          return e;
        break;
      case NormalizerStep::Kind::Nfkd:
        if (Error e = normal_form(text, static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT), "NFKD"))
          return e;
        break;
    }
  }
  return {};
}

}  // namespace colibri::tokenizer

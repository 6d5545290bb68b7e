// core/tokenizer/normalizer.cpp — Prepend, Replace and the Unicode normal forms.
//
// The normal forms come from utf8proc (Debian libutf8proc-dev): it is small and has the
// composition tables; ICU would be 30 MB for the same four functions. tokenizers uses the
// unicode-normalization-alignments crate; both follow UAX #15, and results differ only for
// characters that one of the two Unicode versions does not know.
#include "tokenizer/components.h"

#include <cstdlib>

#include <utf8proc.h>

#include "util/strings.h"

namespace colibri::tokenizer {

namespace {

bool is_ascii(std::string_view text) {
  for (char c : text)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

Error normal_form(std::string *text, utf8proc_option_t options, const char *name) {
  if (is_ascii(*text)) return {};  // every normal form leaves ASCII unchanged
  utf8proc_uint8_t *result = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t *>(text->data()),
                                          static_cast<utf8proc_ssize_t>(text->size()), &result,
                                          static_cast<utf8proc_option_t>(options | UTF8PROC_STABLE));
  if (n < 0) {
    return make_error(ErrorKind::Internal,
                      util::strprintf("tokenizer: %s normalization failed: %s", name, utf8proc_errmsg(n)));
  }
  text->assign(reinterpret_cast<const char *>(result), static_cast<size_t>(n));
  std::free(result);
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

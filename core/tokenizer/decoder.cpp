// core/tokenizer/decoder.cpp — decoder chains and post-processors.
//
// Semantics from tokenizers/src/decoders/{byte_level,byte_fallback,fuse,strip,metaspace}.rs,
// normalizers/replace.rs (the Replace decoder), and processors/{template,roberta,bert}.rs.
#include <string_view>

#include "tokenizer/byte_level.h"
#include "tokenizer/components.h"
#include "tokenizer/utf8.h"

namespace colibri::tokenizer {

namespace {

std::vector<uint32_t> code_points(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    size_t n = 0;
    out.push_back(utf8_decode(text, pos, &n));
    pos += n;
  }
  return out;
}

// byte_level.rs decode_chain: a token whose every character is in the byte map becomes
// those bytes; any other token contributes its own UTF-8 bytes. The joined bytes are then
// repaired (String::from_utf8_lossy).
std::string byte_level_decode(const std::vector<std::string> &tokens) {
  const ByteLevelMap &map = ByteLevelMap::get();
  std::string bytes;
  for (const std::string &token : tokens) {
    const size_t mark = bytes.size();
    bool all_mapped = true;
    for (size_t pos = 0; pos < token.size();) {
      size_t n = 0;
      const int b = map.decode_code_point(utf8_decode(token, pos, &n));
      if (b < 0) {
        all_mapped = false;
        break;
      }
      bytes.push_back(static_cast<char>(b));
      pos += n;
    }
    if (!all_mapped) {
      bytes.resize(mark);
      bytes.append(token);
    }
  }
  return utf8_is_valid(bytes) ? bytes : utf8_replace_invalid(bytes);
}

// "<0xAB>" -> 0xAB, or -1.
int byte_token_value(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
  int value = 0;
  for (char c : token.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') value |= c - '0';
    else if (c >= 'A' && c <= 'F') value |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') value |= c - 'a' + 10;
    else return -1;
  }
  return value;
}

// byte_fallback.rs: runs of <0xXX> tokens become their bytes when those are valid UTF-8,
// otherwise one U+FFFD per byte token (not per maximal subpart).
std::vector<std::string> byte_fallback_decode(std::vector<std::string> tokens) {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string pending;
  size_t pending_count = 0;
  auto flush = [&] {
    if (pending_count == 0) return;
    if (utf8_is_valid(pending)) {
      out.push_back(pending);
    } else {
      for (size_t i = 0; i < pending_count; ++i) out.emplace_back(kReplacementUtf8);
    }
    pending.clear();
    pending_count = 0;
  };
  for (std::string &token : tokens) {
    const int b = byte_token_value(token);
    if (b >= 0) {
      pending.push_back(static_cast<char>(b));
      ++pending_count;
    } else {
      flush();
      out.push_back(std::move(token));
    }
  }
  flush();
  return out;
}

void replace_literal_in(std::string *text, std::string_view pattern, std::string_view content) {
  if (pattern.empty() || text->find(pattern) == std::string::npos) return;
  std::string out;
  size_t pos = 0;
  for (size_t hit = text->find(pattern); hit != std::string::npos; hit = text->find(pattern, pos)) {
    out.append(*text, pos, hit - pos);
    out.append(content);
    pos = hit + pattern.size();
  }
  out.append(*text, pos, std::string::npos);
  *text = std::move(out);
}

// strip.rs: removes up to `start` leading and `stop` trailing copies of one character.
std::string strip_token(const std::string &token, uint32_t c, size_t start, size_t stop) {
  const std::vector<uint32_t> chars = code_points(token);
  size_t begin = 0;
  while (begin < start && begin < chars.size() && chars[begin] == c) ++begin;
  size_t end = chars.size();
  for (size_t i = 0; i < stop && end > begin && chars[end - 1] == c; ++i) --end;
  std::string out;
  for (size_t i = begin; i < end; ++i) utf8_append(&out, chars[i]);
  return out;
}

}  // namespace

Error Decoder::apply(std::vector<std::string> tokens, std::string *text) const {
  text->clear();
  if (!present) {
    // tokenizer/mod.rs decode() without a decoder: tokens joined by a space.
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) text->push_back(' ');
      text->append(tokens[i]);
    }
    return {};
  }
  std::vector<std::pair<size_t, size_t>> matches;
  for (const DecoderStep &step : steps) {
    switch (step.kind) {
      case DecoderStep::Kind::ByteLevel: {
        std::string joined = byte_level_decode(tokens);
        tokens.assign(1, std::move(joined));
        break;
      }
      case DecoderStep::Kind::ReplaceString:
        for (std::string &token : tokens) replace_literal_in(&token, step.pattern, step.content);
        break;
      case DecoderStep::Kind::ReplaceRegex:
        for (std::string &token : tokens) {
          if (Error e = step.regex->find_all(token, &matches)) return e;
          if (matches.empty()) continue;
          std::string out;
          size_t pos = 0;
          for (const auto &[start, end] : matches) {
            out.append(token, pos, start - pos);
            out.append(step.content);
            pos = end;
          }
          out.append(token, pos, std::string::npos);
          token = std::move(out);
        }
        break;
      case DecoderStep::Kind::ByteFallback:
        tokens = byte_fallback_decode(std::move(tokens));
        break;
      case DecoderStep::Kind::Fuse: {
        std::string joined;
        for (const std::string &token : tokens) joined.append(token);
        tokens.assign(1, std::move(joined));
        break;
      }
      case DecoderStep::Kind::Strip:
        for (std::string &token : tokens) token = strip_token(token, step.strip_char, step.strip_start, step.strip_stop);
        break;
      case DecoderStep::Kind::Metaspace:
        // metaspace.rs decode_chain: the replacement becomes a space, except in the first
        // token (when a prefix is prepended at encode time) where every one is dropped.
        for (size_t i = 0; i < tokens.size(); ++i) {
          const bool drop = i == 0 && step.prepend_scheme != PrependScheme::Never;
          std::string out;
          for (uint32_t c : code_points(tokens[i])) {
            if (c == step.replacement) {
              if (!drop) out.push_back(' ');
            } else {
              utf8_append(&out, c);
            }
          }
          tokens[i] = std::move(out);
        }
        break;
    }
  }
  for (const std::string &token : tokens) text->append(token);
  return {};
}

void PostProcessor::apply(std::vector<int32_t> *ids) const {
  for (const PostProcessorStep &step : steps) {
    switch (step.kind) {
      case PostProcessorStep::Kind::ByteLevel:
        break;  // only trims offsets; ids are unchanged
      case PostProcessorStep::Kind::Template: {
        std::vector<int32_t> out;
        out.reserve(ids->size() + 4);
        for (const PostProcessorStep::Item &item : step.single) {
          if (item.is_sequence) out.insert(out.end(), ids->begin(), ids->end());
          else out.insert(out.end(), item.ids.begin(), item.ids.end());
        }
        *ids = std::move(out);
        break;
      }
      case PostProcessorStep::Kind::ClsSep:
        ids->insert(ids->begin(), step.cls_id);
        ids->push_back(step.sep_id);
        break;
    }
  }
}

}  // namespace colibri::tokenizer

// core/tokenizer/added_tokens.cpp — leftmost-longest search of added tokens.
#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace colibri::tokenizer {

void AddedTokenMatcher::build(std::vector<const AddedToken *> tokens, std::vector<std::string> patterns,
                              std::shared_ptr<const Regex> word_regex) {
  entries_.clear();
  for (auto &bucket : by_first_byte_) bucket.clear();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (patterns[i].empty()) continue;  // an empty pattern can never be matched
    entries_.push_back(Entry{std::move(patterns[i]), tokens[i]});
  }
  for (uint32_t i = 0; i < entries_.size(); ++i)
    by_first_byte_[static_cast<uint8_t>(entries_[i].pattern[0])].push_back(i);
  for (auto &bucket : by_first_byte_) {
    // Longest first, so the first hit at a position is the longest; ties keep file order.
    std::stable_sort(bucket.begin(), bucket.end(), [this](uint32_t a, uint32_t b) {
      return entries_[a].pattern.size() > entries_[b].pattern.size();
    });
  }
  word_regex_ = std::move(word_regex);
}

bool AddedTokenMatcher::is_word_char_before(std::string_view text, size_t pos) const {
  if (pos == 0 || !word_regex_) return false;
  size_t start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  std::vector<std::pair<size_t, size_t>> matches;
  return !word_regex_->find_all(text.substr(start, pos - start), &matches) && !matches.empty();
}

bool AddedTokenMatcher::is_word_char_after(std::string_view text, size_t pos) const {
  if (pos >= text.size() || !word_regex_) return false;
  const size_t n = utf8_sequence_length(static_cast<unsigned char>(text[pos]));
  std::vector<std::pair<size_t, size_t>> matches;
  return !word_regex_->find_all(text.substr(pos, n), &matches) && !matches.empty();
}

void AddedTokenMatcher::split(std::string_view text, bool parse_special, std::vector<Segment> *out) const {
  out->clear();
  size_t emitted_to = 0;  // start_offset in added_vocabulary.rs find_matches
  size_t pos = 0;         // where the leftmost-longest search resumes
  while (pos < text.size() && !entries_.empty()) {
    // Leftmost-longest: the first position with any hit, the longest hit there.
    const Entry *hit = nullptr;
    size_t hit_pos = pos;
    for (; hit_pos < text.size() && hit == nullptr; ++hit_pos) {
      for (uint32_t index : by_first_byte_[static_cast<uint8_t>(text[hit_pos])]) {
        const Entry &entry = entries_[index];
        if (text.compare(hit_pos, entry.pattern.size(), entry.pattern) == 0) {
          hit = &entry;
          break;
        }
      }
    }
    if (hit == nullptr) break;
    --hit_pos;
    size_t start = hit_pos;
    size_t stop = hit_pos + hit->pattern.size();
    pos = stop;  // the searcher resumes after the match, whether or not it is used
    const AddedToken &token = *hit->token;
    if (token.special && !parse_special) continue;
    if (token.single_word && (is_word_char_before(text, start) || is_word_char_after(text, stop))) continue;
    if (token.lstrip) {
      size_t new_start = start;
      while (new_start > 0) {
        size_t char_start = new_start - 1;
        while (char_start > 0 && (static_cast<unsigned char>(text[char_start]) & 0xC0) == 0x80) --char_start;
        size_t n = 0;
        if (!is_unicode_whitespace(utf8_decode(text, char_start, &n))) break;
        new_start = char_start;
      }
      if (new_start >= emitted_to) start = new_start;  // never reach into the previous match
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t n = 0;
        if (!is_unicode_whitespace(utf8_decode(text, stop, &n))) break;
        stop += n;
      }
    }
    if (start < emitted_to) continue;  // overlaps an rstrip-widened previous match
    if (emitted_to < start) out->push_back(Segment{emitted_to, start, -1});
    out->push_back(Segment{start, stop, token.id});
    emitted_to = stop;
  }
  if (emitted_to < text.size()) out->push_back(Segment{emitted_to, text.size(), -1});
}

}  // namespace colibri::tokenizer

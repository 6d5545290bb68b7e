// core/tokenizer/pre_tokenizer.cpp — ByteLevel, Split and Metaspace pre-tokenization.
//
// Semantics from tokenizers/src/pre_tokenizers/{byte_level,split,metaspace}.rs and
// tokenizers/src/tokenizer/normalizer.rs (NormalizedString::split).
#include <algorithm>
#include <string_view>

#include "tokenizer/byte_level.h"
#include "tokenizer/components.h"

namespace colibri::tokenizer {

namespace {

struct Range {
  size_t start;
  size_t end;
  bool flag;  // is a match (before the behaviour fold), or "remove" (after it)
};

// Pattern::find_matches: the text cut into alternating non-match / match ranges.
std::vector<Range> cut_at_matches(size_t size, const std::vector<std::pair<size_t, size_t>> &matches, bool invert) {
  std::vector<Range> out;
  if (size == 0) {
    out.push_back({0, 0, invert});
    return out;
  }
  size_t prev = 0;
  for (const auto &[start, end] : matches) {
    if (prev != start) out.push_back({prev, start, invert});
    out.push_back({start, end, !invert});
    prev = end;
  }
  if (prev != size) out.push_back({prev, size, invert});
  return out;
}

void find_literal(std::string_view text, std::string_view literal, std::vector<std::pair<size_t, size_t>> *matches) {
  matches->clear();
  if (literal.empty()) return;
  for (size_t hit = text.find(literal); hit != std::string_view::npos; hit = text.find(literal, hit + literal.size()))
    matches->emplace_back(hit, hit + literal.size());
}

void replace_spaces(std::string *text, std::string_view replacement) {
  if (text->find(' ') == std::string::npos) return;
  std::string out;
  out.reserve(text->size() + 8);
  for (char c : *text) {
    if (c == ' ') out.append(replacement);
    else out.push_back(c);
  }
  *text = std::move(out);
}

std::string byte_level_encode(std::string_view text) {
  const ByteLevelMap &map = ByteLevelMap::get();
  std::string out;
  out.reserve(text.size() * 2);
  for (char c : text) out.append(map.encode_byte(static_cast<uint8_t>(c)));
  return out;
}

}  // namespace

std::vector<std::pair<size_t, size_t>> split_ranges(size_t text_size,
                                                    const std::vector<std::pair<size_t, size_t>> &matches,
                                                    SplitBehavior behavior, bool invert) {
  const std::vector<Range> cut = cut_at_matches(text_size, matches, invert);
  std::vector<Range> folded;  // flag now means "remove"
  folded.reserve(cut.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (const Range &r : cut) folded.push_back({r.start, r.end, false});
      break;
    case SplitBehavior::Removed:
      folded = cut;
      break;
    case SplitBehavior::Contiguous:
      for (const Range &r : cut) {
        if (r.flag == previous_match && !folded.empty()) folded.back().end = r.end;
        else folded.push_back({r.start, r.end, false});
        previous_match = r.flag;
      }
      break;
    case SplitBehavior::MergedWithPrevious:
      for (const Range &r : cut) {
        if (r.flag && !previous_match && !folded.empty()) folded.back().end = r.end;
        else folded.push_back({r.start, r.end, false});
        previous_match = r.flag;
      }
      break;
    case SplitBehavior::MergedWithNext:
      // The same fold from the right, then reversed back into text order.
      for (auto it = cut.rbegin(); it != cut.rend(); ++it) {
        if (it->flag && !previous_match && !folded.empty()) folded.back().start = it->start;
        else folded.push_back({it->start, it->end, false});
        previous_match = it->flag;
      }
      std::reverse(folded.begin(), folded.end());
      break;
  }
  std::vector<std::pair<size_t, size_t>> out;
  out.reserve(folded.size());
  for (const Range &r : folded)
    if (!r.flag) out.emplace_back(r.start, r.end);
  return out;
}

Error PreTokenizer::run(std::string_view text, bool at_input_start, const PreTokenSink &sink) const {
  if (text.empty()) return {};
  return run_from(0, text, at_input_start, sink);
}

Error PreTokenizer::run_from(size_t step_index, std::string_view text, bool at_input_start,
                             const PreTokenSink &sink) const {
  if (text.empty()) return {};  // tokenizers drops empty splits after every step
  if (step_index == steps.size()) return sink(text);
  const PreTokenizerStep &step = steps[step_index];
  const size_t next = step_index + 1;
  // Hands text[start, end) to the next step.
  auto forward = [&](std::string_view whole, size_t start, size_t end) -> Error {
    return run_from(next, whole.substr(start, end - start), at_input_start && start == 0, sink);
  };
  auto forward_ranges = [&](std::string_view whole, const std::vector<std::pair<size_t, size_t>> &ranges) -> Error {
    for (const auto &[start, end] : ranges)
      if (Error e = forward(whole, start, end)) return e;
    return {};
  };
  std::vector<std::pair<size_t, size_t>> matches;
  switch (step.kind) {
    case PreTokenizerStep::Kind::ByteLevel: {
      // byte_level.rs: optional prefix space, optional GPT-2 regex split (Isolated), then
      // every byte of every pre-token becomes its printable stand-in character.
      std::string with_space;
      std::string_view source = text;
      if (step.add_prefix_space && text[0] != ' ') {
        with_space.reserve(text.size() + 1);
        with_space.push_back(' ');
        with_space.append(text);
        source = with_space;
      }
      auto map_and_forward = [&](size_t start, size_t end) -> Error {
        if (end <= start) return {};
        const std::string mapped = byte_level_encode(source.substr(start, end - start));
        return run_from(next, mapped, at_input_start && start == 0, sink);
      };
      if (!step.regex) return map_and_forward(0, source.size());
      // Isolated: the gaps between matches and the matches are all pre-tokens, in order.
      size_t done = 0;
      if (Error e = step.regex->for_each_match(source, [&](size_t start, size_t end) -> Error {
            if (Error gap = map_and_forward(done, start)) return gap;
            done = end;
            return map_and_forward(start, end);
          }))
        return e;
      return map_and_forward(done, source.size());
    }
    case PreTokenizerStep::Kind::Split: {
      if (step.regex) {
        if (step.behavior == SplitBehavior::Isolated) {
          // The common case (Qwen2, Llama 3 splits): stream the matches, no lists.
          size_t done = 0;
          if (Error e = step.regex->for_each_match(text, [&](size_t start, size_t end) -> Error {
                if (Error gap = forward(text, done, start)) return gap;
                done = end;
                return forward(text, start, end);
              }))
            return e;
          return forward(text, done, text.size());
        }
        if (Error e = step.regex->find_all(text, &matches)) return e;
      } else {
        find_literal(text, step.literal, &matches);
      }
      return forward_ranges(text, split_ranges(text.size(), matches, step.behavior, step.invert));
    }
    case PreTokenizerStep::Kind::Metaspace: {
      // metaspace.rs: spaces become the replacement, then the prepend scheme, then an
      // optional split before every replacement character (MergedWithNext).
      std::string replaced(text);
      replace_spaces(&replaced, step.replacement);
      const bool starts_with_replacement = replaced.compare(0, step.replacement.size(), step.replacement) == 0;
      if (!starts_with_replacement && (step.prepend_scheme == PrependScheme::Always ||
                                       (step.prepend_scheme == PrependScheme::First && at_input_start))) {
        replaced.insert(0, step.replacement);
      }
      if (!step.split) return run_from(next, replaced, at_input_start, sink);
      find_literal(replaced, step.replacement, &matches);
      return forward_ranges(replaced, split_ranges(replaced.size(), matches, SplitBehavior::MergedWithNext, false));
    }
  }
  return {};
}

}  // namespace colibri::tokenizer

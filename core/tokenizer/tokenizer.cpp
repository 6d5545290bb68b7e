// core/tokenizer/tokenizer.cpp — encode, decode and streaming decode.
//
// encode follows tokenizers/src/tokenizer/mod.rs encode_single_sequence: added tokens are
// cut out of the raw text; every other segment is normalized on its own (so Prepend("▁")
// applies after each special token), added tokens are cut out of the normalized text, the
// rest is pre-tokenized and each pre-token goes through the model; the post-processor then
// adds the template's special tokens.
#include <new>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"
#include "util/strings.h"

namespace colibri::tokenizer {

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

namespace {

Error encode_normalized_segment(const Tokenizer::Impl &impl, std::string_view segment, bool at_input_start,
                                const EncodeOptions &options, std::vector<int32_t> *ids) {
  std::string normalized(segment);
  if (Error e = impl.normalizer.apply(&normalized)) return e;
  std::vector<AddedTokenMatcher::Segment> parts;
  impl.normalized_matcher.split(normalized, options.parse_special, &parts);
  const PreTokenSink to_model = [&impl, ids](std::string_view pre_token) { return impl.model.tokenize(pre_token, ids); };
  const std::string_view text = normalized;
  for (const AddedTokenMatcher::Segment &part : parts) {
    if (part.id >= 0) {
      ids->push_back(part.id);
      continue;
    }
    if (Error e = impl.pre_tokenizer.run(text.substr(part.start, part.end - part.start),
                                         at_input_start && part.start == 0, to_model))
      return e;
  }
  return {};
}

}  // namespace

Error Tokenizer::encode(std::string_view text, const EncodeOptions &options, std::vector<int32_t> *ids) const {
  ids->clear();
  try {
    std::string repaired;
    if (!utf8_is_valid(text)) {
      repaired = utf8_replace_invalid(text);
      text = repaired;
    }
    std::vector<AddedTokenMatcher::Segment> segments;
    impl_->raw_matcher.split(text, options.parse_special, &segments);
    for (const AddedTokenMatcher::Segment &segment : segments) {
      if (segment.id >= 0) {
        ids->push_back(segment.id);
        continue;
      }
      if (Error e = encode_normalized_segment(*impl_, text.substr(segment.start, segment.end - segment.start),
                                              segment.start == 0, options, ids))
        return e;
    }
    if (options.add_special_tokens) impl_->post_processor.apply(ids);
  } catch (const std::bad_alloc &) {
    ids->clear();
    return make_error(ErrorKind::OutOfMemory,
                      util::strprintf("tokenizer: out of memory encoding %zu bytes of text", text.size()));
  }
  return {};
}

Error Tokenizer::decode(const int32_t *ids, size_t n, bool skip_special, std::string *text) const {
  text->clear();
  try {
    std::vector<std::string> tokens;
    tokens.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const int32_t id = ids[i];
      if (id < 0) {
        return make_error(ErrorKind::InvalidArgument,
                          util::strprintf("tokenizer: token id %d (position %zu) is negative; ids are 0..%zu", id, i,
                                          impl_->id_known.size() - 1));
      }
      // An id the tokenizer does not have decodes to nothing, as in tokenizers (decode's
      // filter_map over id_to_token): checkpoints pad the model's vocabulary past the
      // tokenizer's (Qwen2 151936 vs 151665), and a sampled padding id must not end generation.
      if (static_cast<size_t>(id) >= impl_->id_known.size() || !impl_->id_known[static_cast<size_t>(id)]) continue;
      if (skip_special && impl_->id_special[static_cast<size_t>(id)]) continue;
      tokens.push_back(impl_->id_text[static_cast<size_t>(id)]);
    }
    return impl_->decoder.apply(std::move(tokens), text);
  } catch (const std::bad_alloc &) {
    text->clear();
    return make_error(ErrorKind::OutOfMemory, util::strprintf("tokenizer: out of memory decoding %zu ids", n));
  }
}

std::string_view Tokenizer::token_text(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_text.size()) return {};
  return impl_->id_text[static_cast<size_t>(id)];
}

size_t Tokenizer::vocab_size() const { return impl_->id_text.size(); }

int32_t Tokenizer::token_id(std::string_view piece) const {
  if (auto it = impl_->added_index.find(piece); it != impl_->added_index.end()) return it->second;
  if (auto it = impl_->model.vocab().find(piece); it != impl_->model.vocab().end()) return it->second;
  return -1;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->id_special.size() && impl_->id_special[static_cast<size_t>(id)];
}

// ---- StreamDecoder ----
//
// The window method of tokenizers' DecodeStream (tokenizers/src/tokenizer/mod.rs
// step_decode_stream): prefix_ is the text of window_[0, prefix_index_); after each id the
// whole window is decoded, and when that text is longer than prefix_ and does not end in
// U+FFFD, the part past prefix_ is emitted and the window slides to the ids that produced it.

StreamDecoder::StreamDecoder(const Tokenizer &tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

namespace {
bool ends_with_replacement(const std::string &text) {
  return text.size() >= kReplacementUtf8.size() &&
         text.compare(text.size() - kReplacementUtf8.size(), kReplacementUtf8.size(), kReplacementUtf8) == 0;
}
}  // namespace

Error StreamDecoder::push(int32_t id, std::string *out_piece) {
  out_piece->clear();
  if (prefix_.empty() && !window_.empty()) {
    if (Error e = tokenizer_->decode(window_.data(), window_.size(), skip_special_, &scratch_)) return e;
    if (!ends_with_replacement(scratch_)) {
      prefix_ = scratch_;
      prefix_index_ = window_.size();
    }
  }
  window_.push_back(id);
  if (Error e = tokenizer_->decode(window_.data(), window_.size(), skip_special_, &scratch_)) {
    window_.pop_back();
    return e;
  }
  if (scratch_.size() <= prefix_.size() || ends_with_replacement(scratch_)) return {};
  if (scratch_.compare(0, prefix_.size(), prefix_) != 0) {
    // The new id changed how already emitted text decodes: ByteFallback turns a whole run of
    // byte tokens into U+FFFDs once the run turns out invalid ("<0xE8><0x8D><0x8D>" streamed
    // as one character, then "<0x8D>" arrives). Emitted text cannot be taken back, so it
    // stays; decoding restarts from the ids not yet emitted, as flush() does.
    window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
    prefix_.clear();
    prefix_index_ = 0;
    if (Error e = tokenizer_->decode(window_.data(), window_.size(), skip_special_, &scratch_)) return e;
    if (scratch_.empty() || ends_with_replacement(scratch_)) return {};
  }
  out_piece->assign(scratch_, prefix_.size(), std::string::npos);
  const size_t new_prefix_index = window_.size() - prefix_index_;
  window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
  if (Error e = tokenizer_->decode(window_.data(), window_.size(), skip_special_, &prefix_)) return e;
  prefix_index_ = new_prefix_index;
  return {};
}

Error StreamDecoder::flush(std::string *out_piece) {
  out_piece->clear();
  if (!window_.empty()) {
    if (Error e = tokenizer_->decode(window_.data(), window_.size(), skip_special_, &scratch_)) return e;
    if (scratch_.compare(0, prefix_.size(), prefix_) == 0) {
      if (scratch_.size() > prefix_.size()) out_piece->assign(scratch_, prefix_.size(), std::string::npos);
    } else {
      // The held ids changed how earlier text decodes: ByteFallback turns a whole run of
      // byte tokens into U+FFFDs when the run ends incomplete ("<0xE4><0xBD><0xA0><0xE5>"
      // decodes to four U+FFFD, although its first three bytes were already streamed as
      // "你"). What was emitted stays; the held ids are decoded on their own.
      const auto held = window_.begin() + static_cast<std::ptrdiff_t>(prefix_index_);
      const std::vector<int32_t> tail(held, window_.end());
      if (Error e = tokenizer_->decode(tail.data(), tail.size(), skip_special_, out_piece)) return e;
    }
  }
  window_.clear();
  prefix_.clear();
  prefix_index_ = 0;
  return {};
}

}  // namespace colibri::tokenizer

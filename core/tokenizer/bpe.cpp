// core/tokenizer/bpe.cpp — BPE merges by rank (tokenizers/src/models/bpe/{model,word}.rs).
#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>
#include <functional>

#include "tokenizer/utf8.h"
#include "util/strings.h"

namespace colibri::tokenizer {

BpeModel::BpeModel(BpeModel &&other) noexcept { *this = std::move(other); }

BpeModel &BpeModel::operator=(BpeModel &&other) noexcept {
  vocab_ = std::move(other.vocab_);
  merges_ = std::move(other.merges_);
  char_ids_ = std::move(other.char_ids_);
  cutting_allowed_ = other.cutting_allowed_;
  junctions_ = std::move(other.junctions_);
  std::copy(std::begin(other.byte_ids_), std::end(other.byte_ids_), std::begin(byte_ids_));
  unk_token_ = std::move(other.unk_token_);
  has_unk_token_ = other.has_unk_token_;
  unk_id_ = other.unk_id_;
  fuse_unk_ = other.fuse_unk_;
  byte_fallback_ = other.byte_fallback_;
  ignore_merges_ = other.ignore_merges_;
  continuing_subword_prefix_ = std::move(other.continuing_subword_prefix_);
  end_of_word_suffix_ = std::move(other.end_of_word_suffix_);
  cache_.clear();
  return *this;
}

void BpeModel::MergeTable::reserve(size_t count) {
  size_t capacity = 16;
  while (capacity < count * 2) capacity *= 2;  // load factor <= 0.5
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
}

void BpeModel::MergeTable::insert_or_assign(uint64_t key, uint32_t rank, int32_t new_id) {
  for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
    Slot &slot = slots_[i];
    if (slot.key == key || slot.key == ~uint64_t{0}) {
      slot = Slot{key, rank, new_id};
      return;
    }
  }
}

Error BpeModel::build(BpeConfig config, BpeModel *model) {
  model->vocab_ = std::move(config.vocab);
  model->unk_token_ = std::move(config.unk_token);
  model->has_unk_token_ = config.has_unk_token;
  model->fuse_unk_ = config.fuse_unk;
  model->byte_fallback_ = config.byte_fallback;
  model->ignore_merges_ = config.ignore_merges;
  model->continuing_subword_prefix_ = std::move(config.continuing_subword_prefix);
  model->end_of_word_suffix_ = std::move(config.end_of_word_suffix);
  model->unk_id_ = -1;
  if (model->has_unk_token_) {
    auto it = model->vocab_.find(model->unk_token_);
    if (it != model->vocab_.end()) model->unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = model->vocab_.find(std::string_view(name));
    model->byte_ids_[b] = it == model->vocab_.end() ? -1 : it->second;
  }
  model->char_ids_.assign(kCharTableSize, -1);
  for (const auto &[text, id] : model->vocab_) {
    if (text.empty() || !utf8_is_valid(text)) continue;
    size_t n = 0;
    const uint32_t cp = utf8_decode(text, 0, &n);
    if (n == text.size() && cp < kCharTableSize) model->char_ids_[cp] = id;
  }
  model->merges_.clear();
  model->merges_.reserve(config.merges.size());
  const size_t prefix_len = model->continuing_subword_prefix_.size();
  for (size_t rank = 0; rank < config.merges.size(); ++rank) {
    const auto &[left, right] = config.merges[rank];
    auto left_it = model->vocab_.find(left);
    auto right_it = model->vocab_.find(right);
    if (left_it == model->vocab_.end() || right_it == model->vocab_.end()) {
      const std::string &missing = left_it == model->vocab_.end() ? left : right;
      return make_error(ErrorKind::Corrupt,
                        util::strprintf("tokenizer.json: merge %zu (\"%s\" \"%s\") uses \"%s\", which is not in the "
                                        "vocabulary",
                                        rank, left.c_str(), right.c_str(), missing.c_str()));
    }
    // With a continuing-subword prefix the right part carries it, the merged token does not.
    std::string merged = left;
    if (prefix_len > 0 && right.compare(0, prefix_len, model->continuing_subword_prefix_) == 0)
      merged.append(right, prefix_len, std::string::npos);
    else
      merged.append(right);
    auto merged_it = model->vocab_.find(merged);
    if (merged_it == model->vocab_.end()) {
      return make_error(ErrorKind::Corrupt,
                        util::strprintf("tokenizer.json: merge %zu (\"%s\" \"%s\") makes \"%s\", which is not in the "
                                        "vocabulary",
                                        rank, left.c_str(), right.c_str(), merged.c_str()));
    }
    // A repeated pair keeps its last rank, as collecting into tokenizers' HashMap does.
    model->merges_.insert_or_assign(pair_key(left_it->second, right_it->second), static_cast<uint32_t>(rank),
                                    merged_it->second);
  }
  model->cutting_allowed_ = model->continuing_subword_prefix_.empty() && model->end_of_word_suffix_.empty();
  model->junctions_.reserve(config.merges.size());
  for (const auto &[left, right] : config.merges) {
    if (left.empty() || right.empty() || !utf8_is_valid(left) || !utf8_is_valid(right)) {
      model->cutting_allowed_ = false;  // cannot reason about such merges: never cut
      break;
    }
    size_t last = left.size() - 1;
    while (last > 0 && (static_cast<unsigned char>(left[last]) & 0xC0) == 0x80) --last;
    size_t n = 0;
    const uint32_t left_cp = utf8_decode(left, last, &n);
    const uint32_t right_cp = utf8_decode(right, 0, &n);
    model->junctions_.insert_or_assign(pair_key(static_cast<int32_t>(left_cp), static_cast<int32_t>(right_cp)), 0, 0);
  }
  return {};
}

Error BpeModel::tokenize(std::string_view word, std::vector<int32_t> *ids) const {
  if (word.empty()) return {};
  if (ignore_merges_) {
    auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      ids->push_back(it->second);
      return {};
    }
  }
  if (!cutting_allowed_ || word.size() < kCutMinWordBytes) return merge_word_cached(word, ids);
  size_t piece_start = 0;
  size_t n = 0;
  uint32_t previous = utf8_decode(word, 0, &n);
  for (size_t pos = n; pos < word.size(); pos += n) {
    const uint32_t current = utf8_decode(word, pos, &n);
    if (can_cut_between(previous, current)) {
      if (Error e = merge_word_cached(word.substr(piece_start, pos - piece_start), ids)) return e;
      piece_start = pos;
    }
    previous = current;
  }
  return merge_word_cached(word.substr(piece_start), ids);
}

bool BpeModel::can_cut_between(uint32_t left_cp, uint32_t right_cp) const {
  // Both sides must be plain vocabulary symbols: byte-fallback and unk symbols are not the
  // characters themselves (and consecutive unknowns may fuse).
  auto known = [this](uint32_t cp) {
    if (cp < kCharTableSize) return char_ids_[cp] >= 0;
    std::string s;
    utf8_append(&s, cp);
    return vocab_.find(s) != vocab_.end();
  };
  if (junctions_.find(pair_key(static_cast<int32_t>(left_cp), static_cast<int32_t>(right_cp))) != nullptr) return false;
  return known(left_cp) && known(right_cp);
}

Error BpeModel::merge_word_cached(std::string_view word, std::vector<int32_t> *ids) const {
  const bool cacheable = word.size() < kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return {};
    }
  }
  const size_t mark = ids->size();
  if (Error e = merge_word(word, ids)) return e;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    cache_.emplace(std::string(word), std::vector<int32_t>(ids->begin() + static_cast<std::ptrdiff_t>(mark), ids->end()));
  }
  return {};
}

int32_t BpeModel::lookup_symbol(std::string_view s) const {
  size_t n = 0;
  if (!s.empty() && utf8_sequence_length(static_cast<unsigned char>(s[0])) == s.size()) {
    const uint32_t cp = utf8_decode(s, 0, &n);
    if (cp < kCharTableSize) return char_ids_[cp];
  }
  auto it = vocab_.find(s);
  return it == vocab_.end() ? -1 : it->second;
}

Error BpeModel::merge_word(std::string_view word, std::vector<int32_t> *ids) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool removed;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&symbols](int32_t id) {
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{id, index - 1, index + 1, false});
  };

  // 1. Characters -> initial symbols (model.rs merge_word).
  int32_t pending_unk = -1;  // a not yet added unk symbol (so consecutive ones can fuse)
  std::string decorated;
  for (size_t pos = 0; pos < word.size();) {
    const size_t n = utf8_sequence_length(static_cast<unsigned char>(word[pos]));
    const bool is_first = pos == 0;
    const bool is_last = pos + n >= word.size();
    std::string_view s = word.substr(pos, n);
    if ((!is_first && !continuing_subword_prefix_.empty()) || (is_last && !end_of_word_suffix_.empty())) {
      decorated.clear();
      if (!is_first) decorated.append(continuing_subword_prefix_);
      decorated.append(s);
      if (is_last) decorated.append(end_of_word_suffix_);
      s = decorated;
    }
    pos += n;
    const int32_t id = lookup_symbol(s);
    if (id >= 0) {
      if (pending_unk >= 0) {
        add(pending_unk);
        pending_unk = -1;
      }
      add(id);
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (char c : s) all_bytes = all_bytes && byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all_bytes) {
        for (char c : s) add(byte_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (!has_unk_token_) continue;  // tokenizers drops the character silently
    if (unk_id_ < 0) {
      return make_error(ErrorKind::InvalidArgument,
                        util::strprintf("tokenizer: the unknown token \"%s\" named by tokenizer.json is not in the "
                                        "vocabulary, and the text has a character the vocabulary lacks",
                                        unk_token_.c_str()));
    }
    if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
    pending_unk = unk_id_;
  }
  if (pending_unk >= 0) add(pending_unk);
  if (symbols.empty()) return {};
  symbols.back().next = -1;

  // 2. Merge by rank (word.rs merge_all): lowest rank first, then leftmost position. A
  // candidate is packed as rank << 32 | position, so the min-heap compares one integer.
  // A popped candidate is stale when the pair at its position no longer has its rank (a
  // rank names exactly one pair, so this is tokenizers' "same new id" check).
  std::vector<uint64_t> heap;
  heap.reserve(symbols.size());
  const auto min_first = std::greater<uint64_t>();
  auto consider = [&](int32_t pos) {
    const Symbol &left = symbols[static_cast<size_t>(pos)];
    if (left.next < 0) return;
    const MergeTable::Slot *merge = merges_.find(pair_key(left.id, symbols[static_cast<size_t>(left.next)].id));
    if (merge == nullptr) return;
    heap.push_back((static_cast<uint64_t>(merge->rank) << 32) | static_cast<uint32_t>(pos));
    std::push_heap(heap.begin(), heap.end(), min_first);
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), min_first);
    const uint64_t top = heap.back();
    heap.pop_back();
    const auto rank = static_cast<uint32_t>(top >> 32);
    const auto pos = static_cast<int32_t>(top & 0xFFFFFFFFu);
    Symbol &left = symbols[static_cast<size_t>(pos)];
    if (left.removed || left.next < 0) continue;
    Symbol &right = symbols[static_cast<size_t>(left.next)];
    const MergeTable::Slot *merge = merges_.find(pair_key(left.id, right.id));
    if (merge == nullptr || merge->rank != rank) continue;
    left.id = merge->new_id;
    right.removed = true;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = pos;
    if (left.prev >= 0) consider(left.prev);
    consider(pos);
  }
  for (const Symbol &s : symbols)
    if (!s.removed) ids->push_back(s.id);
  return {};
}

}  // namespace colibri::tokenizer

// core/tokenizer/bpe.h — the BPE model: vocabulary, ranked merges, byte fallback, unk.
//
// Semantics from tokenizers/src/models/bpe/{model,word}.rs. A word is split into characters
// (each looked up in the vocabulary, else byte-fallback tokens "<0xXX>", else the unknown
// token, fused or not), then merged by rank: a min-heap of (rank, position) candidate merges
// over a linked list of symbols, so a word of n symbols costs O(n log n), never the
// quadratic rescan. Long words are cut where no merge can cross (see kCutMinWordBytes), and
// results of short words are cached (the output depends on neither).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "util/error.h"

namespace colibri::tokenizer {

// Hash and equality that let unordered_map<std::string, ...> be searched by string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIndex = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct BpeConfig {
  TokenIndex vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::string unk_token;  // empty: none
  bool has_unk_token = false;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
};

class BpeModel {
 public:
  // Fails (Error naming the merge) when a merge uses a token the vocabulary lacks or whose
  // concatenation is missing, as tokenizers does at load.
  static Error build(BpeConfig config, BpeModel *model);

  // Appends the ids of one pre-token. Fails only when an unknown character needs the unk
  // token and the file names one the vocabulary lacks.
  Error tokenize(std::string_view word, std::vector<int32_t> *ids) const;

  const TokenIndex &vocab() const { return vocab_; }

  BpeModel() = default;
  BpeModel(BpeModel &&other) noexcept;
  BpeModel &operator=(BpeModel &&other) noexcept;

 private:
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  // (left id, right id) -> (rank, merged id): open addressing, linear probing. Ids are
  // below 2^31, so the all-ones key never occurs and marks an empty slot.
  class MergeTable {
   public:
    struct Slot {
      uint64_t key = ~uint64_t{0};
      uint32_t rank = 0;
      int32_t new_id = -1;
    };
    void reserve(size_t count);
    void insert_or_assign(uint64_t key, uint32_t rank, int32_t new_id);
    const Slot *find(uint64_t key) const {
      if (slots_.empty()) return nullptr;
      for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
        const Slot &slot = slots_[i];
        if (slot.key == key) return &slot;
        if (slot.key == ~uint64_t{0}) return nullptr;
      }
    }
    void clear() { slots_.clear(); }

   private:
    static size_t hash(uint64_t k) {
      k ^= k >> 33;
      k *= 0xFF51AFD7ED558CCDull;
      k ^= k >> 33;
      return static_cast<size_t>(k);
    }
    std::vector<Slot> slots_;
    size_t mask_ = 0;
  };

  Error merge_word(std::string_view word, std::vector<int32_t> *ids) const;
  Error merge_word_cached(std::string_view word, std::vector<int32_t> *ids) const;
  int32_t lookup_symbol(std::string_view s) const;
  bool can_cut_between(uint32_t left_cp, uint32_t right_cp) const;

  // Long words (Llama-style tokenizers without a pre-tokenizer see whole paragraphs as one
  // word) are cut where no merge can ever join the two sides: between characters c1 c2 that
  // both are vocabulary symbols and for which no merge (a, b) has a ending in c1 and b
  // starting in c2. Merges never cross such a cut, so merging the pieces separately gives the
  // same tokens as merging the whole word, with small heaps and cache hits. Off when a
  // continuing-subword prefix or end-of-word suffix makes symbols depend on position.
  static constexpr size_t kCutMinWordBytes = 32;
  bool cutting_allowed_ = false;
  MergeTable junctions_;  // (last code point of a, first code point of b) of every merge

  TokenIndex vocab_;
  MergeTable merges_;
  // Ids of one-character tokens by code point, for code points below kCharTableSize (the
  // byte-level alphabet, Latin, Greek, Cyrillic and "▁"); -1 when not in the vocabulary.
  static constexpr uint32_t kCharTableSize = 0x3000;
  std::vector<int32_t> char_ids_;
  int32_t byte_ids_[256] = {};  // "<0xXX>" ids for byte fallback, -1 when absent
  std::string unk_token_;
  bool has_unk_token_ = false;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;

  // Word -> ids cache for words shorter than kCacheMaxWordBytes (tokenizers caches 10k
  // words under 256 bytes). Cleared when full. Guarded: a Tokenizer is shared by threads.
  static constexpr size_t kCacheMaxWordBytes = 256;
  static constexpr size_t kCacheCapacity = 10000;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace colibri::tokenizer

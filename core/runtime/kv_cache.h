// core/runtime/kv_cache.h — the KV cache of a session, in blocks.
//
// Storage is a pool of fixed-size blocks, each holding the keys and values of `block_tokens`
// consecutive positions for every layer ([layers, 2, block_tokens, kv_dim]); a sequence owns
// a block table (its blocks in position order), and attention reads through it. Two modes:
//  - contiguous (the default of a session): one block of context_length positions per
//    sequence, fixed (sequence s owns block s). The layout is the classic
//    [sequences, layers, 2, context, kv_dim] cache, except that a sliding-window layer
//    (gpt-oss) may keep a ring of ring_rows positions instead of the context: position p lives
//    in row p % ring_rows, so the layer's memory is bounded by its window, not the context.
//  - paged: block_count blocks of block_tokens positions shared by all sequences; a sequence
//    takes blocks as it grows (reserve) and gives them back (release). Full blocks are also a
//    prefix cache: a block is keyed by the hash of (its parent block's key, its token ids); a
//    new sequence whose tokens start with cached blocks takes them over (attach_prefix)
//    instead of computing them again. Blocks no sequence uses stay cached and are evicted
//    least recently released first when a free block is needed.
// The forward pass is bitwise independent of batch composition, so a cached block holds the
// bits a cold run of the same tokens writes: a prefix hit never changes results. Lookups
// compare the stored token ids and parent block, not only the hash.
//
// All memory is allocated at construction; reserve/release/attach/commit do not allocate
// beyond the prefix map's buckets, reserved for block_count entries up front.
// Thread safety: as the session (one thread at a time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "util/error.h"

namespace colibri::runtime {

struct KvCacheShape {
  uint32_t layers = 0;
  uint32_t kv_dim = 0;
  uint32_t context_length = 0;  // positions per sequence at most
  uint32_t sequences = 0;       // sequence slots
  uint32_t block_tokens = 0;    // 0 = contiguous (one block of context_length per sequence)
  uint32_t block_count = 0;     // paged: blocks in the pool
  bool f16 = false;             // f16 storage (KvDtype::F16) instead of f32
  // false: a layer keeps key rows only (multi-head latent attention, whose values are the first
  // kv_lora_rank values of its cached rows): half the storage, value_offset unused.
  bool values = true;
  // Contiguous only: layers whose ring_layers[l] is 1 keep ring_rows positions (when fewer than
  // context_length). Empty: every layer keeps the whole context.
  std::vector<uint8_t> ring_layers;
  uint32_t ring_rows = 0;
};

struct KvCacheStats {
  uint32_t block_count = 0;     // blocks in the pool
  uint32_t blocks_in_use = 0;   // referenced by at least one sequence
  uint32_t blocks_cached = 0;   // unreferenced but holding a cached prefix block (evictable)
  uint64_t prefix_hit_tokens = 0;  // tokens taken over from the prefix cache (attach_prefix)
  uint64_t evictions = 0;          // cached blocks reused for new content
};

class KvCache {
 public:
  static constexpr uint32_t kNoBlock = 0xFFFFFFFFu;

  // Allocates the pool (std::bad_alloc when the memory is not there).
  explicit KvCache(const KvCacheShape &shape);
  // The bytes such a cache allocates (the one formula its creators' estimates use).
  static double storage_bytes(const KvCacheShape &shape);
  // The bytes this cache holds.
  size_t storage_bytes() const { return block_bytes() * block_count_; }

  bool paged() const { return paged_; }
  uint32_t block_tokens() const { return block_tokens_; }
  uint32_t block_count() const { return block_count_; }
  // Bytes of one block (all layers, keys and values).
  size_t block_bytes() const { return block_stride_ * (f16_ ? 2 : 4); }

  // Element offset of the key rows of (block, layer) in the storage; the block's values for
  // that layer (a cache with values) follow after layer_rows(layer) · kv_dim elements. Row r of
  // the block is at + r · kv_dim.
  size_t offset(uint32_t block, uint32_t layer) const { return block * block_stride_ + layer_offsets_[layer]; }
  size_t value_offset(uint32_t layer) const { return static_cast<size_t>(layer_rows_[layer]) * kv_dim_; }
  // Rows a layer keeps per block: block_tokens, or a ring layer's ring_rows. Position p of a
  // sequence is in block blocks(seq)[p / block_tokens()], row p % layer_rows(layer).
  uint32_t layer_rows(uint32_t layer) const { return layer_rows_[layer]; }
  // Contiguous with ring layers: positions a sequence may hold in them at once (0: no ring).
  uint32_t ring_rows() const { return ring_rows_; }
  float *f32() { return f32_.data(); }
  uint16_t *f16() { return f16_data_.data(); }

  // The block table of a sequence: blocks(seq)[j] holds positions [j · B, (j + 1) · B).
  const uint32_t *blocks(uint32_t sequence) const { return &tables_[static_cast<size_t>(sequence) * max_table_]; }
  uint32_t table_size(uint32_t sequence) const { return table_size_[sequence]; }
  // Positions the sequence's blocks cover.
  uint32_t capacity(uint32_t sequence) const;

  // Paged: blocks the pool can still hand out (free, or cached and evictable).
  uint32_t available_blocks() const { return static_cast<uint32_t>(free_.size()) + lru_size_; }
  // Blocks a sequence needs beyond its table to cover `tokens` positions.
  uint32_t blocks_needed(uint32_t sequence, uint32_t tokens) const;

  // Paged: extends the sequence's table until it covers `tokens` positions. OutOfMemory (the
  // pool is exhausted; nothing taken) or InvalidArgument (beyond the context). Contiguous:
  // only the context check.
  Error reserve(uint32_t sequence, uint32_t tokens);
  // Paged: gives the sequence's blocks back (cached blocks stay cached); the table is empty.
  void release(uint32_t sequence);
  // Paged: the sequence (empty) takes over the cached blocks that hold the longest prefix of
  // tokens[0, count) in whole blocks, leaving at least one token to compute (the logits of the
  // last token are needed). Returns the positions covered (a multiple of block_tokens).
  uint32_t attach_prefix(uint32_t sequence, const int32_t *tokens, size_t count);
  // Paged: registers the sequence's full blocks among tokens[0, count) (its tokens, whose KV
  // has been written) in the prefix cache. Blocks registered before are skipped.
  void commit(uint32_t sequence, const int32_t *tokens, size_t count);
  // Drops every cached prefix block that no sequence uses (their blocks become free).
  void clear_prefix_cache();

  KvCacheStats stats() const;

 private:
  struct Block {
    uint32_t refs = 0;
    uint32_t generation = 0;            // bumped whenever the block gets new content
    bool hashed = false;                // registered in prefix_map_
    uint64_t hash = 0;
    uint32_t parent = kNoBlock;         // the previous block of the prefix (kNoBlock: first)
    uint32_t parent_generation = 0;
    uint32_t lru_prev = kNoBlock, lru_next = kNoBlock;  // cached-and-unused list, oldest first
  };
  // The prefix chain of a sequence so far: the number of its leading blocks registered (or
  // taken over) and the identity of the last of them.
  struct Chain {
    uint32_t blocks = 0;
    uint64_t hash = 0;
    uint32_t last = kNoBlock;
    uint32_t last_generation = 0;
  };

  uint64_t block_hash(uint64_t parent_hash, const int32_t *tokens) const;
  bool matches(uint32_t block, const Chain &chain, const int32_t *tokens) const;
  uint32_t take_block();  // a free block, or the least recently released cached one (evicted)
  void lru_remove(uint32_t block);
  void lru_push(uint32_t block);
  void unhash(uint32_t block);

  bool paged_ = false;
  bool f16_ = false;
  uint32_t block_tokens_ = 0, block_count_ = 0, kv_dim_ = 0, context_ = 0, max_table_ = 0;
  // Rows `layer` keeps per block under `shape` (the one rule the constructor and storage_bytes use).
  static uint32_t rows_of_layer(const KvCacheShape &shape, uint32_t layer);

  uint32_t ring_rows_ = 0;
  size_t block_stride_ = 0;
  std::vector<uint32_t> layer_rows_;   // [layers]
  std::vector<size_t> layer_offsets_;  // [layers] element offset of each layer within a block
  std::vector<float> f32_;
  std::vector<uint16_t> f16_data_;
  std::vector<uint32_t> tables_;      // [sequences, max_table_]
  std::vector<uint32_t> table_size_;  // [sequences]
  std::vector<Chain> chains_;         // [sequences]
  std::vector<Block> meta_;           // [block_count]
  std::vector<int32_t> block_tokens_ids_;  // [block_count, block_tokens] ids of hashed blocks
  std::vector<uint32_t> free_;        // free blocks (a stack)
  uint32_t lru_head_ = kNoBlock, lru_tail_ = kNoBlock, lru_size_ = 0;
  std::unordered_map<uint64_t, uint32_t> prefix_map_;  // hash → block
  uint64_t prefix_hit_tokens_ = 0, evictions_ = 0;
};

}  // namespace colibri::runtime

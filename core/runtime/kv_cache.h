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
//    Sliding-window layers (ring_layers) of a paged cache live in a second pool, the window
//    pool, of blocks of the same block_tokens positions: a sequence holds window blocks only
//    for its last ring_rows positions (taken by the forward pass that writes them, given back
//    once they fall out of the ring), so those layers' memory is bounded by the window, not the
//    context. The window pool is sized at construction to never run out for running sequences
//    (twice their peak: the rest caches prefixes). A window block is cached under the key of
//    the main block at the same index; a prefix hit needs the window blocks that cover the
//    last `window` positions before the hit, and is shortened to the longest prefix that has them.
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
  // Layers whose ring_layers[l] is 1 keep only ring_rows positions (when fewer than
  // context_length): a contiguous cache as a ring inside the sequence's block, a paged one in
  // the window pool. Empty: every layer keeps the whole context.
  std::vector<uint8_t> ring_layers;
  uint32_t ring_rows = 0;
  // Paged with ring layers: the sliding window (positions a query attends to, itself included),
  // which a prefix hit must find cached in the window pool, and the most positions one forward
  // pass writes per sequence (max_batch_tokens), which sizes the window pool.
  uint32_t window = 0;
  uint32_t batch_tokens = 0;
};

struct KvCacheStats {
  uint32_t block_count = 0;     // blocks in the pool
  uint32_t blocks_in_use = 0;   // referenced by at least one sequence
  uint32_t blocks_cached = 0;   // unreferenced but holding a cached prefix block (evictable)
  uint64_t prefix_hit_tokens = 0;  // tokens taken over from the prefix cache (attach_prefix)
  uint64_t evictions = 0;          // cached blocks reused for new content
  // Paged with sliding-window layers: the window pool (kv_cache.h), likewise.
  uint32_t window_block_count = 0;
  uint32_t window_blocks_in_use = 0;
  uint32_t window_blocks_cached = 0;
};

class KvCache {
 public:
  static constexpr uint32_t kNoBlock = 0xFFFFFFFFu;

  // Allocates the pool (std::bad_alloc when the memory is not there).
  explicit KvCache(const KvCacheShape &shape);
  // The bytes such a cache allocates (the one formula its creators' estimates use).
  static double storage_bytes(const KvCacheShape &shape);
  // The bytes this cache holds.
  size_t storage_bytes() const { return (f16_ ? f16_data_.size() : f32_.size()) * element_bytes(); }

  bool paged() const { return paged_; }
  uint32_t block_tokens() const { return block_tokens_; }
  uint32_t block_count() const { return pools_[kMain].count; }
  // Bytes of one block of the main pool (its layers, keys and values).
  size_t block_bytes() const { return pools_[kMain].stride * element_bytes(); }
  // Paged with ring layers: blocks of the window pool and the bytes of one (0, 0 otherwise).
  uint32_t window_block_count() const { return pools_[kWindow].count; }
  size_t window_block_bytes() const { return pools_[kWindow].stride * element_bytes(); }
  // The window pool a paged cache of this shape gets (0 blocks without ring layers), and the
  // bytes of one block of each pool: the one formula storage_bytes and budgets use.
  static uint32_t window_blocks_of(const KvCacheShape &shape);
  static double main_block_bytes_of(const KvCacheShape &shape);
  static double window_block_bytes_of(const KvCacheShape &shape);

  // Element offset of the key rows of (block, layer) in the storage, where block is an entry of
  // blocks(sequence, layer); the block's values for that layer (a cache with values) follow
  // after layer_rows(layer) · kv_dim elements. Row r of the block is at + r · kv_dim.
  size_t offset(uint32_t block, uint32_t layer) const {
    return layer_base_[layer] + block * layer_stride_[layer] + layer_offsets_[layer];
  }
  size_t value_offset(uint32_t layer) const { return static_cast<size_t>(layer_rows_[layer]) * kv_dim_; }
  // Rows a layer keeps per block: block_tokens, or a ring layer's ring_rows in a contiguous
  // cache. Position p of a sequence is in block blocks(seq, layer)[p / block_tokens()], row
  // p % layer_rows(layer).
  uint32_t layer_rows(uint32_t layer) const { return layer_rows_[layer]; }
  // Positions a sequence keeps at once in its ring layers (0: no ring layer).
  uint32_t ring_rows() const { return ring_rows_; }
  float *f32() { return f32_.data(); }
  uint16_t *f16() { return f16_data_.data(); }

  // The block table of a sequence: blocks(seq)[j] holds positions [j · B, (j + 1) · B) of the
  // main pool's layers; blocks(seq, layer) is the table of the layer's pool (a window table has
  // kNoBlock where the positions are out of the ring).
  const uint32_t *blocks(uint32_t sequence) const { return &tables_[static_cast<size_t>(sequence) * max_table_]; }
  const uint32_t *blocks(uint32_t sequence, uint32_t layer) const {
    return layer_pool_[layer] == kWindow ? &window_tables_[static_cast<size_t>(sequence) * max_table_] : blocks(sequence);
  }
  uint32_t table_size(uint32_t sequence) const { return table_size_[sequence]; }
  // Positions the sequence's blocks cover.
  uint32_t capacity(uint32_t sequence) const;
  // Paged with ring layers: the first position the sequence's window blocks still hold (the
  // ring layers have nothing before it; UINT32_MAX when it holds none; 0 without ring layers).
  uint32_t window_start(uint32_t sequence) const;

  // Paged: blocks the pool can still hand out (free, or cached and evictable).
  uint32_t available_blocks() const { return pools_[kMain].available(); }
  // Blocks a sequence needs beyond its table to cover `tokens` positions.
  uint32_t blocks_needed(uint32_t sequence, uint32_t tokens) const;

  // Paged: extends the sequence's table until it covers `tokens` positions. OutOfMemory (the
  // pool is exhausted; nothing taken) or InvalidArgument (beyond the context). Contiguous:
  // only the context check.
  Error reserve(uint32_t sequence, uint32_t tokens);
  // Paged with ring layers, called by the forward pass: window blocks for positions [first,
  // end) of the sequence, which the pass is about to write (the pool has them by its size).
  void take_window(uint32_t sequence, uint32_t first, uint32_t end);
  // ... and after a pass that succeeded: the window blocks wholly before length − ring_rows go
  // back (cached ones stay cached).
  void trim_window(uint32_t sequence, uint32_t length);
  // Paged: gives the sequence's blocks back (cached blocks stay cached); the table is empty.
  void release(uint32_t sequence);
  // Paged: the sequence (empty) takes over the cached blocks that hold the longest prefix of
  // tokens[0, count) in whole blocks, leaving at least one token to compute (the logits of the
  // last token are needed), and with ring layers only as far as the window pool holds the last
  // `window` positions before it. Returns the positions covered (a multiple of block_tokens).
  uint32_t attach_prefix(uint32_t sequence, const int32_t *tokens, size_t count);
  // Paged: registers the sequence's full blocks among tokens[0, count) (its tokens, whose KV
  // has been written) in the prefix cache, with the window blocks it still holds at those
  // indices. Blocks registered before are skipped.
  void commit(uint32_t sequence, const int32_t *tokens, size_t count);
  // Drops every cached prefix block that no sequence uses (their blocks become free).
  void clear_prefix_cache();

  KvCacheStats stats() const;

 private:
  static constexpr uint32_t kMain = 0, kWindow = 1;
  struct Block {
    uint32_t refs = 0;
    uint32_t generation = 0;            // bumped whenever the block gets new content
    bool hashed = false;                // registered in its pool's map
    uint64_t hash = 0;
    // Main pool: the previous block of the prefix (kNoBlock: first). Window pool: the main
    // block at the same index, whose content and prefix this block's keys and values belong to.
    uint32_t parent = kNoBlock;
    uint32_t parent_generation = 0;
    uint32_t lru_prev = kNoBlock, lru_next = kNoBlock;  // cached-and-unused list, oldest first
  };
  // A pool of blocks: storage from element `base`, `stride` elements per block.
  struct Pool {
    uint32_t count = 0;
    size_t base = 0, stride = 0;
    std::vector<Block> meta;        // [count]
    std::vector<uint32_t> free;     // free blocks (a stack)
    uint32_t lru_head = kNoBlock, lru_tail = kNoBlock, lru_size = 0;
    std::unordered_map<uint64_t, uint32_t> map;  // hash → block
    uint64_t evictions = 0;
    uint32_t available() const { return static_cast<uint32_t>(free.size()) + lru_size; }
  };
  // The prefix chain of a sequence so far: the number of its leading blocks registered (or
  // taken over) and the identity of the last of them.
  struct Chain {
    uint32_t blocks = 0;
    uint64_t hash = 0;
    uint32_t last = kNoBlock;
    uint32_t last_generation = 0;
  };

  size_t element_bytes() const { return f16_ ? 2 : 4; }
  uint64_t block_hash(uint64_t parent_hash, const int32_t *tokens) const;
  bool matches(uint32_t block, const Chain &chain, const int32_t *tokens) const;
  // The cached window block for main block `main` (at the same index, key `hash`), or kNoBlock.
  uint32_t window_match(uint64_t hash, uint32_t main) const;
  static void init_pool(Pool &pool, uint32_t count);
  uint32_t take_block(Pool &pool);  // a free block, or the least recently released cached one (evicted)
  void give_back(Pool &pool, uint32_t block);  // one reference less; unused: cached or free
  void lru_remove(Pool &pool, uint32_t block);
  void lru_push(Pool &pool, uint32_t block);
  void unhash(Pool &pool, uint32_t block);
  // Whether `layer` keeps only ring_rows positions under `shape`, the rows it keeps per block,
  // and whether it lives in the window pool (the one rule the constructor and the size
  // formulas use).
  static bool ring_layer(const KvCacheShape &shape, uint32_t layer);
  static uint32_t rows_of_layer(const KvCacheShape &shape, uint32_t layer);
  static bool windowed(const KvCacheShape &shape, uint32_t layer);

  bool paged_ = false;
  bool f16_ = false;
  uint32_t block_tokens_ = 0, kv_dim_ = 0, context_ = 0, max_table_ = 0, window_ = 0;
  uint32_t ring_rows_ = 0;
  Pool pools_[2];
  std::vector<uint32_t> layer_rows_;    // [layers]
  std::vector<uint32_t> layer_pool_;    // [layers] kMain or kWindow
  std::vector<size_t> layer_offsets_;   // [layers] element offset of each layer within its pool's block
  std::vector<size_t> layer_base_, layer_stride_;  // [layers] its pool's base and stride
  std::vector<float> f32_;
  std::vector<uint16_t> f16_data_;
  std::vector<uint32_t> tables_;          // [sequences, max_table_]
  std::vector<uint32_t> table_size_;      // [sequences]
  std::vector<uint32_t> window_tables_;   // [sequences, max_table_] (window pool)
  std::vector<uint32_t> window_lo_, window_hi_;  // [sequences] indices [lo, hi) of the window table held
  std::vector<Chain> chains_;             // [sequences]
  std::vector<int32_t> block_tokens_ids_; // [main count, block_tokens] ids of hashed main blocks
  std::vector<uint32_t> scratch_main_, scratch_window_;  // [max_table_] attach_prefix's lookups
  std::vector<uint64_t> scratch_hash_;                   // [max_table_]
  uint64_t prefix_hit_tokens_ = 0;
};

}  // namespace colibri::runtime

// core/runtime/kv_cache.cpp — block pool, block tables and the prefix cache (kv_cache.h).
#include "runtime/kv_cache.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "util/strings.h"

namespace colibri::runtime {

using util::strprintf;

KvCache::KvCache(const KvCacheShape &shape)
    : paged_(shape.block_tokens != 0),
      f16_(shape.f16),
      block_tokens_(paged_ ? shape.block_tokens : shape.context_length),
      block_count_(paged_ ? shape.block_count : shape.sequences),
      kv_dim_(shape.kv_dim),
      context_(shape.context_length) {
  max_table_ = (context_ + block_tokens_ - 1) / block_tokens_;
  layer_rows_.assign(shape.layers, block_tokens_);
  layer_offsets_.assign(shape.layers, 0);
  for (uint32_t l = 0; l < shape.layers; ++l) {
    layer_rows_[l] = rows_of_layer(shape, l);
    if (layer_rows_[l] != block_tokens_) ring_rows_ = layer_rows_[l];
    layer_offsets_[l] = block_stride_;
    block_stride_ += (shape.values ? 2ull : 1ull) * layer_rows_[l] * kv_dim_;
  }
  const size_t elements = block_stride_ * block_count_;
  if (f16_) f16_data_.assign(elements, 0);
  else f32_.assign(elements, 0.0f);
  tables_.assign(static_cast<size_t>(shape.sequences) * max_table_, kNoBlock);
  table_size_.assign(shape.sequences, 0);
  chains_.assign(shape.sequences, Chain{});
  if (!paged_) {
    // Sequence s owns block s for good.
    for (uint32_t s = 0; s < shape.sequences; ++s) {
      tables_[static_cast<size_t>(s) * max_table_] = s;
      table_size_[s] = 1;
    }
    return;
  }
  meta_.assign(block_count_, Block{});
  block_tokens_ids_.assign(static_cast<size_t>(block_count_) * block_tokens_, 0);
  free_.reserve(block_count_);
  // A stack handing out block 0 first.
  for (uint32_t b = block_count_; b > 0; --b) free_.push_back(b - 1);
  prefix_map_.reserve(block_count_);
}

uint32_t KvCache::rows_of_layer(const KvCacheShape &shape, uint32_t layer) {
  if (shape.block_tokens != 0) return shape.block_tokens;  // paged: every layer keeps whole blocks
  const bool ring = layer < shape.ring_layers.size() && shape.ring_layers[layer] && shape.ring_rows > 0 &&
                    shape.ring_rows < shape.context_length;
  return ring ? shape.ring_rows : shape.context_length;
}

double KvCache::storage_bytes(const KvCacheShape &shape) {
  double per_block = 0;
  for (uint32_t l = 0; l < shape.layers; ++l) per_block += (shape.values ? 2.0 : 1.0) * rows_of_layer(shape, l) * shape.kv_dim;
  return per_block * (shape.f16 ? 2.0 : 4.0) * (shape.block_tokens != 0 ? shape.block_count : shape.sequences);
}

uint32_t KvCache::capacity(uint32_t sequence) const {
  return std::min(context_, table_size_[sequence] * block_tokens_);
}

uint32_t KvCache::blocks_needed(uint32_t sequence, uint32_t tokens) const {
  const uint32_t want = (std::min(tokens, context_) + block_tokens_ - 1) / block_tokens_;
  return want > table_size_[sequence] ? want - table_size_[sequence] : 0;
}

Error KvCache::reserve(uint32_t sequence, uint32_t tokens) {
  if (tokens > context_)
    return make_error(ErrorKind::InvalidArgument, strprintf("sequence %u would hold %u tokens, beyond the context "
                                                            "length %u",
                                                            sequence, tokens, context_));
  if (!paged_) return {};
  const uint32_t need = blocks_needed(sequence, tokens);
  if (need > available_blocks())
    return make_error(ErrorKind::OutOfMemory,
                      strprintf("the KV block pool is exhausted: sequence %u needs %u more blocks of %u tokens for "
                                "%u tokens, %u of the pool's %u blocks are available; raise the KV budget or run "
                                "fewer sequences at once",
                                sequence, need, block_tokens_, tokens, available_blocks(), block_count_));
  uint32_t *table = &tables_[static_cast<size_t>(sequence) * max_table_];
  for (uint32_t i = 0; i < need; ++i) {
    const uint32_t b = take_block();
    meta_[b].refs = 1;
    table[table_size_[sequence]++] = b;
  }
  return {};
}

void KvCache::release(uint32_t sequence) {
  chains_[sequence] = Chain{};
  if (!paged_) return;
  uint32_t *table = &tables_[static_cast<size_t>(sequence) * max_table_];
  // Last block first: the LRU then evicts a released prefix from its tail end, so the head of
  // a shared history (a system prompt) survives longest.
  for (uint32_t j = table_size_[sequence]; j > 0; --j) {
    const uint32_t b = table[j - 1];
    table[j - 1] = kNoBlock;
    if (--meta_[b].refs > 0) continue;
    if (meta_[b].hashed) {
      lru_push(b);
    } else {
      ++meta_[b].generation;
      free_.push_back(b);
    }
  }
  table_size_[sequence] = 0;
}

uint64_t KvCache::block_hash(uint64_t parent_hash, const int32_t *tokens) const {
  return XXH3_64bits_withSeed(tokens, static_cast<size_t>(block_tokens_) * sizeof(int32_t), parent_hash);
}

bool KvCache::matches(uint32_t block, const Chain &chain, const int32_t *tokens) const {
  const Block &m = meta_[block];
  if (!m.hashed || m.parent != chain.last) return false;
  if (chain.last != kNoBlock && m.parent_generation != chain.last_generation) return false;
  return std::memcmp(&block_tokens_ids_[static_cast<size_t>(block) * block_tokens_], tokens,
                     static_cast<size_t>(block_tokens_) * sizeof(int32_t)) == 0;
}

uint32_t KvCache::attach_prefix(uint32_t sequence, const int32_t *tokens, size_t count) {
  if (!paged_ || table_size_[sequence] != 0 || count == 0) return 0;
  Chain chain;
  uint32_t *table = &tables_[static_cast<size_t>(sequence) * max_table_];
  // Whole blocks, leaving the last token to compute.
  const size_t limit = std::min<size_t>((count - 1) / block_tokens_, max_table_);
  for (size_t j = 0; j < limit; ++j) {
    const int32_t *ids = tokens + j * block_tokens_;
    const uint64_t h = block_hash(chain.hash, ids);
    auto it = prefix_map_.find(h);
    if (it == prefix_map_.end() || !matches(it->second, chain, ids)) break;
    const uint32_t b = it->second;
    if (meta_[b].refs == 0) lru_remove(b);
    ++meta_[b].refs;
    table[table_size_[sequence]++] = b;
    chain.blocks = static_cast<uint32_t>(j + 1);
    chain.hash = h;
    chain.last = b;
    chain.last_generation = meta_[b].generation;
  }
  chains_[sequence] = chain;
  const uint32_t covered = table_size_[sequence] * block_tokens_;
  prefix_hit_tokens_ += covered;
  return covered;
}

void KvCache::commit(uint32_t sequence, const int32_t *tokens, size_t count) {
  if (!paged_) return;
  Chain &chain = chains_[sequence];
  const uint32_t *table = blocks(sequence);
  const size_t full = std::min<size_t>(count / block_tokens_, table_size_[sequence]);
  for (size_t j = chain.blocks; j < full; ++j) {
    const int32_t *ids = tokens + j * block_tokens_;
    const uint64_t h = block_hash(chain.hash, ids);
    uint32_t canonical = table[j];
    auto it = prefix_map_.find(h);
    if (it == prefix_map_.end()) {
      Block &m = meta_[canonical];
      m.hashed = true;
      m.hash = h;
      m.parent = chain.last;
      m.parent_generation = chain.last_generation;
      std::memcpy(&block_tokens_ids_[static_cast<size_t>(canonical) * block_tokens_], ids,
                  static_cast<size_t>(block_tokens_) * sizeof(int32_t));
      prefix_map_.emplace(h, canonical);
    } else if (matches(it->second, chain, ids)) {
      // The same content is cached already (computed by another sequence at the same time):
      // this block stays private, the chain continues through the cached one.
      canonical = it->second;
    } else {
      // A hash collision with different content: the chain ends here (nothing wrong is ever
      // shared; later blocks of this sequence are simply not cached).
      chain.blocks = static_cast<uint32_t>(full);
      chain.last = kNoBlock;
      return;
    }
    chain.blocks = static_cast<uint32_t>(j + 1);
    chain.hash = h;
    chain.last = canonical;
    chain.last_generation = meta_[canonical].generation;
  }
}

void KvCache::clear_prefix_cache() {
  if (!paged_) return;
  while (lru_head_ != kNoBlock) {
    const uint32_t b = lru_head_;
    lru_remove(b);
    unhash(b);
    free_.push_back(b);
  }
}

uint32_t KvCache::take_block() {
  if (!free_.empty()) {
    const uint32_t b = free_.back();
    free_.pop_back();
    return b;
  }
  const uint32_t b = lru_head_;  // the caller checked available_blocks()
  lru_remove(b);
  unhash(b);
  ++evictions_;
  return b;
}

void KvCache::unhash(uint32_t block) {
  Block &m = meta_[block];
  if (m.hashed) {
    auto it = prefix_map_.find(m.hash);
    if (it != prefix_map_.end() && it->second == block) prefix_map_.erase(it);
  }
  m.hashed = false;
  ++m.generation;
}

void KvCache::lru_remove(uint32_t block) {
  Block &m = meta_[block];
  if (m.lru_prev != kNoBlock) meta_[m.lru_prev].lru_next = m.lru_next;
  else lru_head_ = m.lru_next;
  if (m.lru_next != kNoBlock) meta_[m.lru_next].lru_prev = m.lru_prev;
  else lru_tail_ = m.lru_prev;
  m.lru_prev = m.lru_next = kNoBlock;
  --lru_size_;
}

void KvCache::lru_push(uint32_t block) {
  Block &m = meta_[block];
  m.lru_prev = lru_tail_;
  m.lru_next = kNoBlock;
  if (lru_tail_ != kNoBlock) meta_[lru_tail_].lru_next = block;
  else lru_head_ = block;
  lru_tail_ = block;
  ++lru_size_;
}

KvCacheStats KvCache::stats() const {
  KvCacheStats s;
  s.block_count = block_count_;
  if (!paged_) {
    s.blocks_in_use = block_count_;
    return s;
  }
  s.blocks_cached = lru_size_;
  s.blocks_in_use = block_count_ - static_cast<uint32_t>(free_.size()) - lru_size_;
  s.prefix_hit_tokens = prefix_hit_tokens_;
  s.evictions = evictions_;
  return s;
}

}  // namespace colibri::runtime

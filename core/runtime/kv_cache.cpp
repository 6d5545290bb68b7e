// core/runtime/kv_cache.cpp — block pool, block tables and the prefix cache (kv_cache.h).
#include "runtime/kv_cache.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "util/strings.h"

namespace colibri::runtime {

using util::strprintf;

bool KvCache::ring_layer(const KvCacheShape &shape, uint32_t layer) {
  return layer < shape.ring_layers.size() && shape.ring_layers[layer] && shape.ring_rows > 0 &&
         shape.ring_rows < shape.context_length;
}

bool KvCache::windowed(const KvCacheShape &shape, uint32_t layer) {
  return shape.block_tokens != 0 && ring_layer(shape, layer);
}

uint32_t KvCache::rows_of_layer(const KvCacheShape &shape, uint32_t layer) {
  if (shape.block_tokens != 0) return shape.block_tokens;  // paged: every layer keeps whole blocks
  return ring_layer(shape, layer) ? shape.ring_rows : shape.context_length;
}

uint32_t KvCache::window_blocks_of(const KvCacheShape &shape) {
  bool any = false;
  for (uint32_t l = 0; l < shape.layers; ++l) any = any || windowed(shape, l);
  if (!any) return 0;
  // A sequence holds at most the blocks over its last ring_rows positions plus the ones a pass
  // writes before the pass trims (take_window, then trim_window): ring_rows + batch_tokens
  // positions at any alignment. Twice that for every sequence: running sequences never wait
  // for a window block, and the other half keeps recent prefixes cached.
  const uint64_t B = shape.block_tokens;
  const uint64_t peak = (static_cast<uint64_t>(shape.ring_rows) + shape.batch_tokens + B - 1) / B + 1;
  return static_cast<uint32_t>(std::min<uint64_t>(2 * peak * shape.sequences, UINT32_MAX));
}

double KvCache::main_block_bytes_of(const KvCacheShape &shape) {
  double elements = 0;
  for (uint32_t l = 0; l < shape.layers; ++l)
    if (!windowed(shape, l)) elements += (shape.values ? 2.0 : 1.0) * rows_of_layer(shape, l) * shape.kv_dim;
  return elements * (shape.f16 ? 2.0 : 4.0);
}

double KvCache::window_block_bytes_of(const KvCacheShape &shape) {
  double elements = 0;
  for (uint32_t l = 0; l < shape.layers; ++l)
    if (windowed(shape, l)) elements += (shape.values ? 2.0 : 1.0) * rows_of_layer(shape, l) * shape.kv_dim;
  return elements * (shape.f16 ? 2.0 : 4.0);
}

double KvCache::storage_bytes(const KvCacheShape &shape) {
  const double main_blocks = shape.block_tokens != 0 ? shape.block_count : shape.sequences;
  return main_block_bytes_of(shape) * main_blocks + window_block_bytes_of(shape) * window_blocks_of(shape);
}

void KvCache::init_pool(Pool &pool, uint32_t count) {
  pool.meta.assign(count, Block{});
  pool.free.reserve(count);
  // A stack handing out block 0 first.
  for (uint32_t b = count; b > 0; --b) pool.free.push_back(b - 1);
  pool.map.reserve(count);
}

KvCache::KvCache(const KvCacheShape &shape)
    : paged_(shape.block_tokens != 0),
      f16_(shape.f16),
      block_tokens_(paged_ ? shape.block_tokens : shape.context_length),
      kv_dim_(shape.kv_dim),
      context_(shape.context_length),
      window_(shape.window) {
  max_table_ = (context_ + block_tokens_ - 1) / block_tokens_;
  Pool &main = pools_[kMain], &window = pools_[kWindow];
  main.count = paged_ ? shape.block_count : shape.sequences;
  window.count = window_blocks_of(shape);
  layer_rows_.assign(shape.layers, block_tokens_);
  layer_pool_.assign(shape.layers, kMain);
  layer_offsets_.assign(shape.layers, 0);
  for (uint32_t l = 0; l < shape.layers; ++l) {
    layer_rows_[l] = rows_of_layer(shape, l);
    Pool &pool = windowed(shape, l) ? window : main;
    layer_pool_[l] = &pool == &window ? kWindow : kMain;
    if (layer_rows_[l] != block_tokens_ || layer_pool_[l] == kWindow) ring_rows_ = shape.ring_rows;
    layer_offsets_[l] = pool.stride;
    pool.stride += (shape.values ? 2ull : 1ull) * layer_rows_[l] * kv_dim_;
  }
  main.base = 0;
  window.base = main.stride * main.count;
  layer_base_.resize(shape.layers);
  layer_stride_.resize(shape.layers);
  for (uint32_t l = 0; l < shape.layers; ++l) {
    layer_base_[l] = pools_[layer_pool_[l]].base;
    layer_stride_[l] = pools_[layer_pool_[l]].stride;
  }
  const size_t elements = window.base + window.stride * window.count;
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
  init_pool(main, main.count);
  block_tokens_ids_.assign(static_cast<size_t>(main.count) * block_tokens_, 0);
  scratch_main_.assign(max_table_, kNoBlock);
  scratch_hash_.assign(max_table_, 0);
  if (window.count) {
    init_pool(window, window.count);
    window_tables_.assign(static_cast<size_t>(shape.sequences) * max_table_, kNoBlock);
    window_lo_.assign(shape.sequences, 0);
    window_hi_.assign(shape.sequences, 0);
    scratch_window_.assign(max_table_, kNoBlock);
  }
}

uint32_t KvCache::capacity(uint32_t sequence) const {
  return std::min(context_, table_size_[sequence] * block_tokens_);
}

uint32_t KvCache::window_start(uint32_t sequence) const {
  if (!pools_[kWindow].count) return 0;
  if (window_lo_[sequence] == window_hi_[sequence]) return UINT32_MAX;  // nothing held
  return window_lo_[sequence] * block_tokens_;
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
  Pool &main = pools_[kMain];
  const uint32_t need = blocks_needed(sequence, tokens);
  if (need > available_blocks())
    return make_error(ErrorKind::OutOfMemory,
                      strprintf("the KV block pool is exhausted: sequence %u needs %u more blocks of %u tokens for "
                                "%u tokens, %u of the pool's %u blocks are available; raise the KV budget or run "
                                "fewer sequences at once",
                                sequence, need, block_tokens_, tokens, available_blocks(), main.count));
  uint32_t *table = &tables_[static_cast<size_t>(sequence) * max_table_];
  for (uint32_t i = 0; i < need; ++i) {
    const uint32_t b = take_block(main);
    main.meta[b].refs = 1;
    table[table_size_[sequence]++] = b;
  }
  return {};
}

void KvCache::take_window(uint32_t sequence, uint32_t first, uint32_t end) {
  Pool &window = pools_[kWindow];
  if (!window.count || end <= first) return;
  uint32_t *table = &window_tables_[static_cast<size_t>(sequence) * max_table_];
  uint32_t &lo = window_lo_[sequence], &hi = window_hi_[sequence];
  for (uint32_t j = first / block_tokens_; j <= (end - 1) / block_tokens_; ++j) {
    if (table[j] != kNoBlock) continue;
    const uint32_t b = take_block(window);  // never empty: the pool is twice the running peak
    window.meta[b].refs = 1;
    table[j] = b;
    if (lo == hi) lo = hi = j;
    lo = std::min(lo, j);
    hi = std::max(hi, j + 1);
  }
}

void KvCache::trim_window(uint32_t sequence, uint32_t length) {
  Pool &window = pools_[kWindow];
  if (!window.count || length <= ring_rows_) return;
  uint32_t *table = &window_tables_[static_cast<size_t>(sequence) * max_table_];
  uint32_t &lo = window_lo_[sequence], &hi = window_hi_[sequence];
  const uint32_t keep_from = length - ring_rows_;  // the first position the ring must hold
  while (lo < hi && (lo + 1) * block_tokens_ <= keep_from) {
    if (table[lo] != kNoBlock) give_back(window, table[lo]);
    table[lo++] = kNoBlock;
  }
  if (lo == hi) lo = hi = 0;
}

void KvCache::give_back(Pool &pool, uint32_t b) {
  if (--pool.meta[b].refs > 0) return;
  if (pool.meta[b].hashed) {
    lru_push(pool, b);
  } else {
    ++pool.meta[b].generation;
    pool.free.push_back(b);
  }
}

void KvCache::release(uint32_t sequence) {
  chains_[sequence] = Chain{};
  if (!paged_) return;
  if (pools_[kWindow].count) {
    uint32_t *wt = &window_tables_[static_cast<size_t>(sequence) * max_table_];
    for (uint32_t j = window_hi_[sequence]; j > window_lo_[sequence]; --j) {
      if (wt[j - 1] != kNoBlock) give_back(pools_[kWindow], wt[j - 1]);
      wt[j - 1] = kNoBlock;
    }
    window_lo_[sequence] = window_hi_[sequence] = 0;
  }
  uint32_t *table = &tables_[static_cast<size_t>(sequence) * max_table_];
  // Last block first: the LRU then evicts a released prefix from its tail end, so the head of
  // a shared history (a system prompt) survives longest.
  for (uint32_t j = table_size_[sequence]; j > 0; --j) {
    give_back(pools_[kMain], table[j - 1]);
    table[j - 1] = kNoBlock;
  }
  table_size_[sequence] = 0;
}

uint64_t KvCache::block_hash(uint64_t parent_hash, const int32_t *tokens) const {
  return XXH3_64bits_withSeed(tokens, static_cast<size_t>(block_tokens_) * sizeof(int32_t), parent_hash);
}

bool KvCache::matches(uint32_t block, const Chain &chain, const int32_t *tokens) const {
  const Block &m = pools_[kMain].meta[block];
  if (!m.hashed || m.parent != chain.last) return false;
  if (chain.last != kNoBlock && m.parent_generation != chain.last_generation) return false;
  return std::memcmp(&block_tokens_ids_[static_cast<size_t>(block) * block_tokens_], tokens,
                     static_cast<size_t>(block_tokens_) * sizeof(int32_t)) == 0;
}

uint32_t KvCache::window_match(uint64_t hash, uint32_t main) const {
  const Pool &window = pools_[kWindow];
  auto it = window.map.find(hash);
  if (it == window.map.end()) return kNoBlock;
  const Block &m = window.meta[it->second];
  const bool same = m.hashed && m.parent == main && m.parent_generation == pools_[kMain].meta[main].generation;
  return same ? it->second : kNoBlock;
}

uint32_t KvCache::attach_prefix(uint32_t sequence, const int32_t *tokens, size_t count) {
  if (!paged_ || table_size_[sequence] != 0 || count == 0) return 0;
  Pool &main = pools_[kMain], &window = pools_[kWindow];
  // The cached main blocks of the prefix, in whole blocks, leaving the last token to compute.
  const size_t limit = std::min<size_t>((count - 1) / block_tokens_, max_table_);
  size_t found = 0;
  {
    Chain chain;
    for (size_t j = 0; j < limit; ++j) {
      const int32_t *ids = tokens + j * block_tokens_;
      const uint64_t h = block_hash(chain.hash, ids);
      auto it = main.map.find(h);
      if (it == main.map.end() || !matches(it->second, chain, ids)) break;
      scratch_main_[j] = it->second;
      scratch_hash_[j] = h;
      chain.hash = h;
      chain.last = it->second;
      chain.last_generation = main.meta[it->second].generation;
      found = j + 1;
    }
  }
  // With ring layers, a hit of n blocks needs the window blocks over the last `window`
  // positions before n · B (what the first computed query attends to): the longest such n.
  size_t n = found, lo = 0;
  if (window.count) {
    for (size_t j = 0; j < found; ++j) scratch_window_[j] = window_match(scratch_hash_[j], scratch_main_[j]);
    auto first_needed = [&](size_t blocks) {
      const size_t end = blocks * block_tokens_;
      return end + 1 > window_ ? (end + 1 - window_) / block_tokens_ : 0;
    };
    for (; n > 0; --n) {
      lo = first_needed(n);
      bool all = true;
      for (size_t j = lo; j < n && all; ++j) all = scratch_window_[j] != kNoBlock;
      if (all) break;
    }
  }
  uint32_t *table = &tables_[static_cast<size_t>(sequence) * max_table_];
  Chain chain;
  for (size_t j = 0; j < n; ++j) {
    const uint32_t b = scratch_main_[j];
    if (main.meta[b].refs == 0) lru_remove(main, b);
    ++main.meta[b].refs;
    table[table_size_[sequence]++] = b;
    chain.blocks = static_cast<uint32_t>(j + 1);
    chain.hash = scratch_hash_[j];
    chain.last = b;
    chain.last_generation = main.meta[b].generation;
  }
  if (window.count && n > lo) {
    uint32_t *wt = &window_tables_[static_cast<size_t>(sequence) * max_table_];
    for (size_t j = lo; j < n; ++j) {
      const uint32_t b = scratch_window_[j];
      if (window.meta[b].refs == 0) lru_remove(window, b);
      ++window.meta[b].refs;
      wt[j] = b;
    }
    window_lo_[sequence] = static_cast<uint32_t>(lo);
    window_hi_[sequence] = static_cast<uint32_t>(n);
  }
  chains_[sequence] = chain;
  const uint32_t covered = table_size_[sequence] * block_tokens_;
  prefix_hit_tokens_ += covered;
  return covered;
}

void KvCache::commit(uint32_t sequence, const int32_t *tokens, size_t count) {
  if (!paged_) return;
  Pool &main = pools_[kMain], &window = pools_[kWindow];
  Chain &chain = chains_[sequence];
  const uint32_t *table = blocks(sequence);
  const size_t full = std::min<size_t>(count / block_tokens_, table_size_[sequence]);
  for (size_t j = chain.blocks; j < full; ++j) {
    const int32_t *ids = tokens + j * block_tokens_;
    const uint64_t h = block_hash(chain.hash, ids);
    uint32_t canonical = table[j];
    auto it = main.map.find(h);
    if (it == main.map.end()) {
      Block &m = main.meta[canonical];
      m.hashed = true;
      m.hash = h;
      m.parent = chain.last;
      m.parent_generation = chain.last_generation;
      std::memcpy(&block_tokens_ids_[static_cast<size_t>(canonical) * block_tokens_], ids,
                  static_cast<size_t>(block_tokens_) * sizeof(int32_t));
      main.map.emplace(h, canonical);
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
    // The window block this sequence still holds at index j joins the cache under the main
    // block's key, unless one for the same main block is cached already.
    if (window.count && j >= window_lo_[sequence] && j < window_hi_[sequence]) {
      const uint32_t w = window_tables_[static_cast<size_t>(sequence) * max_table_ + j];
      if (w != kNoBlock && !window.meta[w].hashed && window_match(h, canonical) == kNoBlock) {
        auto old = window.map.find(h);
        if (old != window.map.end()) unhash(window, old->second);  // a stale one (its main block was reused)
        Block &m = window.meta[w];
        m.hashed = true;
        m.hash = h;
        m.parent = canonical;
        m.parent_generation = main.meta[canonical].generation;
        window.map.emplace(h, w);
      }
    }
    chain.blocks = static_cast<uint32_t>(j + 1);
    chain.hash = h;
    chain.last = canonical;
    chain.last_generation = main.meta[canonical].generation;
  }
}

void KvCache::clear_prefix_cache() {
  if (!paged_) return;
  for (Pool &pool : pools_) {
    while (pool.lru_head != kNoBlock) {
      const uint32_t b = pool.lru_head;
      lru_remove(pool, b);
      unhash(pool, b);
      pool.free.push_back(b);
    }
  }
}

uint32_t KvCache::take_block(Pool &pool) {
  if (!pool.free.empty()) {
    const uint32_t b = pool.free.back();
    pool.free.pop_back();
    return b;
  }
  const uint32_t b = pool.lru_head;  // the caller checked available()
  lru_remove(pool, b);
  unhash(pool, b);
  ++pool.evictions;
  return b;
}

void KvCache::unhash(Pool &pool, uint32_t block) {
  Block &m = pool.meta[block];
  if (m.hashed) {
    auto it = pool.map.find(m.hash);
    if (it != pool.map.end() && it->second == block) pool.map.erase(it);
  }
  m.hashed = false;
  ++m.generation;
}

void KvCache::lru_remove(Pool &pool, uint32_t block) {
  Block &m = pool.meta[block];
  if (m.lru_prev != kNoBlock) pool.meta[m.lru_prev].lru_next = m.lru_next;
  else pool.lru_head = m.lru_next;
  if (m.lru_next != kNoBlock) pool.meta[m.lru_next].lru_prev = m.lru_prev;
  else pool.lru_tail = m.lru_prev;
  m.lru_prev = m.lru_next = kNoBlock;
  --pool.lru_size;
}

void KvCache::lru_push(Pool &pool, uint32_t block) {
  Block &m = pool.meta[block];
  m.lru_prev = pool.lru_tail;
  m.lru_next = kNoBlock;
  if (pool.lru_tail != kNoBlock) pool.meta[pool.lru_tail].lru_next = block;
  else pool.lru_head = block;
  pool.lru_tail = block;
  ++pool.lru_size;
}

KvCacheStats KvCache::stats() const {
  KvCacheStats s;
  const Pool &main = pools_[kMain], &window = pools_[kWindow];
  s.block_count = main.count;
  if (!paged_) {
    s.blocks_in_use = main.count;
    return s;
  }
  s.blocks_cached = main.lru_size;
  s.blocks_in_use = main.count - static_cast<uint32_t>(main.free.size()) - main.lru_size;
  s.prefix_hit_tokens = prefix_hit_tokens_;
  s.evictions = main.evictions + window.evictions;
  s.window_block_count = window.count;
  s.window_blocks_cached = window.lru_size;
  s.window_blocks_in_use = window.count - static_cast<uint32_t>(window.free.size()) - window.lru_size;
  return s;
}

}  // namespace colibri::runtime

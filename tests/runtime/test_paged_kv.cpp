// tests/runtime/test_paged_kv.cpp — the paged KV cache and its prefix cache: a paged session
// gives the contiguous session's logits bit for bit (prefill, decode, several sequences, f32
// and f16 caches, block sizes that do and do not divide the prompt), a prefix hit gives the
// cold run's logits, and the pool's limits (exhaustion, eviction) behave as documented.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "runtime/oracle_support.h"

using namespace colibri;

namespace {

std::unique_ptr<model::Model> fixture_model(const std::string &name) {
  std::string path = testing::convert_fixture(name, "f32");
  REQUIRE(!path.empty());
  auto m = testing::load_model(path);
  REQUIRE(m);
  return m;
}

std::unique_ptr<runtime::Session> make(const model::Model &m, uint32_t sequences, uint32_t block_tokens,
                                       uint32_t blocks = 0, runtime::KvDtype dtype = runtime::KvDtype::F32) {
  runtime::SessionOptions so;
  so.context_length = 64;
  so.max_sequences = sequences;
  so.max_batch_tokens = 64;
  so.max_logit_rows = 64;
  so.threads = 2;
  so.kv_dtype = dtype;
  so.kv_block_tokens = block_tokens;
  so.kv_blocks = blocks;
  Error err;
  auto s = runtime::Session::create(m, so, &err);
  INFO(err.message);
  REQUIRE(s);
  return s;
}

std::vector<int32_t> tokens_of(const testing::OracleCase &oc, size_t n, size_t shift) {
  std::vector<int32_t> t;
  for (size_t i = 0; i < n; ++i) t.push_back(oc.input_ids[(i * 7 + shift) % oc.input_ids.size()]);
  return t;
}

// Runs `prompt` on `sequence` from position `from` (chunked by `chunk`), then `decode` greedy
// steps; returns every logits row computed, concatenated.
std::vector<float> run(runtime::Session &s, uint32_t sequence, const std::vector<int32_t> &prompt, size_t from,
                       size_t chunk, size_t decode) {
  const size_t V = s.model().config().vocab_size;
  std::vector<float> all;
  std::vector<runtime::BatchEntry> batch;
  for (size_t begin = from; begin < prompt.size(); begin += chunk) {
    const size_t end = std::min(prompt.size(), begin + chunk);
    REQUIRE(s.reserve(sequence, static_cast<uint32_t>(end)).ok());
    batch.clear();
    for (size_t i = begin; i < end; ++i) batch.push_back({sequence, static_cast<uint32_t>(i), prompt[i], 1});
    REQUIRE(s.forward(batch.data(), batch.size()).ok());
    for (size_t r = 0; r < s.logit_rows(); ++r) all.insert(all.end(), s.logits(r), s.logits(r) + V);
  }
  uint32_t position = static_cast<uint32_t>(prompt.size());
  for (size_t step = 0; step < decode; ++step) {
    const float *last = all.data() + all.size() - V;
    const int32_t next = static_cast<int32_t>(std::max_element(last, last + V) - last);
    REQUIRE(s.reserve(sequence, position + 1).ok());
    runtime::BatchEntry e{sequence, position++, next, 1};
    REQUIRE(s.forward(&e, 1).ok());
    all.insert(all.end(), s.logits(0), s.logits(0) + V);
  }
  return all;
}

bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("a paged KV cache gives the contiguous cache's logits bit for bit", "[paged]") {
  for (const std::string &name : {std::string("mixtral_gqa"), std::string("qwen3_moe_qknorm")}) {
    auto oc = testing::load_oracle(name);
    auto m = fixture_model(name);
    for (runtime::KvDtype dtype : {runtime::KvDtype::F32, runtime::KvDtype::F16}) {
      const std::vector<int32_t> prompt = tokens_of(oc, 37, 1);
      auto contiguous = make(*m, 1, 0, 0, dtype);
      const std::vector<float> want = run(*contiguous, 0, prompt, 0, 64, 9);
      for (uint32_t block : {1u, 3u, 16u, 64u}) {
        INFO(name << " block_tokens=" << block << " f16=" << (dtype == runtime::KvDtype::F16));
        // Three sequences on one pool; the one under test is the middle slot, its blocks
        // interleaved with the others' (they grow in alternation).
        auto paged = make(*m, 3, block, 0, dtype);
        const std::vector<int32_t> other = tokens_of(oc, 20, 5);
        REQUIRE(paged->reserve(0, 10).ok());
        std::vector<runtime::BatchEntry> filler;
        for (uint32_t i = 0; i < 10; ++i) filler.push_back({0, i, other[i], 0});
        REQUIRE(paged->forward(filler.data(), filler.size()).ok());
        CHECK(same_bits(run(*paged, 1, prompt, 0, 5, 9), want));
        // And chunked differently on a fresh slot after a reset: the same bits again.
        paged->reset_sequence(1);
        CHECK(same_bits(run(*paged, 2, prompt, 0, 11, 9), want));
      }
    }
  }
}

TEST_CASE("a prefix cache hit gives the cold run's logits and skips the cached blocks", "[paged][prefix]") {
  auto oc = testing::load_oracle("mixtral_gqa");
  auto m = fixture_model("mixtral_gqa");
  const size_t V = m->config().vocab_size;
  const uint32_t B = 8;
  const std::vector<int32_t> history = tokens_of(oc, 29, 2);
  std::vector<int32_t> turn2 = history;
  for (int32_t t : tokens_of(oc, 6, 9)) turn2.push_back(t);

  auto cold = make(*m, 1, B);
  const std::vector<float> want = run(*cold, 0, turn2, 0, 64, 4);

  auto s = make(*m, 2, B);
  run(*s, 0, history, 0, 64, 0);
  s->commit_prefix(0, history.data(), history.size());
  s->reset_sequence(0);  // the first turn ends; its full blocks stay cached
  CHECK(s->kv_cache().stats().blocks_cached == history.size() / B);
  const uint32_t hit = s->attach_prefix(1, turn2.data(), turn2.size());
  CHECK(hit == (history.size() / B) * B);
  CHECK(s->sequence_length(1) == hit);
  CHECK(s->kv_cache().stats().prefix_hit_tokens == hit);
  std::vector<float> got = run(*s, 1, turn2, hit, 64, 4);
  // Compare the rows the warm run computed with the cold run's rows for the same positions.
  const std::vector<float> tail(want.end() - static_cast<long>(got.size()), want.end());
  CHECK(got.size() == (turn2.size() - hit + 4) * V);
  CHECK(same_bits(got, tail));

  // A prompt that differs inside the second block matches the first block only.
  std::vector<int32_t> diverging = history;
  diverging[B + 3] = diverging[B + 3] == 1 ? 2 : 1;
  s->reset_sequence(1);
  CHECK(s->attach_prefix(0, diverging.data(), diverging.size()) == B);
  // A prompt of exactly cached whole blocks keeps its last block to compute.
  s->reset_sequence(0);
  const std::vector<int32_t> exact(history.begin(), history.begin() + 2 * B);
  CHECK(s->attach_prefix(0, exact.data(), exact.size()) == B);
}

TEST_CASE("the block pool: exhaustion is refused with a reason, cached blocks are evicted LRU", "[paged][prefix]") {
  auto oc = testing::load_oracle("mixtral_gqa");
  auto m = fixture_model("mixtral_gqa");
  const uint32_t B = 4;
  auto s = make(*m, 2, B, 6);
  REQUIRE(s->reserve(0, 16).ok());  // 4 blocks
  Error e = s->reserve(1, 12);      // 3 more: only 2 left
  CHECK(e.kind == ErrorKind::OutOfMemory);
  CHECK(e.message.find("exhausted") != std::string::npos);
  CHECK(s->kv_cache().table_size(1) == 0);  // nothing taken
  // A position without a block is refused by forward.
  runtime::BatchEntry beyond{1, 0, oc.input_ids[0], 1};
  Error f = s->forward(&beyond, 1);
  CHECK(f.kind == ErrorKind::InvalidArgument);
  CHECK(f.message.find("no KV block") != std::string::npos);

  // Cache 4 blocks of sequence 0, release them, then need 5 blocks: the oldest cached is evicted.
  const std::vector<int32_t> a = tokens_of(oc, 16, 3);
  std::vector<runtime::BatchEntry> batch;
  for (uint32_t i = 0; i < 16; ++i) batch.push_back({0, i, a[i], 0});
  REQUIRE(s->forward(batch.data(), batch.size()).ok());
  s->commit_prefix(0, a.data(), a.size());
  s->reset_sequence(0);
  CHECK(s->kv_cache().stats().blocks_cached == 4);
  CHECK(s->kv_cache().available_blocks() == 6);
  REQUIRE(s->reserve(1, 20).ok());  // 5 blocks: 2 free + 3 evicted
  CHECK(s->kv_cache().stats().evictions == 3);
  s->reset_sequence(1);
  // The last block of `a` was released first and evicted first; the first block survives.
  CHECK(s->attach_prefix(0, a.data(), a.size()) == B);
}

// gpt-oss's sliding-window layers (window 4 in the fixture; layers 0 and 2 of 3) keep window +
// max_batch_tokens − 1 positions: a ring in a contiguous cache, the window pool in a paged one.
// The reference keeps every position (a contiguous cache whose ring would be longer than the
// context): the same logits bit for bit while the ring wraps many times, f32 and f16 caches,
// prefill chunks up to the batch limit, block sizes that do and do not divide the ring.
TEST_CASE("sliding-window layers keep window + max_batch_tokens - 1 positions, ring or window pool, with the full cache's logits bit for bit", "[paged][sliding]") {
  auto oc = testing::load_oracle("gpt_oss_sinks");
  auto m = fixture_model("gpt_oss_sinks");
  const model::ModelConfig &c = m->config();
  REQUIRE(c.sliding_window == 4);
  REQUIRE(c.layer_is_sliding == std::vector<uint8_t>{1, 0, 1});
  auto make_long = [&](uint32_t block_tokens, runtime::KvDtype dtype, uint32_t batch = 8, uint32_t sequences = 1) {
    runtime::SessionOptions so;
    so.context_length = 256;
    so.max_sequences = sequences;
    so.max_batch_tokens = batch;
    so.max_logit_rows = 8;
    so.threads = 2;
    so.kv_dtype = dtype;
    so.kv_block_tokens = block_tokens;
    Error err;
    auto s = runtime::Session::create(*m, so, &err);
    INFO(err.message);
    REQUIRE(s);
    return s;
  };
  for (runtime::KvDtype dtype : {runtime::KvDtype::F32, runtime::KvDtype::F16}) {
    INFO("f16=" << (dtype == runtime::KvDtype::F16));
    auto full = make_long(0, dtype, 256);  // window 4 + 256 - 1 > 256: every position kept
    CHECK(full->kv_cache().ring_rows() == 0);
    const size_t element = dtype == runtime::KvDtype::F16 ? 2 : 4, kv_dim = m->kv_dim();
    const std::vector<int32_t> prompt = tokens_of(oc, 37, 3);
    const std::vector<float> want = run(*full, 0, prompt, 0, 8, 150);

    auto ring = make_long(0, dtype);
    const runtime::KvCache &kv = ring->kv_cache();
    CHECK(kv.ring_rows() == 4 + 8 - 1);
    CHECK(kv.layer_rows(0) == 11);
    CHECK(kv.layer_rows(1) == 256);
    CHECK(kv.layer_rows(2) == 11);
    CHECK(kv.storage_bytes() == (11 + 256 + 11) * 2 * kv_dim * element);  // keys and values, 3 layers
    CHECK(same_bits(run(*ring, 0, prompt, 0, 8, 150), want));
    CHECK(ring->sequence_length(0) == 187);

    for (uint32_t block : {16u, 3u}) {
      INFO("paged, block_tokens=" << block);
      auto paged = make_long(block, dtype);
      const runtime::KvCache &pk = paged->kv_cache();
      CHECK(pk.ring_rows() == 11);
      // The full layer's blocks cover the context; the window pool is twice the peak of one
      // sequence: ceil((11 + 8) / B) + 1 blocks.
      const uint32_t peak = (11 + 8 + block - 1) / block + 1;
      CHECK(pk.window_block_count() == 2 * peak);
      CHECK(pk.block_bytes() == block * 2 * kv_dim * element);          // the full layer only
      CHECK(pk.window_block_bytes() == 2 * block * 2 * kv_dim * element);  // the two sliding layers
      CHECK(pk.storage_bytes() == pk.block_count() * pk.block_bytes() + pk.window_block_count() * pk.window_block_bytes());
      CHECK(same_bits(run(*paged, 0, prompt, 0, 8, 150), want));
      // After 187 positions the sequence holds only the window blocks over its last 11.
      const runtime::KvCacheStats st = pk.stats();
      CHECK(st.window_blocks_in_use <= (11 + block - 1) / block + 1);
      CHECK(st.window_blocks_in_use >= 1);
      CHECK(pk.window_start(0) <= 187 - 11);         // the block holding position 176 ...
      CHECK(pk.window_start(0) + block > 187 - 11);  // ... is the first one held
      // Going back within the ring: the same bits as the full cache; further is refused.
      full->reset_sequence(0);
      REQUIRE(same_bits(run(*full, 0, prompt, 0, 8, 150), want));
      runtime::BatchEntry back{0, 179, prompt[5], 1};
      REQUIRE(paged->forward(&back, 1).ok());
      std::vector<float> got(paged->logits(0), paged->logits(0) + c.vocab_size);
      REQUIRE(full->forward(&back, 1).ok());
      CHECK(std::memcmp(got.data(), full->logits(0), got.size() * sizeof(float)) == 0);
      runtime::BatchEntry too_far{0, 178, prompt[5], 1};
      Error e = paged->forward(&too_far, 1);
      CHECK(e.kind == ErrorKind::InvalidArgument);
      CHECK_THAT(e.message, Catch::Contains("goes back further than the sliding-window layers keep"));
      // A reset gives every window block back.
      paged->reset_sequence(0);
      CHECK(pk.stats().window_blocks_in_use == 0);
      CHECK(same_bits(run(*paged, 0, prompt, 0, 5, 20), run(*full, 0, prompt, 0, 5, 20)));
      full->reset_sequence(0);
    }

    // Going back in the contiguous ring, likewise.
    const int32_t token = prompt[5];
    full->reset_sequence(0);
    run(*full, 0, prompt, 0, 8, 150);
    runtime::BatchEntry back{0, 179, token, 1};
    REQUIRE(ring->forward(&back, 1).ok());
    std::vector<float> got(ring->logits(0), ring->logits(0) + c.vocab_size);
    REQUIRE(full->forward(&back, 1).ok());
    CHECK(std::memcmp(got.data(), full->logits(0), got.size() * sizeof(float)) == 0);
    runtime::BatchEntry too_far{0, 178, token, 1};
    Error e = ring->forward(&too_far, 1);
    CHECK(e.kind == ErrorKind::InvalidArgument);
    CHECK_THAT(e.message, Catch::Contains("goes back further than the sliding-window layers keep"));
    CHECK_THAT(e.message, Catch::Contains("reset the sequence"));
    CHECK(full->forward(&too_far, 1).ok());  // the full cache keeps every position
    // After a reset the sequence starts over in the ring as in a fresh session.
    ring->reset_sequence(0);
    full->reset_sequence(0);
    CHECK(same_bits(run(*ring, 0, prompt, 0, 5, 20), run(*full, 0, prompt, 0, 5, 20)));
  }
}

// A prefix hit on a sliding-window model: the window pool keeps the blocks over the last
// `window` positions of a committed history, the hit takes them over with the full layer's
// blocks, and the warm run gives the cold run's logits bit for bit. Once those window blocks
// are evicted, the hit is shortened to a prefix whose window blocks are still cached (here:
// none), never wrong.
TEST_CASE("a prefix hit on a sliding-window model takes the window blocks too and gives the cold run's logits", "[paged][sliding][prefix]") {
  auto oc = testing::load_oracle("gpt_oss_sinks");
  auto m = fixture_model("gpt_oss_sinks");
  const size_t V = m->config().vocab_size;
  const uint32_t B = 4;
  auto make_paged = [&](uint32_t sequences) {
    runtime::SessionOptions so;
    so.context_length = 128;
    so.max_sequences = sequences;
    so.max_batch_tokens = 8;
    so.max_logit_rows = 8;
    so.threads = 2;
    so.kv_block_tokens = B;
    Error err;
    auto s = runtime::Session::create(*m, so, &err);
    INFO(err.message);
    REQUIRE(s);
    return s;
  };
  const std::vector<int32_t> history = tokens_of(oc, 41, 2);
  std::vector<int32_t> turn2 = history;
  for (int32_t t : tokens_of(oc, 7, 9)) turn2.push_back(t);
  auto cold = make_paged(1);
  const std::vector<float> want = run(*cold, 0, turn2, 0, 8, 5);

  auto s = make_paged(2);
  // Prefills sequence 0 in chunks of 8, committing after each chunk as the serving engine does
  // (a window block joins the cache while its sequence still holds it), then ends it.
  auto prefill_committing = [&](const std::vector<int32_t> &tokens) {
    std::vector<runtime::BatchEntry> batch;
    for (size_t begin = 0; begin < tokens.size(); begin += 8) {
      const size_t end = std::min(tokens.size(), begin + 8);
      REQUIRE(s->reserve(0, static_cast<uint32_t>(end)).ok());
      batch.clear();
      for (size_t i = begin; i < end; ++i) batch.push_back({0, static_cast<uint32_t>(i), tokens[i], 0});
      REQUIRE(s->forward(batch.data(), batch.size()).ok());
      s->commit_prefix(0, tokens.data(), end);
    }
    s->reset_sequence(0);
  };
  prefill_committing(history);
  const runtime::KvCacheStats after = s->kv_cache().stats();
  CHECK(after.window_blocks_in_use == 0);
  CHECK(after.window_blocks_cached >= 2);
  const uint32_t hit = s->attach_prefix(1, turn2.data(), turn2.size());
  CHECK(hit == (history.size() / B) * B);  // 40: the window over positions 37..39 is cached
  CHECK(s->kv_cache().window_start(1) + 4 <= hit);
  std::vector<float> got = run(*s, 1, turn2, hit, 8, 5);
  const std::vector<float> tail(want.end() - static_cast<long>(got.size()), want.end());
  CHECK(got.size() == (turn2.size() - hit + 5) * V);
  CHECK(same_bits(got, tail));

  // Evict the cached window blocks: another sequence runs 120 tokens, committing as it goes,
  // so its trimmed window blocks go to the cache and the pool evicts the oldest (the
  // history's). The full layer's blocks of the history stay cached (its pool has room), but
  // without the window the hit falls back to what can be computed exactly: nothing here.
  s->reset_sequence(1);
  const std::vector<int32_t> other = tokens_of(oc, 120, 5);
  prefill_committing(other);
  CHECK(s->kv_cache().stats().evictions > 0);
  const uint32_t main_cached = s->kv_cache().stats().blocks_cached;
  CHECK(main_cached >= history.size() / B + other.size() / B);  // no main block was evicted
  CHECK(s->attach_prefix(1, turn2.data(), turn2.size()) == 0);
  // The other history's own window blocks are the recent ones: its hit is whole.
  std::vector<int32_t> other2 = other;
  other2.push_back(turn2[0]);
  s->reset_sequence(1);
  const uint32_t other_hit = s->attach_prefix(1, other2.data(), other2.size());
  CHECK(other_hit == 120);
  std::vector<float> warm = run(*s, 1, other2, other_hit, 8, 2);
  auto cold2 = make_paged(1);
  const std::vector<float> want2 = run(*cold2, 0, other2, 0, 8, 2);
  CHECK(same_bits(warm, std::vector<float>(want2.end() - static_cast<long>(warm.size()), want2.end())));
}

// tests/runtime/test_engine.cpp — forward-pass properties beyond the oracle: prefill vs
// decode, multi-sequence batches, routing edge cases, the layer-level MoE entry point, the
// non-finite guard, and input validation.
#include <catch2/catch.hpp>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "runtime/oracle_support.h"
#include "runtime/router.h"
#include "runtime/row_split.h"
#include "support/in_child.h"
#include "support/synthetic_model.h"

using namespace colibri;

namespace {

std::unique_ptr<runtime::Session> make_session(const model::Model &m, uint32_t sequences = 1, size_t threads = 2,
                                               runtime::NonFinitePolicy policy = runtime::NonFinitePolicy::Error,
                                               runtime::KvDtype kv = runtime::KvDtype::F32, uint32_t context = 64) {
  runtime::SessionOptions so;
  so.kv_dtype = kv;
  so.context_length = context;
  so.max_sequences = sequences;
  so.max_batch_tokens = 32;
  so.max_logit_rows = 32;
  so.threads = threads;
  so.non_finite = policy;
  Error err;
  auto s = runtime::Session::create(m, so, &err);
  REQUIRE(s);
  return s;
}

std::unique_ptr<model::Model> fixture_model(const std::string &name, const std::string &dtype = "f32") {
  std::string path = testing::convert_fixture(name, dtype);
  REQUIRE(!path.empty());
  auto m = testing::load_model(path);
  REQUIRE(m);
  return m;
}

double max_abs_diff(const float *a, const float *b, size_t n) {
  double d = 0;
  for (size_t i = 0; i < n; ++i) d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
  return d;
}

}  // namespace

TEST_CASE("prefill of N tokens in one batch equals N single-token decode steps, bitwise, for every dtype and KV type",
          "[engine]") {
  // docs/numerics.md claims 0 (bitwise): every kernel is batch-independent per token (the
  // matmul tiles, the q8 activation quantiser, attention per (token, KV head)).
  for (const std::string &name :
       {std::string("qwen2_moe_shared"), std::string("olmoe_clip"), std::string("minimax_m2_sigmoid"),
        std::string("gpt_oss_sinks"), std::string("gpt_oss_mxfp4"), std::string("deepseek_v3_mla"),
        std::string("deepseek_v3_direct_q")}) {
    for (const char *dtype : {"f32", "bf16", "q8", "q4"}) {
      for (runtime::KvDtype kv : {runtime::KvDtype::F32, runtime::KvDtype::F16}) {
        INFO(name << " " << dtype << (kv == runtime::KvDtype::F16 ? " f16 KV" : " f32 KV"));
        auto oc = testing::load_oracle(name);
        auto m = fixture_model(name, dtype);
        const size_t V = m->config().vocab_size, n = oc.input_ids.size();
        auto batch_session = make_session(*m, 1, 2, runtime::NonFinitePolicy::Error, kv);
        std::vector<runtime::BatchEntry> batch;
        for (size_t i = 0; i < n; ++i) batch.push_back({0, static_cast<uint32_t>(i), oc.input_ids[i], 1});
        REQUIRE(batch_session->forward(batch.data(), n).ok());
        auto step_session = make_session(*m, 1, 2, runtime::NonFinitePolicy::Error, kv);
        size_t differing = 0;
        for (size_t i = 0; i < n; ++i) {
          runtime::BatchEntry e{0, static_cast<uint32_t>(i), oc.input_ids[i], 1};
          REQUIRE(step_session->forward(&e, 1).ok());
          differing += std::memcmp(step_session->logits(0), batch_session->logits(i), V * sizeof(float)) != 0;
        }
        CHECK(differing == 0);
      }
    }
  }
}

TEST_CASE("attention gives the same bits in tiles, split over threads and one token at a time, past runs and slices",
          "[engine][attention]") {
  // 320 positions: five runs of kAttentionRunRows cache rows, and two slices of
  // kAttentionSplitRows positions. One thread decoding token by token is the reference; three
  // threads decoding split every entry's attention past 256 positions (2 KV heads, or MLA's
  // one head group, are fewer tasks than threads) over positions and value dims; two threads
  // prefilling 32-token batches run tiles of 16 entries.
  constexpr uint32_t kLength = 320;
  auto session = [](const model::Model &m, size_t threads, runtime::KvDtype kv) {
    return make_session(m, 1, threads, runtime::NonFinitePolicy::Error, kv, 512);
  };
  for (const char *name : {"mixtral_gqa", "qwen3_moe_qknorm", "gpt_oss_sinks", "deepseek_v3_mla"}) {
    for (runtime::KvDtype kv : {runtime::KvDtype::F32, runtime::KvDtype::F16}) {
      INFO(name << (kv == runtime::KvDtype::F16 ? " f16 KV" : " f32 KV"));
      auto m = fixture_model(name);
      const size_t V = m->config().vocab_size;
      std::vector<int32_t> tokens(kLength);
      uint32_t state = 12345;
      for (auto &t : tokens) t = static_cast<int32_t>((state = state * 1664525u + 1013904223u) >> 8) % static_cast<int32_t>(V);
      auto decode = [&](size_t threads) {
        auto s = session(*m, threads, kv);
        std::vector<float> logits(kLength * V);
        for (uint32_t i = 0; i < kLength; ++i) {
          runtime::BatchEntry e{0, i, tokens[i], 1};
          REQUIRE(s->forward(&e, 1).ok());
          std::memcpy(&logits[i * V], s->logits(0), V * sizeof(float));
        }
        // Split: every layer attending over more than 256 positions (not a 4-wide sliding window).
        CHECK((s->stats().attention_split > 0) == (threads == 3));
        CHECK(s->stats().attention_tiles == 0);
        return logits;
      };
      const std::vector<float> reference = decode(1), split = decode(3);
      auto s = session(*m, 2, kv);
      std::vector<float> tiled(kLength * V);
      for (uint32_t i0 = 0; i0 < kLength; i0 += 32) {
        std::vector<runtime::BatchEntry> batch;
        for (uint32_t i = i0; i < i0 + 32; ++i) batch.push_back({0, i, tokens[i], 1});
        REQUIRE(s->forward(batch.data(), batch.size()).ok());
        for (uint32_t i = 0; i < 32; ++i) std::memcpy(&tiled[(i0 + i) * V], s->logits(i), V * sizeof(float));
      }
      CHECK(s->stats().attention_tiles == size_t(kLength / 16) * m->config().layer_count);
      CHECK(s->stats().attention_split == 0);
      size_t split_differs = 0, tiled_differs = 0;
      for (uint32_t i = 0; i < kLength; ++i) {
        split_differs += std::memcmp(&split[i * V], &reference[i * V], V * sizeof(float)) != 0;
        tiled_differs += std::memcmp(&tiled[i * V], &reference[i * V], V * sizeof(float)) != 0;
      }
      CHECK(split_differs == 0);
      CHECK(tiled_differs == 0);
      // The logits are not all alike (a check that could not fail otherwise).
      CHECK(std::memcmp(&reference[0], &reference[(kLength - 1) * V], V * sizeof(float)) != 0);
    }
  }
}

TEST_CASE("a batch of 3 sequences of different lengths equals each sequence run alone", "[engine]") {
  auto oc = testing::load_oracle("mixtral_gqa");
  auto m = fixture_model("mixtral_gqa");
  const size_t V = m->config().vocab_size;
  const size_t lengths[3] = {5, 3, 9};
  std::vector<std::vector<int32_t>> prompts(3);
  for (size_t s = 0; s < 3; ++s)
    for (size_t i = 0; i < lengths[s]; ++i) prompts[s].push_back(oc.input_ids[(i + 3 * s) % oc.input_ids.size()]);
  // Interleave the three prompts in one batch; logits at every entry.
  auto together = make_session(*m, 3);
  std::vector<runtime::BatchEntry> batch;
  for (size_t i = 0; i < 9; ++i)
    for (uint32_t s = 0; s < 3; ++s)
      if (i < lengths[s]) batch.push_back({s, static_cast<uint32_t>(i), prompts[s][i], 1});
  REQUIRE(together->forward(batch.data(), batch.size()).ok());
  for (uint32_t s = 0; s < 3; ++s) {
    auto alone = make_session(*m, 1);
    std::vector<runtime::BatchEntry> single;
    for (size_t i = 0; i < lengths[s]; ++i) single.push_back({0, static_cast<uint32_t>(i), prompts[s][i], 1});
    REQUIRE(alone->forward(single.data(), single.size()).ok());
    size_t row = 0;
    for (size_t j = 0; j < batch.size(); ++j) {
      if (batch[j].sequence != s) continue;
      CHECK(std::memcmp(together->logits(j), alone->logits(row), V * sizeof(float)) == 0);  // bitwise
      ++row;
    }
  }
  // Then one decode step for all three at once, again equal to each alone.
  CHECK(together->sequence_length(2) == 9);
}

TEST_CASE("routing: ±5000 logits stay finite, ties go to the lower index, k may equal E", "[engine][router]") {
  const auto &k = kernels::default_kernel_table();
  float logits[6] = {5000.0f, -5000.0f, 4999.0f, 5000.0f, -4999.0f, 0.0f};
  k.softmax(logits, 6);
  for (float p : logits) CHECK(std::isfinite(p));
  int32_t ids[6];
  float weights[6];
  runtime::select_top_k(logits, 6, 2, true, ids, weights);
  CHECK(ids[0] == 0);  // experts 0 and 3 tie at the top: lower index first
  CHECK(ids[1] == 3);
  CHECK(weights[0] == Approx(0.5f));
  CHECK(weights[1] == Approx(0.5f));

  float equal[4] = {0.25f, 0.25f, 0.25f, 0.25f};
  runtime::select_top_k(equal, 4, 3, false, ids, weights);
  CHECK((ids[0] == 0 && ids[1] == 1 && ids[2] == 2));
  CHECK(weights[2] == 0.25f);

  float p[4] = {0.1f, 0.4f, 0.2f, 0.3f};
  runtime::select_top_k(p, 4, 4, true, ids, weights);  // top-k = number of experts
  CHECK((ids[0] == 1 && ids[1] == 3 && ids[2] == 2 && ids[3] == 0));
  float sum = weights[0] + weights[1] + weights[2] + weights[3];
  CHECK(sum == Approx(1.0f));
}

TEST_CASE("sigmoid routing: the bias picks, the unbiased score weighs, groups limit, ties to the lower index",
          "[engine][router]") {
  float scratch[16];
  int32_t ids[4];
  float weights[4];
  {
    // The bias moves expert 3 (score 0.2) ahead of expert 0 (score 0.5), but its weight is 0.2.
    const float scores[4] = {0.5f, 0.9f, 0.3f, 0.2f};
    const float bias[4] = {0.0f, 0.0f, 0.0f, 0.5f};
    runtime::SigmoidRouting r;
    r.bias = bias;
    r.renormalise = false;
    runtime::select_top_k_sigmoid(scores, 4, 2, r, scratch, ids, weights);
    CHECK((ids[0] == 1 && ids[1] == 3));
    CHECK(weights[0] == 0.9f);
    CHECK(weights[1] == 0.2f);
    // Renormalised over the unbiased scores, then scaled: 0.9 / 1.1 × 2.5, 0.2 / 1.1 × 2.5.
    r.renormalise = true;
    r.scale = 2.5f;
    runtime::select_top_k_sigmoid(scores, 4, 2, r, scratch, ids, weights);
    CHECK(weights[0] == Approx(0.9f / 1.1f * 2.5f));
    CHECK(weights[1] == Approx(0.2f / 1.1f * 2.5f));
    CHECK(weights[0] + weights[1] == Approx(2.5f));
  }
  {
    // Two groups of 4. Group 0 holds the single best expert (0.95) but group 1 has the best
    // two-expert sum (0.8 + 0.7 > 0.95 + 0.1): with topk_group 1 only group 1 is eligible.
    const float scores[8] = {0.95f, 0.1f, 0.1f, 0.1f, 0.8f, 0.2f, 0.7f, 0.3f};
    runtime::SigmoidRouting r;
    r.group_count = 2;
    r.group_top = 1;
    r.renormalise = false;
    runtime::select_top_k_sigmoid(scores, 8, 2, r, scratch, ids, weights);
    CHECK((ids[0] == 4 && ids[1] == 6));
    // Both groups eligible: the global top-2.
    r.group_top = 2;
    runtime::select_top_k_sigmoid(scores, 8, 2, r, scratch, ids, weights);
    CHECK((ids[0] == 0 && ids[1] == 4));
    // Tied group sums: the lower group wins.
    const float tied[8] = {0.5f, 0.5f, 0.0f, 0.0f, 0.0f, 0.5f, 0.5f, 0.0f};
    r.group_top = 1;
    runtime::select_top_k_sigmoid(tied, 8, 2, r, scratch, ids, weights);
    CHECK((ids[0] == 0 && ids[1] == 1));
  }
  {
    // All scores equal: the lowest indices, in order; the renormalised weights are equal.
    const float equal[6] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
    runtime::SigmoidRouting r;
    r.epsilon = 1e-20f;
    runtime::select_top_k_sigmoid(equal, 6, 3, r, scratch, ids, weights);
    CHECK((ids[0] == 0 && ids[1] == 1 && ids[2] == 2));
    CHECK(weights[0] == Approx(1.0f / 3.0f));
    CHECK(weights[2] == weights[0]);
    // Every score 0 (a sigmoid underflow): the epsilon keeps the weights finite, at 0.
    const float zero[6] = {};
    runtime::select_top_k_sigmoid(zero, 6, 3, r, scratch, ids, weights);
    CHECK((ids[0] == 0 && weights[0] == 0.0f && weights[2] == 0.0f));
  }
}

TEST_CASE("the layer-level MoE entry point: router vs caller routes, one expert for all, unused experts", "[engine][moe]") {
  auto m = fixture_model("mixtral_gqa");
  const size_t H = m->config().hidden_size, K = m->config().top_k, E = m->config().expert_count;
  auto s = make_session(*m);
  const size_t tokens = 6;
  std::vector<float> hidden(tokens * H);
  for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = std::sin(0.37f * static_cast<float>(i));
  std::vector<float> routed(tokens * H), given(tokens * H), single(H);

  // All tokens choose expert 3 with weight 1 (and expert 5 with weight 0): the other experts
  // are chosen by no token.
  std::vector<runtime::Route> routes(tokens * K);
  for (size_t t = 0; t < tokens; ++t) {
    routes[t * K] = {3, 1.0f};
    routes[t * K + 1] = {5, 0.0f};
  }
  REQUIRE(s->moe_layer(0, hidden.data(), tokens, routes.data(), given.data()).ok());
  for (size_t t = 0; t < tokens; ++t) {
    REQUIRE(s->moe_layer(0, &hidden[t * H], 1, &routes[t * K], single.data()).ok());
    CHECK(std::memcmp(single.data(), &given[t * H], H * 4) == 0);  // batch-independent, bitwise
  }
  // With the model's router: the result is a convex combination of expert outputs, finite,
  // and differs from the forced route.
  REQUIRE(s->moe_layer(0, hidden.data(), tokens, nullptr, routed.data()).ok());
  for (float v : routed) REQUIRE(std::isfinite(v));
  CHECK(max_abs_diff(routed.data(), given.data(), routed.size()) > 1e-3);
  // Bad input is refused with a reason.
  routes[0].expert = static_cast<int32_t>(E);
  Error bad = s->moe_layer(0, hidden.data(), tokens, routes.data(), given.data());
  CHECK(bad.kind == ErrorKind::InvalidArgument);
  CHECK_THAT(bad.message, Catch::Contains("invalid"));
  CHECK(s->moe_layer(7, hidden.data(), 1, nullptr, given.data()).kind == ErrorKind::InvalidArgument);
}

TEST_CASE("non-finite guard: policy error reports, policy zero zeroes the row and counts it", "[engine][nonfinite]") {
  auto m = fixture_model("mixtral_gqa");
  const size_t H = m->config().hidden_size;
  std::vector<float> hidden(3 * H, 0.5f), out(3 * H);
  hidden[H + 7] = std::numeric_limits<float>::quiet_NaN();
  auto strict = make_session(*m);
  Error e = strict->moe_layer(1, hidden.data(), 3, nullptr, out.data());
  CHECK(e.kind == ErrorKind::NonFinite);
  CHECK_THAT(e.message, Catch::Contains("layer 1") && Catch::Contains("batch row 1"));
  auto lenient = make_session(*m, 1, 2, runtime::NonFinitePolicy::Zero);
  REQUIRE(lenient->moe_layer(1, hidden.data(), 3, nullptr, out.data()).ok());
  CHECK(lenient->stats().non_finite_rows == 1);
  for (float v : out) CHECK(std::isfinite(v));
}

namespace {

// A complete synthetic model (tests/support/synthetic_model.h) with one tensor all NaN.
std::unique_ptr<model::Model> model_with_nan(const model::ModelConfig &config, const std::string &tensor) {
  testing::ModelImageParts parts = testing::model_parts(config);
  parts.nan_tensors = {tensor};
  const std::string path = testing::temp_dir("nonfinite") + "/" + tensor + ".colibri";
  REQUIRE_FALSE(testing::write_model_parts(path, parts));
  auto m = testing::load_model(path);
  REQUIRE(m);
  return m;
}

model::ModelConfig dense_and_shared_config() {  // Qwen2-MoE: layer 0 dense, layer 1 MoE with a shared expert
  model::ModelConfig c = testing::tiny_model_config();
  c.family = model::kFamilyQwen2Moe;
  c.hf_architecture = "Qwen2MoeForCausalLM";
  c.shared_expert_ffn_size = 32;
  c.shared_expert_gate = true;
  c.dense_ffn_size = 48;
  c.layer_is_moe = {0, 1};
  return c;
}

}  // namespace

TEST_CASE("non-finite guard: every stage to the logits is checked, and the error names the stage and position",
          "[engine][nonfinite]") {
  struct Case {
    model::ModelConfig config;
    const char *tensor;
    const char *stage;
    bool zeroable;  // policy zero zeroes the rows and goes on; the final norm and logits always fail
  };
  const model::ModelConfig mixtral = testing::tiny_model_config(), qwen2 = dense_and_shared_config();
  const Case cases[] = {
      {mixtral, "token_embd", "(stage: token_embd;", true},
      {mixtral, "blk.0.attn_output", "(stage: attention output of layer 0;", true},
      {mixtral, "blk.1.ffn_norm", "(stage: MoE input of layer 1;", true},
      {mixtral, "blk.1.ffn_down_exps", "(stage: MoE output of layer 1;", true},  // the last layer's experts
      {qwen2, "blk.0.ffn_down", "(stage: dense FFN output of layer 0;", true},
      {qwen2, "blk.1.ffn_down_shexp", "(stage: MoE output of layer 1;", true},  // the shared expert
      {mixtral, "output_norm", "(stage: output_norm;", false},
      {mixtral, "output", "(stage: logits;", false},
  };
  // A prefill of 3 tokens; only the last wants logits (position 2).
  const runtime::BatchEntry batch[] = {{0, 0, 5, 0}, {0, 1, 6, 0}, {0, 2, 7, 1}};
  for (const Case &k : cases) {
    INFO(k.tensor);
    auto m = model_with_nan(k.config, k.tensor);
    auto strict = make_session(*m);
    Error e = strict->forward(batch, 3);
    CHECK(e.kind == ErrorKind::NonFinite);
    CHECK_THAT(e.message, Catch::Contains(k.stage));
    CHECK_THAT(e.message, Catch::Contains(k.zeroable ? "at position 0 of sequence 0" : "at position 2 of sequence 0"));
    CHECK(strict->logit_rows() == 0);  // no logits to read after a failed pass
    CHECK(strict->sequence_length(0) == 0);
    auto lenient = make_session(*m, 1, 2, runtime::NonFinitePolicy::Zero);
    Error z = lenient->forward(batch, 3);
    if (k.zeroable) {
      REQUIRE(z.ok());
      CHECK(lenient->stats().non_finite_rows >= 3);
      REQUIRE(lenient->logit_rows() == 1);
      for (size_t i = 0; i < m->config().vocab_size; ++i) CHECK(std::isfinite(lenient->logits(0)[i]));
    } else {
      CHECK(z.kind == ErrorKind::NonFinite);
      CHECK_THAT(z.message, Catch::Contains(k.stage) && Catch::Contains("'zero' does not apply"));
    }
  }
  // The same model without NaN passes: the guard does not fire on finite values.
  testing::ModelImageParts parts = testing::model_parts(mixtral);
  const std::string path = testing::temp_dir("nonfinite") + "/finite.colibri";
  REQUIRE_FALSE(testing::write_model_parts(path, parts));
  auto finite = testing::load_model(path);
  REQUIRE(finite);
  auto s = make_session(*finite);
  REQUIRE(s->forward(batch, 3).ok());
  CHECK(s->stats().non_finite_rows == 0);
}

TEST_CASE("a session whose KV cache cannot fit is refused with its size, before anything is allocated", "[engine]") {
  auto m = fixture_model("mixtral_gqa");
  runtime::SessionOptions so;
  so.threads = 1;
  so.context_length = 1u << 24;
  const double per_sequence = 2.0 * 4 * m->config().layer_count * so.context_length * static_cast<double>(m->kv_dim());
  Error err;
  so.max_sequences = 4096;  // beyond the fixed 256 GiB bound
  CHECK_FALSE(runtime::Session::create(*m, so, &err));
  CHECK(err.kind == ErrorKind::InvalidArgument);
  CHECK_THAT(err.message, Catch::Contains("GiB") && Catch::Contains("lower context_length"));
  // Beyond this machine's memory but under the fixed bound: refused too (the zero-filled cache
  // would otherwise swap or draw the OOM killer).
  const double memory = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  const double sequences = std::floor(memory / per_sequence) + 1;
  if (sequences * per_sequence > 256.0 * (1ull << 30)) {
    WARN("this machine has more memory than the fixed KV bound: the memory check is not reached");
    return;
  }
  so.max_sequences = static_cast<uint32_t>(sequences);
  CHECK_FALSE(runtime::Session::create(*m, so, &err));
  CHECK_THAT(err.message, Catch::Contains("machine has"));
}

TEST_CASE("forward refuses bad batches with a reason", "[engine]") {
  auto m = fixture_model("mixtral_gqa");
  auto s = make_session(*m, 2);
  runtime::BatchEntry bad_token{0, 0, 100000, 1};
  CHECK_THAT(s->forward(&bad_token, 1).message, Catch::Contains("outside the vocabulary"));
  runtime::BatchEntry gap{0, 5, 1, 1};
  CHECK_THAT(s->forward(&gap, 1).message, Catch::Contains("gap"));
  runtime::BatchEntry far{0, 1000000, 1, 1};  // a gap, however far: not a "full" sequence
  CHECK_THAT(s->forward(&far, 1).message, Catch::Contains("gap") && Catch::Contains("has 0 tokens"));
  runtime::BatchEntry slot{5, 0, 1, 1};
  CHECK_THAT(s->forward(&slot, 1).message, Catch::Contains("slots"));
  runtime::BatchEntry twice[2] = {{0, 0, 1, 0}, {0, 0, 2, 1}};
  CHECK_THAT(s->forward(twice, 2).message, Catch::Contains("consecutive"));
  CHECK(s->forward(nullptr, 0).kind == ErrorKind::InvalidArgument);
  CHECK(s->sequence_length(0) == 0);  // nothing was committed by the refused calls
  // The next position of a full sequence is beyond the context length.
  std::vector<runtime::BatchEntry> fill;
  for (uint32_t p = 0; p < 64; ++p) fill.push_back({0, p, 1, 0});
  fill[31].want_logits = fill[63].want_logits = 1;
  REQUIRE(s->forward(fill.data(), 32).ok());
  REQUIRE(s->forward(fill.data() + 32, 32).ok());
  runtime::BatchEntry next{0, 64, 1, 1};
  CHECK_THAT(s->forward(&next, 1).message, Catch::Contains("beyond the context length 64"));
}

TEST_CASE("an f16 KV cache stays close to the f32 cache and keeps the greedy token", "[engine][kv]") {
  auto oc = testing::load_oracle("qwen3_moe_qknorm");
  auto m = fixture_model("qwen3_moe_qknorm");
  const size_t V = m->config().vocab_size, n = oc.input_ids.size();
  std::vector<float> f32_logits;
  for (runtime::KvDtype kv : {runtime::KvDtype::F32, runtime::KvDtype::F16}) {
    auto s = make_session(*m, 1, 0, runtime::NonFinitePolicy::Error, kv);
    std::vector<runtime::BatchEntry> batch;
    for (size_t i = 0; i < n; ++i) batch.push_back({0, static_cast<uint32_t>(i), oc.input_ids[i], 1});
    REQUIRE(s->forward(batch.data(), n).ok());
    if (kv == runtime::KvDtype::F32) {
      f32_logits.assign(s->logits(0), s->logits(0) + n * V);
      continue;
    }
    double worst = max_abs_diff(f32_logits.data(), s->logits(0), n * V);
    WARN("f16 KV cache: max |logit diff| vs f32 cache = " << worst);
    CHECK(worst > 0.0);   // the cache really is rounded
    CHECK(worst < 2e-2);
    const float *last = s->logits(n - 1);
    CHECK(std::max_element(last, last + V) - last == oc.greedy_tokens[0]);
  }
}

TEST_CASE("a NUMA policy on a converted model loads, reports a measurement, and refuses a node that is not there",
          "[engine][numa]") {
  // The placement itself: tests/runtime/test_numa.cpp.
  std::string path = testing::convert_fixture("mixtral_gqa", "f32");
  model::LoadOptions lo;
  lo.numa.mode = util::NumaPolicy::Mode::Interleave;
  lo.warm_up = true;
  Error err;
  auto m = model::Model::load(path, lo, &err);
  REQUIRE(m);
  const std::string support = util::numa_support();
  CAPTURE(support, m->numa_report());
  if (util::system_numa().unavailable_reason().empty()) {
    CHECK_THAT(support, Catch::StartsWith("libnuma.so.1 loaded"));
    CHECK_THAT(m->numa_report(), Catch::StartsWith("interleave: weights copied into memory interleaved over"));
    CHECK_THAT(m->numa_report(), Catch::Contains("; measured: node "));
  } else {
    CHECK_THAT(m->numa_report(), Catch::Contains("nothing placed"));
  }
  lo.numa = {util::NumaPolicy::Mode::Bind, 999};
  CHECK_FALSE(model::Model::load(path, lo, &err));
  CHECK_THAT(err.message, Catch::Contains("bind:999"));
}

TEST_CASE("a model loaded into memory runs from a read-only copy and gives the mapped model's bits", "[engine][load]") {
  for (const std::string dtype : {"f32", "q8"}) {
    const std::string path = testing::convert_fixture("mixtral_gqa", dtype);
    REQUIRE(!path.empty());
    Error err;
    auto mapped = model::Model::load(path, {}, &err);
    REQUIRE(mapped);
    model::LoadOptions lo;
    lo.load_into_memory = true;
    lo.image.populate = true;  // does nothing with a copy, but must not hurt
    auto loaded = model::Model::load(path, lo, &err);
    INFO(dtype << ": " << err.message);
    REQUIRE(loaded);
    CHECK_FALSE(mapped->image().loaded_into_memory());
    CHECK(loaded->image().loaded_into_memory());
    const image::Image &a = mapped->image(), &b = loaded->image();
    REQUIRE(a.file_size() == b.file_size());
    CHECK(a.bytes() != b.bytes());
    CHECK(std::memcmp(a.bytes(), b.bytes(), a.file_size()) == 0);
    // The weights bound by the model point into the copy.
    const unsigned char *embd = loaded->token_embedding().data;
    CHECK((embd >= b.bytes() && embd < b.bytes() + b.file_size()));
    CHECK(loaded->image().verify_all(1).ok());

    auto oc = testing::load_oracle("mixtral_gqa");
    const size_t V = mapped->config().vocab_size, n = oc.input_ids.size();
    std::vector<runtime::BatchEntry> batch;
    for (size_t i = 0; i < n; ++i) batch.push_back({0, static_cast<uint32_t>(i), oc.input_ids[i], 1});
    auto s1 = make_session(*mapped), s2 = make_session(*loaded);
    REQUIRE(s1->forward(batch.data(), n).ok());
    REQUIRE(s2->forward(batch.data(), n).ok());
    for (size_t i = 0; i < n; ++i) CHECK(std::memcmp(s1->logits(i), s2->logits(i), V * sizeof(float)) == 0);

    // Under a NUMA policy the copy is placed before it is filled (harmless on one node).
    lo.numa.mode = util::NumaPolicy::Mode::Interleave;
    auto numa = model::Model::load(path, lo, &err);
    REQUIRE(numa);
    CHECK(numa->image().loaded_into_memory());
    CHECK(!numa->numa_report().empty());
    CHECK(numa->numa_report() != "off");
  }
}

TEST_CASE("matmul task cuts: equal bytes, every row exactly once, in order", "[engine][split]") {
  using colibri::runtime::equal_bytes_cut;
  using colibri::runtime::RowPosition;
  struct Shape {
    std::vector<uint64_t> rows, row_bytes;
  };
  const std::vector<Shape> shapes = {
      {{1024, 256, 256}, {2048, 2048, 2048}},  // q, k, v of the benchmark model (f16)
      {{1024, 256, 256}, {1152, 1152, 1152}},  // the same in q8/32
      {{32000}, {2048}},                        // an LM head
      {{8}, {4096}},                            // a router: fewer rows than tasks
      {{3, 1, 77, 2}, {40, 8000, 36, 4}},       // mixed sizes, nothing aligned
      {{1}, {4}},
  };
  for (const Shape &s : shapes) {
    auto shape = [&](size_t j, uint64_t *rows, uint64_t *row_bytes) {
      *rows = s.rows[j];
      *row_bytes = s.row_bytes[j];
    };
    uint64_t total = 0;
    for (size_t j = 0; j < s.rows.size(); ++j) total += s.rows[j] * s.row_bytes[j];
    for (size_t tasks : {1, 2, 3, 8, 16, 64}) {
      for (size_t align : {1, 16}) {
        INFO("matrices=" << s.rows.size() << " tasks=" << tasks << " align=" << align);
        std::vector<std::vector<int>> seen(s.rows.size());
        for (size_t j = 0; j < s.rows.size(); ++j) seen[j].assign(s.rows[j], 0);
        RowPosition previous{0, 0};
        REQUIRE(equal_bytes_cut(shape, s.rows.size(), 0, tasks, align).matrix == 0);
        REQUIRE(equal_bytes_cut(shape, s.rows.size(), 0, tasks, align).row == 0);
        uint64_t max_task_bytes = 0;
        for (size_t i = 0; i < tasks; ++i) {
          const RowPosition a = equal_bytes_cut(shape, s.rows.size(), i, tasks, align);
          const RowPosition b = equal_bytes_cut(shape, s.rows.size(), i + 1, tasks, align);
          REQUIRE((a.matrix == s.rows.size() || a.row % align == 0 || a.row == s.rows[a.matrix]));
          REQUIRE(a.matrix == previous.matrix);
          REQUIRE(a.row == previous.row);
          REQUIRE((a.matrix < b.matrix || (a.matrix == b.matrix && a.row <= b.row)));
          uint64_t bytes = 0;
          for (size_t j = a.matrix; j <= b.matrix && j < s.rows.size(); ++j) {
            const size_t begin = j == a.matrix ? a.row : 0, end = j == b.matrix ? b.row : s.rows[j];
            if (j != a.matrix && j != b.matrix) REQUIRE(begin == 0);
            for (size_t r = begin; r < end; ++r) ++seen[j][r];
            if (end > begin) bytes += (end - begin) * s.row_bytes[j];
          }
          max_task_bytes = std::max(max_task_bytes, bytes);
          previous = b;
        }
        REQUIRE(previous.matrix == s.rows.size());
        REQUIRE(previous.row == 0);
        for (size_t j = 0; j < s.rows.size(); ++j)
          for (size_t r = 0; r < s.rows[j]; ++r) REQUIRE(seen[j][r] == 1);
        // Equal bytes up to the rounding: a task is at most one share plus align rows of the
        // widest matrix (its two cuts rounded, each by at most align / 2 rows) plus one row
        // (the share's remainder).
        uint64_t widest = 0;
        for (uint64_t rb : s.row_bytes) widest = std::max(widest, rb);
        REQUIRE(max_task_bytes <= (total + tasks - 1) / tasks + (align + 1) * widest);
      }
    }
  }
  // The benchmark's q/k/v on 2 threads × 4 tasks: each thread gets half the bytes exactly.
  const Shape qkv = shapes[0];
  auto shape = [&](size_t j, uint64_t *rows, uint64_t *row_bytes) {
    *rows = qkv.rows[j];
    *row_bytes = qkv.row_bytes[j];
  };
  const RowPosition half = equal_bytes_cut(shape, 3, 4, 8, 16);
  CHECK(half.matrix == 0);
  CHECK(half.row == 768);
  // Cuts round to the nearest 16 rows, not down: 60 rows in 4 tasks are 16 + 16 + 16 + 12
  // (rounding down gave 0 + 16 + 16 + 28).
  auto router = [](size_t, uint64_t *rows, uint64_t *row_bytes) {
    *rows = 60;
    *row_bytes = 4096;
  };
  CHECK(equal_bytes_cut(router, 1, 1, 4, 16).row == 16);
  CHECK(equal_bytes_cut(router, 1, 2, 4, 16).row == 32);
  CHECK(equal_bytes_cut(router, 1, 3, 4, 16).row == 48);
  CHECK(equal_bytes_cut(router, 1, 4, 4, 16).matrix == 1);
}

// Issue 18, item 8: a session whose worker threads the OS refuses (a thread limit) fails to
// be created with resource exhaustion naming the limit, not "internal error".
TEST_CASE("a session under a thread limit: resource exhaustion, naming the limit", "[engine]") {
  auto m = fixture_model("mixtral_gqa");
  const std::string message = testing::in_child([&] {
    struct rlimit rl = {1, 1};  // RLIMIT_NPROC: no thread beyond this process; root is exempt
    if (!testing::drop_root_privileges()) return std::string("setuid failed");
    if (setrlimit(RLIMIT_NPROC, &rl) != 0) return std::string("setrlimit failed");
    runtime::SessionOptions so;
    so.context_length = 64;
    so.threads = 4;
    Error err;
    auto s = runtime::Session::create(*m, so, &err);
    return s ? std::string("created") : std::string(error_kind_name(err.kind)) + ": " + err.message;
  });
  INFO(message);
  CHECK_THAT(message, Catch::StartsWith("out of memory or threads: resource exhaustion") &&
                          Catch::Contains("thread 2 of 4 for the session's thread pool") &&
                          Catch::Contains("ulimit -u, here 1") && !Catch::Contains("internal error"));
}

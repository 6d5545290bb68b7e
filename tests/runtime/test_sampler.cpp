// tests/runtime/test_sampler.cpp — each stage of the sampler chain, and reproducibility.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "runtime/sampler.h"

using namespace colibri::runtime;

namespace {

SamplerOptions plain(float temperature) {
  SamplerOptions o;
  o.temperature = temperature;
  o.top_k = 0;
  o.top_p = 1.0f;
  o.min_p = 0.0f;
  o.seed = 42;
  return o;
}

// One draw that must succeed.
int32_t draw(Sampler &s, const std::vector<float> &logits) {
  int32_t token = -1;
  const colibri::Error e = s.sample(logits.data(), &token);
  REQUIRE(e.ok());
  return token;
}

std::map<int32_t, int> histogram(Sampler &s, const std::vector<float> &logits, int draws) {
  std::map<int32_t, int> h;
  for (int i = 0; i < draws; ++i) ++h[draw(s, logits)];
  return h;
}

}  // namespace

TEST_CASE("greedy picks the argmax, ties to the lower id", "[sampler]") {
  Sampler s(plain(0.0f), 5);
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f};
  CHECK(draw(s, logits) == 1);
}

TEST_CASE("same seed, same tokens, another seed, another sequence", "[sampler]") {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i));
  auto run = [&](uint64_t seed) {
    SamplerOptions o = plain(1.0f);
    o.seed = seed;
    Sampler s(o, logits.size());
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(draw(s, logits));
    return out;
  };
  CHECK(run(7) == run(7));
  CHECK(run(7) != run(8));
  // reset() re-seeds: the sequence starts over.
  Sampler s(plain(1.0f), logits.size());
  int32_t first = draw(s, logits);
  s.reset();
  CHECK(draw(s, logits) == first);
}

TEST_CASE("temperature sharpens and flattens the distribution", "[sampler]") {
  std::vector<float> logits = {1.0f, 0.0f};
  Sampler cold(plain(0.25f), 2), hot(plain(4.0f), 2);
  auto c = histogram(cold, logits, 4000), h = histogram(hot, logits, 4000);
  // p(0) = 1/(1+e^-4) ≈ 0.982 cold, 1/(1+e^-0.25) ≈ 0.562 hot.
  CHECK(c[0] > 3800);
  CHECK(h[0] > 2000);
  CHECK(h[0] < 2500);
}

TEST_CASE("top-k keeps only the k best tokens", "[sampler]") {
  SamplerOptions o = plain(1.0f);
  o.top_k = 2;
  Sampler s(o, 4);
  std::vector<float> logits = {0.0f, 0.1f, 0.2f, 0.3f};
  auto h = histogram(s, logits, 2000);
  CHECK(h.count(0) == 0);
  CHECK(h.count(1) == 0);
  CHECK(h[2] + h[3] == 2000);
}

TEST_CASE("top-p keeps the smallest prefix reaching the mass", "[sampler]") {
  SamplerOptions o = plain(1.0f);
  o.top_p = 0.5f;
  Sampler s(o, 3);
  std::vector<float> logits = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  auto h = histogram(s, logits, 500);
  CHECK(h[0] == 500);  // 0.6 alone reaches 0.5
}

TEST_CASE("top-p over a wide vocabulary keeps exactly the best prefix, past the first sort chunk", "[sampler]") {
  // 1000 tokens, logits a permutation of descending values: the prefix that reaches the mass
  // spans several of the sampler's doubling sort chunks (64, 128, ...).
  constexpr size_t kVocab = 1000;
  std::vector<float> logits(kVocab);
  std::vector<int32_t> rank_of(kVocab);
  for (size_t i = 0; i < kVocab; ++i) {
    const size_t rank = (i * 337) % kVocab;  // 337 is coprime with 1000: a permutation
    rank_of[i] = static_cast<int32_t>(rank);
    logits[i] = -0.001f * static_cast<float>(rank);
  }
  // The mass of the best n ranks, in the order the sampler adds them.
  double total = 0.0;
  for (size_t r = 0; r < kVocab; ++r) total += std::exp(static_cast<double>(-0.001f * static_cast<float>(r)));
  SamplerOptions o = plain(1.0f);
  o.top_p = 0.3f;
  double mass = 0.0;
  size_t want = 0;
  while (mass < 0.3) mass += std::exp(static_cast<double>(-0.001f * static_cast<float>(want++))) / total;
  REQUIRE(want > 64);  // past the first chunk
  Sampler s(o, kVocab);
  auto h = histogram(s, logits, 20000);
  int32_t worst = 0;
  for (auto [token, n] : h) worst = std::max(worst, rank_of[static_cast<size_t>(token)]);
  CHECK(static_cast<size_t>(worst) + 1 <= want);
  CHECK(static_cast<size_t>(worst) + 1 >= want - 2);  // the last kept ranks are drawn at all
}

TEST_CASE("without top-k or top-p, draws follow the softmax over the whole vocabulary", "[sampler]") {
  // 4096 tokens in shuffled order, 8 of them likely: the unsorted draw must still sample the
  // softmax. p(each likely token) = e^3 / (8 e^3 + 4088) ≈ 0.0282.
  constexpr size_t kVocab = 4096;
  std::vector<float> logits(kVocab, 0.0f);
  for (size_t i = 0; i < 8; ++i) logits[(i * 977 + 13) % kVocab] = 3.0f;
  Sampler s(plain(1.0f), kVocab);
  constexpr int kDraws = 40000;
  auto h = histogram(s, logits, kDraws);
  const double p_likely = std::exp(3.0) / (8 * std::exp(3.0) + (kVocab - 8));
  for (size_t i = 0; i < 8; ++i) {
    const double expected = p_likely * kDraws;  // ≈ 1129, sd ≈ 33
    CHECK(std::fabs(h[static_cast<int32_t>((i * 977 + 13) % kVocab)] - expected) < 6 * std::sqrt(expected));
  }
  int others = 0;
  for (auto [token, n] : h)
    if (logits[static_cast<size_t>(token)] == 0.0f) others += n;
  const double p_others = 1.0 - 8 * p_likely, expected_others = p_others * kDraws;  // ≈ 38 970, sd ≈ 32
  CHECK(std::fabs(others - expected_others) < 6 * std::sqrt(kDraws * p_others * (1.0 - p_others)));
}

TEST_CASE("min-p drops tokens below min_p times the best probability", "[sampler]") {
  SamplerOptions o = plain(1.0f);
  o.min_p = 0.4f;
  Sampler s(o, 3);
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  auto h = histogram(s, logits, 2000);
  CHECK(h.count(2) == 0);  // 0.2 < 0.4 · 0.5
  CHECK(h[1] > 0);
}

TEST_CASE("repetition, presence and frequency penalties act on the window", "[sampler]") {
  std::vector<float> logits = {2.0f, 1.9f, -1.0f};
  SamplerOptions o = plain(0.0f);
  o.repetition_penalty = 1.2f;  // 2.0 / 1.2 = 1.67 < 1.9
  Sampler rep(o, 3);
  rep.accept(0);
  CHECK(draw(rep, logits) == 1);

  SamplerOptions f = plain(0.0f);
  f.frequency_penalty = 0.06f;  // token 0 seen twice: 2.0 - 0.12 = 1.88 < 1.9
  Sampler freq(f, 3);
  freq.accept(0);
  CHECK(draw(freq, logits) == 0);  // once: 1.94 > 1.9
  freq.accept(0);
  CHECK(draw(freq, logits) == 1);

  SamplerOptions p = plain(0.0f);
  p.presence_penalty = 0.2f;
  p.penalty_last_n = 1;  // only the last token counts
  Sampler pres(p, 3);
  pres.accept(0);
  CHECK(draw(pres, logits) == 1);
  pres.accept(2);  // token 0 leaves the window
  CHECK(draw(pres, logits) == 0);
}

TEST_CASE("absurd sampler options are refused with the field name", "[sampler]") {
  SamplerOptions o;
  o.temperature = -1.0f;
  CHECK_THAT(o.validate().message, Catch::Contains("temperature"));
  o = SamplerOptions{};
  o.top_p = 0.0f;
  CHECK_THAT(o.validate().message, Catch::Contains("top_p"));
  o = SamplerOptions{};
  o.repetition_penalty = std::nanf("");
  CHECK_THAT(o.validate().message, Catch::Contains("repetition_penalty"));
  CHECK(SamplerOptions{}.validate().ok());
}

TEST_CASE("no id is ever picked from a row with NaN or +inf, or with every logit -inf", "[sampler][nonfinite]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  SamplerOptions penalised = plain(0.7f);
  penalised.top_k = 3;
  penalised.repetition_penalty = 1.3f;
  for (const SamplerOptions &o : {plain(0.0f), plain(1.0f), penalised}) {
    INFO("temperature " << o.temperature);
    Sampler s(o, 6);
    s.accept(1);
    const int32_t untouched = 12345;
    int32_t token = untouched;
    const std::vector<float> all_nan(6, nan);
    colibri::Error e = s.sample(all_nan.data(), &token);
    CHECK(e.kind == colibri::ErrorKind::NonFinite);
    CHECK_THAT(e.message, Catch::Contains("logits[0] is NaN"));
    CHECK(token == untouched);
    // One NaN among finite logits (greedy used to skip it, or pick 0 when it was first).
    const std::vector<float> one_nan = {0.5f, 1.0f, 2.0f, nan, 0.0f, -1.0f};
    e = s.sample(one_nan.data(), &token);
    CHECK(e.kind == colibri::ErrorKind::NonFinite);
    CHECK_THAT(e.message, Catch::Contains("logits[3] is NaN"));
    const std::vector<float> plus_inf = {0.5f, inf, 2.0f, 0.0f, 0.0f, -1.0f};
    e = s.sample(plus_inf.data(), &token);
    CHECK(e.kind == colibri::ErrorKind::NonFinite);
    CHECK_THAT(e.message, Catch::Contains("logits[1] is +inf"));
    const std::vector<float> masked(6, -inf);
    e = s.sample(masked.data(), &token);
    CHECK(e.kind == colibri::ErrorKind::InvalidArgument);
    CHECK_THAT(e.message, Catch::Contains("every logit is -inf"));
    CHECK(token == untouched);
    // -inf masks: only the one unmasked token can come out.
    std::vector<float> one_left(6, -inf);
    one_left[4] = -3.0f;
    for (int i = 0; i < 20; ++i) CHECK(draw(s, one_left) == 4);
  }
}

// tests/runtime/test_logprobs.cpp — runtime::compute_logprobs: log_softmax values, the order
// of the top N (ties to the lower id), N larger than the vocabulary, extreme logits.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "runtime/logprobs.h"

using namespace colibri::runtime;

TEST_CASE("logprobs: the top N of a small vocabulary is all of it, most likely first, exp sums to 1") {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  TokenLogprob chosen, top[kMaxTopLogprobs];
  compute_logprobs(logits.data(), logits.size(), 4, kMaxTopLogprobs, &chosen, top);
  double sum = 0.0, normaliser = 0.0;
  for (float x : logits) normaliser += std::exp(static_cast<double>(x));
  for (size_t k = 0; k < logits.size(); ++k) {
    sum += std::exp(static_cast<double>(top[k].logprob));
    const double want = logits[static_cast<size_t>(top[k].token)] - std::log(normaliser);
    CHECK(std::fabs(top[k].logprob - want) < 1e-6);
  }
  CHECK(std::fabs(sum - 1.0) < 1e-6);
  // 2.0 twice: the lower id first; then 1.0, 0.5, -1.0.
  CHECK(top[0].token == 1);
  CHECK(top[1].token == 3);
  CHECK(top[2].token == 4);
  CHECK(top[3].token == 0);
  CHECK(top[4].token == 2);
  CHECK(chosen.token == 4);
  CHECK(chosen.logprob == top[2].logprob);
}

TEST_CASE("logprobs: the top 3 of a large row, and no alternatives when N is 0") {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>((i * 37) % 101) * 0.1f;
  TokenLogprob chosen, top[3];
  compute_logprobs(logits.data(), logits.size(), 0, 3, &chosen, top);
  // (i * 37) % 101 == 100 first at i = 30 (37 * 30 = 11 * 101 - 1), then every 101 ids.
  CHECK(top[0].token == 30);
  CHECK(top[1].token == 131);
  CHECK(top[2].token == 232);
  CHECK(top[0].logprob == top[1].logprob);
  CHECK(chosen.logprob < top[0].logprob);
  TokenLogprob only;
  compute_logprobs(logits.data(), logits.size(), 30, 0, &only, nullptr);
  CHECK(only.token == 30);
  CHECK(only.logprob == top[0].logprob);
}

TEST_CASE("logprobs: logits of +-5000 give finite values, the best at most 0") {
  const std::vector<float> logits = {5000.0f, -5000.0f, 4999.0f};
  TokenLogprob chosen, top[2];
  compute_logprobs(logits.data(), logits.size(), 1, 2, &chosen, top);
  CHECK(std::isfinite(chosen.logprob));
  CHECK(chosen.logprob == Approx(-10000.0f - std::log1p(std::exp(-1.0f))).epsilon(1e-6));
  CHECK(top[0].token == 0);
  CHECK(top[0].logprob <= 0.0f);
  // fp32 near 5000 resolves ~5e-4.
  CHECK(top[1].logprob == Approx(-1.0f - std::log1p(std::exp(-1.0f))).margin(1e-3));
}

// core/runtime/logprobs.cpp — log_softmax of one row, the chosen token and the top N
// (logprobs.h).
#include "runtime/logprobs.h"

#include <cmath>

namespace colibri::runtime {

void compute_logprobs(const float *logits, size_t vocab, int32_t token, uint32_t top_count, TokenLogprob *chosen,
                      TokenLogprob *top) {
  // log p_i = x_i - max - log(sum_j exp(x_j - max)): subtracting the max keeps exp in range.
  float max = logits[0];
  for (size_t i = 1; i < vocab; ++i) max = logits[i] > max ? logits[i] : max;
  // fp32 exponentials, summed in double. This pass runs per token on the scheduler thread:
  // expf took 0.37 ms for a 151936-entry row where double exp took 0.57 (one core of the
  // development VM, -O2, best of 20).
  double sum = 0.0;
  for (size_t i = 0; i < vocab; ++i) sum += static_cast<double>(std::exp(logits[i] - max));
  const float log_normaliser = max + static_cast<float>(std::log(sum));
  auto logprob = [&](size_t i) {
    const float lp = logits[i] - log_normaliser;
    return lp > 0.0f ? 0.0f : lp;  // rounding may put the top token a hair above 0
  };
  *chosen = {token, logprob(static_cast<size_t>(token))};

  // The n best by insertion into a sorted prefix (n <= 20, one pass over the row): a token
  // enters only with a strictly larger logit than the last kept one, so ties keep the lower id.
  const size_t n = top_count < vocab ? top_count : vocab;
  if (n == 0) return;
  size_t kept = 0;
  for (size_t i = 0; i < vocab; ++i) {
    const float x = logits[i];
    if (kept == n && !(x > logits[static_cast<size_t>(top[n - 1].token)])) continue;
    size_t at = kept < n ? kept++ : n - 1;
    while (at > 0 && x > logits[static_cast<size_t>(top[at - 1].token)]) {
      top[at] = top[at - 1];
      --at;
    }
    top[at].token = static_cast<int32_t>(i);
  }
  for (size_t k = 0; k < n; ++k) top[k].logprob = logprob(static_cast<size_t>(top[k].token));
}

}  // namespace colibri::runtime

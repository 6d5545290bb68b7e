// core/runtime/logprobs.h — the log-probabilities of one logits row: the chosen token's and
// the N most likely tokens'. This is the model's raw distribution (log_softmax of the row as
// the forward pass produced it, before any penalty, temperature or truncation of the sampler:
// vLLM's default "raw logprobs", what OpenAI's `logprobs` field reports).
#pragma once

#include <cstddef>
#include <cstdint>

namespace colibri::runtime {

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;  // natural log, <= 0
};

// The most alternatives one step may record (OpenAI's top_logprobs limit).
inline constexpr uint32_t kMaxTopLogprobs = 20;

// For logits[0..vocab) (finite: the caller sampled from this row already, and the sampler
// refuses a row with NaN or +inf): *chosen = {token, log p(token)}, top[0..n) the n =
// min(top_count, vocab) most likely tokens, most likely first, equal logits the lower id
// first. fp32 arithmetic, the normaliser's sum of exp(x - max) accumulated in double; one
// pass over the row (plus a short insertion for the top N). top_count
// <= kMaxTopLogprobs; top may be null when top_count is 0. Allocates nothing.
void compute_logprobs(const float *logits, size_t vocab, int32_t token, uint32_t top_count, TokenLogprob *chosen,
                      TokenLogprob *top);

}  // namespace colibri::runtime

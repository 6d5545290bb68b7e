// core/runtime/sampler.h — the sampler chain: repetition/presence/frequency penalties →
// temperature → top-k → top-p → min-p → seeded draw. Temperature 0 is greedy (argmax, ties
// to the lower token id). The same seed and inputs give the same tokens on any machine and
// thread count (own xoshiro256** generator, fp32/fp64 arithmetic in a fixed order).
// A Sampler allocates only at construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "util/error.h"

namespace colibri::runtime {

struct SamplerOptions {
  float temperature = 0.8f;        // 0 = greedy
  uint32_t top_k = 40;             // 0 = off
  float top_p = 0.95f;             // 1 = off
  float min_p = 0.05f;             // 0 = off; keeps tokens with p >= min_p · p_max
  float repetition_penalty = 1.0f; // 1 = off; HF semantics: logit > 0 ? /= r : *= r
  float presence_penalty = 0.0f;   // subtracted once from seen tokens' logits
  float frequency_penalty = 0.0f;  // subtracted per occurrence
  uint32_t penalty_last_n = 64;    // tokens of history the penalties look at (0 = penalties off)
  uint64_t seed = 0;

  // Checks ranges; InvalidArgument naming the field and its range.
  Error validate() const;
};

class Sampler {
 public:
  Sampler(const SamplerOptions &options, size_t vocab_size);

  // Picks the next token from `logits` [vocab] (not modified) into *token. -inf masks a
  // token; a NaN or +inf logit is a NonFinite error naming its index, and a row with no
  // finite logit an InvalidArgument error: no id is ever picked from such a row (*token is
  // left as it was). The check is the copy pass the sampler makes anyway.
  Error sample(const float *logits, int32_t *token);
  // Records a token (prompt or generated) in the penalty history.
  void accept(int32_t token);
  void reset();  // clears the history and re-seeds the generator

  const SamplerOptions &options() const { return options_; }

 private:
  // top-p orders the candidates in chunks of this many, doubling, until the mass is reached.
  static constexpr size_t kTopPFirstChunk = 64;

  double next_uniform();  // [0, 1)
  // The chain on checked logits: logits_in as given, logits the caller's copy (penalised here).
  int32_t pick(const float *logits_in, float *logits);

  SamplerOptions options_;
  size_t vocab_;
  uint64_t state_[4];
  std::vector<int32_t> history_;   // ring of the last penalty_last_n tokens
  size_t history_next_ = 0;
  std::vector<uint32_t> counts_;   // occurrences per token inside the window
  std::vector<float> scratch_logits_;
  std::vector<int32_t> candidates_;
  std::vector<double> probs_;
  std::vector<uint8_t> seen_;
};

}  // namespace colibri::runtime

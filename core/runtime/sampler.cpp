// core/runtime/sampler.cpp — penalties, temperature, top-k/top-p/min-p and a seeded draw.
// Semantics follow transformers' logits processors (RepetitionPenaltyLogitsProcessor,
// TopK/TopP/MinP warpers) and the OpenAI presence/frequency penalties.
#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "util/strings.h"

namespace colibri::runtime {

using util::strprintf;

Error SamplerOptions::validate() const {
  auto bad = [](std::string m) { return make_error(ErrorKind::InvalidArgument, std::move(m)); };
  if (!(temperature >= 0.0f && temperature <= 100.0f)) return bad(strprintf("temperature %g: use 0 (greedy) to 100", static_cast<double>(temperature)));
  if (!(top_p > 0.0f && top_p <= 1.0f)) return bad(strprintf("top_p %g: use a value in (0, 1]", static_cast<double>(top_p)));
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return bad(strprintf("min_p %g: use a value in [0, 1]", static_cast<double>(min_p)));
  if (!(repetition_penalty > 0.0f && repetition_penalty <= 10.0f))
    return bad(strprintf("repetition_penalty %g: use a value in (0, 10]", static_cast<double>(repetition_penalty)));
  if (!(std::fabs(presence_penalty) <= 2.0f)) return bad(strprintf("presence_penalty %g: use -2..2", static_cast<double>(presence_penalty)));
  if (!(std::fabs(frequency_penalty) <= 2.0f)) return bad(strprintf("frequency_penalty %g: use -2..2", static_cast<double>(frequency_penalty)));
  if (penalty_last_n > (1u << 20)) return bad(strprintf("penalty_last_n %u: use 0..1048576", penalty_last_n));
  return {};
}

namespace {

uint64_t splitmix64(uint64_t &x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Sampler::Sampler(const SamplerOptions &options, size_t vocab_size) : options_(options), vocab_(vocab_size) {
  size_t window = options_.penalty_last_n;
  history_.assign(window, -1);
  counts_.assign(vocab_, 0);
  seen_.assign(vocab_, 0);
  scratch_logits_.assign(vocab_, 0.0f);
  candidates_.reserve(vocab_);
  probs_.reserve(vocab_);
  reset();
}

void Sampler::reset() {
  uint64_t s = options_.seed;
  for (uint64_t &v : state_) v = splitmix64(s);
  std::fill(history_.begin(), history_.end(), -1);
  std::fill(counts_.begin(), counts_.end(), 0u);
  history_next_ = 0;
}

double Sampler::next_uniform() {  // xoshiro256**
  uint64_t result = rotl(state_[1] * 5, 7) * 9;
  uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return static_cast<double>(result >> 11) * 0x1.0p-53;
}

void Sampler::accept(int32_t token) {
  if (token < 0 || static_cast<size_t>(token) >= vocab_ || history_.empty()) return;
  int32_t evicted = history_[history_next_];
  if (evicted >= 0) --counts_[static_cast<size_t>(evicted)];
  history_[history_next_] = token;
  ++counts_[static_cast<size_t>(token)];
  history_next_ = (history_next_ + 1) % history_.size();
}

Error Sampler::sample(const float *logits_in, int32_t *token) {
  float *logits = scratch_logits_.data();
  // Copy and check in one pass: NaN or +inf has no meaning as a logit; -inf masks a token.
  constexpr float kInf = std::numeric_limits<float>::infinity();
  size_t bad = vocab_, candidates = 0;
  for (size_t i = 0; i < vocab_; ++i) {
    const float l = logits_in[i];
    logits[i] = l;
    if (bad == vocab_ && (std::isnan(l) || l == kInf)) bad = i;
    candidates += l != -kInf ? 1 : 0;
  }
  if (bad != vocab_)
    return make_error(ErrorKind::NonFinite,
                      strprintf("logits[%zu] is %s: the sampler takes finite logits (-inf masks a token), so no token "
                                "is picked",
                                bad, std::isnan(logits_in[bad]) ? "NaN" : "+inf"));
  if (candidates == 0) return make_error(ErrorKind::InvalidArgument, "every logit is -inf: no token can be sampled");
  *token = pick(logits_in, logits);
  return {};
}

int32_t Sampler::pick(const float *logits_in, float *logits) {
  // 1. Penalties over the tokens in the window.
  bool penalise = options_.repetition_penalty != 1.0f || options_.presence_penalty != 0.0f ||
                  options_.frequency_penalty != 0.0f;
  if (penalise) {
    // Each distinct token of the window is penalised once, by its count in the window.
    candidates_.clear();
    for (int32_t token : history_) {
      if (token < 0 || seen_[static_cast<size_t>(token)]) continue;
      seen_[static_cast<size_t>(token)] = 1;
      candidates_.push_back(token);
      float &l = logits[token];
      if (options_.repetition_penalty != 1.0f) l = l > 0 ? l / options_.repetition_penalty : l * options_.repetition_penalty;
      l -= options_.presence_penalty + options_.frequency_penalty * static_cast<float>(counts_[static_cast<size_t>(token)]);
    }
    for (int32_t token : candidates_) seen_[static_cast<size_t>(token)] = 0;
  }
  // 2. Greedy: argmax, ties to the lower id.
  if (options_.temperature == 0.0f) {
    size_t best = 0;
    for (size_t i = 1; i < vocab_; ++i)
      if (logits[i] > logits[best]) best = i;
    return static_cast<int32_t>(best);
  }
  // 3. Candidates: the finite logits, in id order.
  candidates_.clear();
  for (size_t i = 0; i < vocab_; ++i)
    if (std::isfinite(logits[i])) candidates_.push_back(static_cast<int32_t>(i));
  if (candidates_.empty()) {  // the penalties pushed every logit to -inf (|logit| near FLT_MAX): greedy before them
    size_t best = 0;
    for (size_t i = 1; i < vocab_; ++i)
      if (logits_in[i] > logits_in[best]) best = i;
    return static_cast<int32_t>(best);
  }
  // Descending logit, ties to the lower id: the order top-k and top-p cut in. Nothing else needs
  // an order, so the vocabulary is sorted only as far as a cut needs it (never in full when
  // top_k = 0 and top_p = 1: the draw then walks the candidates in id order, which samples the
  // same distribution).
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  size_t keep = candidates_.size();
  size_t sorted = 0;  // candidates_[0, sorted) hold the best `sorted` candidates in order
  if (options_.top_k > 0 && options_.top_k < keep) {
    keep = options_.top_k;
    std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<long>(keep), candidates_.end(), by_logit);
    sorted = keep;
  }
  // 4. Softmax weights over the kept candidates, in double, summed in the array's order.
  float max_logit = logits[candidates_[0]];
  for (size_t i = 1; i < keep; ++i) max_logit = std::max(max_logit, logits[candidates_[i]]);
  const double inv_temperature = 1.0 / static_cast<double>(options_.temperature);
  auto weight = [&](int32_t id) {
    return std::exp((static_cast<double>(logits[id]) - static_cast<double>(max_logit)) * inv_temperature);
  };
  std::vector<double> &probs = probs_;
  probs.resize(keep);
  double sum = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    probs[i] = weight(candidates_[i]);
    sum += probs[i];
  }
  // 5. top-p: the smallest prefix in descending order whose mass reaches top_p (at least one
  // token). The order is built in doubling chunks, so a peaked distribution sorts a few dozen
  // candidates, not the vocabulary.
  if (options_.top_p < 1.0f) {
    double mass = 0.0;
    size_t n = 0;
    size_t chunk = std::min<size_t>(keep, kTopPFirstChunk);
    for (bool reached = false; !reached;) {
      if (sorted < chunk) {
        std::partial_sort(candidates_.begin() + static_cast<long>(sorted), candidates_.begin() + static_cast<long>(chunk),
                          candidates_.begin() + static_cast<long>(keep), by_logit);
        for (size_t i = sorted; i < chunk; ++i) probs[i] = weight(candidates_[i]);
        sorted = chunk;
      }
      while (n < chunk) {
        mass += probs[n++] / sum;
        if (mass >= options_.top_p) {
          reached = true;
          break;
        }
      }
      if (n == keep) break;
      chunk = std::min(keep, 2 * chunk);
    }
    keep = n;
  }
  // 6. min-p: drop tokens below min_p · p_max, keeping the order. Weights are relative to the
  // best kept logit, whose weight is exp(0) = 1, so the rule reads weight < min_p.
  if (options_.min_p > 0.0f) {
    const double floor = static_cast<double>(options_.min_p);
    size_t n = 0;
    for (size_t i = 0; i < keep; ++i) {
      if (probs[i] < floor) continue;
      probs[n] = probs[i];
      candidates_[n++] = candidates_[i];
    }
    keep = n;
  }
  // 7. Draw from the renormalised survivors, in the array's order.
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i) total += probs[i];
  double r = next_uniform() * total;
  for (size_t i = 0; i < keep; ++i) {
    r -= probs[i];
    if (r < 0.0) return candidates_[i];
  }
  return candidates_[keep - 1];
}

}  // namespace colibri::runtime

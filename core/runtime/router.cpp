// core/runtime/router.cpp — top-k selection over router probabilities.
#include "runtime/router.h"

namespace colibri::runtime {

void select_top_k(const float *p, size_t expert_count, size_t k, bool renormalise, int32_t *ids, float *weights) {
  float sum = 0.0f;
  for (size_t slot = 0; slot < k; ++slot) {
    // Highest remaining probability; the strict '>' keeps the lower index on ties.
    int32_t best = -1;
    for (size_t e = 0; e < expert_count; ++e) {
      bool taken = false;
      for (size_t s = 0; s < slot && !taken; ++s) taken = ids[s] == static_cast<int32_t>(e);
      if (!taken && (best < 0 || p[e] > p[best])) best = static_cast<int32_t>(e);
    }
    ids[slot] = best;
    weights[slot] = p[best];
    sum += p[best];
  }
  if (renormalise)
    for (size_t slot = 0; slot < k; ++slot) weights[slot] /= sum;
}

}  // namespace colibri::runtime

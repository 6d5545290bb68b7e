// core/runtime/router.cpp — top-k selection over router probabilities.
#include "runtime/router.h"

#include <limits>

namespace colibri::runtime {

namespace {

// The index of the highest value[i] among i in [0, n) not yet in taken[0, count); the strict
// '>' keeps the lower index on ties. -1 when every index is taken.
int32_t best_remaining(const float *value, size_t n, const int32_t *taken, size_t count) {
  int32_t best = -1;
  for (size_t i = 0; i < n; ++i) {
    bool used = false;
    for (size_t s = 0; s < count && !used; ++s) used = taken[s] == static_cast<int32_t>(i);
    if (!used && (best < 0 || value[i] > value[best])) best = static_cast<int32_t>(i);
  }
  return best;
}

}  // namespace

void select_top_k(const float *p, size_t expert_count, size_t k, bool renormalise, int32_t *ids, float *weights) {
  float sum = 0.0f;
  for (size_t slot = 0; slot < k; ++slot) {
    ids[slot] = best_remaining(p, expert_count, ids, slot);
    weights[slot] = p[ids[slot]];
    sum += weights[slot];
  }
  if (renormalise)
    for (size_t slot = 0; slot < k; ++slot) weights[slot] /= sum;
}

void select_top_k_sigmoid(const float *scores, size_t expert_count, size_t k, const SigmoidRouting &r, float *scratch,
                          int32_t *ids, float *weights) {
  float *choice = scratch;
  for (size_t e = 0; e < expert_count; ++e) choice[e] = scores[e] + (r.bias ? r.bias[e] : 0.0f);
  if (r.group_count > 1) {
    // Group score: the sum of the group's two best choices (torch: topk(2).sum()).
    float *group_score = scratch + expert_count;
    const size_t per_group = expert_count / r.group_count;
    for (size_t g = 0; g < r.group_count; ++g) {
      const float *v = choice + g * per_group;
      int32_t two[2];
      two[0] = best_remaining(v, per_group, two, 0);
      two[1] = best_remaining(v, per_group, two, 1);
      group_score[g] = v[two[0]] + v[two[1]];
    }
    // Keep the best group_top groups: group g ranks below every group with a higher score and
    // every lower-indexed group with an equal one.
    for (size_t g = 0; g < r.group_count; ++g) {
      size_t ahead = 0;
      for (size_t h = 0; h < r.group_count; ++h)
        ahead += group_score[h] > group_score[g] || (group_score[h] == group_score[g] && h < g);
      if (ahead >= r.group_top)
        for (size_t e = g * per_group; e < (g + 1) * per_group; ++e) choice[e] = -std::numeric_limits<float>::infinity();
    }
  }
  float sum = 0.0f;
  for (size_t slot = 0; slot < k; ++slot) {
    ids[slot] = best_remaining(choice, expert_count, ids, slot);
    weights[slot] = scores[ids[slot]];
    sum += weights[slot];
  }
  if (r.renormalise)
    for (size_t slot = 0; slot < k; ++slot) weights[slot] /= sum + r.epsilon;
  for (size_t slot = 0; slot < k; ++slot) weights[slot] *= r.scale;
}

}  // namespace colibri::runtime

// core/runtime/router.h — routing semantics shared by the forward pass and the tests
// (docs/architecture.md §4). Softmax routers: softmax in fp32 with the max subtracted (logits
// of ±5000 stay finite), top-k by probability with ties to the lower expert index, optional
// renormalisation of the k weights. Sigmoid routers: fp32 sigmoid scores, a selection bias,
// optional group limiting, weights from the unbiased scores (select_top_k_sigmoid).
#pragma once

#include <cstddef>
#include <cstdint>

namespace colibri::runtime {

// probabilities: E softmax outputs of one token. Writes k expert ids (best first) and their
// weights (renormalised to sum 1 when renormalise != 0).
void select_top_k(const float *probabilities, size_t expert_count, size_t k, bool renormalise, int32_t *ids,
                  float *weights);

// The sigmoid router of GLM-4.5, MiniMax-M2 and DeepSeek-V3 (transformers Glm4MoeTopkRouter,
// MiniMaxM2TopKRouter). scores: E sigmoid outputs of one token. Experts are ranked by
// choice = score + bias[e] (bias may be null: zero). With group_count > 1 the E experts form
// group_count equal consecutive groups, a group ranks by the sum of its two best choices, and
// only the experts of the best group_top groups are eligible. The k eligible experts with the
// highest choice are taken (best first; every tie to the lower index, groups too); their
// weights are their unbiased scores, divided by (their sum + epsilon) when renormalise, then
// multiplied by scale. scratch: E + group_count floats.
struct SigmoidRouting {
  const float *bias = nullptr;
  size_t group_count = 1, group_top = 1;
  bool renormalise = true;
  float epsilon = 0.0f;
  float scale = 1.0f;
};
void select_top_k_sigmoid(const float *scores, size_t expert_count, size_t k, const SigmoidRouting &routing,
                          float *scratch, int32_t *ids, float *weights);

}  // namespace colibri::runtime

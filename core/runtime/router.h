// core/runtime/router.h — routing semantics shared by the forward pass and the tests
// (docs/architecture.md §4): softmax in fp32 with the max subtracted (logits of ±5000 stay
// finite), top-k by probability with ties to the lower expert index, optional
// renormalisation of the k weights.
#pragma once

#include <cstddef>
#include <cstdint>

namespace colibri::runtime {

// probabilities: E softmax outputs of one token. Writes k expert ids (best first) and their
// weights (renormalised to sum 1 when renormalise != 0).
void select_top_k(const float *probabilities, size_t expert_count, size_t k, bool renormalise, int32_t *ids,
                  float *weights);

}  // namespace colibri::runtime

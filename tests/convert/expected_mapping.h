// tests/convert/expected_mapping.h — which Hugging Face tensors an image tensor is made of,
// written for the tests from the transformers module names, independently of the
// converter's own table (modeltool/convert/tensor_plan.cpp), so each checks the other.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace colibri::testing {

// The checkpoint tensors of image tensor `image_name` for `architecture`, in stacking
// order (one per expert for the ffn_*_exps tensors); empty for an unknown name.
std::vector<std::string> expected_hf_sources(const std::string &architecture, uint64_t expert_count,
                                             const std::string &image_name);

}  // namespace colibri::testing

// core/model/tensor_names.cpp — name parsing and the storage dtype policy.
#include "model/tensor_names.h"

#include <cstdlib>
#include <cstring>

namespace colibri::model::names {

uint64_t expert_size_bytes(const std::vector<image::TensorSpec> &tensors, uint64_t expert_count) {
  if (expert_count == 0) return 0;
  bool found = false;
  uint64_t first_layer = 0, bytes = 0;
  for (const image::TensorSpec &t : tensors) {
    uint64_t layer = 0, size = 0;
    std::string role;
    if (!parse_layer_tensor(t.name, &layer, &role) || (role != kExpertsGate && role != kExpertsUp && role != kExpertsDown))
      continue;
    if (found && layer > first_layer) continue;
    if (!found || layer < first_layer) {
      found = true;
      first_layer = layer;
      bytes = 0;
    }
    if (image::tensor_data_bytes(t.dtype, t.group_size, static_cast<uint32_t>(t.shape.size()), t.shape.data(), &size))
      bytes += size;
  }
  return bytes / expert_count;
}

bool parse_layer_tensor(const std::string &name, uint64_t *layer, std::string *role) {
  if (name.rfind("blk.", 0) != 0) return false;
  size_t dot = name.find('.', 4);
  if (dot == std::string::npos || dot == 4) return false;
  uint64_t value = 0;
  for (size_t i = 4; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    value = value * 10 + static_cast<uint64_t>(name[i] - '0');
    if (value > (1ull << 32)) return false;
  }
  *layer = value;
  *role = name.substr(dot + 1);
  return !role->empty();
}

image::DType storage_dtype(const std::string &name, uint32_t rank, uint64_t last_dim, image::DType requested,
                           uint32_t group_size) {
  uint64_t layer;
  std::string role;
  bool is_router = parse_layer_tensor(name, &layer, &role) && (role == kRouter || role == kSharedExpertGate);
  if (rank < 2 || is_router) return image::DType::F32;
  if (requested == image::DType::Q8 && (group_size == 0 || last_dim % group_size != 0)) return image::DType::F16;
  return requested;
}

}  // namespace colibri::model::names

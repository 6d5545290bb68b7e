// core/model/tensor_names.cpp — name parsing and the storage dtype policy.
#include "model/tensor_names.h"

#include "image/dtype_convert.h"

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

const char *tensor_class_name(TensorClass c) {
  switch (c) {
    case TensorClass::Embeddings: return "embeddings";
    case TensorClass::Output: return "output";
    case TensorClass::Attention: return "attention";
    case TensorClass::Experts: return "experts";
    case TensorClass::SharedExpert: return "shared_expert";
    case TensorClass::DenseFfn: return "dense_ffn";
    case TensorClass::Router: return "router";
    case TensorClass::Vectors: return "vectors";
  }
  return "unknown";
}

bool tensor_class_from_name(const std::string &name, TensorClass *out) {
  for (uint32_t i = 0; i < kTensorClassCount; ++i) {
    if (name == tensor_class_name(static_cast<TensorClass>(i))) {
      *out = static_cast<TensorClass>(i);
      return true;
    }
  }
  return false;
}

bool parse_mtp_tensor(const std::string &name, uint64_t *j, std::string *suffix) {
  const size_t n = std::char_traits<char>::length(kMtpPrefix);
  if (name.compare(0, n, kMtpPrefix) != 0) return false;
  const size_t dot = name.find('.', n);
  if (dot == std::string::npos || dot == n || dot - n > 6 || dot + 1 >= name.size()) return false;
  for (size_t i = n; i < dot; ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  *j = std::stoull(name.substr(n, dot - n));
  *suffix = name.substr(dot + 1);
  return true;
}

TensorClass tensor_class(const std::string &name, uint32_t rank) {
  uint64_t layer;
  std::string role;
  if (parse_mtp_tensor(name, &layer, &role)) {
    // A multi-token-prediction layer's tensors take the class of what they are in a layer: the
    // router stays f32 as every router; eh_proj and the dense FFN are dense_ffn, its embedding
    // and head (shared_head.head) embeddings and output.
    auto has = [&](const char *part) { return role.find(part) != std::string::npos; };
    if (rank < 2 || role.ends_with("_bias") || role.ends_with("e_score_correction_bias")) return TensorClass::Vectors;
    if (role == "mlp.gate.weight") return TensorClass::Router;
    if (has("embed_tokens")) return TensorClass::Embeddings;
    if (has("shared_head.head")) return TensorClass::Output;
    if (has("self_attn.")) return TensorClass::Attention;
    if (has("shared_experts.")) return TensorClass::SharedExpert;
    if (has("experts.")) return TensorClass::Experts;
    return TensorClass::DenseFfn;
  }
  const bool per_layer = parse_layer_tensor(name, &layer, &role);
  if (per_layer && (role == kRouter || role == kSharedExpertGate)) return TensorClass::Router;
  // Biases are vectors whatever their rank (the experts' biases are [experts, rows]).
  const bool bias = per_layer && role.size() > 5 && role.compare(role.size() - 5, 5, "_bias") == 0;
  if (rank < 2 || bias) return TensorClass::Vectors;
  if (name == kTokenEmbedding) return TensorClass::Embeddings;
  if (!per_layer) return TensorClass::Output;
  if (role.rfind("attn_", 0) == 0) return TensorClass::Attention;
  if (role.size() > 5 && role.compare(role.size() - 5, 5, "_exps") == 0) return TensorClass::Experts;
  if (role.size() > 6 && role.compare(role.size() - 6, 6, "_shexp") == 0) return TensorClass::SharedExpert;
  return TensorClass::DenseFfn;
}

image::DType class_dtype(const StoragePolicy &policy, TensorClass c) {
  const size_t i = static_cast<size_t>(c);
  if (policy.has_override[i]) return policy.override_dtype[i];
  if (c == TensorClass::Vectors || c == TensorClass::Router) return image::DType::F32;
  const bool four_bit = policy.requested == image::DType::Q4 || policy.requested == image::DType::MXFP4;
  if (four_bit && c != TensorClass::Experts) return kFourBitCompanion;
  return policy.requested;
}

static uint32_t block_group(image::DType dtype, uint32_t group_size) {
  switch (dtype) {
    case image::DType::Q8:
    case image::DType::Q4: return group_size;
    case image::DType::Q8F16: return image::kQ8F16GroupSize;
    case image::DType::MXFP4: return image::kMxfp4GroupSize;
    default: return 0;
  }
}

StorageChoice storage_choice(const StoragePolicy &policy, const std::string &name, uint32_t rank, uint64_t last_dim) {
  StorageChoice choice;
  choice.dtype = class_dtype(policy, tensor_class(name, rank));
  if (!image::is_block_dtype(choice.dtype)) return choice;
  choice.group_size = block_group(choice.dtype, policy.group_size);
  if (choice.group_size != 0 && last_dim % choice.group_size == 0) return choice;
  if (choice.dtype == image::DType::Q4 && last_dim % image::kQ8F16GroupSize == 0)
    return {image::DType::Q8F16, image::kQ8F16GroupSize};
  return {image::DType::F16, 0};
}

std::string policy_error(const StoragePolicy &policy) {
  for (uint32_t i = 0; i < kTensorClassCount; ++i) {
    const TensorClass c = static_cast<TensorClass>(i);
    const image::DType d = class_dtype(policy, c);
    if ((c == TensorClass::Vectors || c == TensorClass::Router) && d != image::DType::F32)
      return std::string("tensor class '") + tensor_class_name(c) + "' is always stored as f32 (the engine reads it in f32), not " +
             image::dtype_name(d);
    if ((d == image::DType::Q8 || d == image::DType::Q4) && !image::group_size_valid(d, policy.group_size))
      return std::string("tensor class '") + tensor_class_name(c) + "' is " + image::dtype_name(d) + ", which does not take group size " +
             std::to_string(policy.group_size) + (d == image::DType::Q8 ? " (q8: 32 or 64)" : " (q4: 32, 64 or 128)");
  }
  return {};
}

image::DType storage_dtype(const std::string &name, uint32_t rank, uint64_t last_dim, image::DType requested,
                           uint32_t group_size) {
  StoragePolicy policy;
  policy.requested = requested;
  policy.group_size = group_size;
  return storage_choice(policy, name, rank, last_dim).dtype;
}

}  // namespace colibri::model::names

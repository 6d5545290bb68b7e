// tests/convert/synthetic_checkpoint.h — writes small (or, for the benchmark, large)
// Hugging Face checkpoint directories for the four supported families: config.json,
// generation_config.json, tokenizer.json, tokenizer_config.json and model.safetensors (or
// shards + index). Every element's value is a pure function of (tensor name, element index,
// seed), so a test can recompute what any image tensor must hold without keeping the source.
//
// The tensor names and shapes here are written from the transformers modeling files
// independently of the converter's mapping table, so the tests check one against the other.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "convert/safetensors_writer.h"
#include "util/error.h"

namespace colibri::testing {

struct SyntheticCheckpointSpec {
  std::string architecture = "MixtralForCausalLM";  // or Qwen2Moe / Qwen3Moe / Olmoe / DeepseekV3ForCausalLM
  uint64_t vocab = 64;
  uint64_t hidden = 32;
  uint64_t layers = 2;
  uint64_t heads = 4;
  uint64_t kv_heads = 2;
  uint64_t head_dim = 0;        // 0: hidden / heads, and config.json says null
  uint64_t experts = 4;
  uint64_t top_k = 2;
  uint64_t expert_ffn = 16;
  uint64_t dense_ffn = 24;      // Qwen dense layers (mlp_only_layers)
  uint64_t shared_ffn = 16;     // Qwen2-MoE shared expert
  std::vector<uint64_t> mlp_only_layers;
  // DeepseekV3ForCausalLM (multi-head latent attention; q_lora 0: a direct q_proj), its first
  // `first_dense` layers dense (dense_ffn), `shared_experts` × expert_ffn of shared expert, and
  // the routers' `groups` / `topk_groups`.
  uint64_t q_lora = 0, kv_lora = 32, qk_nope = 16, qk_rope = 8, v_head = 16;
  uint64_t first_dense = 1, shared_experts = 1, groups = 1, topk_groups = 1;
  bool tie_embeddings = false;
  std::string dtype = "F32";    // safetensors dtype of every tensor: F32, F16 or BF16
  size_t shards = 1;            // > 1: model-0000i-of-0000n.safetensors + index
  uint32_t seed = 1;
  nlohmann::json config_overrides = nlohmann::json::object();  // merged into config.json last
  // Edits the tensor list before writing (drop, add, reshape, retype tensors).
  std::function<void(std::vector<SafetensorsEntry> &)> edit_tensors;
};

// The value of element `index` of tensor `name` (exact in f32; rounded when the checkpoint
// stores f16/bf16). In [-1, 1).
float synthetic_value(const std::string &name, uint64_t index, uint32_t seed);

// The tensors a transformers model of this spec holds (before edit_tensors).
std::vector<SafetensorsEntry> synthetic_tensors(const SyntheticCheckpointSpec &spec);
nlohmann::json synthetic_config(const SyntheticCheckpointSpec &spec);

// Writes the whole checkpoint directory (created if needed).
Error write_synthetic_checkpoint(const std::string &directory, const SyntheticCheckpointSpec &spec);

}  // namespace colibri::testing

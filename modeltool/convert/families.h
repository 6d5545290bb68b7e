// modeltool/convert/families.h — the model families the converter knows, as data: which
// config.json keys hold each hyper-parameter, the Hugging Face config-class defaults for
// the optional ones, and how the checkpoint names its MoE tensors. read_hf_config() turns
// a config.json into the image's ModelConfig and refuses, by name, anything the engine
// would need but does not support (RoPE scaling, sliding windows, other activations,
// quantized checkpoints, o_proj biases).
//
// Semantics come from the transformers sources (models/<family>/modeling_<family>.py and
// configuration_<family>.py); docs/architecture.md §3–§4 summarises them.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "util/error.h"

namespace colibri::modeltool::convert {

struct FamilyInfo {
  const char *family;        // model::kFamily* (stored in the image)
  const char *architecture;  // config.json "architectures"[0]
  const char *model_type;    // config.json "model_type"

  // config.json keys. The expert count is read from "num_experts" or "num_local_experts"
  // (transformers 5 writes whichever its attribute_map prefers).
  const char *expert_ffn_key;   // per-expert intermediate size
  const char *dense_ffn_key;    // intermediate size of dense layers; nullptr: every layer is MoE
  bool sparse_step_layers;      // Qwen rule: MoE iff not in mlp_only_layers and (i+1) % decoder_sparse_step == 0
  bool renormalise_always;      // Mixtral renormalises the top-k weights; others follow norm_topk_prob
  bool shared_expert;           // Qwen2-MoE shared expert + sigmoid gate
  const char *qkv_bias_key;     // Qwen2-MoE "qkv_bias" (default true); nullptr: no q/k/v biases
  bool o_bias_key;              // "attention_bias" adds q/k/v/o biases (Qwen3-MoE, OLMoE): refused if true
  const char *qk_norm;          // "none" | "per_head" | "full"
  bool clip_qkv;                // OLMoE clip_qkv

  // Defaults of the transformers config class for optional keys.
  double default_rope_theta;
  double default_rms_norm_eps;
  uint64_t default_max_positions;

  // Checkpoint tensor names below "model.layers.<i>.".
  const char *moe_block;             // "block_sparse_moe" (Mixtral) | "mlp"
  const char *expert_projection[3];  // gate, up, down: "w1", "w3", "w2" | "gate_proj", "up_proj", "down_proj"
};

// The family of `architecture` (e.g. "MixtralForCausalLM"), or nullptr.
const FamilyInfo *find_family(const std::string &architecture);
// "MixtralForCausalLM, Qwen2MoeForCausalLM, ..."
std::string supported_architectures();

// Reads config.json into *out (every ModelConfig field) and checks it is supported and
// self-consistent. Errors: Unsupported (unknown architecture, unsupported feature),
// Corrupt (missing or ill-typed keys, inconsistent sizes).
Error read_hf_config(const nlohmann::json &config, const FamilyInfo **family, model::ModelConfig *out);

}  // namespace colibri::modeltool::convert

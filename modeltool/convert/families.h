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

  // config.json keys. The expert count is read from "num_experts", "num_local_experts" or
  // "n_routed_experts" (transformers 5 writes whichever its attribute_map prefers).
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

  // Sigmoid-routed families (GLM-4.5, MiniMax-M2); the defaults are the softmax families'.
  const char *router_score = "softmax";      // model::ModelConfig::router_score
  const char *router_bias_name = nullptr;    // e_score_correction_bias below moe_block, nullptr: none
  bool expert_groups = false;                // reads n_group / topk_group
  const char *scaling_key = nullptr;         // "routed_scaling_factor", nullptr: 1
  double topk_norm_epsilon = 0.0;            // added to the renormalisation's denominator
  bool norm_topk_default = false;            // norm_topk_prob when config.json omits it
  bool qkv_bias_default = true;              // qkv_bias_key's value when config.json omits it
  const char *qk_norm_key = nullptr;         // GLM "use_qk_norm": qk_norm applies iff true (default false)
  const char *first_k_dense_key = nullptr;   // GLM "first_k_dense_replace": layers below it are dense
  const char *shared_block = "shared_expert";   // checkpoint name of the shared expert below moe_block
  const char *shared_count_key = nullptr;    // GLM "n_shared_experts": shared FFN = n × expert FFN, no gate
  bool partial_rotary = false;               // the modeling code rotates only the first rotary_dim values
  // gpt-oss: mlp.router (weight and bias), fused experts gate_up_proj / down_proj with biases,
  // o_proj bias, attention sinks, sliding-window layers (layer_types), clamped SwiGLU.
  bool fused_experts = false;
  // DeepSeek-V3 / Kimi-K2: multi-head latent attention (q_lora_rank, kv_lora_rank,
  // qk_nope_head_dim, qk_rope_head_dim, v_head_dim, rope_interleave; YaRN's mscale_all_dim in
  // the softmax scale). head_dim is qk_rope_head_dim, all of it rotated.
  bool mla = false;
};

// Block-scaled FP8 weights (quantization_config quant_method "fp8", fmt "e4m3",
// weight_block_size [rows, cols]: DeepSeek-V3/R1's own checkpoints, Qwen3's FP8 releases): an
// F8_E4M3 weight W comes with `<W>_scale_inv` (F32) [ceil(out / rows), ceil(in / cols)], and
// its value is the e4m3 value times the scale of its block. The converter dequantises them.
struct Fp8Blocks {
  bool used = false;
  uint64_t rows = 0, cols = 0;
};
// Fills *out from config.json's quantization_config (used false without one, or with MXFP4).
// Errors: Unsupported for an fp8 config this converter cannot read (another fmt, no block size).
Error read_fp8_blocks(const nlohmann::json &config, Fp8Blocks *out);

// The family of `architecture` (e.g. "MixtralForCausalLM"), or nullptr.
const FamilyInfo *find_family(const std::string &architecture);
// "MixtralForCausalLM, Qwen2MoeForCausalLM, ..."
std::string supported_architectures();

// Reads config.json into *out (every ModelConfig field) and checks it is supported and
// self-consistent. Errors: Unsupported (unknown architecture, unsupported feature),
// Corrupt (missing or ill-typed keys, inconsistent sizes).
Error read_hf_config(const nlohmann::json &config, const FamilyInfo **family, model::ModelConfig *out);

}  // namespace colibri::modeltool::convert

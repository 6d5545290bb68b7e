// core/model/config.h — the hyper-parameters and routing semantics an image carries in its
// metadata ("model" object), as one struct with JSON (de)serialisation. The converter fills
// it from config.json; the engine reads it back. Field names are the JSON keys.
// Semantics per family: docs/architecture.md §4 and docs/format.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace colibri::model {

// Family identifiers stored in metadata ("family").
inline constexpr const char *kFamilyMixtral = "mixtral";
inline constexpr const char *kFamilyQwen2Moe = "qwen2_moe";
inline constexpr const char *kFamilyQwen3Moe = "qwen3_moe";
inline constexpr const char *kFamilyOlmoe = "olmoe";
inline constexpr const char *kFamilyGlm4Moe = "glm4_moe";
inline constexpr const char *kFamilyMinimaxM2 = "minimax_m2";
inline constexpr const char *kFamilyGptOss = "gpt_oss";
inline constexpr const char *kFamilyDeepseekV3 = "deepseek_v3";

struct ModelConfig {
  std::string family;           // one of kFamily*
  std::string hf_architecture;  // e.g. "MixtralForCausalLM"
  uint64_t vocab_size = 0;
  uint64_t hidden_size = 0;
  uint64_t layer_count = 0;
  uint64_t head_count = 0;
  uint64_t kv_head_count = 0;
  uint64_t head_dim = 0;
  uint64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  // RoPE scaling: "none" or "yarn" (transformers _compute_yarn_parameters: inverse frequencies
  // blended between θ^(−2i/r) and θ^(−2i/r)/factor by a linear ramp over the dims between the
  // correction range of beta_fast/beta_slow rotations at original_max_position_embeddings;
  // cos and sin multiplied by rope_attention_factor).
  std::string rope_scaling = "none";
  double rope_factor = 1.0;
  uint64_t rope_original_max_positions = 0;
  double rope_beta_fast = 32.0;
  double rope_beta_slow = 1.0;
  bool rope_truncate = true;
  double rope_attention_factor = 1.0;  // resolved by the converter (mscale / mscale_all_dim rules)
  uint64_t rotary_dim = 0;           // leading dims of each head that RoPE rotates (even, <= head_dim);
                                     // from_json sets it: absent (images before it existed) = head_dim
  bool tie_word_embeddings = false;
  bool attention_bias = false;       // q/k/v projections have biases (Qwen2-MoE)
  std::string qk_norm = "none";      // "none" | "per_head" (Qwen3-MoE) | "full" (OLMoE)
  double clip_qkv = 0.0;             // 0 = no clipping (OLMoE option)
  bool attention_output_bias = false;  // o_proj has a bias, attn_output_bias [hidden] (gpt-oss)
  // Per-head learned attention sinks (gpt-oss): tensor attn_sinks [heads], one extra logit per
  // head that joins the softmax over the keys and takes its share of the mass, but adds no value.
  bool attention_sinks = false;
  // Sliding-window attention (gpt-oss): a layer with layer_is_sliding[l] = 1 attends to the last
  // sliding_window positions only (the query's own included). Empty list = no sliding layer.
  uint64_t sliding_window = 0;
  std::vector<uint8_t> layer_is_sliding;
  // Multi-head latent attention (attention "mla": DeepSeek-V2/V3, Kimi-K2; transformers
  // DeepseekV3Attention). A query head is qk_nope_head_dim values without RoPE plus head_dim
  // (qk_rope_head_dim) with it, from attn_q, or from attn_q_b(RMSNorm(attn_q_a(x))) when
  // q_lora_rank > 0. Per token one latent of kv_lora_rank (attn_kv_a_mqa's first rows,
  // RMSNorm'ed) and one rope key of head_dim (its last rows) shared by every head are cached;
  // head h's key is attn_k_b[h]ᵀ·latent ⊕ rope key and its value attn_v_b[h]·latent
  // (v_head_dim values). The engine attends in the absorbed form: q̃_h = attn_k_b[h]·q_nope_h
  // against the cached latents, then attn_v_b[h] on the weighted latent. rope_interleave: RoPE
  // pairs are neighbours (x0, x1), (x2, x3), ... and come out in the rotate_half layout
  // (transformers apply_rotary_pos_emb_interleave). attention_scale: the softmax scale
  // ((qk_nope + qk_rope)^-1/2, times YaRN's mscale_all_dim factor squared); kv_head_count =
  // head_count. Keys written only for MLA, so that other images are unchanged.
  std::string attention = "gqa";  // "gqa" | "mla"
  uint64_t q_lora_rank = 0;
  uint64_t kv_lora_rank = 0;
  uint64_t qk_nope_head_dim = 0;
  uint64_t v_head_dim = 0;
  bool rope_interleave = false;
  double attention_scale = 0.0;

  // MoE
  uint64_t expert_count = 0;
  uint64_t expert_ffn_size = 0;      // moe_intermediate_size / intermediate_size per expert
  uint64_t top_k = 0;
  std::string router_score = "softmax";  // scores over experts, fp32: "softmax" | "sigmoid"
  bool norm_topk_prob = true;            // renormalise the k selected weights to sum 1
  // Sigmoid routers (GLM-4.5, MiniMax-M2, DeepSeek-V3): selection ranks score + a per-expert bias
  // (tensor ffn_exp_probs_b, the checkpoint's e_score_correction_bias); the weights are the
  // unbiased scores. Selection may be limited to the best expert_group_top of expert_group_count
  // equal groups (a group ranks by the sum of its two best biased scores). Renormalisation divides
  // by (sum + topk_norm_epsilon); the weights are then multiplied by routed_scaling_factor.
  bool router_select_bias = false;
  uint64_t expert_group_count = 1;
  uint64_t expert_group_top = 1;
  double topk_norm_epsilon = 0.0;
  double routed_scaling_factor = 1.0;
  uint64_t shared_expert_ffn_size = 0;   // 0 = no shared expert
  bool shared_expert_gate = false;       // shared expert output × sigmoid(gate · x)
  // gpt-oss: the router has a bias (ffn_gate_inp_bias [E], added to the logits); every expert
  // projection has one (ffn_{gate,up}_exps_bias [E, ffn], ffn_down_exps_bias [E, hidden]).
  bool router_bias = false;
  bool expert_bias = false;
  // The experts' gated activation: "silu" (SiLU(gate) · up) or "swiglu_clamped" (gpt-oss:
  // gate ≤ limit, up in [−limit, limit], (up + 1) · gate · σ(alpha · gate)).
  std::string expert_activation = "silu";
  double swiglu_limit = 0.0;
  double swiglu_alpha = 0.0;
  uint64_t dense_ffn_size = 0;           // intermediate size of dense (non-MoE) layers
  std::vector<uint8_t> layer_is_moe;     // per layer: 1 = MoE FFN, 0 = dense FFN
  // Multi-token-prediction layers the checkpoint holds after the last layer (GLM-4.5's
  // num_nextn_predict_layers, DeepSeek-V3's). The converter keeps their tensors as mtp.<j>.*
  // (tensor_names.h); the forward pass never runs them.
  uint64_t mtp_layer_count = 0;

  bool mla() const { return attention == "mla"; }
  // Values of one query head: head_dim, or (MLA) qk_nope_head_dim + head_dim.
  uint64_t query_head_dim() const { return mla() ? qk_nope_head_dim + head_dim : head_dim; }
  // Values one position takes in the KV cache of one layer: keys and values of the KV heads, or
  // (MLA) the latent and the rope key. What the expanded keys and values of MLA would take:
  // heads × (qk_nope + head_dim + v_head_dim).
  uint64_t kv_values_per_position() const { return mla() ? kv_lora_rank + head_dim : 2 * kv_head_count * head_dim; }
  uint64_t expanded_kv_values_per_position() const {
    return mla() ? head_count * (qk_nope_head_dim + head_dim + v_head_dim) : kv_values_per_position();
  }

  nlohmann::json to_json() const;
  // Parses and checks consistency (non-zero sizes, top_k ≤ experts, heads divide, the
  // dimension limits below, ...).
  static Error from_json(const nlohmann::json &j, ModelConfig *out);
  // The dimension limits alone (ModelLimits): an error naming the first field over its limit.
  // The converter calls it before it sizes anything from a config.json.
  Error check_limits() const;
};

// Upper bounds on a model's dimensions. Far above any published MoE model (the largest have a
// vocabulary of ~256 Ki, hidden 7168, 61-94 layers, 128 heads, 512 experts); they keep every
// product of sizes the engine and the converter form (heads × head_dim × hidden, experts × ffn ×
// hidden, ...) well inside 64 bits, and turn a damaged or hostile config into an error instead
// of a wrapped product or an allocation of everything the machine has.
struct ModelLimits {
  static constexpr uint64_t kVocabSize = uint64_t(1) << 24;
  static constexpr uint64_t kHiddenSize = uint64_t(1) << 17;
  static constexpr uint64_t kLayerCount = uint64_t(1) << 12;
  static constexpr uint64_t kHeadCount = uint64_t(1) << 12;  // query and key/value heads
  static constexpr uint64_t kHeadDim = uint64_t(1) << 12;
  static constexpr uint64_t kExpertCount = uint64_t(1) << 16;
  static constexpr uint64_t kFfnSize = uint64_t(1) << 20;    // expert, shared expert and dense FFNs
};

}  // namespace colibri::model

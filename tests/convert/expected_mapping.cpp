// tests/convert/expected_mapping.cpp — image tensor -> Hugging Face tensor names.
#include "convert/expected_mapping.h"

#include <map>
#include <utility>

#include "model/tensor_names.h"

namespace colibri::testing {

std::vector<std::string> expected_hf_sources(const std::string &architecture, uint64_t expert_count,
                                             const std::string &image_name) {
  if (image_name == "token_embd") return {"model.embed_tokens.weight"};
  if (image_name == "output_norm") return {"model.norm.weight"};
  if (image_name == "output") return {"lm_head.weight"};
  uint64_t layer = 0;
  std::string role;
  if (!model::names::parse_layer_tensor(image_name, &layer, &role)) return {};
  // Mixtral and MiniMax-M2: the MoE block as "block_sparse_moe", experts w1 (gate), w3 (up), w2
  // (down), and (MiniMax-M2) the block's e_score_correction_bias; GLM-4.5 keeps the bias in its
  // gate and has "shared_experts".
  const bool mixtral = architecture == "MixtralForCausalLM" || architecture == "MiniMaxM2ForCausalLM";
  const bool glm = architecture == "Glm4MoeForCausalLM";
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  const std::string moe = p + (mixtral ? "block_sparse_moe." : "mlp.");
  static const std::map<std::string, std::string> per_layer = {
      {"attn_norm", "input_layernorm.weight"},    {"ffn_norm", "post_attention_layernorm.weight"},
      {"attn_q", "self_attn.q_proj.weight"},      {"attn_k", "self_attn.k_proj.weight"},
      {"attn_v", "self_attn.v_proj.weight"},      {"attn_output", "self_attn.o_proj.weight"},
      {"attn_q_bias", "self_attn.q_proj.bias"},   {"attn_k_bias", "self_attn.k_proj.bias"},
      {"attn_v_bias", "self_attn.v_proj.bias"},   {"attn_q_norm", "self_attn.q_norm.weight"},
      {"attn_k_norm", "self_attn.k_norm.weight"}, {"ffn_gate", "mlp.gate_proj.weight"},
      {"ffn_up", "mlp.up_proj.weight"},           {"ffn_down", "mlp.down_proj.weight"}};
  static const std::map<std::string, std::string> per_moe = {
      {"ffn_gate_inp", "gate.weight"},
      {"ffn_gate_shexp", "shared_expert.gate_proj.weight"},
      {"ffn_up_shexp", "shared_expert.up_proj.weight"},
      {"ffn_down_shexp", "shared_expert.down_proj.weight"},
      {"ffn_gate_inp_shexp", "shared_expert_gate.weight"}};
  static const std::map<std::string, std::pair<const char *, const char *>> experts = {
      {"ffn_gate_exps", {"w1", "gate_proj"}}, {"ffn_up_exps", {"w3", "up_proj"}}, {"ffn_down_exps", {"w2", "down_proj"}}};
  if (auto it = per_layer.find(role); it != per_layer.end()) return {p + it->second};
  if (role == "ffn_exp_probs_b") return {moe + (glm ? "gate." : "") + "e_score_correction_bias"};
  if (glm && role.ends_with("_shexp")) return {moe + "shared_experts." + role.substr(4, role.size() - 10) + "_proj.weight"};
  if (auto it = per_moe.find(role); it != per_moe.end()) return {moe + it->second};
  auto it = experts.find(role);
  if (it == experts.end()) return {};
  std::vector<std::string> out;
  for (uint64_t e = 0; e < expert_count; ++e)
    out.push_back(moe + "experts." + std::to_string(e) + "." + (mixtral ? it->second.first : it->second.second) +
                  ".weight");
  return out;
}

}  // namespace colibri::testing

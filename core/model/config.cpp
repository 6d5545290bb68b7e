// core/model/config.cpp — ModelConfig <-> JSON with validation.
#include "model/config.h"

#include <algorithm>
#include <iterator>

#include "util/strings.h"

namespace colibri::model {

using util::strprintf;

nlohmann::json ModelConfig::to_json() const {
  nlohmann::json j;
  j["family"] = family;
  j["hf_architecture"] = hf_architecture;
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["layer_count"] = layer_count;
  j["head_count"] = head_count;
  j["kv_head_count"] = kv_head_count;
  j["head_dim"] = head_dim;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  j["rotary_dim"] = rotary_dim;
  j["rope_scaling"] = rope_scaling;
  if (rope_scaling != "none") {
    j["rope_factor"] = rope_factor;
    j["rope_original_max_positions"] = rope_original_max_positions;
    j["rope_beta_fast"] = rope_beta_fast;
    j["rope_beta_slow"] = rope_beta_slow;
    j["rope_truncate"] = rope_truncate;
    j["rope_attention_factor"] = rope_attention_factor;
  }
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["attention_bias"] = attention_bias;
  j["qk_norm"] = qk_norm;
  j["clip_qkv"] = clip_qkv;
  j["expert_count"] = expert_count;
  j["expert_ffn_size"] = expert_ffn_size;
  j["top_k"] = top_k;
  j["router_score"] = router_score;
  j["norm_topk_prob"] = norm_topk_prob;
  j["router_select_bias"] = router_select_bias;
  j["expert_group_count"] = expert_group_count;
  j["expert_group_top"] = expert_group_top;
  j["topk_norm_epsilon"] = topk_norm_epsilon;
  j["routed_scaling_factor"] = routed_scaling_factor;
  j["shared_expert_ffn_size"] = shared_expert_ffn_size;
  j["shared_expert_gate"] = shared_expert_gate;
  j["dense_ffn_size"] = dense_ffn_size;
  j["layer_is_moe"] = layer_is_moe;
  j["mtp_layer_count"] = mtp_layer_count;
  // gpt-oss keys: written only when used, so that images of the other families are unchanged.
  if (attention_output_bias) j["attention_output_bias"] = true;
  if (attention_sinks) j["attention_sinks"] = true;
  if (!layer_is_sliding.empty()) {
    j["sliding_window"] = sliding_window;
    j["layer_is_sliding"] = layer_is_sliding;
  }
  if (router_bias) j["router_bias"] = true;
  if (expert_bias) j["expert_bias"] = true;
  if (mla()) {
    j["attention"] = attention;
    j["q_lora_rank"] = q_lora_rank;
    j["kv_lora_rank"] = kv_lora_rank;
    j["qk_nope_head_dim"] = qk_nope_head_dim;
    j["v_head_dim"] = v_head_dim;
    j["attention_scale"] = attention_scale;
  }
  if (rope_interleave) j["rope_interleave"] = true;
  if (expert_activation != "silu") {
    j["expert_activation"] = expert_activation;
    j["swiglu_limit"] = swiglu_limit;
    j["swiglu_alpha"] = swiglu_alpha;
  }
  return j;
}

namespace {

template <typename T>
bool read_field(const nlohmann::json &j, const char *key, T *out, std::string *problem) {
  auto it = j.find(key);
  if (it == j.end()) {
    *problem = strprintf("missing key '%s'", key);
    return false;
  }
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) { *problem = strprintf("'%s' must be a boolean", key); return false; }
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) { *problem = strprintf("'%s' must be a string", key); return false; }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!it->is_number()) { *problem = strprintf("'%s' must be a number", key); return false; }
  } else if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_unsigned() && !(it->is_number_integer() && it->template get<int64_t>() >= 0)) {
      *problem = strprintf("'%s' must be a non-negative integer", key);
      return false;
    }
  } else {
    if (!it->is_array()) { *problem = strprintf("'%s' must be an array", key); return false; }
    for (const auto &v : *it)
      if (!v.is_number_unsigned() && !v.is_boolean()) { *problem = strprintf("'%s' must hold 0/1 values", key); return false; }
  }
  if constexpr (std::is_same_v<T, std::vector<uint8_t>>) {
    out->clear();
    for (const auto &v : *it) out->push_back(v.is_boolean() ? (v.template get<bool>() ? 1 : 0) : (v.template get<uint64_t>() ? 1 : 0));
  } else {
    *out = it->template get<T>();
  }
  return true;
}

}  // namespace

Error ModelConfig::check_limits() const {
  struct Limit {
    const char *field;
    uint64_t value, limit;
  };
  const Limit limits[] = {
      {"vocab_size", vocab_size, ModelLimits::kVocabSize},
      {"hidden_size", hidden_size, ModelLimits::kHiddenSize},
      {"layer_count", layer_count, ModelLimits::kLayerCount},
      {"head_count", head_count, ModelLimits::kHeadCount},
      {"kv_head_count", kv_head_count, ModelLimits::kHeadCount},
      {"head_dim", head_dim, ModelLimits::kHeadDim},
      {"expert_count", expert_count, ModelLimits::kExpertCount},
      {"top_k", top_k, ModelLimits::kExpertCount},
      {"expert_ffn_size", expert_ffn_size, ModelLimits::kFfnSize},
      {"shared_expert_ffn_size", shared_expert_ffn_size, ModelLimits::kFfnSize},
      {"dense_ffn_size", dense_ffn_size, ModelLimits::kFfnSize},
      {"expert_group_count", expert_group_count, ModelLimits::kExpertCount},
      {"expert_group_top", expert_group_top, ModelLimits::kExpertCount},
      {"rotary_dim", rotary_dim, ModelLimits::kHeadDim},
      {"mtp_layer_count", mtp_layer_count, ModelLimits::kLayerCount},
      {"q_lora_rank", q_lora_rank, ModelLimits::kHiddenSize},
      {"kv_lora_rank", kv_lora_rank, ModelLimits::kHiddenSize},
      {"qk_nope_head_dim", qk_nope_head_dim, ModelLimits::kHeadDim},
      {"v_head_dim", v_head_dim, ModelLimits::kHeadDim},
  };
  for (const Limit &l : limits)
    if (l.value > l.limit)
      return make_error(ErrorKind::Corrupt,
                        strprintf("model metadata: %s %llu is over the limit of %llu (a damaged or hand-edited config?)",
                                  l.field, static_cast<unsigned long long>(l.value),
                                  static_cast<unsigned long long>(l.limit)));
  return {};
}

Error ModelConfig::from_json(const nlohmann::json &j, ModelConfig *out) {
  ModelConfig c;
  std::string problem;
  auto bad = [&](const std::string &why) {
    return make_error(ErrorKind::Corrupt, "model metadata: " + why);
  };
  if (!j.is_object()) return bad("the 'model' entry is not an object");
#define COLIBRI_READ(key) \
  if (!read_field(j, #key, &c.key, &problem)) return bad(problem)
  COLIBRI_READ(family);
  COLIBRI_READ(hf_architecture);
  COLIBRI_READ(vocab_size);
  COLIBRI_READ(hidden_size);
  COLIBRI_READ(layer_count);
  COLIBRI_READ(head_count);
  COLIBRI_READ(kv_head_count);
  COLIBRI_READ(head_dim);
  COLIBRI_READ(max_position_embeddings);
  COLIBRI_READ(rms_norm_eps);
  COLIBRI_READ(rope_theta);
  COLIBRI_READ(tie_word_embeddings);
  COLIBRI_READ(attention_bias);
  COLIBRI_READ(qk_norm);
  COLIBRI_READ(clip_qkv);
  COLIBRI_READ(expert_count);
  COLIBRI_READ(expert_ffn_size);
  COLIBRI_READ(top_k);
  COLIBRI_READ(router_score);
  COLIBRI_READ(norm_topk_prob);
  COLIBRI_READ(shared_expert_ffn_size);
  COLIBRI_READ(shared_expert_gate);
  COLIBRI_READ(dense_ffn_size);
  COLIBRI_READ(layer_is_moe);
  // Keys added after the first images: absent means the semantics those images had.
#define COLIBRI_READ_OPTIONAL(key) \
  if (j.contains(#key) && !read_field(j, #key, &c.key, &problem)) return bad(problem)
  COLIBRI_READ_OPTIONAL(rotary_dim);
  COLIBRI_READ_OPTIONAL(router_select_bias);
  COLIBRI_READ_OPTIONAL(expert_group_count);
  COLIBRI_READ_OPTIONAL(expert_group_top);
  COLIBRI_READ_OPTIONAL(topk_norm_epsilon);
  COLIBRI_READ_OPTIONAL(routed_scaling_factor);
  COLIBRI_READ_OPTIONAL(mtp_layer_count);
  COLIBRI_READ_OPTIONAL(rope_scaling);
  COLIBRI_READ_OPTIONAL(attention_output_bias);
  COLIBRI_READ_OPTIONAL(attention_sinks);
  COLIBRI_READ_OPTIONAL(layer_is_sliding);
  if (!c.layer_is_sliding.empty()) COLIBRI_READ(sliding_window);
  COLIBRI_READ_OPTIONAL(router_bias);
  COLIBRI_READ_OPTIONAL(expert_bias);
  COLIBRI_READ_OPTIONAL(expert_activation);
  COLIBRI_READ_OPTIONAL(attention);
  COLIBRI_READ_OPTIONAL(rope_interleave);
  if (c.mla()) {
    COLIBRI_READ(q_lora_rank);
    COLIBRI_READ(kv_lora_rank);
    COLIBRI_READ(qk_nope_head_dim);
    COLIBRI_READ(v_head_dim);
    COLIBRI_READ(attention_scale);
  }
  if (c.expert_activation == "swiglu_clamped") {
    COLIBRI_READ(swiglu_limit);
    COLIBRI_READ(swiglu_alpha);
  }
  if (c.rope_scaling == "yarn") {
    COLIBRI_READ(rope_factor);
    COLIBRI_READ(rope_original_max_positions);
    COLIBRI_READ(rope_beta_fast);
    COLIBRI_READ(rope_beta_slow);
    COLIBRI_READ(rope_truncate);
    COLIBRI_READ(rope_attention_factor);
  }
#undef COLIBRI_READ_OPTIONAL
#undef COLIBRI_READ
  if (c.rotary_dim == 0) c.rotary_dim = c.head_dim;
  const char *families[] = {kFamilyMixtral, kFamilyQwen2Moe, kFamilyQwen3Moe, kFamilyOlmoe, kFamilyGlm4Moe,
                            kFamilyMinimaxM2, kFamilyGptOss, kFamilyDeepseekV3};
  if (std::find(std::begin(families), std::end(families), c.family) == std::end(families))
    return make_error(ErrorKind::Unsupported,
                      strprintf("model family '%s' is not supported by this build (supported: mixtral, qwen2_moe, "
                                "qwen3_moe, olmoe, glm4_moe, minimax_m2, gpt_oss, deepseek_v3)",
                                c.family.c_str()));
  if (Error e = c.check_limits()) return e;
  if (c.vocab_size == 0 || c.hidden_size == 0 || c.layer_count == 0 || c.head_count == 0 || c.kv_head_count == 0 ||
      c.head_dim == 0)
    return bad("vocab_size, hidden_size, layer_count, head_count, kv_head_count and head_dim must be non-zero");
  if (c.head_count % c.kv_head_count != 0)
    return bad(strprintf("head_count %llu is not a multiple of kv_head_count %llu",
                         static_cast<unsigned long long>(c.head_count),
                         static_cast<unsigned long long>(c.kv_head_count)));
  if (c.head_dim % 2 != 0) return bad("head_dim must be even (RoPE rotates pairs)");
  if (c.rotary_dim % 2 != 0 || c.rotary_dim > c.head_dim)
    return bad(strprintf("rotary_dim %llu must be even and at most head_dim %llu",
                         static_cast<unsigned long long>(c.rotary_dim), static_cast<unsigned long long>(c.head_dim)));
  if (c.layer_is_moe.size() != c.layer_count)
    return bad(strprintf("layer_is_moe has %zu entries for %llu layers", c.layer_is_moe.size(),
                         static_cast<unsigned long long>(c.layer_count)));
  bool any_moe = false, any_dense = false;
  for (uint8_t m : c.layer_is_moe) (m ? any_moe : any_dense) = true;
  if (any_moe && (c.expert_count == 0 || c.top_k == 0 || c.top_k > c.expert_count || c.expert_ffn_size == 0))
    return bad("MoE layers need expert_count > 0, expert_ffn_size > 0 and 1 <= top_k <= expert_count");
  if (any_dense && c.dense_ffn_size == 0) return bad("dense layers need dense_ffn_size > 0");
  if (c.router_score != "softmax" && c.router_score != "sigmoid")
    return make_error(ErrorKind::Unsupported, strprintf("router score function '%s' is not supported (supported: "
                                                        "softmax, sigmoid)",
                                                        c.router_score.c_str()));
  if (c.router_select_bias && c.router_score != "sigmoid")
    return bad("router_select_bias needs router_score sigmoid (the bias ranks sigmoid scores)");
  if (c.expert_group_count == 0 || c.expert_group_top == 0 || c.expert_group_top > c.expert_group_count)
    return bad("expert groups need 1 <= expert_group_top <= expert_group_count");
  if (c.expert_group_count > 1) {
    if (c.router_score != "sigmoid") return bad("expert groups need router_score sigmoid");
    if (c.expert_count % c.expert_group_count != 0 || c.expert_count / c.expert_group_count < 2)
      return bad(strprintf("expert_count %llu must split into expert_group_count %llu groups of at least 2 experts",
                           static_cast<unsigned long long>(c.expert_count),
                           static_cast<unsigned long long>(c.expert_group_count)));
    if (c.top_k > c.expert_group_top * (c.expert_count / c.expert_group_count))
      return bad("top_k is larger than the experts of the expert_group_top chosen groups");
  }
  if (!(c.topk_norm_epsilon >= 0.0 && c.topk_norm_epsilon < 1.0) ||
      !(c.routed_scaling_factor > 0.0 && c.routed_scaling_factor <= 1e6))
    return bad("topk_norm_epsilon must be in [0, 1) and routed_scaling_factor in (0, 1e6]");
  if (c.qk_norm != "none" && c.qk_norm != "per_head" && c.qk_norm != "full")
    return bad(strprintf("qk_norm '%s' is not one of none, per_head, full", c.qk_norm.c_str()));
  if (c.rope_scaling != "none" && c.rope_scaling != "yarn")
    return make_error(ErrorKind::Unsupported, strprintf("RoPE scaling '%s' is not supported (supported: none, yarn)",
                                                        c.rope_scaling.c_str()));
  if (c.rope_scaling == "yarn" &&
      (!(c.rope_factor >= 1.0 && c.rope_factor <= 1e6) || c.rope_original_max_positions == 0 ||
       c.rope_original_max_positions > (uint64_t(1) << 32) || !(c.rope_beta_fast > 0.0 && c.rope_beta_fast < 1e6) ||
       !(c.rope_beta_slow > 0.0 && c.rope_beta_slow < 1e6) ||
       !(c.rope_attention_factor > 0.0 && c.rope_attention_factor < 1e3)))
    return bad("yarn RoPE needs rope_factor in [1, 1e6], rope_original_max_positions in 1..2^32, positive beta_fast, "
               "beta_slow and rope_attention_factor");
  if (!c.layer_is_sliding.empty()) {
    if (c.layer_is_sliding.size() != c.layer_count)
      return bad(strprintf("layer_is_sliding has %zu entries for %llu layers", c.layer_is_sliding.size(),
                           static_cast<unsigned long long>(c.layer_count)));
    if (c.sliding_window == 0 || c.sliding_window > (uint64_t(1) << 32))
      return bad("sliding_window must be in 1..2^32 when layers slide");
  }
  if (c.expert_activation != "silu" && c.expert_activation != "swiglu_clamped")
    return make_error(ErrorKind::Unsupported, strprintf("expert activation '%s' is not supported (supported: silu, "
                                                        "swiglu_clamped)",
                                                        c.expert_activation.c_str()));
  if (c.expert_activation == "swiglu_clamped" &&
      (!(c.swiglu_limit > 0.0 && c.swiglu_limit < 1e6) || !(c.swiglu_alpha > 0.0 && c.swiglu_alpha < 1e6)))
    return bad("swiglu_clamped needs swiglu_limit and swiglu_alpha in (0, 1e6)");
  if (c.router_bias && c.router_score != "softmax") return bad("router_bias needs router_score softmax");
  if (c.attention != "gqa" && c.attention != "mla")
    return make_error(ErrorKind::Unsupported, strprintf("attention '%s' is not supported (supported: gqa, mla)",
                                                        c.attention.c_str()));
  if (c.mla()) {
    if (c.kv_lora_rank == 0 || c.qk_nope_head_dim == 0 || c.v_head_dim == 0)
      return bad("mla attention needs kv_lora_rank, qk_nope_head_dim and v_head_dim > 0");
    if (c.kv_head_count != c.head_count) return bad("mla attention needs kv_head_count = head_count");
    if (c.rotary_dim != c.head_dim) return bad("mla attention rotates the whole rope part: rotary_dim = head_dim");
    if (c.qk_norm != "none" || c.clip_qkv != 0.0 || c.attention_bias || c.attention_sinks || !c.layer_is_sliding.empty())
      return bad("mla attention takes no q/k norm, clipping, q/k/v biases, sinks or sliding layers");
    if (!(c.attention_scale > 0.0 && c.attention_scale < 1e3)) return bad("mla attention needs attention_scale in (0, 1e3)");
  }
  if (!(c.rms_norm_eps > 0.0) || !(c.rope_theta > 0.0) || c.clip_qkv < 0.0)
    return bad("rms_norm_eps and rope_theta must be positive, clip_qkv non-negative");
  *out = std::move(c);
  return {};
}

}  // namespace colibri::model

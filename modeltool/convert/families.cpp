// modeltool/convert/families.cpp — the family table and the config.json reader.
#include "modeltool/convert/families.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <set>

#include "util/strings.h"

namespace colibri::modeltool::convert {

using util::strprintf;

namespace {

// Defaults: transformers 5 configuration_<family>.py (Mixtral: default_theta 1e6,
// max_position_embeddings 4096 * 32; the Qwen configs 32768; OLMoE 4096).
constexpr FamilyInfo kFamilies[] = {
    {model::kFamilyMixtral, "MixtralForCausalLM", "mixtral",
     /*expert_ffn_key=*/"intermediate_size", /*dense_ffn_key=*/nullptr, /*sparse_step_layers=*/false,
     /*renormalise_always=*/true, /*shared_expert=*/false, /*qkv_bias_key=*/nullptr, /*o_bias_key=*/false,
     /*qk_norm=*/"none", /*clip_qkv=*/false,
     /*rope_theta=*/1e6, /*rms_norm_eps=*/1e-5, /*max_positions=*/131072,
     "block_sparse_moe", {"w1", "w3", "w2"}},
    {model::kFamilyQwen2Moe, "Qwen2MoeForCausalLM", "qwen2_moe",
     "moe_intermediate_size", "intermediate_size", true,
     false, true, "qkv_bias", false,
     "none", false,
     1e4, 1e-6, 32768,
     "mlp", {"gate_proj", "up_proj", "down_proj"}},
    {model::kFamilyQwen3Moe, "Qwen3MoeForCausalLM", "qwen3_moe",
     "moe_intermediate_size", "intermediate_size", true,
     false, false, nullptr, true,
     "per_head", false,
     1e4, 1e-6, 32768,
     "mlp", {"gate_proj", "up_proj", "down_proj"}},
    {model::kFamilyOlmoe, "OlmoeForCausalLM", "olmoe",
     "intermediate_size", nullptr, false,
     false, false, nullptr, true,
     "full", true,
     1e4, 1e-5, 4096,
     "mlp", {"gate_proj", "up_proj", "down_proj"}},
    // GLM-4.5/4.6 (transformers glm4_moe): sigmoid router with e_score_correction_bias and group
    // limits, shared experts without a gate, dense first layers, partial RoPE, optional per-head
    // q/k norm, q/k/v biases (o_proj never has one).
    {.family = model::kFamilyGlm4Moe, .architecture = "Glm4MoeForCausalLM", .model_type = "glm4_moe",
     .expert_ffn_key = "moe_intermediate_size", .dense_ffn_key = "intermediate_size", .sparse_step_layers = false,
     .renormalise_always = false, .shared_expert = false, .qkv_bias_key = "attention_bias", .o_bias_key = false,
     .qk_norm = "per_head", .clip_qkv = false,
     .default_rope_theta = 1e4, .default_rms_norm_eps = 1e-5, .default_max_positions = 131072,
     .moe_block = "mlp", .expert_projection = {"gate_proj", "up_proj", "down_proj"},
     .router_score = "sigmoid", .router_bias_name = "gate.e_score_correction_bias", .expert_groups = true,
     .scaling_key = "routed_scaling_factor", .topk_norm_epsilon = 1e-20, .norm_topk_default = true,
     .qkv_bias_default = false, .qk_norm_key = "use_qk_norm", .first_k_dense_key = "first_k_dense_replace",
     .shared_block = "shared_experts", .shared_count_key = "n_shared_experts", .partial_rotary = true},
    // MiniMax-M2 (transformers minimax_m2): sigmoid router with e_score_correction_bias, always
    // renormalised, q/k RMSNorm over the whole projection, partial RoPE (rotary_dim), no biases.
    {.family = model::kFamilyMinimaxM2, .architecture = "MiniMaxM2ForCausalLM", .model_type = "minimax_m2",
     .expert_ffn_key = "intermediate_size", .dense_ffn_key = nullptr, .sparse_step_layers = false,
     .renormalise_always = true, .shared_expert = false, .qkv_bias_key = nullptr, .o_bias_key = false,
     .qk_norm = "full", .clip_qkv = false,
     .default_rope_theta = 5e6, .default_rms_norm_eps = 1e-6, .default_max_positions = 196608,
     .moe_block = "block_sparse_moe", .expert_projection = {"w1", "w3", "w2"},
     .router_score = "sigmoid", .router_bias_name = "e_score_correction_bias", .partial_rotary = true},
    // DeepSeek-V3/R1/V3.1 and Kimi-K2 (transformers deepseek_v3): multi-head latent attention,
    // GLM-4.5's router (sigmoid, e_score_correction_bias, groups, routed scaling), shared experts
    // without a gate, dense first layers. attention_bias (biases on q_a/kv_a/o) is refused.
    {.family = model::kFamilyDeepseekV3, .architecture = "DeepseekV3ForCausalLM", .model_type = "deepseek_v3",
     .expert_ffn_key = "moe_intermediate_size", .dense_ffn_key = "intermediate_size", .sparse_step_layers = false,
     .renormalise_always = false, .shared_expert = false, .qkv_bias_key = nullptr, .o_bias_key = true,
     .qk_norm = "none", .clip_qkv = false,
     .default_rope_theta = 1e4, .default_rms_norm_eps = 1e-6, .default_max_positions = 4096,
     .moe_block = "mlp", .expert_projection = {"gate_proj", "up_proj", "down_proj"},
     .router_score = "sigmoid", .router_bias_name = "gate.e_score_correction_bias", .expert_groups = true,
     .scaling_key = "routed_scaling_factor", .topk_norm_epsilon = 1e-20, .norm_topk_default = true,
     .first_k_dense_key = "first_k_dense_replace", .shared_block = "shared_experts",
     .shared_count_key = "n_shared_experts", .mla = true},
    // gpt-oss (transformers gpt_oss): q/k/v/o biases (attention_bias), per-head attention sinks,
    // sliding-window layers by layer_types, YaRN RoPE; router linear with a bias, softmax over the
    // top-k logits (= Mixtral's renormalised softmax); fused experts with biases and the clamped
    // SwiGLU (swiglu_limit, swiglu_alpha).
    {.family = model::kFamilyGptOss, .architecture = "GptOssForCausalLM", .model_type = "gpt_oss",
     .expert_ffn_key = "intermediate_size", .dense_ffn_key = nullptr, .sparse_step_layers = false,
     .renormalise_always = true, .shared_expert = false, .qkv_bias_key = "attention_bias", .o_bias_key = false,
     .qk_norm = "none", .clip_qkv = false,
     .default_rope_theta = 150000.0, .default_rms_norm_eps = 1e-5, .default_max_positions = 131072,
     .moe_block = "mlp", .expert_projection = {"gate_up_proj", "gate_up_proj", "down_proj"},
     .fused_experts = true},
};

// transformers GptOssConfig's rope_parameters when config.json gives none.
constexpr const char *kGptOssDefaultYarn =
    R"({"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": false,
        "original_max_position_embeddings": 4096})";

Error unsupported(const std::string &what) {
  return make_error(ErrorKind::Unsupported, "config.json: " + what + " is not supported yet");
}

// Typed access to config.json that remembers the first problem, so the reader below can
// list the keys it needs without an error check after each one.
class ConfigReader {
 public:
  explicit ConfigReader(const nlohmann::json &config) : config_(config) {}
  const nlohmann::json &config() const { return config_; }

  const Error &error() const { return error_; }
  bool has(const char *key) const { return value(key) != nullptr; }
  const nlohmann::json *value(const char *key) const {
    auto it = config_.find(key);
    return it == config_.end() || it->is_null() ? nullptr : &*it;
  }

  uint64_t required_uint(const char *key) {
    if (!has(key)) {
      fail(strprintf("config.json has no '%s'", key));
      return 0;
    }
    return optional_uint(key, 0);
  }
  uint64_t optional_uint(const char *key, uint64_t fallback) {
    const nlohmann::json *v = value(key);
    if (!v) return fallback;
    if (v->is_number_unsigned()) return v->get<uint64_t>();
    if (v->is_number_integer() && v->get<int64_t>() >= 0) return static_cast<uint64_t>(v->get<int64_t>());
    fail(strprintf("config.json: '%s' must be a non-negative integer, got %s", key, v->dump().c_str()));
    return fallback;
  }
  double optional_number(const char *key, double fallback) {
    const nlohmann::json *v = value(key);
    if (!v) return fallback;
    if (v->is_number()) return v->get<double>();
    fail(strprintf("config.json: '%s' must be a number, got %s", key, v->dump().c_str()));
    return fallback;
  }
  bool optional_bool(const char *key, bool fallback) {
    const nlohmann::json *v = value(key);
    if (!v) return fallback;
    if (v->is_boolean()) return v->get<bool>();
    fail(strprintf("config.json: '%s' must be true or false, got %s", key, v->dump().c_str()));
    return fallback;
  }
  std::string optional_string(const char *key, const std::string &fallback) {
    const nlohmann::json *v = value(key);
    if (!v) return fallback;
    if (v->is_string()) return v->get<std::string>();
    fail(strprintf("config.json: '%s' must be a string, got %s", key, v->dump().c_str()));
    return fallback;
  }
  std::vector<uint64_t> optional_uint_list(const char *key) {
    std::vector<uint64_t> out;
    const nlohmann::json *v = value(key);
    if (!v) return out;
    bool ok = v->is_array();
    if (ok)
      for (const auto &item : *v) {
        if (!item.is_number_unsigned() && !(item.is_number_integer() && item.get<int64_t>() >= 0)) ok = false;
        else out.push_back(item.get<uint64_t>());
      }
    if (!ok) fail(strprintf("config.json: '%s' must be a list of non-negative integers", key));
    return out;
  }
  void fail(std::string message) {
    if (!error_) error_ = make_error(ErrorKind::Corrupt, std::move(message));
  }

 private:
  const nlohmann::json &config_;
  Error error_;
};

Error identify_family(const nlohmann::json &config, const FamilyInfo **family, std::string *architecture) {
  std::vector<std::string> named;
  auto architectures = config.find("architectures");
  if (architectures != config.end() && architectures->is_array())
    for (const auto &a : *architectures)
      if (a.is_string()) named.push_back(a.get<std::string>());
  for (const std::string &a : named)
    if ((*family = find_family(a))) {
      *architecture = a;
      return {};
    }
  std::string model_type;
  auto type = config.find("model_type");
  if (type != config.end() && type->is_string()) model_type = type->get<std::string>();
  if (named.empty())
    for (const FamilyInfo &f : kFamilies)
      if (model_type == f.model_type) {
        *family = &f;
        *architecture = f.architecture;
        return {};
      }
  std::string what = !named.empty()      ? "architecture '" + named.front() + "'"
                     : !model_type.empty() ? "model_type '" + model_type + "'"
                                           : std::string("a model without 'architectures' or 'model_type'");
  return make_error(ErrorKind::Unsupported, strprintf("config.json describes %s, which the converter does not support "
                                                      "(supported: %s)",
                                                      what.c_str(), supported_architectures().c_str()));
}

// RoPE: plain or yarn-scaled rotary embeddings, over all of head_dim or (partial rotary) over its first
// int(head_dim × partial_rotary_factor) values. transformers 4 writes rope_theta / rope_scaling /
// partial_rotary_factor at the top level; transformers 5 writes rope_parameters {rope_type,
// rope_theta, partial_rotary_factor, ...}; MiniMax-M2 checkpoints give rotary_dim.
// YaRN (rope_type "yarn", transformers _compute_yarn_parameters): the parameters the engine needs,
// with the attention factor resolved here as transformers resolves it.
Error read_yarn(const nlohmann::json &p, uint64_t max_positions, model::ModelConfig *c) {
  auto number = [&](const char *key, double fallback, double *out) -> Error {
    auto it = p.find(key);
    if (it == p.end() || it->is_null()) {
      *out = fallback;
      return {};
    }
    if (!it->is_number()) return make_error(ErrorKind::Corrupt, strprintf("config.json: yarn RoPE '%s' is not a number", key));
    *out = it->get<double>();
    return {};
  };
  double original = 0, factor = 0, attention = 0, mscale = 0, mscale_all_dim = 0, beta_fast = 0, beta_slow = 0;
  if (Error e = number("original_max_position_embeddings", 0, &original)) return e;
  if (!(original >= 1 && original <= 4294967296.0 && original == std::floor(original)))
    return make_error(ErrorKind::Corrupt, "config.json: yarn RoPE needs original_max_position_embeddings, a positive integer");
  // DeepSeek-V3 leaves factor out: then it is max_position_embeddings / original.
  if (Error e = number("factor", static_cast<double>(max_positions) / original, &factor)) return e;
  if (Error e = number("attention_factor", 0, &attention)) return e;
  if (Error e = number("mscale", 0, &mscale)) return e;
  if (Error e = number("mscale_all_dim", 0, &mscale_all_dim)) return e;
  if (Error e = number("beta_fast", 32, &beta_fast)) return e;  // transformers: `or 32` (0 and null mean 32)
  if (Error e = number("beta_slow", 1, &beta_slow)) return e;
  if (beta_fast == 0) beta_fast = 32;
  if (beta_slow == 0) beta_slow = 1;
  bool truncate = true;
  if (auto it = p.find("truncate"); it != p.end() && !it->is_null()) {
    if (!it->is_boolean()) return make_error(ErrorKind::Corrupt, "config.json: yarn RoPE 'truncate' is not true or false");
    truncate = it->get<bool>();
  }
  if (!(factor >= 1.0 && factor <= 1e6))
    return unsupported(strprintf("yarn RoPE with factor %g (supported: 1 to 1e6)", factor));
  auto get_mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
  if (attention == 0)
    attention = mscale != 0 && mscale_all_dim != 0 ? get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
                                                   : get_mscale(factor, 1.0);
  c->rope_scaling = "yarn";
  c->rope_factor = factor;
  c->rope_original_max_positions = static_cast<uint64_t>(original);
  c->rope_beta_fast = beta_fast;
  c->rope_beta_slow = beta_slow;
  c->rope_truncate = truncate;
  c->rope_attention_factor = attention;
  // transformers yarn_apply_mscale (DeepSeek-V2/V3): the softmax scale is multiplied by
  // get_mscale(factor, mscale_all_dim)² when mscale_all_dim is set (applied by read_mla).
  c->attention_scale = mscale_all_dim != 0 ? get_mscale(factor, mscale_all_dim) * get_mscale(factor, mscale_all_dim) : 1.0;
  return {};
}

// Multi-head latent attention (DeepseekV3Config): the ranks and head parts, the softmax scale.
// read_rope has already run with head_dim = qk_rope_head_dim and left YaRN's mscale_all_dim
// factor in attention_scale (1 without it).
Error read_mla(ConfigReader &reader, const nlohmann::json &config, model::ModelConfig *c) {
  c->attention = "mla";
  // q_lora_rank: absent is DeepseekV3Config's default 1536; null means a direct q_proj.
  auto q = config.find("q_lora_rank");
  c->q_lora_rank = q == config.end() ? 1536 : q->is_null() ? 0 : reader.optional_uint("q_lora_rank", 0);
  c->kv_lora_rank = reader.required_uint("kv_lora_rank");
  c->qk_nope_head_dim = reader.required_uint("qk_nope_head_dim");
  c->v_head_dim = reader.required_uint("v_head_dim");
  c->rope_interleave = reader.optional_bool("rope_interleave", true);
  if (reader.error()) return reader.error();
  c->kv_head_count = c->head_count;  // every head reads the one latent
  const double mscale_squared = c->rope_scaling == "yarn" ? c->attention_scale : 1.0;
  c->attention_scale = mscale_squared / std::sqrt(static_cast<double>(c->qk_nope_head_dim + c->head_dim));
  return {};
}

Error read_rope(ConfigReader &reader, const FamilyInfo &family, uint64_t head_dim, model::ModelConfig *c) {
  double *theta = &c->rope_theta;
  uint64_t *rotary_dim = &c->rotary_dim;
  auto rope_type = [](const nlohmann::json &o) {
    for (const char *key : {"rope_type", "type"}) {
      auto it = o.find(key);
      if (it != o.end() && it->is_string()) return it->get<std::string>();
    }
    return std::string("default");
  };
  if (const nlohmann::json *scaling = reader.value("rope_scaling")) {
    if (!scaling->is_object() || (rope_type(*scaling) != "default" && rope_type(*scaling) != "yarn"))
      return unsupported("rope_scaling " + scaling->dump() + " (scaled RoPE other than yarn)");
    if (rope_type(*scaling) == "yarn")
      if (Error e = read_yarn(*scaling, c->max_position_embeddings, c)) return e;
  }
  *theta = family.default_rope_theta;
  double factor = 1.0;
  bool has_factor = false;
  if (const nlohmann::json *parameters = reader.value("rope_parameters")) {
    if (!parameters->is_object() || (rope_type(*parameters) != "default" && rope_type(*parameters) != "yarn"))
      return unsupported("rope_parameters " + parameters->dump() + " (scaled RoPE other than yarn, or per-layer RoPE)");
    if (rope_type(*parameters) == "yarn")
      if (Error e = read_yarn(*parameters, c->max_position_embeddings, c)) return e;
    auto f = parameters->find("partial_rotary_factor");
    if (f != parameters->end() && !f->is_null()) {
      if (!f->is_number())
        return make_error(ErrorKind::Corrupt, "config.json: rope_parameters.partial_rotary_factor is not a number");
      factor = f->get<double>();
      has_factor = true;
    }
    auto t = parameters->find("rope_theta");
    if (t != parameters->end()) {
      if (!t->is_number()) return make_error(ErrorKind::Corrupt, "config.json: rope_parameters.rope_theta is not a number");
      *theta = t->get<double>();
    }
  }
  if (family.fused_experts && !reader.has("rope_scaling") && !reader.has("rope_parameters"))
    if (Error e = read_yarn(nlohmann::json::parse(kGptOssDefaultYarn), c->max_position_embeddings, c)) return e;
  *theta = reader.optional_number("rope_theta", *theta);
  if (reader.has("partial_rotary_factor")) {
    factor = reader.optional_number("partial_rotary_factor", 1.0);
    has_factor = true;
  }
  // transformers: dim = int(head_dim * partial_rotary_factor); rotary_dim alone (MiniMax-M2's
  // legacy key) becomes that factor.
  *rotary_dim = head_dim;
  if (has_factor) {
    if (!(factor > 0.0 && factor <= 1.0))
      return make_error(ErrorKind::Corrupt, strprintf("config.json: partial_rotary_factor %g is not in (0, 1]", factor));
    *rotary_dim = static_cast<uint64_t>(static_cast<double>(head_dim) * factor);
  } else if (reader.has("rotary_dim")) {
    *rotary_dim = reader.optional_uint("rotary_dim", head_dim);
  }
  if (reader.error()) return reader.error();
  if (*rotary_dim != head_dim && !family.partial_rotary)
    return unsupported(strprintf("partial_rotary_factor %g (rotary_dim %llu of head_dim %llu: partial RoPE) for %s",
                                 static_cast<double>(*rotary_dim) / static_cast<double>(head_dim),
                                 static_cast<unsigned long long>(*rotary_dim), static_cast<unsigned long long>(head_dim),
                                 family.architecture));
  if (*rotary_dim == 0 || *rotary_dim > head_dim || *rotary_dim % 2 != 0)
    return unsupported(strprintf("a rotary dimension of %llu for head_dim %llu (RoPE needs an even count of at most "
                                 "head_dim)",
                                 static_cast<unsigned long long>(*rotary_dim), static_cast<unsigned long long>(head_dim)));
  return {};
}

// gpt-oss: layer_types names each layer "sliding_attention" or "full_attention" (the config
// class's default alternates, layer 0 sliding); sliding layers see the last sliding_window
// positions (transformers' sliding-window mask: key > query − window).
Error read_layer_types(ConfigReader &reader, model::ModelConfig *c) {
  c->layer_is_sliding.assign(c->layer_count, 0);
  for (uint64_t i = 0; i < c->layer_count; ++i) c->layer_is_sliding[i] = (i + 1) % 2 != 0 ? 1 : 0;
  if (const nlohmann::json *types = reader.value("layer_types")) {
    if (!types->is_array() || types->size() != c->layer_count)
      return make_error(ErrorKind::Corrupt, strprintf("config.json: layer_types must list one type per layer (%llu)",
                                                      static_cast<unsigned long long>(c->layer_count)));
    for (size_t i = 0; i < types->size(); ++i) {
      const nlohmann::json &t = (*types)[i];
      const std::string type = t.is_string() ? t.get<std::string>() : t.dump();
      if (type != "sliding_attention" && type != "full_attention")
        return unsupported("layer_types entry '" + type + "' (sliding_attention and full_attention only)");
      c->layer_is_sliding[i] = type == "sliding_attention" ? 1 : 0;
    }
  }
  c->sliding_window = reader.optional_uint("sliding_window", 128);
  if (reader.error()) return reader.error();
  if (std::count(c->layer_is_sliding.begin(), c->layer_is_sliding.end(), 1) == 0) {
    c->layer_is_sliding.clear();  // no sliding layer: the window is irrelevant
    c->sliding_window = 0;
  } else if (c->sliding_window == 0 || c->sliding_window > (uint64_t(1) << 32)) {
    return make_error(ErrorKind::Corrupt, "config.json: sliding_window must be a positive window size (1..2^32) "
                                          "when layer_types has sliding_attention layers");
  }
  return {};
}

// Sliding-window attention: Qwen configs carry use_sliding_window (the window size is then
// irrelevant unless it is true); Mixtral carries only sliding_window, often null.
Error check_sliding_window(ConfigReader &reader, uint64_t max_positions) {
  if (reader.has("use_sliding_window")) {
    if (reader.optional_bool("use_sliding_window", false)) return unsupported("use_sliding_window true (sliding-window attention)");
  } else if (reader.has("sliding_window")) {
    uint64_t window = reader.optional_uint("sliding_window", 0);
    if (window > 0 && window < max_positions)
      return unsupported(strprintf("sliding_window %llu, smaller than max_position_embeddings %llu (sliding-window "
                                   "attention)",
                                   static_cast<unsigned long long>(window),
                                   static_cast<unsigned long long>(max_positions)));
  }
  if (const nlohmann::json *types = reader.value("layer_types"); types && types->is_array())
    for (const auto &t : *types)
      if (t.is_string() && t.get<std::string>() != "full_attention")
        return unsupported("layer_types entry '" + t.get<std::string>() + "' (only full_attention)");
  return {};
}

Error check_unsupported_features(ConfigReader &reader, const FamilyInfo &family) {
  if (const nlohmann::json *quant = reader.value("quantization_config")) {
    std::string method = "unknown";
    if (quant->is_object() && quant->contains("quant_method") && (*quant)["quant_method"].is_string())
      method = (*quant)["quant_method"].get<std::string>();
    // gpt-oss as OpenAI ships it: MXFP4 experts (*_blocks / *_scales), everything else bf16; the
    // tensor plan reads them (Mxfp4Source) and the image keeps them MXFP4.
    const bool mxfp4_experts = method == "mxfp4" && family.fused_experts;
    // Block-scaled FP8 (DeepSeek's own checkpoints): the tensor plan dequantises it (Fp8Blocks).
    Fp8Blocks fp8;
    if (method == "fp8") {
      if (Error e = read_fp8_blocks(reader.config(), &fp8)) return e;
    } else if (!mxfp4_experts) {
      return make_error(ErrorKind::Unsupported,
                        "config.json: quantization_config (quant_method '" + method + "'): " +
                            (method == "mxfp4" ? "MXFP4 checkpoints are not supported yet outside gpt-oss (GptOssForCausalLM)"
                                               : "this quantized checkpoint format is not supported yet") +
                            "; convert the original f32/f16/bf16 checkpoint (or a block-scaled FP8 one) and use "
                            "--dtype q8, q4 or mxfp4");
    }
  }
  std::string act = reader.optional_string("hidden_act", "silu");
  if (act != "silu") return unsupported("hidden_act '" + act + "' (experts use SiLU / SwiGLU)");
  if (family.o_bias_key && reader.optional_bool("attention_bias", false))
    return unsupported("attention_bias true (biases on q/k/v/o_proj) for " + std::string(family.architecture));
  return reader.error();
}

}  // namespace

Error read_fp8_blocks(const nlohmann::json &config, Fp8Blocks *out) {
  *out = Fp8Blocks{};
  auto q = config.find("quantization_config");
  if (q == config.end() || !q->is_object()) return {};
  auto method = q->find("quant_method");
  if (method == q->end() || !method->is_string() || method->get<std::string>() != "fp8") return {};
  auto fmt = q->find("fmt");
  if (fmt != q->end() && !(fmt->is_string() && fmt->get<std::string>() == "e4m3"))
    return make_error(ErrorKind::Unsupported, "config.json: quantization_config fp8 with fmt " + fmt->dump() +
                                                  " is not supported yet (supported: e4m3, DeepSeek's block-scaled "
                                                  "format)");
  auto block = q->find("weight_block_size");
  const bool ok = block != q->end() && block->is_array() && block->size() == 2 &&
                  std::all_of(block->begin(), block->end(), [](const nlohmann::json &v) {
                    return v.is_number_unsigned() && v.get<uint64_t>() > 0 && v.get<uint64_t>() <= (uint64_t(1) << 20);
                  });
  if (!ok)
    return make_error(ErrorKind::Unsupported,
                      "config.json: quantization_config fp8 without a weight_block_size [rows, cols] (per-tensor or "
                      "per-channel FP8) is not supported yet; only block-scaled FP8 with *_scale_inv tensors is");
  out->used = true;
  out->rows = (*block)[0].get<uint64_t>();
  out->cols = (*block)[1].get<uint64_t>();
  return {};
}

const FamilyInfo *find_family(const std::string &architecture) {
  for (const FamilyInfo &f : kFamilies)
    if (architecture == f.architecture) return &f;
  return nullptr;
}

std::string supported_architectures() {
  std::string out;
  for (const FamilyInfo &f : kFamilies) out += (out.empty() ? "" : ", ") + std::string(f.architecture);
  return out;
}

// A ModelConfig check's error, reworded for config.json.
static Error inconsistent(const Error &e) {
  std::string message = e.message;
  const std::string prefix = "model metadata: ";
  if (message.rfind(prefix, 0) == 0) message = message.substr(prefix.size());
  return make_error(e.kind, "config.json describes an inconsistent model: " + message);
}

Error read_hf_config(const nlohmann::json &config, const FamilyInfo **family_out, model::ModelConfig *out) {
  if (!config.is_object()) return make_error(ErrorKind::Corrupt, "config.json is not a JSON object");
  const FamilyInfo *family = nullptr;
  model::ModelConfig c;
  if (Error e = identify_family(config, &family, &c.hf_architecture)) return e;
  c.family = family->family;

  ConfigReader reader(config);
  if (Error e = check_unsupported_features(reader, *family)) return e;

  // Shared transformer shape.
  c.vocab_size = reader.required_uint("vocab_size");
  c.hidden_size = reader.required_uint("hidden_size");
  c.layer_count = reader.required_uint("num_hidden_layers");
  c.head_count = reader.required_uint("num_attention_heads");
  c.kv_head_count = reader.optional_uint("num_key_value_heads", c.head_count);
  c.head_dim = family->mla ? reader.required_uint("qk_rope_head_dim")  // MLA: the rotated part of a head
                            : reader.optional_uint("head_dim", 0);      // null or absent: hidden / heads
  c.max_position_embeddings = reader.optional_uint("max_position_embeddings", family->default_max_positions);
  c.rms_norm_eps = reader.optional_number("rms_norm_eps", family->default_rms_norm_eps);
  c.tie_word_embeddings = reader.optional_bool("tie_word_embeddings", false);
  if (reader.error()) return reader.error();
  if (c.head_dim == 0) {
    if (c.head_count == 0 || c.hidden_size % c.head_count != 0)
      return make_error(ErrorKind::Corrupt, strprintf("config.json: hidden_size %llu is not a multiple of "
                                                      "num_attention_heads %llu and head_dim is not given",
                                                      static_cast<unsigned long long>(c.hidden_size),
                                                      static_cast<unsigned long long>(c.head_count)));
    c.head_dim = c.hidden_size / c.head_count;
  }
  if (Error e = read_rope(reader, *family, c.head_dim, &c)) return e;
  if (family->mla) {
    if (Error e = read_mla(reader, config, &c)) return e;
  } else {
    c.attention_scale = 0.0;  // the GQA families' scale is 1/sqrt(head_dim), not stored
  }
  if (family->fused_experts) {
    if (Error e = read_layer_types(reader, &c)) return e;
  } else if (Error e = check_sliding_window(reader, c.max_position_embeddings)) {
    return e;
  }

  // Attention extras.
  c.attention_bias = family->qkv_bias_key ? reader.optional_bool(family->qkv_bias_key, family->qkv_bias_default) : false;
  if (family->fused_experts) {  // gpt-oss: attention_bias covers o_proj too; sinks always
    c.attention_output_bias = c.attention_bias;
    c.attention_sinks = true;
  }
  c.qk_norm = !family->qk_norm_key || reader.optional_bool(family->qk_norm_key, false) ? family->qk_norm : "none";
  c.clip_qkv = family->clip_qkv ? reader.optional_number("clip_qkv", 0.0) : 0.0;

  // Mixture of experts and the dense/MoE layer pattern.
  c.expert_count = reader.has("num_experts")        ? reader.optional_uint("num_experts", 0)
                   : reader.has("n_routed_experts") ? reader.optional_uint("n_routed_experts", 0)
                                                    : reader.required_uint("num_local_experts");
  if (c.expert_count > 0) {
    c.top_k = reader.required_uint("num_experts_per_tok");
    c.expert_ffn_size = reader.required_uint(family->expert_ffn_key);
  }
  c.router_score = family->router_score;
  c.norm_topk_prob = family->renormalise_always || reader.optional_bool("norm_topk_prob", family->norm_topk_default);
  c.router_select_bias = family->router_bias_name != nullptr;
  if (family->expert_groups) {
    c.expert_group_count = reader.optional_uint("n_group", 1);
    c.expert_group_top = reader.optional_uint("topk_group", 1);
  }
  c.topk_norm_epsilon = family->topk_norm_epsilon;
  if (family->scaling_key) c.routed_scaling_factor = reader.optional_number(family->scaling_key, 1.0);
  if (family->fused_experts) {  // gpt-oss: biased router and experts, clamped SwiGLU
    c.router_bias = true;
    c.expert_bias = true;
    c.expert_activation = "swiglu_clamped";
    c.swiglu_limit = reader.optional_number("swiglu_limit", 7.0);
    c.swiglu_alpha = reader.optional_number("swiglu_alpha", 1.702);
  }
  if (reader.error()) return reader.error();
  // The limits before anything is sized from these numbers (layer lists, tensor plans).
  if (Error e = c.check_limits()) return inconsistent(e);
  c.layer_is_moe.assign(c.layer_count, c.expert_count > 0 ? 1 : 0);
  if (family->sparse_step_layers) {
    std::vector<uint64_t> mlp_only = reader.optional_uint_list("mlp_only_layers");
    uint64_t step = reader.optional_uint("decoder_sparse_step", 1);
    if (step == 0) reader.fail("config.json: decoder_sparse_step must be at least 1");
    for (uint64_t i = 0; i < c.layer_count && step > 0; ++i) {
      bool dense = std::find(mlp_only.begin(), mlp_only.end(), i) != mlp_only.end() || (i + 1) % step != 0;
      if (dense) c.layer_is_moe[i] = 0;
    }
  }
  // GLM-4.5 checkpoints carry num_nextn_predict_layers MTP layers after the last layer
  // (transformers names the key num_mtp_layers as well).
  c.mtp_layer_count = reader.has("num_nextn_predict_layers") ? reader.optional_uint("num_nextn_predict_layers", 0)
                                                             : reader.optional_uint("num_mtp_layers", 0);
  if (family->first_k_dense_key) {
    uint64_t dense = reader.optional_uint(family->first_k_dense_key, 1);
    for (uint64_t i = 0; i < c.layer_count && i < dense; ++i) c.layer_is_moe[i] = 0;
  }
  if (family->dense_ffn_key && std::count(c.layer_is_moe.begin(), c.layer_is_moe.end(), 0) > 0)
    c.dense_ffn_size = reader.required_uint(family->dense_ffn_key);
  if (family->shared_expert && c.expert_count > 0) {
    c.shared_expert_ffn_size = reader.required_uint("shared_expert_intermediate_size");
    c.shared_expert_gate = c.shared_expert_ffn_size > 0;
  }
  if (family->shared_count_key && c.expert_count > 0) {
    uint64_t shared = reader.optional_uint(family->shared_count_key, 1);
    if (shared > model::ModelLimits::kFfnSize) reader.fail(strprintf("config.json: '%s' is too large", family->shared_count_key));
    else c.shared_expert_ffn_size = shared * c.expert_ffn_size;  // both within kFfnSize: no overflow
    c.shared_expert_gate = false;
  }
  if (reader.error()) return reader.error();

  // The engine's own consistency rules (ModelConfig::from_json) apply to what we write.
  model::ModelConfig checked;
  if (Error e = model::ModelConfig::from_json(c.to_json(), &checked)) return inconsistent(e);
  *family_out = family;
  *out = std::move(c);
  return {};
}

}  // namespace colibri::modeltool::convert

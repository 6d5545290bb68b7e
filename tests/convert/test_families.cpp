// tests/convert/test_families.cpp — config.json -> ModelConfig for each family, the
// dense/MoE layer rule, the transformers 4 and 5 layouts, and every refusal by name.
#include <catch2/catch.hpp>

#include <cmath>

#include "convert/synthetic_checkpoint.h"
#include "modeltool/convert/families.h"

using namespace colibri;
using namespace colibri::modeltool::convert;
using Catch::Contains;
using nlohmann::json;

namespace {

json config_for(const std::string &architecture, json overrides = json::object()) {
  testing::SyntheticCheckpointSpec spec;
  spec.architecture = architecture;
  spec.config_overrides = std::move(overrides);
  return testing::synthetic_config(spec);
}

model::ModelConfig read_ok(const json &config) {
  const FamilyInfo *family = nullptr;
  model::ModelConfig c;
  Error e = read_hf_config(config, &family, &c);
  INFO(e.message);
  REQUIRE_FALSE(e);
  REQUIRE(family);
  return c;
}

Error read_error(const json &config) {
  const FamilyInfo *family = nullptr;
  model::ModelConfig c;
  return read_hf_config(config, &family, &c);
}

}  // namespace

TEST_CASE("Mixtral: every layer MoE, top-k always renormalised, head_dim null means hidden/heads", "[families]") {
  model::ModelConfig c = read_ok(config_for("MixtralForCausalLM", {{"norm_topk_prob", false}}));
  CHECK(c.family == "mixtral");
  CHECK(c.hf_architecture == "MixtralForCausalLM");
  CHECK(c.vocab_size == 64);
  CHECK(c.hidden_size == 32);
  CHECK(c.head_count == 4);
  CHECK(c.kv_head_count == 2);
  CHECK(c.head_dim == 8);
  CHECK(c.expert_count == 4);
  CHECK(c.top_k == 2);
  CHECK(c.expert_ffn_size == 16);
  CHECK(c.norm_topk_prob);  // Mixtral ignores the key: it always renormalises
  CHECK(c.router_score == "softmax");
  CHECK(c.rope_theta == 1e6);
  CHECK(c.rms_norm_eps == 1e-5);
  CHECK(c.qk_norm == "none");
  CHECK_FALSE(c.attention_bias);
  CHECK(c.shared_expert_ffn_size == 0);
  CHECK(c.dense_ffn_size == 0);
  CHECK(c.layer_is_moe == std::vector<uint8_t>{1, 1});
}

TEST_CASE("optional keys take the transformers config-class defaults", "[families]") {
  json config = config_for("MixtralForCausalLM");
  for (const char *key : {"num_key_value_heads", "rope_theta", "rms_norm_eps", "max_position_embeddings",
                          "tie_word_embeddings", "hidden_act", "sliding_window", "head_dim"})
    config.erase(key);
  model::ModelConfig c = read_ok(config);
  CHECK(c.kv_head_count == c.head_count);
  CHECK(c.rope_theta == 1e6);
  CHECK(c.rms_norm_eps == 1e-5);
  CHECK(c.max_position_embeddings == 131072);
  CHECK_FALSE(c.tie_word_embeddings);
}

TEST_CASE("Qwen2-MoE: shared expert, q/k/v biases, mlp_only_layers and decoder_sparse_step", "[families]") {
  model::ModelConfig c = read_ok(config_for("Qwen2MoeForCausalLM", {{"num_hidden_layers", 6},
                                                                     {"mlp_only_layers", {0}},
                                                                     {"decoder_sparse_step", 2}}));
  CHECK(c.family == "qwen2_moe");
  CHECK(c.attention_bias);
  CHECK(c.shared_expert_ffn_size == 16);
  CHECK(c.shared_expert_gate);
  CHECK(c.dense_ffn_size == 24);
  CHECK(c.expert_ffn_size == 16);
  CHECK_FALSE(c.norm_topk_prob);
  CHECK(c.rope_theta == 1e6);  // from rope_parameters (transformers 5 layout)
  // MoE iff i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0.
  CHECK(c.layer_is_moe == std::vector<uint8_t>{0, 1, 0, 1, 0, 1});
}

TEST_CASE("Qwen2-MoE: qkv_bias false drops the biases", "[families]") {
  CHECK_FALSE(read_ok(config_for("Qwen2MoeForCausalLM", {{"qkv_bias", false}})).attention_bias);
  json config = config_for("Qwen2MoeForCausalLM");
  config.erase("qkv_bias");  // transformers 4 configs: the biases are always there
  CHECK(read_ok(config).attention_bias);
}

TEST_CASE("Qwen3-MoE: explicit head_dim, per-head q/k norm, norm_topk_prob, num_local_experts", "[families]") {
  json config = config_for("Qwen3MoeForCausalLM", {{"head_dim", 16}});
  config["num_local_experts"] = config["num_experts"];  // transformers 5 writes this name
  config.erase("num_experts");
  model::ModelConfig c = read_ok(config);
  CHECK(c.family == "qwen3_moe");
  CHECK(c.head_dim == 16);
  CHECK(c.qk_norm == "per_head");
  CHECK(c.norm_topk_prob);
  CHECK(c.expert_count == 4);
  CHECK_FALSE(c.attention_bias);
  CHECK(c.shared_expert_ffn_size == 0);
}

TEST_CASE("OLMoE: whole-projection q/k norm and clip_qkv", "[families]") {
  model::ModelConfig c = read_ok(config_for("OlmoeForCausalLM"));
  CHECK(c.family == "olmoe");
  CHECK(c.qk_norm == "full");
  CHECK(c.clip_qkv == 8.0);
  CHECK_FALSE(c.norm_topk_prob);
  CHECK(c.rope_theta == 10000.0);
  CHECK(read_ok(config_for("OlmoeForCausalLM", {{"clip_qkv", nullptr}})).clip_qkv == 0.0);
}

TEST_CASE("the family is found from model_type when architectures is absent", "[families]") {
  json config = config_for("OlmoeForCausalLM");
  config.erase("architectures");
  CHECK(read_ok(config).hf_architecture == "OlmoeForCausalLM");
}

TEST_CASE("an unknown architecture is refused with the supported list", "[families]") {
  Error e = read_error(config_for("MixtralForCausalLM", {{"architectures", {"LlamaForCausalLM"}}}));
  CHECK(e.kind == ErrorKind::Unsupported);
  CHECK_THAT(e.message, Contains("architecture 'LlamaForCausalLM'"));
  CHECK_THAT(e.message, Contains("MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, OlmoeForCausalLM"));
}

TEST_CASE("unsupported features are refused by name", "[families]") {
  struct Case {
    const char *architecture;
    json overrides;
    const char *expected;
  };
  const Case cases[] = {
      {"MixtralForCausalLM", {{"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}}, "rope_scaling"},
      {"Qwen2MoeForCausalLM", {{"rope_parameters", {{"rope_type", "dynamic"}, {"rope_theta", 1e6}}}}, "rope_parameters"},
      {"Qwen2MoeForCausalLM", {{"rope_parameters", {{"rope_type", "longrope"}, {"rope_theta", 1e6}}}}, "other than yarn"},
      {"MixtralForCausalLM", {{"sliding_window", 1024}}, "sliding_window 1024, smaller than max_position_embeddings 4096"},
      {"Qwen2MoeForCausalLM", {{"use_sliding_window", true}}, "use_sliding_window true"},
      {"Qwen2MoeForCausalLM", {{"layer_types", {"full_attention", "sliding_attention"}}}, "sliding_attention"},
      {"OlmoeForCausalLM", {{"hidden_act", "gelu"}}, "hidden_act 'gelu'"},
      {"Qwen3MoeForCausalLM", {{"attention_bias", true}}, "attention_bias true"},
      {"MixtralForCausalLM", {{"quantization_config", {{"quant_method", "gptq"}, {"bits", 4}}}}, "quant_method 'gptq'"},
      {"Qwen3MoeForCausalLM", {{"quantization_config", {{"quant_method", "mxfp4"}}}}, "outside gpt-oss (GptOssForCausalLM)"},
      {"MixtralForCausalLM", {{"partial_rotary_factor", 0.5}}, "partial_rotary_factor"},
  };
  for (const Case &c : cases) {
    Error e = read_error(config_for(c.architecture, c.overrides));
    INFO(c.architecture << " " << c.overrides.dump());
    CHECK(e.kind == ErrorKind::Unsupported);
    CHECK_THAT(e.message, Contains(c.expected));
    CHECK_THAT(e.message, Contains("not supported yet"));
  }
}

TEST_CASE("yarn RoPE: both layouts, the attention factor as transformers resolves it, bad parameters named",
          "[families]") {
  // transformers 5: rope_parameters; factor 4 gives attention factor 0.1 ln 4 + 1.
  model::ModelConfig v5 = read_ok(config_for("Qwen2MoeForCausalLM", {{"rope_parameters", {{"rope_type", "yarn"},
      {"rope_theta", 1e6}, {"factor", 4.0}, {"original_max_position_embeddings", 1024}}}}));
  CHECK(v5.rope_scaling == "yarn");
  CHECK(v5.rope_factor == 4.0);
  CHECK(v5.rope_original_max_positions == 1024);
  CHECK(v5.rope_beta_fast == 32.0);
  CHECK(v5.rope_beta_slow == 1.0);
  CHECK(v5.rope_truncate);
  CHECK(v5.rope_attention_factor == Approx(0.1 * std::log(4.0) + 1.0));
  CHECK(v5.rope_theta == 1e6);
  // transformers 4: rope_scaling {type: yarn}; DeepSeek's form: no factor (max / original) and
  // mscale = mscale_all_dim, which makes the factor 1.
  model::ModelConfig v4 = read_ok(config_for("MixtralForCausalLM", {{"rope_scaling", {{"type", "yarn"},
      {"original_max_position_embeddings", 1024}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}, {"beta_fast", 16},
      {"truncate", false}}}}));
  CHECK(v4.rope_factor == 4.0);  // max_position_embeddings 4096 / 1024
  CHECK(v4.rope_attention_factor == 1.0);
  CHECK(v4.rope_beta_fast == 16.0);
  CHECK_FALSE(v4.rope_truncate);
  CHECK(read_ok(config_for("MixtralForCausalLM", {{"rope_scaling", {{"type", "yarn"}, {"factor", 2.0},
      {"original_max_position_embeddings", 2048}, {"attention_factor", 1.5}}}})).rope_attention_factor == 1.5);
  // No original context, a factor below 1, a non-number: named.
  Error none = read_error(config_for("MixtralForCausalLM", {{"rope_scaling", {{"type", "yarn"}, {"factor", 2.0}}}}));
  CHECK(none.kind == ErrorKind::Corrupt);
  CHECK_THAT(none.message, Contains("original_max_position_embeddings"));
  Error small = read_error(config_for("MixtralForCausalLM", {{"rope_scaling", {{"type", "yarn"}, {"factor", 0.5},
      {"original_max_position_embeddings", 2048}}}}));
  CHECK(small.kind == ErrorKind::Unsupported);
  CHECK_THAT(small.message, Contains("factor 0.5"));
  Error text = read_error(config_for("MixtralForCausalLM", {{"rope_scaling", {{"type", "yarn"}, {"factor", "4"},
      {"original_max_position_embeddings", 2048}}}}));
  CHECK(text.kind == ErrorKind::Corrupt);
  CHECK_THAT(text.message, Contains("'factor' is not a number"));
}

TEST_CASE("features that are switched off are accepted", "[families]") {
  read_ok(config_for("MixtralForCausalLM", {{"sliding_window", 4096}}));  // window == context: no effect
  read_ok(config_for("Qwen2MoeForCausalLM", {{"sliding_window", 512}}));  // use_sliding_window is false
  read_ok(config_for("MixtralForCausalLM", {{"rope_scaling", nullptr}}));
  read_ok(config_for("MixtralForCausalLM", {{"rope_scaling", {{"rope_type", "default"}}}}));
  read_ok(config_for("MixtralForCausalLM", {{"quantization_config", nullptr}}));
}

TEST_CASE("missing and ill-typed keys are named", "[families]") {
  json config = config_for("MixtralForCausalLM");
  config.erase("hidden_size");
  Error e = read_error(config);
  CHECK(e.kind == ErrorKind::Corrupt);
  CHECK_THAT(e.message, Contains("config.json has no 'hidden_size'"));
  e = read_error(config_for("MixtralForCausalLM", {{"num_attention_heads", "four"}}));
  CHECK_THAT(e.message, Contains("'num_attention_heads' must be a non-negative integer, got \"four\""));
  e = read_error(config_for("Qwen2MoeForCausalLM", {{"mlp_only_layers", {"x"}}}));
  CHECK_THAT(e.message, Contains("'mlp_only_layers' must be a list"));
  e = read_error(config_for("Qwen2MoeForCausalLM", {{"decoder_sparse_step", 0}}));
  CHECK_THAT(e.message, Contains("decoder_sparse_step"));
}

TEST_CASE("inconsistent sizes are refused through the engine's own rules", "[families]") {
  Error e = read_error(config_for("MixtralForCausalLM", {{"num_key_value_heads", 3}}));
  CHECK(e.kind == ErrorKind::Corrupt);
  CHECK_THAT(e.message, Contains("config.json describes an inconsistent model"));
  CHECK_THAT(e.message, Contains("head_count 4 is not a multiple of kv_head_count 3"));
  e = read_error(config_for("MixtralForCausalLM", {{"num_experts_per_tok", 9}}));
  CHECK_THAT(e.message, Contains("top_k"));
  e = read_error(config_for("MixtralForCausalLM", {{"num_attention_heads", 5}}));
  CHECK_THAT(e.message, Contains("hidden_size 32 is not a multiple of num_attention_heads 5"));
}

TEST_CASE("absurd sizes are refused before anything is sized from them", "[families]") {
  // Products that wrap around 64 bits to the real tensor shapes (9223372036854775812 heads of
  // head_dim 64 "are" 256 wide) once converted and then crashed the engine.
  Error e = read_error(config_for("MixtralForCausalLM", {{"num_attention_heads", 9223372036854775812ull},
                                                         {"num_key_value_heads", 4611686018427387906ull},
                                                         {"head_dim", 64}}));
  CHECK(e.kind == ErrorKind::Corrupt);
  CHECK_THAT(e.message, Contains("head_count 9223372036854775812 is over the limit of 4096"));
  // Counts that made the converter allocate without bound (layer lists, tensor plans).
  e = read_error(config_for("MixtralForCausalLM", {{"num_hidden_layers", 1000000000000000ull}}));
  CHECK_THAT(e.message, Contains("layer_count 1000000000000000 is over the limit"));
  e = read_error(config_for("MixtralForCausalLM", {{"num_local_experts", 1000000000}}));
  CHECK_THAT(e.message, Contains("expert_count 1000000000 is over the limit"));
  e = read_error(config_for("MixtralForCausalLM", {{"vocab_size", uint64_t(1) << 40}}));
  CHECK_THAT(e.message, Contains("vocab_size"));
  e = read_error(config_for("MixtralForCausalLM", {{"intermediate_size", uint64_t(1) << 30}}));
  CHECK_THAT(e.message, Contains("expert_ffn_size"));
  // At the limits themselves the rules are the usual ones (here: heads must divide hidden).
  model::ModelConfig c = read_ok(config_for("MixtralForCausalLM", {{"num_hidden_layers", model::ModelLimits::kLayerCount}}));
  CHECK(c.layer_count == model::ModelLimits::kLayerCount);
  // An image's metadata goes through the same limits when the engine opens it.
  json metadata = read_ok(config_for("MixtralForCausalLM")).to_json();
  metadata["head_dim"] = uint64_t(1) << 62;
  model::ModelConfig from_image;
  e = model::ModelConfig::from_json(metadata, &from_image);
  CHECK(e.kind == ErrorKind::Corrupt);
  CHECK_THAT(e.message, Contains("model metadata: head_dim 4611686018427387904 is over the limit of 4096"));
}

namespace {

// config.json as transformers 5.24 writes it for a small Glm4MoeForCausalLM / MiniMaxM2ForCausalLM.
json glm4_moe_config() {
  return json::parse(R"({"architectures": ["Glm4MoeForCausalLM"], "attention_bias": true, "first_k_dense_replace": 1,
    "head_dim": 16, "hidden_act": "silu", "hidden_size": 32, "intermediate_size": 48, "max_position_embeddings": 131072,
    "model_type": "glm4_moe", "moe_intermediate_size": 16, "n_group": 2, "n_routed_experts": 8, "n_shared_experts": 1,
    "norm_topk_prob": true, "num_attention_heads": 4, "num_experts_per_tok": 2, "num_hidden_layers": 3,
    "num_key_value_heads": 2, "num_nextn_predict_layers": 1, "rms_norm_eps": 1e-05,
    "rope_parameters": {"partial_rotary_factor": 0.5, "rope_theta": 10000.0, "rope_type": "default"},
    "routed_scaling_factor": 2.5, "tie_word_embeddings": false, "topk_group": 1, "use_qk_norm": true, "vocab_size": 64})");
}

json minimax_m2_config() {
  return json::parse(R"({"architectures": ["MiniMaxM2ForCausalLM"], "head_dim": 16, "hidden_act": "silu", "hidden_size": 32,
    "intermediate_size": 16, "max_position_embeddings": 196608, "model_type": "minimax_m2", "num_attention_heads": 4,
    "num_experts_per_tok": 2, "num_hidden_layers": 2, "num_key_value_heads": 2, "num_local_experts": 8,
    "rms_norm_eps": 1e-06, "rope_parameters": {"partial_rotary_factor": 0.5, "rope_theta": 5000000.0, "rope_type": "default"},
    "rotary_dim": 8, "tie_word_embeddings": false, "vocab_size": 64})");
}

}  // namespace

TEST_CASE("GLM-4.5: sigmoid groups, scaling, shared experts, dense first layers, partial RoPE", "[families]") {
  model::ModelConfig c = read_ok(glm4_moe_config());
  CHECK(c.family == "glm4_moe");
  CHECK(c.router_score == "sigmoid");
  CHECK(c.router_select_bias);
  CHECK(c.expert_group_count == 2);
  CHECK(c.expert_group_top == 1);
  CHECK(c.routed_scaling_factor == 2.5);
  CHECK(c.topk_norm_epsilon == 1e-20);
  CHECK(c.norm_topk_prob);
  CHECK(c.expert_count == 8);
  CHECK(c.shared_expert_ffn_size == 16);  // n_shared_experts × moe_intermediate_size
  CHECK_FALSE(c.shared_expert_gate);
  CHECK(c.layer_is_moe == std::vector<uint8_t>{0, 1, 1});
  CHECK(c.dense_ffn_size == 48);
  CHECK(c.rotary_dim == 8);
  CHECK(c.qk_norm == "per_head");
  CHECK(c.attention_bias);
  CHECK(c.mtp_layer_count == 1);  // num_nextn_predict_layers: recorded, not converted
  json plain = glm4_moe_config();
  plain.erase("use_qk_norm");
  plain.erase("attention_bias");
  plain.erase("norm_topk_prob");
  plain["n_shared_experts"] = 2;
  plain["first_k_dense_replace"] = 0;
  model::ModelConfig d = read_ok(plain);
  CHECK(d.qk_norm == "none");  // use_qk_norm defaults to false
  CHECK_FALSE(d.attention_bias);
  CHECK(d.norm_topk_prob);     // Glm4MoeConfig's default
  CHECK(d.shared_expert_ffn_size == 32);
  CHECK(d.layer_is_moe == std::vector<uint8_t>{1, 1, 1});
  json bad_groups = glm4_moe_config();
  bad_groups["n_group"] = 3;  // 8 experts do not split into 3 groups
  CHECK(read_error(bad_groups).kind == ErrorKind::Corrupt);
}

TEST_CASE("MiniMax-M2: sigmoid with bias, always renormalised, whole-projection q/k norm, rotary_dim", "[families]") {
  model::ModelConfig c = read_ok(minimax_m2_config());
  CHECK(c.family == "minimax_m2");
  CHECK(c.router_score == "sigmoid");
  CHECK(c.router_select_bias);
  CHECK(c.expert_group_count == 1);
  CHECK(c.norm_topk_prob);
  CHECK(c.routed_scaling_factor == 1.0);
  CHECK(c.topk_norm_epsilon == 0.0);
  CHECK(c.qk_norm == "full");
  CHECK(c.rotary_dim == 8);
  CHECK(c.layer_is_moe == std::vector<uint8_t>{1, 1});
  CHECK(c.rope_theta == 5e6);
  json legacy = minimax_m2_config();  // the hub checkpoints: rotary_dim and a top-level rope_theta
  legacy.erase("rope_parameters");
  legacy["rope_theta"] = 5e6;
  legacy["rotary_dim"] = 4;
  CHECK(read_ok(legacy).rotary_dim == 4);
  legacy["rotary_dim"] = 5;
  Error odd = read_error(legacy);
  CHECK(odd.kind == ErrorKind::Unsupported);
  CHECK_THAT(odd.message, Contains("rotary dimension of 5"));
}

// tests/convert/synthetic_checkpoint.cpp — deterministic Hugging Face checkpoints.
#include "convert/synthetic_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "image/dtype_convert.h"

namespace colibri::testing {

using nlohmann::json;

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t name_hash(const std::string &name, uint32_t seed) {
  uint64_t h = 0xCBF29CE484222325ull ^ (static_cast<uint64_t>(seed) * 0x100000001B3ull);
  for (unsigned char c : name) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

float value_from_hash(uint64_t h) {
  // 24 random bits -> a multiple of 2^-23 in [-1, 1): exact in f32.
  return static_cast<float>(static_cast<int64_t>(h >> 40) - (1 << 23)) / static_cast<float>(1 << 23);
}

bool is_qwen(const std::string &architecture) {
  return architecture == "Qwen2MoeForCausalLM" || architecture == "Qwen3MoeForCausalLM";
}

uint64_t head_dim_of(const SyntheticCheckpointSpec &s) { return s.head_dim ? s.head_dim : s.hidden / s.heads; }

bool is_deepseek(const SyntheticCheckpointSpec &s) { return s.architecture == "DeepseekV3ForCausalLM"; }

bool layer_is_dense(const SyntheticCheckpointSpec &s, uint64_t layer) {
  if (is_deepseek(s)) return layer < s.first_dense;
  return is_qwen(s.architecture) &&
         std::find(s.mlp_only_layers.begin(), s.mlp_only_layers.end(), layer) != s.mlp_only_layers.end();
}

json tokenizer_json() {
  json added = json::array();
  const char *specials[] = {"<unk>", "<s>", "</s>"};
  for (int id = 0; id < 3; ++id)
    added.push_back({{"id", id}, {"content", specials[id]}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}, {"a", 3}, {"b", 4}, {"\u00e9t\u00e9", 5}, {"<pad>", 6}};
  return {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added},
          {"normalizer", nullptr}, {"pre_tokenizer", nullptr}, {"post_processor", nullptr}, {"decoder", nullptr},
          {"model", {{"type", "BPE"}, {"unk_token", "<unk>"}, {"vocab", vocab}, {"merges", json::array()}}}};
}

}  // namespace

float synthetic_value(const std::string &name, uint64_t index, uint32_t seed) {
  return value_from_hash(splitmix64(name_hash(name, seed) + index));
}

std::vector<SafetensorsEntry> synthetic_tensors(const SyntheticCheckpointSpec &s) {
  const std::string &dt = s.dtype;
  const uint64_t hd = head_dim_of(s), q = s.heads * hd, kv = s.kv_heads * hd, h = s.hidden;
  const bool mixtral = s.architecture == "MixtralForCausalLM";
  std::vector<SafetensorsEntry> t;
  t.push_back({"model.embed_tokens.weight", dt, {s.vocab, h}});
  for (uint64_t i = 0; i < s.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    t.push_back({p + "input_layernorm.weight", dt, {h}});
    t.push_back({p + "post_attention_layernorm.weight", dt, {h}});
    if (is_deepseek(s)) {  // transformers DeepseekV3Attention
      const std::string a = p + "self_attn.";
      const uint64_t qh = s.heads * (s.qk_nope + s.qk_rope);
      if (s.q_lora) {
        t.push_back({a + "q_a_proj.weight", dt, {s.q_lora, h}});
        t.push_back({a + "q_a_layernorm.weight", dt, {s.q_lora}});
        t.push_back({a + "q_b_proj.weight", dt, {qh, s.q_lora}});
      } else {
        t.push_back({a + "q_proj.weight", dt, {qh, h}});
      }
      t.push_back({a + "kv_a_proj_with_mqa.weight", dt, {s.kv_lora + s.qk_rope, h}});
      t.push_back({a + "kv_a_layernorm.weight", dt, {s.kv_lora}});
      t.push_back({a + "kv_b_proj.weight", dt, {s.heads * (s.qk_nope + s.v_head), s.kv_lora}});
      t.push_back({a + "o_proj.weight", dt, {h, s.heads * s.v_head}});
    } else {
      t.push_back({p + "self_attn.q_proj.weight", dt, {q, h}});
      t.push_back({p + "self_attn.k_proj.weight", dt, {kv, h}});
      t.push_back({p + "self_attn.v_proj.weight", dt, {kv, h}});
      t.push_back({p + "self_attn.o_proj.weight", dt, {h, q}});
    }
    if (s.architecture == "Qwen2MoeForCausalLM") {
      t.push_back({p + "self_attn.q_proj.bias", dt, {q}});
      t.push_back({p + "self_attn.k_proj.bias", dt, {kv}});
      t.push_back({p + "self_attn.v_proj.bias", dt, {kv}});
    }
    if (s.architecture == "Qwen3MoeForCausalLM") {  // per head
      t.push_back({p + "self_attn.q_norm.weight", dt, {hd}});
      t.push_back({p + "self_attn.k_norm.weight", dt, {hd}});
    }
    if (s.architecture == "OlmoeForCausalLM") {  // whole projection
      t.push_back({p + "self_attn.q_norm.weight", dt, {q}});
      t.push_back({p + "self_attn.k_norm.weight", dt, {kv}});
    }
    if (layer_is_dense(s, i)) {
      t.push_back({p + "mlp.gate_proj.weight", dt, {s.dense_ffn, h}});
      t.push_back({p + "mlp.up_proj.weight", dt, {s.dense_ffn, h}});
      t.push_back({p + "mlp.down_proj.weight", dt, {h, s.dense_ffn}});
      continue;
    }
    const std::string moe = p + (mixtral ? "block_sparse_moe." : "mlp.");
    t.push_back({moe + "gate.weight", dt, {s.experts, h}});
    if (is_deepseek(s)) {
      t.push_back({moe + "gate.e_score_correction_bias", "F32", {s.experts}});
      const uint64_t shared = s.shared_experts * s.expert_ffn;
      t.push_back({moe + "shared_experts.gate_proj.weight", dt, {shared, h}});
      t.push_back({moe + "shared_experts.up_proj.weight", dt, {shared, h}});
      t.push_back({moe + "shared_experts.down_proj.weight", dt, {h, shared}});
    }
    for (uint64_t e = 0; e < s.experts; ++e) {
      const std::string x = moe + "experts." + std::to_string(e) + ".";
      t.push_back({x + (mixtral ? "w1" : "gate_proj") + ".weight", dt, {s.expert_ffn, h}});
      t.push_back({x + (mixtral ? "w2" : "down_proj") + ".weight", dt, {h, s.expert_ffn}});
      t.push_back({x + (mixtral ? "w3" : "up_proj") + ".weight", dt, {s.expert_ffn, h}});
    }
    if (s.architecture == "Qwen2MoeForCausalLM") {
      t.push_back({moe + "shared_expert.gate_proj.weight", dt, {s.shared_ffn, h}});
      t.push_back({moe + "shared_expert.up_proj.weight", dt, {s.shared_ffn, h}});
      t.push_back({moe + "shared_expert.down_proj.weight", dt, {h, s.shared_ffn}});
      t.push_back({moe + "shared_expert_gate.weight", dt, {1, h}});
    }
  }
  t.push_back({"model.norm.weight", dt, {h}});
  if (!s.tie_embeddings) t.push_back({"lm_head.weight", dt, {s.vocab, h}});
  return t;
}

json synthetic_config(const SyntheticCheckpointSpec &s) {
  const std::string &a = s.architecture;
  json c = {{"architectures", {a}},
            {"vocab_size", s.vocab},
            {"hidden_size", s.hidden},
            {"num_hidden_layers", s.layers},
            {"num_attention_heads", s.heads},
            {"num_key_value_heads", s.kv_heads},
            {"num_experts_per_tok", s.top_k},
            {"hidden_act", "silu"},
            {"max_position_embeddings", 4096},
            {"tie_word_embeddings", s.tie_embeddings},
            {"bos_token_id", 1},
            {"eos_token_id", 2},
            {"torch_dtype", s.dtype == "BF16" ? "bfloat16" : s.dtype == "F16" ? "float16" : "float32"}};
  if (a == "MixtralForCausalLM") {  // transformers-4 layout
    c.update({{"model_type", "mixtral"}, {"num_local_experts", s.experts}, {"intermediate_size", s.expert_ffn},
              {"rms_norm_eps", 1e-5}, {"rope_theta", 1e6}, {"sliding_window", nullptr},
              {"head_dim", s.head_dim ? json(s.head_dim) : json(nullptr)}});
  } else if (a == "Qwen2MoeForCausalLM") {  // transformers-5 layout
    c.update({{"model_type", "qwen2_moe"}, {"num_experts", s.experts}, {"moe_intermediate_size", s.expert_ffn},
              {"intermediate_size", s.dense_ffn}, {"shared_expert_intermediate_size", s.shared_ffn},
              {"norm_topk_prob", false}, {"decoder_sparse_step", 1}, {"mlp_only_layers", s.mlp_only_layers},
              {"qkv_bias", true}, {"use_sliding_window", false}, {"sliding_window", 4096}, {"rms_norm_eps", 1e-6},
              {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e6}}}});
  } else if (a == "Qwen3MoeForCausalLM") {
    c.update({{"model_type", "qwen3_moe"}, {"num_experts", s.experts}, {"moe_intermediate_size", s.expert_ffn},
              {"intermediate_size", s.dense_ffn}, {"head_dim", head_dim_of(s)}, {"norm_topk_prob", true},
              {"decoder_sparse_step", 1}, {"mlp_only_layers", s.mlp_only_layers}, {"attention_bias", false},
              {"use_sliding_window", false}, {"sliding_window", nullptr}, {"rms_norm_eps", 1e-6},
              {"rope_theta", 1e6}, {"rope_scaling", nullptr}});
  } else if (a == "DeepseekV3ForCausalLM") {
    c.update({{"model_type", "deepseek_v3"}, {"n_routed_experts", s.experts}, {"moe_intermediate_size", s.expert_ffn},
              {"intermediate_size", s.dense_ffn}, {"n_shared_experts", s.shared_experts},
              {"first_k_dense_replace", s.first_dense}, {"n_group", s.groups}, {"topk_group", s.topk_groups},
              {"routed_scaling_factor", 2.5}, {"norm_topk_prob", true},
              {"q_lora_rank", s.q_lora ? json(s.q_lora) : json(nullptr)}, {"kv_lora_rank", s.kv_lora},
              {"qk_nope_head_dim", s.qk_nope}, {"qk_rope_head_dim", s.qk_rope}, {"v_head_dim", s.v_head},
              {"rope_interleave", true}, {"attention_bias", false}, {"rms_norm_eps", 1e-6},
              {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}});
  } else {
    c.update({{"model_type", "olmoe"}, {"num_experts", s.experts}, {"intermediate_size", s.expert_ffn},
              {"norm_topk_prob", false}, {"clip_qkv", 8.0}, {"attention_bias", false}, {"rms_norm_eps", 1e-5},
              {"rope_theta", 10000.0}});
  }
  c.update(s.config_overrides);
  return c;
}

Error write_synthetic_checkpoint(const std::string &directory, const SyntheticCheckpointSpec &s) {
  std::filesystem::create_directories(directory);
  write_text(directory + "/config.json", synthetic_config(s).dump(2));
  write_text(directory + "/generation_config.json", json({{"bos_token_id", 1}, {"eos_token_id", 2}}).dump(2));
  write_text(directory + "/tokenizer.json", tokenizer_json().dump(2, ' ', /*ensure_ascii=*/false));
  json tokenizer_config = {{"add_bos_token", true},
                           {"add_eos_token", false},
                           {"bos_token", "<s>"},
                           {"eos_token", {{"__type", "AddedToken"}, {"content", "</s>"}}},
                           {"pad_token", nullptr},
                           {"chat_template", "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"}};
  write_text(directory + "/tokenizer_config.json", tokenizer_config.dump(2));

  std::vector<SafetensorsEntry> tensors = synthetic_tensors(s);
  if (s.edit_tensors) s.edit_tensors(tensors);
  const uint32_t seed = s.seed;
  auto fill_range = [seed](const SafetensorsEntry &t, uint64_t offset, unsigned char *out, size_t bytes) {
    size_t width = t.dtype == "F32" ? 4 : (t.dtype == "F16" || t.dtype == "BF16") ? 2 : 1;
    if (width == 1) {  // a dtype the converter refuses: any bytes will do
      std::memset(out, 0x3C, bytes);
      return;
    }
    uint64_t h = name_hash(t.name, seed), first = offset / width;
    for (size_t i = 0; i < bytes / width; ++i) {
      float v = value_from_hash(splitmix64(h + first + i));
      if (width == 4) {
        std::memcpy(out + 4 * i, &v, 4);
      } else {
        uint16_t half = t.dtype == "F16" ? image::f32_to_f16(v) : image::f32_to_bf16(v);
        std::memcpy(out + 2 * i, &half, 2);
      }
    }
  };

  const size_t shards = std::max<size_t>(1, s.shards);
  json weight_map = json::object();
  for (size_t k = 0; k < shards; ++k) {
    size_t begin = tensors.size() * k / shards, end = tensors.size() * (k + 1) / shards;
    std::vector<SafetensorsEntry> part(tensors.begin() + static_cast<ptrdiff_t>(begin),
                                       tensors.begin() + static_cast<ptrdiff_t>(end));
    char name[64];
    if (shards == 1) std::snprintf(name, sizeof name, "model.safetensors");
    else std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, shards);
    for (const SafetensorsEntry &t : part) weight_map[t.name] = name;
    auto fill = [&](size_t index, uint64_t offset, unsigned char *out, size_t bytes) {
      fill_range(part[index], offset, out, bytes);
    };
    if (Error e = write_safetensors(directory + "/" + name, part, fill, {{"format", "pt"}})) return e;
  }
  if (shards > 1)
    write_text(directory + "/model.safetensors.index.json", json({{"metadata", json::object()}, {"weight_map", weight_map}}).dump(2));
  return {};
}

}  // namespace colibri::testing

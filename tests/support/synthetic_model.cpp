// tests/support/synthetic_model.cpp — complete model images for tests (see the header).
#include "support/synthetic_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "image/dtype_convert.h"
#include "model/header_fields.h"
#include "model/tensor_names.h"

namespace colibri::testing {

namespace names = model::names;

model::ModelConfig tiny_model_config() {
  model::ModelConfig c;
  c.family = model::kFamilyMixtral;
  c.hf_architecture = "MixtralForCausalLM";
  c.vocab_size = 40;
  c.hidden_size = 64;
  c.layer_count = 2;
  c.head_count = 4;
  c.kv_head_count = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 256;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.expert_count = 4;
  c.expert_ffn_size = 32;
  c.top_k = 2;
  c.layer_is_moe = {1, 1};
  return c;
}

std::string tiny_tokenizer_json(uint64_t vocab) {
  // Ids 0..2 are special tokens, then single letters, then pairs "ab", "cd", ... as merges.
  nlohmann::json v = nlohmann::json::object();
  nlohmann::json merges = nlohmann::json::array();
  nlohmann::json added = nlohmann::json::array();
  const char *specials[] = {"<unk>", "<s>", "</s>"};
  uint64_t id = 0;
  for (const char *s : specials) {
    v[s] = id;
    added.push_back({{"id", id}, {"content", s}, {"special", true}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}});
    ++id;
  }
  for (char ch = 'a'; ch <= 'z' && id < vocab; ++ch) v[std::string(1, ch)] = id++;
  for (char ch = 'a'; ch + 1 <= 'z' && id < vocab; ch += 2) {
    const std::string a(1, ch), b(1, static_cast<char>(ch + 1));
    v[a + b] = id++;
    merges.push_back(a + " " + b);
  }
  nlohmann::json j = {{"version", "1.0"},
                      {"added_tokens", added},
                      {"normalizer", nullptr},
                      {"pre_tokenizer", nullptr},
                      {"post_processor", nullptr},
                      {"decoder", nullptr},
                      {"model", {{"type", "BPE"}, {"unk_token", "<unk>"}, {"vocab", v}, {"merges", merges}}}};
  return j.dump();
}

ModelImageParts model_parts(const model::ModelConfig &c, image::DType dtype, uint32_t group_size) {
  ModelImageParts p;
  auto add = [&](const std::string &name, std::vector<uint64_t> shape) {
    names::StoragePolicy policy;
    policy.requested = dtype;
    policy.group_size = group_size;
    const names::StorageChoice choice = names::storage_choice(policy, name, static_cast<uint32_t>(shape.size()), shape.back());
    p.tensors.push_back({name, choice.dtype, choice.group_size, std::move(shape)});
  };
  const uint64_t H = c.hidden_size, Q = c.head_count * c.head_dim, KV = c.kv_head_count * c.head_dim;
  add(names::kTokenEmbedding, {c.vocab_size, H});
  for (uint64_t l = 0; l < c.layer_count; ++l) {
    auto n = [&](const char *role) { return names::layer_tensor(l, role); };
    add(n(names::kAttnNorm), {H});
    add(n(names::kAttnQ), {Q, H});
    add(n(names::kAttnK), {KV, H});
    add(n(names::kAttnV), {KV, H});
    add(n(names::kAttnOutput), {H, Q});
    if (c.attention_bias) {
      add(n(names::kAttnQBias), {Q});
      add(n(names::kAttnKBias), {KV});
      add(n(names::kAttnVBias), {KV});
    }
    if (c.qk_norm == "per_head") {
      add(n(names::kAttnQNorm), {c.head_dim});
      add(n(names::kAttnKNorm), {c.head_dim});
    } else if (c.qk_norm == "full") {
      add(n(names::kAttnQNorm), {Q});
      add(n(names::kAttnKNorm), {KV});
    }
    add(n(names::kFfnNorm), {H});
    if (l < c.layer_is_moe.size() && c.layer_is_moe[l]) {
      const uint64_t E = c.expert_count, F = c.expert_ffn_size, S = c.shared_expert_ffn_size;
      add(n(names::kRouter), {E, H});
      add(n(names::kExpertsGate), {E, F, H});
      add(n(names::kExpertsUp), {E, F, H});
      add(n(names::kExpertsDown), {E, H, F});
      if (S) {
        add(n(names::kSharedGate), {S, H});
        add(n(names::kSharedUp), {S, H});
        add(n(names::kSharedDown), {H, S});
        if (c.shared_expert_gate) add(n(names::kSharedExpertGate), {1, H});
      }
    } else {
      add(n(names::kDenseGate), {c.dense_ffn_size, H});
      add(n(names::kDenseUp), {c.dense_ffn_size, H});
      add(n(names::kDenseDown), {H, c.dense_ffn_size});
    }
  }
  add(names::kOutputNorm, {H});
  if (!c.tie_word_embeddings) add(names::kOutput, {c.vocab_size, H});

  p.metadata = {{"colibri_format", 1},
                {"model", c.to_json()},
                {"tokenizer",
                 {{"json", tiny_tokenizer_json(c.vocab_size)},
                  {"chat_template", "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"},
                  {"bos_token_id", 1},
                  {"eos_token_ids", {2}},
                  {"pad_token_id", nullptr},
                  {"bos_token", "<s>"},
                  {"eos_token", "</s>"},
                  {"add_bos_token", true},
                  {"add_eos_token", false}}},
                {"provenance", {{"converter", "tests/support/synthetic_model"}}}};
  p.header = model::header_fields(c, p.tensors);
  return p;
}

Error write_model_parts(const std::string &path, const ModelImageParts &parts, uint32_t seed) {
  image::WriterOptions options;
  options.alignment = parts.alignment;
  options.overwrite = true;
  for (const std::string &name : parts.nan_tensors)
    if (std::none_of(parts.tensors.begin(), parts.tensors.end(), [&](const image::TensorSpec &t) { return t.name == name; }))
      return make_error(ErrorKind::InvalidArgument, "nan_tensors: the model has no tensor " + name);
  image::ImageWriter writer;
  if (Error e = writer.begin(path, options, parts.header, parts.tensors, parts.metadata_text.empty() ? parts.metadata.dump() : parts.metadata_text)) return e;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<float> row;
  std::vector<unsigned char> encoded;
  for (const image::TensorSpec &t : parts.tensors) {
    const uint64_t cols = t.shape.back();
    uint64_t rows = 1;
    for (size_t d = 0; d + 1 < t.shape.size(); ++d) rows *= t.shape[d];
    // Scaled by 1/sqrt(cols) so that activations stay O(1) through the layers.
    const float scale = 1.0f / std::sqrt(static_cast<float>(cols));
    row.resize(cols);
    encoded.resize(image::row_bytes(t.dtype, t.group_size, cols));
    const bool nan = std::find(parts.nan_tensors.begin(), parts.nan_tensors.end(), t.name) != parts.nan_tensors.end();
    for (uint64_t r = 0; r < rows; ++r) {
      for (float &v : row) v = t.shape.size() == 1 ? 1.0f + 0.1f * normal(rng) : 2.0f * scale * normal(rng);
      if (nan) std::fill(row.begin(), row.end(), std::numeric_limits<float>::quiet_NaN());
      if (image::is_block_dtype(t.dtype)) image::quantize_row(t.dtype, t.group_size, row.data(), cols, encoded.data());
      else image::encode_floats(t.dtype, row.data(), cols, encoded.data());
      if (Error e = writer.append(encoded.data(), encoded.size())) return e;
    }
  }
  return writer.finish();
}

Error write_synthetic_model(const std::string &path, const model::ModelConfig &config, image::DType dtype, uint32_t seed) {
  return write_model_parts(path, model_parts(config, dtype), seed);
}

std::string metadata_with_raw_member(const nlohmann::json &metadata, const std::string &raw_member) {
  std::string text = metadata.dump();
  text.pop_back();  // the closing brace
  return text + ", " + raw_member + "}";
}

}  // namespace colibri::testing

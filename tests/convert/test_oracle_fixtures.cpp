// tests/convert/test_oracle_fixtures.cpp — the committed transformers checkpoints
// (tests/fixtures/oracle/<case>, written by tools/oracle/make_fixtures.py) convert to images
// with the right hyper-parameters, routing semantics and special tokens; every tensor holds
// exactly its checkpoint bytes (f32 -> f32); and a re-sharded copy gives identical tensors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "convert/convert_test_support.h"
#include "convert/expected_mapping.h"
#include "convert/safetensors_writer.h"
#include "model/config.h"
#include "model/model.h"
#include "model/tensor_names.h"
#include "modeltool/convert/families.h"
#include "modeltool/convert/safetensors.h"

using namespace colibri;
using nlohmann::json;

namespace {

struct Expected {
  const char *name;
  const char *architecture;
  model::ModelConfig config;  // the fields checked below
  json tokenizer;             // bos_token_id, eos_token_ids, pad_token_id, bos_token, eos_token
};

model::ModelConfig make(const char *family, uint64_t layers, uint64_t kv_heads, uint64_t head_dim, uint64_t experts,
                        uint64_t top_k, uint64_t expert_ffn, bool renormalise, bool tied, double theta, double eps) {
  model::ModelConfig c;
  c.family = family;
  c.vocab_size = 512;
  c.hidden_size = 64;
  c.head_count = 4;
  c.layer_count = layers;
  c.kv_head_count = kv_heads;
  c.head_dim = head_dim;
  c.expert_count = experts;
  c.top_k = top_k;
  c.expert_ffn_size = expert_ffn;
  c.norm_topk_prob = renormalise;
  c.tie_word_embeddings = tied;
  c.rope_theta = theta;
  c.rms_norm_eps = eps;
  c.max_position_embeddings = 4096;
  c.layer_is_moe.assign(layers, 1);
  return c;
}

std::vector<Expected> expected_cases() {
  std::vector<Expected> cases;
  json llama_tokens = {{"bos_token_id", 1}, {"eos_token_ids", {2}}, {"pad_token_id", nullptr}, {"bos_token", "<s>"},
                       {"eos_token", "</s>"}};
  cases.push_back({"mixtral_gqa", "MixtralForCausalLM",
                   make("mixtral", 2, 2, 16, 8, 2, 32, true, false, 1e4, 1e-5), llama_tokens});
  cases.push_back({"mixtral_tied_top3", "MixtralForCausalLM",
                   make("mixtral", 3, 4, 16, 5, 3, 32, true, true, 1e6, 1e-6), llama_tokens});

  Expected qwen2{"qwen2_moe_shared", "Qwen2MoeForCausalLM", make("qwen2_moe", 3, 2, 16, 6, 2, 32, false, false, 1e6, 1e-6),
                 {{"bos_token_id", nullptr}, {"eos_token_ids", {511}}, {"pad_token_id", 509}, {"bos_token", nullptr},
                  {"eos_token", "<|im_end|>"}}};
  qwen2.config.attention_bias = true;
  qwen2.config.shared_expert_ffn_size = 32;
  qwen2.config.shared_expert_gate = true;
  qwen2.config.dense_ffn_size = 48;
  qwen2.config.layer_is_moe = {1, 0, 1};  // mlp_only_layers [1]
  cases.push_back(qwen2);

  Expected qwen3{"qwen3_moe_qknorm", "Qwen3MoeForCausalLM", make("qwen3_moe", 2, 2, 32, 8, 2, 24, true, false, 1e6, 1e-6),
                 {{"bos_token_id", nullptr}, {"eos_token_ids", {511, 509}}, {"pad_token_id", 509}, {"bos_token", nullptr},
                  {"eos_token", "<|im_end|>"}}};
  qwen3.config.qk_norm = "per_head";
  cases.push_back(qwen3);

  Expected olmoe{"olmoe_clip", "OlmoeForCausalLM", make("olmoe", 2, 2, 16, 8, 2, 32, false, false, 1e4, 1e-5),
                 {{"bos_token_id", nullptr}, {"eos_token_ids", {509}}, {"pad_token_id", 509}, {"bos_token", nullptr},
                  {"eos_token", "<|endoftext|>"}}};
  olmoe.config.qk_norm = "full";
  olmoe.config.clip_qkv = 2.0;
  cases.push_back(olmoe);

  Expected glm{"glm4_moe_groups", "Glm4MoeForCausalLM", make("glm4_moe", 3, 2, 32, 8, 3, 24, true, false, 1e4, 1e-5),
               {{"bos_token_id", nullptr}, {"eos_token_ids", {511, 509}}, {"pad_token_id", 509}, {"bos_token", nullptr},
                {"eos_token", "<|im_end|>"}}};
  glm.config.attention_bias = true;
  glm.config.qk_norm = "per_head";
  glm.config.rotary_dim = 16;
  glm.config.router_score = "sigmoid";
  glm.config.router_select_bias = true;
  glm.config.expert_group_count = 4;
  glm.config.expert_group_top = 2;
  glm.config.topk_norm_epsilon = 1e-20;
  glm.config.routed_scaling_factor = 2.5;
  glm.config.shared_expert_ffn_size = 24;
  glm.config.dense_ffn_size = 48;
  glm.config.layer_is_moe = {0, 1, 1};  // first_k_dense_replace 1
  cases.push_back(glm);

  Expected minimax{"minimax_m2_sigmoid", "MiniMaxM2ForCausalLM",
                   make("minimax_m2", 2, 2, 32, 8, 2, 24, true, false, 5e6, 1e-6),
                   {{"bos_token_id", nullptr}, {"eos_token_ids", {509}}, {"pad_token_id", 509}, {"bos_token", nullptr},
                    {"eos_token", "<|endoftext|>"}}};
  minimax.config.qk_norm = "full";
  minimax.config.rotary_dim = 16;
  minimax.config.router_score = "sigmoid";
  minimax.config.router_select_bias = true;
  cases.push_back(minimax);

  Expected yarn{"qwen3_moe_yarn", "Qwen3MoeForCausalLM", make("qwen3_moe", 2, 2, 32, 8, 2, 24, true, false, 1e6, 1e-6),
                {{"bos_token_id", nullptr}, {"eos_token_ids", {511, 509}}, {"pad_token_id", 509}, {"bos_token", nullptr},
                 {"eos_token", "<|im_end|>"}}};
  yarn.config.qk_norm = "per_head";
  yarn.config.rope_scaling = "yarn";
  yarn.config.rope_factor = 4.0;
  yarn.config.rope_original_max_positions = 1024;
  yarn.config.rope_attention_factor = 0.1 * std::log(4.0) + 1.0;
  cases.push_back(yarn);
  return cases;
}

std::string fixture_dir(const char *name) { return std::string(COLIBRI_FIXTURES_DIR) + "/oracle/" + name; }

void check_config(const model::ModelConfig &found, const Expected &expected) {
  const model::ModelConfig &e = expected.config;
  CHECK(found.family == e.family);
  CHECK(found.hf_architecture == expected.architecture);
  CHECK(found.vocab_size == e.vocab_size);
  CHECK(found.hidden_size == e.hidden_size);
  CHECK(found.layer_count == e.layer_count);
  CHECK(found.head_count == e.head_count);
  CHECK(found.kv_head_count == e.kv_head_count);
  CHECK(found.head_dim == e.head_dim);
  CHECK(found.max_position_embeddings == e.max_position_embeddings);
  CHECK(found.rms_norm_eps == e.rms_norm_eps);
  CHECK(found.rope_theta == e.rope_theta);
  CHECK(found.tie_word_embeddings == e.tie_word_embeddings);
  CHECK(found.attention_bias == e.attention_bias);
  CHECK(found.qk_norm == e.qk_norm);
  CHECK(found.clip_qkv == e.clip_qkv);
  CHECK(found.expert_count == e.expert_count);
  CHECK(found.expert_ffn_size == e.expert_ffn_size);
  CHECK(found.top_k == e.top_k);
  CHECK(found.rotary_dim == (e.rotary_dim ? e.rotary_dim : e.head_dim));
  CHECK(found.router_score == e.router_score);
  CHECK(found.rope_scaling == e.rope_scaling);
  CHECK(found.rope_factor == e.rope_factor);
  CHECK(found.rope_original_max_positions == e.rope_original_max_positions);
  CHECK(found.rope_beta_fast == e.rope_beta_fast);
  CHECK(found.rope_beta_slow == e.rope_beta_slow);
  CHECK(found.rope_truncate == e.rope_truncate);
  CHECK(found.rope_attention_factor == Approx(e.rope_attention_factor).epsilon(1e-15));
  CHECK(found.router_select_bias == e.router_select_bias);
  CHECK(found.expert_group_count == e.expert_group_count);
  CHECK(found.expert_group_top == e.expert_group_top);
  CHECK(found.topk_norm_epsilon == e.topk_norm_epsilon);
  CHECK(found.routed_scaling_factor == e.routed_scaling_factor);
  CHECK(found.norm_topk_prob == e.norm_topk_prob);
  CHECK(found.shared_expert_ffn_size == e.shared_expert_ffn_size);
  CHECK(found.shared_expert_gate == e.shared_expert_gate);
  CHECK(found.dense_ffn_size == e.dense_ffn_size);
  CHECK(found.layer_is_moe == e.layer_is_moe);
}

// Every image tensor's bytes are its sources' bytes, concatenated; every source is used.
void check_bytes_match_checkpoint(const image::Image &img, const std::string &dir, const Expected &expected) {
  modeltool::convert::SafetensorsCheckpoint checkpoint;
  REQUIRE_FALSE(modeltool::convert::SafetensorsCheckpoint::open(dir, &checkpoint));
  std::set<std::string> unused;
  for (const auto &t : checkpoint.tensors()) unused.insert(t.name);
  for (const image::TensorInfo &t : img.tensors()) {
    INFO(t.name);
    REQUIRE(t.dtype == image::DType::F32);
    uint64_t offset = 0;
    for (const std::string &name :
         testing::expected_hf_sources(expected.architecture, expected.config.expert_count, t.name)) {
      const modeltool::convert::SafetensorsTensor *source = checkpoint.find(name);
      REQUIRE(source);
      REQUIRE(source->dtype == "F32");
      REQUIRE(offset + source->byte_size() <= t.size);
      CHECK(std::memcmp(img.data(t) + offset, checkpoint.data(*source), source->byte_size()) == 0);
      offset += source->byte_size();
      unused.erase(name);
    }
    CHECK(offset == t.size);
  }
  CHECK(unused.empty());
}

}  // namespace

TEST_CASE("every oracle fixture converts with its hyper-parameters, tokens and bytes", "[convert][oracle]") {
  for (const Expected &expected : expected_cases()) {
    SECTION(expected.name) {
      const std::string dir = fixture_dir(expected.name);
      REQUIRE(std::filesystem::exists(dir + "/config.json"));
      testing::ScopedTempDir out("oracle");
      Error e = testing::convert(dir, out / "m.colibri");
      INFO(e.message);
      REQUIRE_FALSE(e);
      auto img = testing::open_image(out / "m.colibri");
      REQUIRE_FALSE(img->verify_all(1));

      model::ModelConfig config;
      REQUIRE_FALSE(model::ModelConfig::from_json(img->metadata()["model"], &config));
      check_config(config, expected);

      const json &tok = img->metadata()["tokenizer"];
      for (const auto &[key, value] : expected.tokenizer.items()) {
        INFO(key);
        CHECK(tok[key] == value);
      }
      CHECK(tok["json"] == testing::read_text(dir + "/tokenizer.json"));
      CHECK(tok["chat_template"].is_string());
      CHECK(img->metadata()["provenance"]["source_dtypes"] == json({"f32"}));
      CHECK((img->find("output") == nullptr) == expected.config.tie_word_embeddings);
      check_bytes_match_checkpoint(*img, dir, expected);
    }
  }
}

TEST_CASE("a re-sharded copy of each oracle fixture converts to identical tensors", "[convert][oracle]") {
  for (const Expected &expected : expected_cases()) {
    SECTION(expected.name) {
      testing::ScopedTempDir tmp("oracle-shards");
      REQUIRE_FALSE(testing::shard_checkpoint(fixture_dir(expected.name), tmp / "sharded", 3));
      REQUIRE(std::filesystem::exists(tmp / "sharded/model-00003-of-00003.safetensors"));
      REQUIRE_FALSE(testing::convert(fixture_dir(expected.name), tmp / "single.colibri"));
      REQUIRE_FALSE(testing::convert(tmp / "sharded", tmp / "sharded.colibri"));
      auto a = testing::open_image(tmp / "single.colibri"), b = testing::open_image(tmp / "sharded.colibri");
      REQUIRE(a->tensors().size() == b->tensors().size());
      for (size_t i = 0; i < a->tensors().size(); ++i) {
        const image::TensorInfo &x = a->tensors()[i], &y = b->tensors()[i];
        INFO(x.name);
        CHECK(x.name == y.name);
        CHECK(x.dtype == y.dtype);
        CHECK(x.shape_string() == y.shape_string());
        CHECK(x.size == y.size);
        CHECK(x.checksum == y.checksum);
        CHECK(std::memcmp(a->data(x), b->data(y), x.size) == 0);
      }
      CHECK(a->metadata()["model"] == b->metadata()["model"]);
      CHECK(a->metadata()["tokenizer"] == b->metadata()["tokenizer"]);
    }
  }
}

TEST_CASE("every oracle fixture also converts to f16, bf16 and q8 images that verify", "[convert][oracle]") {
  for (const Expected &expected : expected_cases()) {
    SECTION(expected.name) {
      testing::ScopedTempDir tmp("oracle-dtypes");
      for (image::DType dtype : {image::DType::F16, image::DType::BF16, image::DType::Q8}) {
        std::string out = tmp / (std::string(image::dtype_name(dtype)) + ".colibri");
        REQUIRE_FALSE(testing::convert(fixture_dir(expected.name), out, dtype));
        auto img = testing::open_image(out);
        REQUIRE_FALSE(img->verify_all(1));
        // The first MoE layer (GLM-4.5's layer 0 is dense).
        const auto &moe = expected.config.layer_is_moe;
        const uint64_t layer = static_cast<uint64_t>(std::find(moe.begin(), moe.end(), 1) - moe.begin());
        const image::TensorInfo *experts = img->find(model::names::layer_tensor(layer, "ffn_gate_exps"));
        const image::TensorInfo *router = img->find(model::names::layer_tensor(layer, "ffn_gate_inp"));
        REQUIRE(experts);
        REQUIRE(router);
        CHECK(experts->dtype == dtype);
        CHECK(router->dtype == image::DType::F32);
        if (expected.config.router_select_bias) {
          const image::TensorInfo *bias = img->find(model::names::layer_tensor(layer, "ffn_exp_probs_b"));
          REQUIRE(bias);
          CHECK(bias->dtype == image::DType::F32);  // a vector: never quantised
        }
      }
    }
  }
}

TEST_CASE("GLM-4.5's multi-token-prediction layer tensors are kept in the image as mtp.<j>.*, never bound", "[convert][oracle]") {
  // The glm4_moe_groups fixture (num_nextn_predict_layers 1, 3 layers) plus two tensors of an
  // MTP layer 3, as the hub checkpoints carry them; a layer 4 tensor stays unexpected.
  testing::ScopedTempDir tmp("oracle-mtp");
  const std::string source = fixture_dir("glm4_moe_groups");
  modeltool::convert::SafetensorsCheckpoint checkpoint;
  REQUIRE_FALSE(modeltool::convert::SafetensorsCheckpoint::open(source, &checkpoint));
  auto write_with = [&](const std::string &dir, const std::vector<std::string> &extra) {
    std::filesystem::create_directories(dir);
    for (const char *file : {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"})
      std::filesystem::copy_file(source + "/" + file, dir + "/" + file);
    std::vector<testing::SafetensorsEntry> entries;
    for (const auto &t : checkpoint.tensors()) entries.push_back({t.name, t.dtype, t.shape});
    for (const std::string &name : extra) entries.push_back({name, "F32", {64}});
    return testing::write_safetensors(dir + "/model.safetensors", entries,
                                      [&](size_t index, uint64_t offset, unsigned char *out, size_t bytes) {
                                        if (index < checkpoint.tensors().size())
                                          std::memcpy(out, checkpoint.data(checkpoint.tensors()[index]) + offset, bytes);
                                        else
                                          std::memset(out, 0, bytes);
                                      });
  };
  REQUIRE_FALSE(write_with(tmp / "mtp", {"model.layers.3.enorm.weight", "model.layers.3.hnorm.weight"}));
  REQUIRE_FALSE(testing::convert(tmp / "mtp", tmp / "mtp.colibri"));
  REQUIRE_FALSE(testing::convert(source, tmp / "plain.colibri"));
  auto with_mtp = testing::open_image(tmp / "mtp.colibri"), plain = testing::open_image(tmp / "plain.colibri");
  REQUIRE(with_mtp->tensors().size() == plain->tensors().size() + 2);
  CHECK(with_mtp->metadata()["model"]["mtp_layer_count"] == 1);
  CHECK(with_mtp->metadata()["model"] == plain->metadata()["model"]);
  // After every other tensor, sorted by name, stored like any vector (f32), checksummed.
  const size_t n = plain->tensors().size();
  CHECK(with_mtp->tensors()[n].name == "mtp.0.enorm.weight");
  CHECK(with_mtp->tensors()[n + 1].name == "mtp.0.hnorm.weight");
  CHECK(with_mtp->tensors()[n].dtype == image::DType::F32);
  CHECK_FALSE(with_mtp->verify_all(1));
  // The model binds without them (a speculative decoder's) and computes what the plain image does.
  Error load_error;
  auto model = model::Model::from_image(testing::open_image(tmp / "mtp.colibri"), &load_error);
  INFO(load_error.message);
  CHECK(model);

  REQUIRE_FALSE(write_with(tmp / "beyond", {"model.layers.4.enorm.weight"}));
  Error e = testing::convert(tmp / "beyond", tmp / "beyond.colibri");
  CHECK(e.kind == ErrorKind::Corrupt);
  CHECK_THAT(e.message, Catch::Contains("model.layers.4.enorm.weight"));
}

TEST_CASE("gpt-oss converts: fused experts sliced and transposed, biases, sinks, sliding layers, yarn", "[convert][oracle]") {
  const std::string dir = fixture_dir("gpt_oss_sinks");
  testing::ScopedTempDir tmp("oracle-gpt-oss");
  Error e = testing::convert(dir, tmp / "m.colibri");
  INFO(e.message);
  REQUIRE_FALSE(e);
  auto img = testing::open_image(tmp / "m.colibri");
  REQUIRE_FALSE(img->verify_all(1));
  model::ModelConfig c;
  REQUIRE_FALSE(model::ModelConfig::from_json(img->metadata()["model"], &c));
  CHECK(c.family == "gpt_oss");
  CHECK(c.hf_architecture == "GptOssForCausalLM");
  CHECK(c.layer_count == 3);
  CHECK(c.head_dim == 16);
  CHECK(c.expert_count == 8);
  CHECK(c.top_k == 2);
  CHECK(c.expert_ffn_size == 32);
  CHECK(c.router_score == "softmax");
  CHECK(c.norm_topk_prob);  // softmax over the top-k logits
  CHECK(c.attention_bias);
  CHECK(c.attention_output_bias);
  CHECK(c.attention_sinks);
  CHECK(c.sliding_window == 4);
  CHECK(c.layer_is_sliding == std::vector<uint8_t>{1, 0, 1});
  CHECK(c.router_bias);
  CHECK(c.expert_bias);
  CHECK(c.expert_activation == "swiglu_clamped");
  CHECK(c.swiglu_limit == 1.5);
  CHECK(c.swiglu_alpha == 1.702);
  CHECK(c.rope_scaling == "yarn");
  CHECK(c.rope_theta == 150000.0);
  CHECK(c.rope_factor == 32.0);
  CHECK(c.rope_original_max_positions == 4096);
  CHECK_FALSE(c.rope_truncate);
  CHECK(c.rope_attention_factor == Approx(0.1 * std::log(32.0) + 1.0).epsilon(1e-15));
  CHECK(c.max_position_embeddings == 131072);

  // Values, by the transformers layout written out here independently of the converter's
  // table: gate_up_proj [E, hidden, 2F] holds gate in the even columns and up in the odd ones
  // (x · W), down_proj [E, F, hidden]; the image holds [out, in] matrices.
  modeltool::convert::SafetensorsCheckpoint checkpoint;
  REQUIRE_FALSE(modeltool::convert::SafetensorsCheckpoint::open(dir, &checkpoint));
  auto source = [&](const std::string &name) {
    const modeltool::convert::SafetensorsTensor *t = checkpoint.find(name);
    REQUIRE(t);
    REQUIRE(t->dtype == "F32");
    return reinterpret_cast<const float *>(checkpoint.data(*t));
  };
  auto stored = [&](const std::string &name) {
    const image::TensorInfo *t = img->find(name);
    REQUIRE(t);
    REQUIRE(t->dtype == image::DType::F32);
    return reinterpret_cast<const float *>(img->data(*t));
  };
  const size_t E = 8, F = 32, H = 64;
  size_t mismatches = 0;
  for (uint64_t l = 0; l < 3; ++l) {
    const std::string hf = "model.layers." + std::to_string(l) + ".mlp.experts.";
    const float *gate_up = source(hf + "gate_up_proj"), *gate_up_bias = source(hf + "gate_up_proj_bias");
    const float *down = source(hf + "down_proj"), *down_bias = source(hf + "down_proj_bias");
    auto blk = [&](const char *role) { return model::names::layer_tensor(l, role); };
    const float *gate = stored(blk("ffn_gate_exps")), *up = stored(blk("ffn_up_exps")), *down_t = stored(blk("ffn_down_exps"));
    const float *gate_b = stored(blk("ffn_gate_exps_bias")), *up_b = stored(blk("ffn_up_exps_bias"));
    const float *down_b = stored(blk("ffn_down_exps_bias"));
    for (size_t x = 0; x < E; ++x) {
      for (size_t f = 0; f < F; ++f) {
        for (size_t h = 0; h < H; ++h) {
          mismatches += gate[(x * F + f) * H + h] != gate_up[(x * H + h) * 2 * F + 2 * f];
          mismatches += up[(x * F + f) * H + h] != gate_up[(x * H + h) * 2 * F + 2 * f + 1];
          mismatches += down_t[(x * H + h) * F + f] != down[(x * F + f) * H + h];
        }
        mismatches += gate_b[x * F + f] != gate_up_bias[x * 2 * F + 2 * f];
        mismatches += up_b[x * F + f] != gate_up_bias[x * 2 * F + 2 * f + 1];
      }
      for (size_t h = 0; h < H; ++h) mismatches += down_b[x * H + h] != down_bias[x * H + h];
    }
    const std::string attn = "model.layers." + std::to_string(l) + ".self_attn.";
    CHECK(std::memcmp(stored(blk("attn_sinks")), source(attn + "sinks"), 4 * sizeof(float)) == 0);
    CHECK(std::memcmp(stored(blk("attn_output_bias")), source(attn + "o_proj.bias"), H * sizeof(float)) == 0);
    CHECK(std::memcmp(stored(blk("ffn_gate_inp_bias")), source("model.layers." + std::to_string(l) + ".mlp.router.bias"),
                      E * sizeof(float)) == 0);
  }
  CHECK(mismatches == 0);

  // q8: the experts quantise, their biases (rank 2) stay f32 vectors.
  REQUIRE_FALSE(testing::convert(dir, tmp / "q8.colibri", image::DType::Q8));
  auto q8 = testing::open_image(tmp / "q8.colibri");
  CHECK(q8->find("blk.0.ffn_gate_exps")->dtype == image::DType::Q8);
  CHECK(q8->find("blk.0.ffn_gate_exps_bias")->dtype == image::DType::F32);
  CHECK(q8->find("blk.0.ffn_down_exps_bias")->dtype == image::DType::F32);
  CHECK(q8->find("blk.0.attn_sinks")->dtype == image::DType::F32);
}

TEST_CASE("images of the version-3 families are version 3, and one that says less is refused, naming the version",
          "[convert][oracle][version]") {
  // format.h: glm4_moe, minimax_m2, gpt_oss and deepseek_v3 images carry model semantics that
  // a version-2 build cannot know; the older families' f32 images stay version 1.
  const std::pair<const char *, uint32_t> cases[] = {{"mixtral_gqa", 1},  {"qwen3_moe_qknorm", 1},
                                                     {"glm4_moe_groups", 3}, {"minimax_m2_sigmoid", 3},
                                                     {"gpt_oss_sinks", 3},   {"deepseek_v3_mla", 3}};
  for (const auto &[name, version] : cases) {
    INFO(name);
    testing::ScopedTempDir tmp("oracle-version");
    REQUIRE_FALSE(testing::convert(fixture_dir(name), tmp / "m.colibri"));
    auto bytes = testing::read_file(tmp / "m.colibri");
    image::FileHeader h;
    std::memcpy(&h, bytes.data(), sizeof h);
    CHECK(h.version == version);
    if (version < 3) continue;
    // The same image stamped version 2 (checksum refreshed: only the version is wrong).
    h.version = 2;
    std::memcpy(bytes.data(), &h, sizeof h);
    REQUIRE(testing::refresh_header_checksum(bytes));
    testing::write_file(tmp / "v2.colibri", bytes);
    Error e;
    auto model = model::Model::from_image(testing::open_image(tmp / "v2.colibri"), &e);
    CHECK(model == nullptr);
    CHECK(e.kind == ErrorKind::Corrupt);
    CHECK_THAT(e.message, Catch::Contains("needs image format version 3, but the image says version 2"));
  }
}

TEST_CASE("DeepSeek-V3 converts: MLA's kv_b_proj cut per head (keys transposed), ranks, scale, router", "[convert][oracle]") {
  for (const char *name : {"deepseek_v3_mla", "deepseek_v3_direct_q"}) {
    SECTION(name) {
      const std::string dir = fixture_dir(name);
      const json hf = json::parse(testing::read_text(dir + "/config.json"));
      testing::ScopedTempDir tmp("oracle-deepseek");
      Error e = testing::convert(dir, tmp / "m.colibri");
      INFO(e.message);
      REQUIRE_FALSE(e);
      auto img = testing::open_image(tmp / "m.colibri");
      REQUIRE_FALSE(img->verify_all(1));
      model::ModelConfig c;
      REQUIRE_FALSE(model::ModelConfig::from_json(img->metadata()["model"], &c));
      CHECK(c.family == "deepseek_v3");
      CHECK(c.attention == "mla");
      CHECK(c.q_lora_rank == (hf["q_lora_rank"].is_null() ? 0 : hf["q_lora_rank"].get<uint64_t>()));
      CHECK(c.kv_lora_rank == hf["kv_lora_rank"].get<uint64_t>());
      CHECK(c.qk_nope_head_dim == hf["qk_nope_head_dim"].get<uint64_t>());
      CHECK(c.head_dim == hf["qk_rope_head_dim"].get<uint64_t>());
      CHECK(c.rotary_dim == c.head_dim);
      CHECK(c.v_head_dim == hf["v_head_dim"].get<uint64_t>());
      CHECK(c.rope_interleave == hf["rope_interleave"].get<bool>());
      CHECK(c.kv_head_count == c.head_count);
      CHECK(c.router_score == "sigmoid");
      CHECK(c.router_select_bias);
      CHECK(c.topk_norm_epsilon == 1e-20);
      CHECK(c.expert_group_count == hf["n_group"].get<uint64_t>());
      CHECK(c.routed_scaling_factor == hf["routed_scaling_factor"].get<double>());
      CHECK(c.shared_expert_ffn_size == hf["n_shared_experts"].get<uint64_t>() * hf["moe_intermediate_size"].get<uint64_t>());
      CHECK_FALSE(c.shared_expert_gate);
      // transformers DeepseekV3Attention: qk_head_dim^-1/2, times get_mscale(factor, mscale_all_dim)² under YaRN.
      double scale = 1.0 / std::sqrt(static_cast<double>(c.qk_nope_head_dim + c.head_dim));
      const json &rope = hf["rope_parameters"];
      if (rope["rope_type"] == "yarn") {
        const double m = 0.1 * rope["mscale_all_dim"].get<double>() * std::log(rope["factor"].get<double>()) + 1.0;
        scale *= m * m;
        CHECK(c.rope_attention_factor ==
              Approx((0.1 * rope["mscale"].get<double>() * std::log(rope["factor"].get<double>()) + 1.0) / m).epsilon(1e-15));
      }
      CHECK(c.attention_scale == Approx(scale).epsilon(1e-15));

      // kv_b_proj [heads·(nope + v), kv_lora]: head h's rows h·(nope+v) .. +nope are its key rows,
      // stored transposed as attn_k_b[h] [kv_lora, nope]; the next v rows its value rows, stored
      // as they are in attn_v_b[h] [v, kv_lora].
      modeltool::convert::SafetensorsCheckpoint checkpoint;
      REQUIRE_FALSE(modeltool::convert::SafetensorsCheckpoint::open(dir, &checkpoint));
      const size_t heads = c.head_count, nope = c.qk_nope_head_dim, v = c.v_head_dim, r = c.kv_lora_rank;
      size_t mismatches = 0;
      for (uint64_t l = 0; l < c.layer_count; ++l) {
        const modeltool::convert::SafetensorsTensor *kvb =
            checkpoint.find("model.layers." + std::to_string(l) + ".self_attn.kv_b_proj.weight");
        REQUIRE(kvb);
        const float *w = reinterpret_cast<const float *>(checkpoint.data(*kvb));
        const image::TensorInfo *kb = img->find(model::names::layer_tensor(l, "attn_k_b"));
        const image::TensorInfo *vb = img->find(model::names::layer_tensor(l, "attn_v_b"));
        REQUIRE(kb);
        REQUIRE(vb);
        CHECK((kb->rank == 3 && kb->shape[0] == heads && kb->shape[1] == r && kb->shape[2] == nope));
        CHECK((vb->rank == 3 && vb->shape[0] == heads && vb->shape[1] == v && vb->shape[2] == r));
        const float *k = reinterpret_cast<const float *>(img->data(*kb)), *val = reinterpret_cast<const float *>(img->data(*vb));
        for (size_t h = 0; h < heads; ++h)
          for (size_t i = 0; i < r; ++i) {
            for (size_t j = 0; j < nope; ++j) mismatches += k[(h * r + i) * nope + j] != w[(h * (nope + v) + j) * r + i];
            for (size_t j = 0; j < v; ++j) mismatches += val[(h * v + j) * r + i] != w[(h * (nope + v) + nope + j) * r + i];
          }
        CHECK((img->find(model::names::layer_tensor(l, "attn_q_a")) != nullptr) == (c.q_lora_rank > 0));
        CHECK((img->find(model::names::layer_tensor(l, "attn_q")) != nullptr) == (c.q_lora_rank == 0));
      }
      CHECK(mismatches == 0);
      // q4: the experts 4-bit, the attention matrices (attn_k_b and attn_v_b too) q8f16, norms f32.
      REQUIRE_FALSE(testing::convert(dir, tmp / "q4.colibri", image::DType::Q4));
      auto q4 = testing::open_image(tmp / "q4.colibri");
      CHECK(q4->find("blk.1.attn_k_b")->dtype == image::DType::Q8F16);
      CHECK(q4->find("blk.1.attn_v_b")->dtype == image::DType::Q8F16);
      CHECK(q4->find("blk.1.attn_kv_a_norm")->dtype == image::DType::F32);
      CHECK(q4->find("blk.1.ffn_gate_exps")->dtype == image::DType::Q4);
    }
  }
}

namespace {

// OCP E4M3 ("fn": no infinity, S.1111.111 NaN), written out here independently of the converter.
double e4m3(uint8_t code) {
  const int e = (code >> 3) & 0xF, m = code & 7;
  const double magnitude = e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
  return code & 0x80 ? -magnitude : magnitude;
}

// Writes the deepseek_v3_mla fixture as DeepSeek ships its FP8 checkpoints: every projection of
// rank 2 (not the embeddings, the LM head or the routers) in F8_E4M3 with `<name>_scale_inv`
// block scales (blocks of 32 × 32 here, partial ones at the edges: [80, 64] has 3 × 2 blocks),
// quantization_config fp8 e4m3; and beside it the same checkpoint in f32 holding exactly the
// values the FP8 one means (e4m3 value × block scale). Returns the count of FP8 tensors.
size_t write_fp8_pair(const std::string &fp8_dir, const std::string &f32_dir) {
  const std::string src = fixture_dir("deepseek_v3_mla");
  constexpr uint64_t kBlock = 32;
  modeltool::convert::SafetensorsCheckpoint checkpoint;
  REQUIRE_FALSE(modeltool::convert::SafetensorsCheckpoint::open(src, &checkpoint));
  std::vector<testing::SafetensorsEntry> fp8_entries, f32_entries;
  std::vector<std::vector<unsigned char>> fp8_data, f32_data;
  size_t quantised = 0;
  // The fixture's tensors, plus two of a multi-token-prediction layer 3 (num_nextn_predict_layers
  // 1), as DeepSeek's checkpoints carry it: an FP8 eh_proj with its scales, and a norm.
  struct Source {
    std::string name;
    std::vector<uint64_t> shape;
    std::vector<float> values;
  };
  std::vector<Source> sources;
  for (const auto &t : checkpoint.tensors()) {
    REQUIRE(t.dtype == "F32");
    const float *v = reinterpret_cast<const float *>(checkpoint.data(t));
    sources.push_back({t.name, t.shape, std::vector<float>(v, v + t.byte_size() / 4)});
  }
  sources.push_back({"model.layers.3.eh_proj.weight", {64, 128}, std::vector<float>(64 * 128)});
  sources.push_back({"model.layers.3.enorm.weight", {64}, std::vector<float>(64, 1.0f)});
  for (size_t i = 0; i < 64 * 128; ++i) sources[sources.size() - 2].values[i] = std::sin(0.37f * static_cast<float>(i));
  for (const Source &t : sources) {
    const float *v = t.values.data();
    const bool q = t.shape.size() == 2 && t.name.ends_with("_proj.weight") && t.name.find("embed") == std::string::npos;
    std::vector<unsigned char> raw(reinterpret_cast<const unsigned char *>(v), reinterpret_cast<const unsigned char *>(v + t.values.size()));
    if (!q) {
      fp8_entries.push_back({t.name, "F32", t.shape});
      fp8_data.push_back(raw);
      f32_entries.push_back({t.name, "F32", t.shape});
      f32_data.push_back(raw);
      continue;
    }
    ++quantised;
    const uint64_t rows = t.shape[0], cols = t.shape[1], br = (rows + kBlock - 1) / kBlock, bc = (cols + kBlock - 1) / kBlock;
    std::vector<float> scales(br * bc), meant(rows * cols);
    std::vector<unsigned char> codes(rows * cols);
    for (uint64_t i = 0; i < br; ++i)
      for (uint64_t j = 0; j < bc; ++j) {
        float amax = 0;
        for (uint64_t r = i * kBlock; r < std::min(rows, (i + 1) * kBlock); ++r)
          for (uint64_t c = j * kBlock; c < std::min(cols, (j + 1) * kBlock); ++c) amax = std::max(amax, std::fabs(v[r * cols + c]));
        const float scale = amax > 0 ? amax / 448.0f : 1.0f;
        scales[i * bc + j] = scale;
        for (uint64_t r = i * kBlock; r < std::min(rows, (i + 1) * kBlock); ++r)
          for (uint64_t c = j * kBlock; c < std::min(cols, (j + 1) * kBlock); ++c) {
            int best = 0;
            for (int code = 0; code < 256; ++code)
              if ((code & 0x7F) != 0x7F && std::fabs(e4m3(static_cast<uint8_t>(code)) - v[r * cols + c] / scale) <
                                               std::fabs(e4m3(static_cast<uint8_t>(best)) - v[r * cols + c] / scale))
                best = code;
            codes[r * cols + c] = static_cast<unsigned char>(best);
            meant[r * cols + c] = static_cast<float>(e4m3(static_cast<uint8_t>(best))) * scale;
          }
      }
    fp8_entries.push_back({t.name, "F8_E4M3", t.shape});
    fp8_data.push_back(codes);
    fp8_entries.push_back({t.name + "_scale_inv", "F32", {br, bc}});
    fp8_data.push_back(std::vector<unsigned char>(reinterpret_cast<unsigned char *>(scales.data()),
                                                  reinterpret_cast<unsigned char *>(scales.data() + scales.size())));
    f32_entries.push_back({t.name, "F32", t.shape});
    f32_data.push_back(std::vector<unsigned char>(reinterpret_cast<unsigned char *>(meant.data()),
                                                  reinterpret_cast<unsigned char *>(meant.data() + meant.size())));
  }
  auto write = [&](const std::string &dir, const std::vector<testing::SafetensorsEntry> &entries,
                   const std::vector<std::vector<unsigned char>> &data, bool fp8) {
    std::filesystem::create_directories(dir);
    REQUIRE_FALSE(testing::write_safetensors(dir + "/model.safetensors", entries,
                                             [&](size_t i, uint64_t offset, unsigned char *out, size_t bytes) {
                                               std::memcpy(out, data[i].data() + offset, bytes);
                                             }));
    json config = json::parse(testing::read_text(src + "/config.json"));
    if (fp8)
      config["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
                                       {"weight_block_size", {kBlock, kBlock}}};
    testing::write_text(dir + "/config.json", config.dump(2));
    for (const char *f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
      std::filesystem::copy_file(src + "/" + f, dir + "/" + f);
  };
  write(fp8_dir, fp8_entries, fp8_data, true);
  write(f32_dir, f32_entries, f32_data, false);
  return quantised;
}

}  // namespace

TEST_CASE("a block-scaled FP8 checkpoint (DeepSeek's format) converts to exactly the values it means", "[convert][oracle][fp8]") {
  testing::ScopedTempDir tmp("oracle-fp8");
  const size_t quantised = write_fp8_pair(tmp / "fp8", tmp / "f32");
  CHECK(quantised > 40);  // every layer's projections, the experts' one by one, kv_b_proj among them
  // f32: the FP8 checkpoint's image equals, byte for byte, the image of the f32 checkpoint that
  // holds e4m3 × scale: stacked experts, kv_b_proj cut per head (transposed keys) and all.
  for (image::DType dtype : {image::DType::F32, image::DType::BF16, image::DType::Q4}) {
    INFO(image::dtype_name(dtype));
    const std::string a = tmp / (std::string("fp8-") + image::dtype_name(dtype) + ".colibri");
    const std::string b = tmp / (std::string("f32-") + image::dtype_name(dtype) + ".colibri");
    Error e = testing::convert(tmp / "fp8", a, dtype);
    INFO(e.message);
    REQUIRE_FALSE(e);
    REQUIRE_FALSE(testing::convert(tmp / "f32", b, dtype));
    auto x = testing::open_image(a), y = testing::open_image(b);
    REQUIRE_FALSE(x->verify_all(1));
    REQUIRE(x->tensors().size() == y->tensors().size());
    size_t differ = 0;
    for (size_t i = 0; i < x->tensors().size(); ++i) {
      const image::TensorInfo &p = x->tensors()[i], &q = y->tensors()[i];
      CHECK(p.name == q.name);
      differ += p.size != q.size || std::memcmp(x->data(p), y->data(q), p.size) != 0;
    }
    CHECK(differ == 0);
    CHECK(x->metadata()["model"] == y->metadata()["model"]);
    CHECK(x->metadata()["provenance"]["source_dtypes"] == json({"f32", "fp8_e4m3"}));
  }
  // The MTP layer's tensors are in the image (its FP8 weight decoded like the others, its scale
  // consumed), after the model's.
  auto fp8_image = testing::open_image(tmp / "fp8-f32.colibri");
  CHECK(fp8_image->find("mtp.0.eh_proj.weight") != nullptr);
  CHECK(fp8_image->find("mtp.0.enorm.weight") != nullptr);
  CHECK(fp8_image->find("mtp.0.eh_proj.weight_scale_inv") == nullptr);
  // The default dtype is the checkpoint's float tensors' (here f32), not something from FP8.
  REQUIRE_FALSE(testing::convert(tmp / "fp8", tmp / "default.colibri"));
  CHECK(testing::open_image(tmp / "default.colibri")->find("blk.0.attn_q_a")->dtype == image::DType::F32);

  // Refusals by name: FP8 weights without the fp8 quantization_config; a scale tensor missing.
  json config = json::parse(testing::read_text(tmp / "fp8/config.json"));
  config.erase("quantization_config");
  testing::write_text(tmp / "fp8/config.json", config.dump(2));
  Error e = testing::convert(tmp / "fp8", tmp / "bad.colibri");
  CHECK(e.kind == ErrorKind::Unsupported);
  CHECK_THAT(e.message, Catch::Contains("is F8_E4M3, but config.json has no quantization_config fp8"));
  config["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e5m2"}, {"weight_block_size", {32, 32}}};
  testing::write_text(tmp / "fp8/config.json", config.dump(2));
  e = testing::convert(tmp / "fp8", tmp / "bad.colibri");
  CHECK(e.kind == ErrorKind::Unsupported);
  CHECK_THAT(e.message, Catch::Contains("fmt \"e5m2\""));
  config["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {64, 64}}};
  testing::write_text(tmp / "fp8/config.json", config.dump(2));
  e = testing::convert(tmp / "fp8", tmp / "bad.colibri");
  CHECK(e.kind == ErrorKind::Corrupt);
  CHECK_THAT(e.message, Catch::Contains("_scale_inv") && Catch::Contains("weight_block_size [64, 64]"));
  CHECK_FALSE(std::filesystem::exists(tmp / "bad.colibri"));
}

TEST_CASE("an MXFP4 gpt-oss checkpoint keeps its experts block for block, and --dtype decodes them exactly", "[convert][oracle]") {
  const std::string dir = fixture_dir("gpt_oss_mxfp4");
  testing::ScopedTempDir tmp("oracle-gpt-oss-mxfp4");
  Error e = testing::convert(dir, tmp / "default.colibri");
  INFO(e.message);
  REQUIRE_FALSE(e);
  REQUIRE_FALSE(testing::convert(dir, tmp / "f32.colibri", image::DType::F32));
  auto img = testing::open_image(tmp / "default.colibri"), f32 = testing::open_image(tmp / "f32.colibri");
  REQUIRE_FALSE(img->verify_all(1));
  CHECK(img->metadata()["provenance"]["source_dtypes"] == json::array({"f32", "mxfp4"}));

  // Values, decoded here from OpenAI's layout independently of the converter: blocks
  // [E, R, G, 16] with byte j of a group holding element 2j (low nibble) and 2j + 1 (high),
  // scales [E, R, G] e8m0; gate = even rows of gate_up_proj, up = odd rows.
  modeltool::convert::SafetensorsCheckpoint checkpoint;
  REQUIRE_FALSE(modeltool::convert::SafetensorsCheckpoint::open(dir, &checkpoint));
  auto bytes = [&](const std::string &name) {
    const modeltool::convert::SafetensorsTensor *t = checkpoint.find(name);
    REQUIRE(t);
    REQUIRE(t->dtype == "U8");
    return checkpoint.data(*t);
  };
  static const float kE2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  const size_t E = 8, F = 64, H = 64;
  size_t value_mismatches = 0, scale_mismatches = 0, checked = 0;
  for (uint64_t l = 0; l < 2; ++l) {
    const std::string hf = "model.layers." + std::to_string(l) + ".mlp.experts.";
    struct Role {
      const char *image_role;
      std::string source;
      size_t rows, cols, source_rows, stride, offset;
    } roles[3] = {{"ffn_gate_exps", hf + "gate_up_proj", F, H, 2 * F, 2, 0},
                  {"ffn_up_exps", hf + "gate_up_proj", F, H, 2 * F, 2, 1},
                  {"ffn_down_exps", hf + "down_proj", H, F, H, 1, 0}};
    for (const Role &role : roles) {
      const std::string name = model::names::layer_tensor(l, role.image_role);
      const image::TensorInfo *t = img->find(name), *t32 = f32->find(name);
      REQUIRE(t);
      REQUIRE(t32);
      CHECK(t->dtype == image::DType::MXFP4);
      CHECK(t->group_size == 32);
      CHECK(t32->dtype == image::DType::F32);
      const unsigned char *blocks = bytes(role.source + "_blocks"), *scales = bytes(role.source + "_scales");
      const size_t groups = role.cols / 32, row_bytes = groups * image::kMxfp4BlockBytes;
      std::vector<float> row(role.cols);
      for (size_t x = 0; x < E; ++x)
        for (size_t r = 0; r < role.rows; ++r) {
          const size_t sr = r * role.stride + role.offset;
          const unsigned char *stored = img->data(*t) + (x * role.rows + r) * row_bytes;
          image::dequantize_row(image::DType::MXFP4, 32, stored, role.cols, row.data());
          const float *exact = reinterpret_cast<const float *>(f32->data(*t32)) + (x * role.rows + r) * role.cols;
          for (size_t c = 0; c < role.cols; ++c) {
            const size_t g = c / 32, k = c % 32;
            const uint8_t scale = scales[(x * role.source_rows + sr) * groups + g];
            const uint8_t byte = blocks[((x * role.source_rows + sr) * groups + g) * 16 + k / 2];
            const float expected = kE2m1[k % 2 ? byte >> 4 : byte & 0x0F] * std::ldexp(1.0f, int(scale) - 127);
            value_mismatches += std::memcmp(&row[c], &expected, 4) != 0;
            value_mismatches += std::memcmp(&exact[c], &expected, 4) != 0;
            if (k == 0) scale_mismatches += stored[g * image::kMxfp4BlockBytes] != scale;
            ++checked;
          }
        }
    }
  }
  CHECK(checked == 2 * E * 3 * F * H);
  CHECK(value_mismatches == 0);  // bitwise, so -0 codes stay -0
  CHECK(scale_mismatches == 0);

  // Everything else keeps the checkpoint's float type (f32 here); --dtype q4 re-quantises the
  // decoded experts, and the other matrices take the 4-bit companion as for any checkpoint.
  CHECK(img->find("blk.0.attn_q")->dtype == image::DType::F32);
  CHECK(img->find("token_embd")->dtype == image::DType::F32);
  CHECK(img->find("blk.0.ffn_gate_exps_bias")->dtype == image::DType::F32);
  REQUIRE_FALSE(testing::convert(dir, tmp / "q4.colibri", image::DType::Q4));
  auto q4 = testing::open_image(tmp / "q4.colibri");
  CHECK(q4->find("blk.0.ffn_up_exps")->dtype == image::DType::Q4);
  CHECK(q4->find("blk.0.attn_q")->dtype == image::DType::Q8F16);

  // A damaged scale (e8m0 255 is NaN) is refused by name, and no image is left behind.
  const std::string bad = tmp / "bad";
  std::filesystem::create_directories(bad);
  for (const auto &entry : std::filesystem::directory_iterator(dir))
    std::filesystem::copy_file(entry.path(), std::filesystem::path(bad) / entry.path().filename());
  {
    const std::string st_path = bad + "/model.safetensors";
    std::string file = testing::read_text(st_path);
    uint64_t header_size = 0;
    std::memcpy(&header_size, file.data(), 8);
    const json header = json::parse(file.substr(8, header_size));
    const uint64_t begin = header["model.layers.1.mlp.experts.down_proj_scales"]["data_offsets"][0].get<uint64_t>();
    file[8 + header_size + begin + 5] = static_cast<char>(0xFF);
    testing::write_text(st_path, file);
  }
  e = testing::convert(bad, tmp / "bad.colibri");
  CHECK(e.kind == ErrorKind::NonFinite);
  CHECK_THAT(e.message, Catch::Contains("model.layers.1.mlp.experts.down_proj_blocks"));
  CHECK_THAT(e.message, Catch::Contains("scale byte 255"));
  CHECK_THAT(e.message, Catch::Contains("download it again"));
  CHECK_FALSE(std::filesystem::exists(tmp / "bad.colibri"));
}

TEST_CASE("gpt-oss configs with unusable layer_types or windows are refused by name", "[convert][oracle]") {
  const json base = json::parse(testing::read_text(fixture_dir("gpt_oss_sinks") + "/config.json"));
  const modeltool::convert::FamilyInfo *family = nullptr;
  model::ModelConfig c;
  json bad = base;
  bad["layer_types"] = {"sliding_attention", "chunked_attention", "full_attention"};
  Error e = modeltool::convert::read_hf_config(bad, &family, &c);
  CHECK(e.kind == ErrorKind::Unsupported);
  CHECK_THAT(e.message, Catch::Contains("chunked_attention"));
  bad = base;
  bad["layer_types"] = {"sliding_attention"};
  e = modeltool::convert::read_hf_config(bad, &family, &c);
  CHECK(e.kind == ErrorKind::Corrupt);
  CHECK_THAT(e.message, Catch::Contains("layer_types"));
  bad = base;
  bad["sliding_window"] = 0;
  e = modeltool::convert::read_hf_config(bad, &family, &c);
  CHECK(e.kind == ErrorKind::Corrupt);
  CHECK_THAT(e.message, Catch::Contains("sliding_window"));
  // Without layer_types the config class alternates (layer 0 sliding); without rope
  // parameters it is YaRN factor 32 over 4096 positions.
  json defaults = base;
  defaults.erase("layer_types");
  defaults.erase("rope_parameters");
  REQUIRE_FALSE(modeltool::convert::read_hf_config(defaults, &family, &c));
  CHECK(c.layer_is_sliding == std::vector<uint8_t>{1, 0, 1});
  CHECK(c.rope_scaling == "yarn");
  CHECK(c.rope_factor == 32.0);
  CHECK(c.rope_theta == 150000.0);
}

// tests/convert/test_convert.cpp — end-to-end conversion of synthesized checkpoints: the
// image holds every tensor with the right name, shape, dtype and values (experts stacked
// in order), the metadata has exactly the documented shape, and every refusal names its
// cause and leaves no output behind.
#include <sys/stat.h>
#include <chrono>
#include <csignal>
#include <atomic>
#include <thread>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <filesystem>
#include <map>
#include <set>

#include "colibri_version.h"
#include "convert/convert_test_support.h"
#include "convert/expected_mapping.h"
#include "convert/safetensors_writer.h"
#include "convert/synthetic_checkpoint.h"
#include "support/fifo_guard.h"
#include "image/writer.h"
#include "model/config.h"
#include "util/strings.h"
#include "model/tensor_names.h"
#include "modeltool/cli_support.h"
#include "modeltool/commands.h"
#include "modeltool/convert/tensor_stream.h"

using namespace colibri;
using Catch::Contains;
using nlohmann::json;
using testing::ScopedTempDir;
using testing::SyntheticCheckpointSpec;

namespace {

const char *kArchitectures[] = {"MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM",
                                "OlmoeForCausalLM"};

std::vector<std::string> hf_sources(const SyntheticCheckpointSpec &s, const std::string &image_name) {
  std::vector<std::string> sources = testing::expected_hf_sources(s.architecture, s.experts, image_name);
  REQUIRE_FALSE(sources.empty());
  return sources;
}

// What the checkpoint holds for element i of `name` (after its own dtype's rounding).
float source_value(const SyntheticCheckpointSpec &s, const std::string &name, uint64_t i) {
  float v = testing::synthetic_value(name, i, s.seed);
  if (s.dtype == "F16") return image::f16_to_f32(image::f32_to_f16(v));
  if (s.dtype == "BF16") return image::bf16_to_f32(image::f32_to_bf16(v));
  return v;
}

float stored_value(image::DType dtype, float v) {
  if (dtype == image::DType::F16) return image::f16_to_f32(image::f32_to_f16(v));
  if (dtype == image::DType::BF16) return image::bf16_to_f32(image::f32_to_bf16(v));
  return v;
}

// Checks every image tensor against its sources, and that every source went somewhere.
void check_tensors(const image::Image &img, const SyntheticCheckpointSpec &s) {
  std::set<std::string> unused;
  for (const auto &t : testing::synthetic_tensors(s)) unused.insert(t.name);
  if (s.tie_embeddings) unused.erase("lm_head.weight");
  for (const image::TensorInfo &t : img.tensors()) {
    INFO("image tensor " << t.name);
    std::vector<std::string> sources = hf_sources(s, t.name);
    std::vector<float> values = testing::image_values(img, t);
    REQUIRE(values.size() % sources.size() == 0);
    const uint64_t per_source = values.size() / sources.size();
    if (sources.size() > 1) CHECK(t.shape[0] == sources.size());  // experts stacked on the outer dimension
    // The 4-bit and q8f16 tolerances scale with the tensor's largest magnitude: q4 one step of
    // a group scale (<= max|x| / 8), q8f16 one step (<= max|x| / 127), mxfp4 half of the
    // largest element (saturation beyond 6 of a scale <= max|x| / 4).
    float amax = 0.0f;
    for (size_t k = 0; k < sources.size(); ++k)
      for (uint64_t i = 0; i < per_source; ++i) amax = std::fmax(amax, std::fabs(source_value(s, sources[k], i)));
    const float block_tolerance = t.dtype == image::DType::Q4      ? amax / 8.0f
                                  : t.dtype == image::DType::Q8F16 ? amax / 127.0f
                                                                   : amax / 2.0f;
    for (size_t k = 0; k < sources.size(); ++k) {
      INFO("source " << sources[k]);
      CHECK(unused.erase(sources[k]) == 1);
      for (uint64_t i = 0; i < per_source; ++i) {
        float expected = source_value(s, sources[k], i);
        float found = values[k * per_source + i];
        if (t.dtype == image::DType::Q8) {
          REQUIRE(std::fabs(found - expected) <= 1.0f / 254.0f + 1e-6f);  // scale/2, scale <= 1/127
        } else if (image::is_block_dtype(t.dtype)) {
          REQUIRE(std::fabs(found - expected) <= block_tolerance * 1.001f + 1e-6f);
        } else if (found != stored_value(t.dtype, expected)) {
          FAIL("element " << i << ": found " << found << ", expected " << stored_value(t.dtype, expected));
        }
      }
    }
  }
  CHECK(unused.empty());
}

// The image's metadata, with the checks common to every conversion.
json checked_metadata(const image::Image &img, const std::string &checkpoint_dir) {
  const json &m = img.metadata();
  std::set<std::string> keys;
  for (const auto &item : m.items()) keys.insert(item.key());
  CHECK(keys == std::set<std::string>{"colibri_format", "model", "tokenizer", "provenance"});
  CHECK(m["colibri_format"] == 1);
  CHECK(m["tokenizer"]["json"] == testing::read_text(checkpoint_dir + "/tokenizer.json"));
  const json &p = m["provenance"];
  CHECK(p["converter"] == std::string("colibri-model ") + COLIBRI_PROJECT_VERSION_STRING);
  CHECK(p["source_format"] == "huggingface-safetensors");
  std::vector<std::string> files;
  for (const json &source : p["sources"]) {
    std::string name = source["file"];
    files.push_back(name);
    std::string bytes = testing::read_text(checkpoint_dir + "/" + name);
    CHECK(source["bytes"] == bytes.size());
    CHECK(source["xxh3"] == util::hex64(image::checksum_bytes(bytes.data(), bytes.size())));
  }
  CHECK(std::is_sorted(files.begin(), files.end()));
  return m;
}

model::ModelConfig model_config(const image::Image &img) {
  model::ModelConfig c;
  Error e = model::ModelConfig::from_json(img.metadata()["model"], &c);
  INFO(e.message);
  REQUIRE_FALSE(e);
  return c;
}

bool directory_is_empty(const std::string &dir) {
  return std::filesystem::is_empty(dir);
}

}  // namespace

TEST_CASE("every family converts with every tensor in place and the metadata complete", "[convert]") {
  for (const char *architecture : kArchitectures) {
    SECTION(architecture) {
      ScopedTempDir dir("family");
      SyntheticCheckpointSpec s;
      s.architecture = architecture;
      s.layers = 3;
      s.mlp_only_layers = {1};  // Qwen: layer 1 dense
      REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "hf", s));
      Error e = testing::convert(dir / "hf", dir / "m.colibri");
      INFO(e.message);
      REQUIRE_FALSE(e);
      auto img = testing::open_image(dir / "m.colibri");
      REQUIRE_FALSE(img->verify_all(1));
      check_tensors(*img, s);

      json m = checked_metadata(*img, dir / "hf");
      CHECK(m["provenance"]["source_dtypes"] == json({"f32"}));
      std::vector<std::string> files;
      for (const json &source : m["provenance"]["sources"]) files.push_back(source["file"]);
      CHECK(files == std::vector<std::string>{"config.json", "generation_config.json", "model.safetensors",
                                              "tokenizer.json", "tokenizer_config.json"});
      const json &tok = m["tokenizer"];
      CHECK(tok["chat_template"] == "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}");
      CHECK(tok["bos_token_id"] == 1);
      CHECK(tok["eos_token_ids"] == json({2}));
      CHECK(tok["pad_token_id"].is_null());
      CHECK(tok["bos_token"] == "<s>");
      CHECK(tok["eos_token"] == "</s>");
      CHECK(tok["add_bos_token"] == true);
      CHECK(tok["add_eos_token"] == false);

      model::ModelConfig c = model_config(*img);
      CHECK(c.hf_architecture == architecture);
      const bool qwen = c.family == "qwen2_moe" || c.family == "qwen3_moe";
      CHECK(c.layer_is_moe == (qwen ? std::vector<uint8_t>{1, 0, 1} : std::vector<uint8_t>{1, 1, 1}));
      CHECK(c.dense_ffn_size == (qwen ? 24u : 0u));

      const image::FileHeader &h = img->header();
      CHECK(h.expert_count == 4);
      CHECK(h.top_k == 2);
      CHECK(h.hidden_size == 32);
      CHECK(h.ffn_hidden_size == 16);
      CHECK(h.layer_count == 3);
      CHECK(h.expert_size_bytes == 3 * 16 * 32 * 4);  // gate + up + down of one expert, f32
      CHECK(h.gate_weight_offset == img->find("blk.0.ffn_gate_inp")->offset);
    }
  }
}

TEST_CASE("experts are stacked expert-major in checkpoint order", "[convert]") {
  ScopedTempDir dir("stack");
  SyntheticCheckpointSpec s;
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "hf", s));
  REQUIRE_FALSE(testing::convert(dir / "hf", dir / "m.colibri"));
  auto img = testing::open_image(dir / "m.colibri");
  const image::TensorInfo *down = img->find("blk.1.ffn_down_exps");
  REQUIRE(down);
  CHECK(down->shape_string() == "[4, 32, 16]");  // [experts, hidden, ffn]
  std::vector<float> values = testing::image_values(*img, *down);
  // Expert 2, output row 5, input column 7 is experts.2.w2.weight[5][7].
  CHECK(values[(2 * 32 + 5) * 16 + 7] == testing::synthetic_value("model.layers.1.block_sparse_moe.experts.2.w2.weight",
                                                                  5 * 16 + 7, s.seed));
  CHECK(img->find("blk.0.ffn_gate_exps")->shape_string() == "[4, 16, 32]");
}

TEST_CASE("the first MoE layer's router is the header's gate when layer 0 is dense", "[convert]") {
  ScopedTempDir dir("gate");
  SyntheticCheckpointSpec s;
  s.architecture = "Qwen2MoeForCausalLM";
  s.mlp_only_layers = {0};
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "hf", s));
  REQUIRE_FALSE(testing::convert(dir / "hf", dir / "m.colibri"));
  auto img = testing::open_image(dir / "m.colibri");
  CHECK(img->find("blk.0.ffn_gate_inp") == nullptr);
  CHECK(img->find("blk.0.ffn_gate") != nullptr);
  CHECK(img->header().gate_weight_offset == img->find("blk.1.ffn_gate_inp")->offset);
}

TEST_CASE("dtypes: the default keeps a uniform source type, --dtype converts, norms and routers stay f32", "[convert]") {
  ScopedTempDir dir("dtype");
  SyntheticCheckpointSpec s;
  s.architecture = "Qwen2MoeForCausalLM";
  s.dtype = "BF16";
  s.expert_ffn = 32;  // every row a multiple of the q8 group
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "hf", s));

  REQUIRE_FALSE(testing::convert(dir / "hf", dir / "default.colibri"));
  auto img = testing::open_image(dir / "default.colibri");
  CHECK(img->find("blk.0.attn_q")->dtype == image::DType::BF16);
  CHECK(img->find("blk.0.ffn_gate_exps")->dtype == image::DType::BF16);
  CHECK(img->find("blk.0.attn_norm")->dtype == image::DType::F32);
  CHECK(img->find("blk.0.attn_q_bias")->dtype == image::DType::F32);
  CHECK(img->find("blk.0.ffn_gate_inp")->dtype == image::DType::F32);
  CHECK(img->find("blk.0.ffn_gate_inp_shexp")->dtype == image::DType::F32);
  CHECK(img->metadata()["provenance"]["source_dtypes"] == json({"bf16"}));
  check_tensors(*img, s);

  for (image::DType dtype : {image::DType::F32, image::DType::F16, image::DType::Q8}) {
    std::string out = dir / (std::string(image::dtype_name(dtype)) + ".colibri");
    REQUIRE_FALSE(testing::convert(dir / "hf", out, dtype));
    auto converted = testing::open_image(out);
    CHECK(converted->find("blk.0.ffn_down_exps")->dtype == dtype);
    CHECK(converted->find("token_embd")->dtype == dtype);
    REQUIRE_FALSE(converted->verify_all(1));
    check_tensors(*converted, s);
  }
}

TEST_CASE("q8 uses the requested group size and falls back where rows do not divide", "[convert]") {
  ScopedTempDir dir("q8");
  SyntheticCheckpointSpec s;
  s.hidden = 64;
  s.expert_ffn = 48;  // down_proj rows have 48 columns: not a multiple of 32
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "hf", s));
  REQUIRE_FALSE(testing::convert(dir / "hf", dir / "g64.colibri", image::DType::Q8, 64));
  auto img = testing::open_image(dir / "g64.colibri");
  const image::TensorInfo *gate = img->find("blk.0.ffn_gate_exps");
  CHECK(gate->dtype == image::DType::Q8);
  CHECK(gate->group_size == 64);
  CHECK(img->find("blk.0.ffn_down_exps")->dtype == image::DType::F16);
  CHECK(img->find("blk.0.ffn_down_exps")->group_size == 0);
  check_tensors(*img, s);
}

TEST_CASE("convert writes the same bytes for any thread count", "[convert][threads]") {
  ScopedTempDir dir("threads");
  SyntheticCheckpointSpec s;
  s.architecture = "Qwen2MoeForCausalLM";
  s.dtype = "BF16";
  s.hidden = 64;
  s.expert_ffn = 64;
  s.shared_ffn = 32;
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "hf", s));
  for (image::DType dtype : {image::DType::Q8, image::DType::Q4, image::DType::F16}) {
    std::vector<std::vector<unsigned char>> files;
    for (size_t threads : {1, 2, 5}) {
      modeltool::convert::ConvertOptions options;
      options.input = dir / "hf";
      std::string name = "t";  // (not "t" + std::to_string(...): GCC 12's -Wrestrict false positive)
      name += std::to_string(threads);
      name += ".colibri";
      options.output = dir / name;
      options.dtype = dtype;
      options.threads = threads;
      options.overwrite = true;
      modeltool::convert::ConvertReport report;
      REQUIRE_FALSE(modeltool::convert::convert_checkpoint(options, &report));
      files.push_back(testing::read_file(options.output));
    }
    INFO(image::dtype_name(dtype));
    CHECK(files[0] == files[1]);
    CHECK(files[0] == files[2]);
  }
}

TEST_CASE("convert to q8 and q4 writes every row of sources that take several chunks", "[convert][threads]") {
  // convert reads 4 MiB of source at a time and hands each converted chunk to the writer on
  // another thread while the next is converted (two buffers in turn): a 4608 x 512 f32 expert
  // matrix is 9.4 MB, three chunks. Every row must be the quantiser's bytes of the source row.
  ScopedTempDir dir("chunks");
  SyntheticCheckpointSpec s;
  s.layers = 1;
  s.hidden = 512;
  s.expert_ffn = 4608;
  s.experts = 2;
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "hf", s));
  for (image::DType dtype : {image::DType::Q8, image::DType::Q4}) {
    for (size_t threads : {1, 2}) {
      INFO(image::dtype_name(dtype) << ", " << threads << " threads");
      modeltool::convert::ConvertOptions options;
      options.input = dir / "hf";
      options.output = dir / "q.colibri";
      options.dtype = dtype;
      options.threads = threads;
      options.overwrite = true;
      modeltool::convert::ConvertReport report;
      REQUIRE_FALSE(modeltool::convert::convert_checkpoint(options, &report));
      auto img = testing::open_image(options.output);
      const image::TensorInfo *t = img->find("blk.0.ffn_gate_exps");
      REQUIRE(t != nullptr);
      REQUIRE(t->dtype == dtype);
      const std::vector<std::string> sources = hf_sources(s, t->name);
      const uint64_t cols = s.hidden, rows = s.expert_ffn;
      REQUIRE(rows * cols * 4 > 2 * modeltool::convert::TensorStreamer::kChunkSourceBytes);
      const uint64_t row = image::row_bytes(dtype, t->group_size, cols);
      std::vector<float> x(cols);
      std::vector<unsigned char> expected(row);
      uint64_t differing_rows = 0;
      for (size_t k = 0; k < sources.size(); ++k)
        for (uint64_t r = 0; r < rows; ++r) {
          for (uint64_t c = 0; c < cols; ++c) x[c] = source_value(s, sources[k], r * cols + c);
          image::quantize_row(dtype, t->group_size, x.data(), cols, expected.data());
          if (std::memcmp(expected.data(), img->data(*t) + (k * rows + r) * row, row) != 0) ++differing_rows;
        }
      CHECK(differing_rows == 0);
    }
  }
}

TEST_CASE("q4 and mxfp4 (--dtype) quantise the experts, the other matrices are q8f16, --tensor-dtype overrides a class",
          "[convert][q4]") {
  ScopedTempDir dir("q4");
  SyntheticCheckpointSpec s;
  s.architecture = "Qwen2MoeForCausalLM";  // shared expert, attention biases
  s.dtype = "BF16";
  s.hidden = 64;
  s.expert_ffn = 64;
  s.shared_ffn = 32;
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "hf", s));
  REQUIRE_FALSE(testing::convert(dir / "hf", dir / "q4.colibri", image::DType::Q4, 64));
  auto img = testing::open_image(dir / "q4.colibri");
  CHECK(img->header().version == 2);
  CHECK(img->find("blk.0.ffn_gate_exps")->dtype == image::DType::Q4);
  CHECK(img->find("blk.0.ffn_gate_exps")->group_size == 64);
  CHECK(img->find("blk.0.ffn_down_exps")->dtype == image::DType::Q4);
  CHECK(img->find("blk.0.attn_q")->dtype == image::DType::Q8F16);
  CHECK(img->find("blk.0.attn_q")->group_size == 32);
  CHECK(img->find("blk.0.ffn_up_shexp")->dtype == image::DType::Q8F16);
  CHECK(img->find("token_embd")->dtype == image::DType::Q8F16);
  CHECK(img->find("blk.0.ffn_gate_inp")->dtype == image::DType::F32);
  CHECK(img->find("blk.0.attn_q_bias")->dtype == image::DType::F32);
  REQUIRE_FALSE(img->verify_all(1));
  check_tensors(*img, s);

  modeltool::convert::ConvertOptions options;
  options.input = dir / "hf";
  options.output = dir / "mixed.colibri";
  options.dtype = image::DType::MXFP4;
  options.class_dtypes = {{"embeddings", image::DType::BF16}, {"attention", image::DType::Q8}};
  modeltool::convert::ConvertReport report;
  REQUIRE_FALSE(modeltool::convert::convert_checkpoint(options, &report));
  auto mixed = testing::open_image(dir / "mixed.colibri");
  CHECK(mixed->find("blk.1.ffn_up_exps")->dtype == image::DType::MXFP4);
  CHECK(mixed->find("token_embd")->dtype == image::DType::BF16);
  CHECK(mixed->find("blk.0.attn_k")->dtype == image::DType::Q8);
  CHECK(mixed->find("blk.0.ffn_down_shexp")->dtype == image::DType::Q8F16);
  check_tensors(*mixed, s);

  options.output = dir / "bad.colibri";
  options.class_dtypes = {{"router", image::DType::Q8}};
  Error e = modeltool::convert::convert_checkpoint(options, &report);
  REQUIRE(e);
  CHECK_THAT(e.message, Catch::Contains("'router' is always stored as f32"));
  options.class_dtypes = {{"expert", image::DType::Q4}};
  e = modeltool::convert::convert_checkpoint(options, &report);
  REQUIRE(e);
  CHECK_THAT(e.message, Catch::Contains("unknown tensor class 'expert'"));
  options.class_dtypes = {{"attention", image::DType::Q8}};
  options.group_size = 128;  // q4/128 is fine, q8/128 is not
  e = modeltool::convert::convert_checkpoint(options, &report);
  REQUIRE(e);
  CHECK_THAT(e.message, Catch::Contains("'attention' is q8, which does not take group size 128"));
  CHECK_FALSE(std::filesystem::exists(dir / "bad.colibri"));
}

TEST_CASE("mixed source dtypes default to f16", "[convert]") {
  ScopedTempDir dir("mixed");
  SyntheticCheckpointSpec s;
  s.dtype = "BF16";
  s.edit_tensors = [](std::vector<testing::SafetensorsEntry> &tensors) {
    for (auto &t : tensors)
      if (t.name.ends_with("gate.weight")) t.dtype = "F32";  // routers kept in f32, as some checkpoints do
  };
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "hf", s));
  REQUIRE_FALSE(testing::convert(dir / "hf", dir / "m.colibri"));
  auto img = testing::open_image(dir / "m.colibri");
  CHECK(img->find("blk.0.attn_q")->dtype == image::DType::F16);
  CHECK(img->metadata()["provenance"]["source_dtypes"] == json({"bf16", "f32"}));
}

TEST_CASE("tied embeddings: no output tensor, and a stored lm_head is left out", "[convert]") {
  ScopedTempDir dir("tied");
  SyntheticCheckpointSpec s;
  s.tie_embeddings = true;
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "hf", s));
  REQUIRE_FALSE(testing::convert(dir / "hf", dir / "m.colibri"));
  auto img = testing::open_image(dir / "m.colibri");
  CHECK(img->find("output") == nullptr);
  CHECK(model_config(*img).tie_word_embeddings);
  check_tensors(*img, s);

  s.edit_tensors = [&](std::vector<testing::SafetensorsEntry> &tensors) {
    tensors.push_back({"lm_head.weight", "F32", {s.vocab, s.hidden}});
  };
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "hf2", s));
  modeltool::convert::ConvertOptions options;
  options.input = dir / "hf2";
  options.output = dir / "m2.colibri";
  modeltool::convert::ConvertReport report;
  REQUIRE_FALSE(modeltool::convert::convert_checkpoint(options, &report));
  CHECK(report.ignored == std::vector<std::string>{"lm_head.weight"});
  CHECK(testing::open_image(dir / "m2.colibri")->find("output") == nullptr);
}

TEST_CASE("a sharded checkpoint gives the same tensors as the single file", "[convert]") {
  ScopedTempDir dir("sharded");
  SyntheticCheckpointSpec s;
  s.architecture = "Qwen3MoeForCausalLM";
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "single", s));
  s.shards = 3;
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "sharded", s));
  REQUIRE_FALSE(testing::convert(dir / "single", dir / "a.colibri"));
  REQUIRE_FALSE(testing::convert(dir / "sharded", dir / "b.colibri"));
  auto a = testing::open_image(dir / "a.colibri"), b = testing::open_image(dir / "b.colibri");
  REQUIRE(a->tensors().size() == b->tensors().size());
  for (size_t i = 0; i < a->tensors().size(); ++i) {
    CHECK(a->tensors()[i].name == b->tensors()[i].name);
    CHECK(a->tensors()[i].checksum == b->tensors()[i].checksum);
  }
  std::vector<std::string> files;
  for (const json &source : b->metadata()["provenance"]["sources"]) files.push_back(source["file"]);
  CHECK(std::count(files.begin(), files.end(), "model.safetensors.index.json") == 1);
  CHECK(std::count(files.begin(), files.end(), "model-00003-of-00003.safetensors") == 1);
}

TEST_CASE("the input may be a file inside the checkpoint directory", "[convert]") {
  ScopedTempDir dir("file-input");
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "hf", SyntheticCheckpointSpec{}));
  REQUIRE_FALSE(testing::convert(dir / "hf/model.safetensors", dir / "m.colibri"));
}

TEST_CASE("the alignment option sets the tensor alignment", "[convert]") {
  ScopedTempDir dir("align");
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "hf", SyntheticCheckpointSpec{}));
  modeltool::convert::ConvertOptions options;
  options.input = dir / "hf";
  options.output = dir / "m.colibri";
  options.alignment = 64;
  modeltool::convert::ConvertReport report;
  REQUIRE_FALSE(modeltool::convert::convert_checkpoint(options, &report));
  auto img = testing::open_image(dir / "m.colibri");
  CHECK(img->header().data_alignment == 64);
  for (const auto &t : img->tensors()) CHECK(t.offset % 64 == 0);
  options.alignment = 100;
  options.overwrite = true;
  CHECK(modeltool::convert::convert_checkpoint(options, &report).kind == ErrorKind::InvalidArgument);
}

// ---- tokenizer metadata sources -------------------------------------------------------

TEST_CASE("chat templates from a named list or chat_template.jinja, special ids from tokenizer_config", "[convert]") {
  ScopedTempDir dir("tokenizer");
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "hf", SyntheticCheckpointSpec{}));
  json tc = json::parse(testing::read_text(dir / "hf/tokenizer_config.json"));
  tc["chat_template"] = json::array({{{"name", "tool_use"}, {"template", "T"}}, {{"name", "default"}, {"template", "D"}}});
  tc["pad_token"] = "<pad>";
  testing::write_text(dir / "hf/tokenizer_config.json", tc.dump());
  testing::write_text(dir / "hf/generation_config.json", "{}");
  json config = json::parse(testing::read_text(dir / "hf/config.json"));
  config.erase("bos_token_id");
  config.erase("eos_token_id");
  testing::write_text(dir / "hf/config.json", config.dump());
  REQUIRE_FALSE(testing::convert(dir / "hf", dir / "a.colibri"));
  json tok = testing::open_image(dir / "a.colibri")->metadata()["tokenizer"];
  CHECK(tok["chat_template"] == "D");
  CHECK(tok["bos_token_id"] == 1);           // "<s>" resolved through added_tokens
  CHECK(tok["eos_token_ids"] == json({2}));  // "</s>" (an AddedToken object)
  CHECK(tok["pad_token_id"] == 6);           // "<pad>" resolved through the BPE vocabulary

  tc.erase("chat_template");
  tc.erase("eos_token");
  testing::write_text(dir / "hf/tokenizer_config.json", tc.dump());
  testing::write_text(dir / "hf/chat_template.jinja", "{{ messages }}");
  testing::write_text(dir / "hf/generation_config.json", R"({"eos_token_id": [2, 0]})");
  REQUIRE_FALSE(testing::convert(dir / "hf", dir / "b.colibri"));
  auto img = testing::open_image(dir / "b.colibri");
  tok = img->metadata()["tokenizer"];
  CHECK(tok["chat_template"] == "{{ messages }}");
  CHECK(tok["eos_token_ids"] == json({2, 0}));
  CHECK(tok["eos_token"] == "</s>");  // from the id, through tokenizer.json
  bool recorded = false;
  for (const json &source : img->metadata()["provenance"]["sources"]) recorded |= source["file"] == "chat_template.jinja";
  CHECK(recorded);
}

// ---- refusals --------------------------------------------------------------------------

namespace {

// Writes a checkpoint, lets `damage` break it, converts, and checks nothing was written.
Error convert_damaged(const SyntheticCheckpointSpec &spec, const std::function<void(const std::string &)> &damage) {
  ScopedTempDir dir("refuse");
  std::string hf = dir / "hf", out_dir = dir / "out";
  std::filesystem::create_directories(out_dir);
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(hf, spec));
  damage(hf);
  Error e = testing::convert(hf, out_dir + "/m.colibri");
  CHECK(directory_is_empty(out_dir));  // no image, no temporary file
  return e;
}

const auto kNoDamage = [](const std::string &) {};

}  // namespace

TEST_CASE("refused: missing config.json", "[convert][errors]") {
  Error e = convert_damaged({}, [](const std::string &hf) { std::filesystem::remove(hf + "/config.json"); });
  CHECK(e.kind == ErrorKind::Io);
  CHECK_THAT(e.message, Contains("has no config.json"));
}

TEST_CASE("refused: unknown architecture, listing the supported ones", "[convert][errors]") {
  SyntheticCheckpointSpec s;
  s.config_overrides = {{"architectures", {"DbrxForCausalLM"}}};
  Error e = convert_damaged(s, kNoDamage);
  CHECK(e.kind == ErrorKind::Unsupported);
  CHECK_THAT(e.message, Contains("'DbrxForCausalLM'"));
  CHECK_THAT(e.message, Contains("supported: MixtralForCausalLM"));
}

TEST_CASE("refused: a missing tensor, by name", "[convert][errors]") {
  SyntheticCheckpointSpec s;
  s.edit_tensors = [](std::vector<testing::SafetensorsEntry> &t) {
    std::erase_if(t, [](const auto &x) { return x.name == "model.layers.1.block_sparse_moe.experts.3.w3.weight"; });
  };
  Error e = convert_damaged(s, kNoDamage);
  CHECK(e.kind == ErrorKind::Corrupt);
  CHECK_THAT(e.message, Contains("missing tensor 'model.layers.1.block_sparse_moe.experts.3.w3.weight'"));
}

TEST_CASE("refused: an unexpected extra tensor, by name", "[convert][errors]") {
  SyntheticCheckpointSpec s;
  s.edit_tensors = [](std::vector<testing::SafetensorsEntry> &t) {
    t.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {4}});  // ignorable
    t.push_back({"model.layers.0.mlp.extra_proj.weight", "F32", {2, 2}});
  };
  Error e = convert_damaged(s, kNoDamage);
  CHECK(e.kind == ErrorKind::Corrupt);
  CHECK_THAT(e.message, Contains("unexpected tensor 'model.layers.0.mlp.extra_proj.weight' [2, 2] F32"));
  CHECK_THAT(e.message, !Contains("inv_freq"));
}

TEST_CASE("refused: a shape mismatch, expected vs found", "[convert][errors]") {
  SyntheticCheckpointSpec s;
  s.edit_tensors = [](std::vector<testing::SafetensorsEntry> &t) {
    for (auto &x : t)
      if (x.name == "model.layers.0.self_attn.k_proj.weight") x.shape = {32, 32};
  };
  Error e = convert_damaged(s, kNoDamage);
  CHECK(e.kind == ErrorKind::Corrupt);
  CHECK_THAT(e.message, Contains("'model.layers.0.self_attn.k_proj.weight' in 'model.safetensors' has shape [32, 32], "
                                 "expected [16, 32] (for blk.0.attn_k"));
}

TEST_CASE("refused: a shard in the index but absent", "[convert][errors]") {
  SyntheticCheckpointSpec s;
  s.shards = 2;
  Error e = convert_damaged(s, [](const std::string &hf) { std::filesystem::remove(hf + "/model-00001-of-00002.safetensors"); });
  CHECK(e.kind == ErrorKind::Io);
  CHECK_THAT(e.message, Contains("shard 'model-00001-of-00002.safetensors' is listed in model.safetensors.index.json"));
}

TEST_CASE("refused: a truncated shard", "[convert][errors]") {
  Error e = convert_damaged({}, [](const std::string &hf) {
    std::filesystem::resize_file(hf + "/model.safetensors", std::filesystem::file_size(hf + "/model.safetensors") - 1);
  });
  CHECK(e.kind == ErrorKind::Corrupt);
  CHECK_THAT(e.message, Contains("'model.safetensors' is truncated"));
}

TEST_CASE("refused: an unsupported source dtype, naming tensor and dtype", "[convert][errors]") {
  SyntheticCheckpointSpec s;
  s.edit_tensors = [](std::vector<testing::SafetensorsEntry> &t) {
    for (auto &x : t)
      if (x.name == "model.layers.0.self_attn.q_proj.weight") x.dtype = "F8_E5M2";
  };
  Error e = convert_damaged(s, kNoDamage);
  CHECK(e.kind == ErrorKind::Unsupported);
  CHECK_THAT(e.message, Contains("tensor 'model.layers.0.self_attn.q_proj.weight' in 'model.safetensors' has dtype "
                                 "F8_E5M2, which is not supported yet"));
}

TEST_CASE("refused: an unsupported config feature", "[convert][errors]") {
  SyntheticCheckpointSpec s;
  s.config_overrides = {{"rope_scaling", {{"rope_type", "longrope"}, {"factor", 4.0}}}};
  Error e = convert_damaged(s, kNoDamage);
  CHECK(e.kind == ErrorKind::Unsupported);
  CHECK_THAT(e.message, Contains("rope_scaling"));
  CHECK_THAT(e.message, Contains("not supported yet"));
}

TEST_CASE("refused: a missing tokenizer.json", "[convert][errors]") {
  Error e = convert_damaged({}, [](const std::string &hf) { std::filesystem::remove(hf + "/tokenizer.json"); });
  CHECK(e.kind == ErrorKind::Io);
  CHECK_THAT(e.message, Contains("tokenizer.json' is missing"));
}

TEST_CASE("refused: a tokenizer.json the engine cannot load (one of another kind converts, with a warning)",
          "[convert][errors]") {
  Error e = convert_damaged({}, [](const std::string &hf) { testing::write_text(hf + "/tokenizer.json", "{}"); });
  CHECK(e.kind == ErrorKind::Corrupt);
  CHECK_THAT(e.message, Contains("tokenizer.json' cannot be used: tokenizer.json: \"model\" is missing"));

  // A Unigram tokenizer (not run by this build): the image is still useful (layer-level API).
  ScopedTempDir dir("unigram");
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "hf", SyntheticCheckpointSpec{}));
  testing::write_text(dir / "hf/tokenizer.json", R"({"model": {"type": "Unigram", "vocab": [["<unk>", 0.0]]}})");
  modeltool::convert::ConvertOptions options;
  options.input = dir / "hf";
  options.output = dir / "m.colibri";
  modeltool::convert::ConvertReport report;
  REQUIRE_FALSE(modeltool::convert::convert_checkpoint(options, &report));
  REQUIRE(report.warnings.size() == 1);
  CHECK_THAT(report.warnings[0], Contains("Unigram") && Contains("tokenizer calls"));

  // Token ids beyond the model's vocabulary (64 rows here): converted, with a warning.
  SyntheticCheckpointSpec small;
  small.vocab = 2;
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "small", small));
  options.input = dir / "small";
  options.output = dir / "small.colibri";
  report = {};
  REQUIRE_FALSE(modeltool::convert::convert_checkpoint(options, &report));
  REQUIRE(report.warnings.size() == 1);
  CHECK_THAT(report.warnings[0], Contains("model's vocabulary has 2 rows"));
}

TEST_CASE("an existing output needs --force, and an input is never the output", "[convert][errors]") {
  ScopedTempDir dir("output");
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "hf", SyntheticCheckpointSpec{}));
  testing::write_text(dir / "m.colibri", "old");
  Error e = testing::convert(dir / "hf", dir / "m.colibri");
  CHECK(e.kind == ErrorKind::InvalidArgument);
  CHECK_THAT(e.message, Contains("already exists; pass --force"));
  CHECK(testing::read_text(dir / "m.colibri") == "old");
  REQUIRE_FALSE(testing::convert(dir / "hf", dir / "m.colibri", std::nullopt, 32, /*overwrite=*/true));
  testing::open_image(dir / "m.colibri");

  std::string shard = dir / "hf/model.safetensors";
  std::string before = testing::read_text(shard);
  std::filesystem::create_symlink(shard, dir / "link.colibri");
  e = testing::convert(dir / "hf", dir / "link.colibri", std::nullopt, 32, true);
  CHECK(e.kind == ErrorKind::InvalidArgument);
  CHECK_THAT(e.message, Contains("is the same file as the input"));
  e = testing::convert(dir / "hf", dir / "hf/config.json", std::nullopt, 32, true);
  CHECK_THAT(e.message, Contains("is the same file as the input"));
  CHECK(testing::read_text(shard) == before);
}

namespace {
// Overwrites element `index` of F32 tensor `name` in the safetensors file at `path`.
void poke_f32(const std::string &path, const std::string &name, uint64_t index, float value) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(f);
  uint64_t header_bytes = 0;
  f.read(reinterpret_cast<char *>(&header_bytes), 8);
  std::string header(header_bytes, '\0');
  f.read(header.data(), static_cast<std::streamsize>(header_bytes));
  const json h = json::parse(header);
  REQUIRE(h.contains(name));
  REQUIRE(h[name]["dtype"] == "F32");
  const uint64_t offset = 8 + header_bytes + h[name]["data_offsets"][0].get<uint64_t>() + index * 4;
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(reinterpret_cast<const char *>(&value), 4);
  REQUIRE(f);
}
}  // namespace

TEST_CASE("a NaN or infinity in a checkpoint: q8 refuses and names the element, float dtypes keep it", "[convert]") {
  ScopedTempDir dir("nonfinite");
  SyntheticCheckpointSpec s;
  s.expert_ffn = 32;  // every row a multiple of the q8 group
  const std::string tensor = "model.layers.1.block_sparse_moe.experts.2.w3.weight";  // [32, 32]
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    INFO("value " << bad);
    std::filesystem::remove_all(dir / "hf");
    REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "hf", s));
    poke_f32(dir / "hf/model.safetensors", tensor, 5 * 32 + 7, bad);  // row 5, column 7

    const std::string q8 = dir / "q8.colibri";
    Error e = testing::convert(dir / "hf", q8, image::DType::Q8);
    REQUIRE(e);
    CHECK(e.kind == ErrorKind::NonFinite);
    CHECK_THAT(e.message, Contains(tensor));
    CHECK_THAT(e.message, Contains("row 5, column 7"));
    CHECK_THAT(e.message, Contains("--dtype f16"));
    CHECK_FALSE(std::filesystem::exists(q8));  // nothing half-written left behind

    // f16 stores the value as it is (the engine's non-finite guard reports it at run time).
    REQUIRE_FALSE(testing::convert(dir / "hf", dir / "f16.colibri", image::DType::F16, 32, true));
    auto img = testing::open_image(dir / "f16.colibri");
    const image::TensorInfo *up = img->find("blk.1.ffn_up_exps");
    REQUIRE(up != nullptr);
    const std::vector<float> values = testing::image_values(*img, *up);
    const float stored = values[2 * 32 * 32 + 5 * 32 + 7];
    if (std::isnan(bad)) CHECK(std::isnan(stored));
    else CHECK(stored == bad);

    // repack of that image to q8 refuses in the same way (exit 1, as verify --deep).
    const std::string repacked = dir / "repacked.colibri";
    std::vector<std::string> args = {"repack", dir / "f16.colibri", repacked, "--dtype", "q8"};
    std::vector<char *> argv;
    for (std::string &a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    CHECK(modeltool::run_repack(static_cast<int>(args.size()), argv.data()) == modeltool::kExitCorrupt);
    CHECK_FALSE(std::filesystem::exists(repacked));
  }
}

TEST_CASE("a FIFO in the checkpoint directory is refused at once, not waited on", "[convert]") {
  ScopedTempDir dir("fifo");
  SyntheticCheckpointSpec s;
  for (const std::string file : {"config.json", "model.safetensors"}) {
    INFO(file);
    std::filesystem::remove_all(dir / "hf");
    REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "hf", s));
    const std::string path = dir / ("hf/" + file);
    std::filesystem::remove(path);
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    const Error e = testing::call_refusing_fifo(path, [&] { return testing::convert(dir / "hf", dir / "m.colibri"); });
    CHECK(e.kind == ErrorKind::Io);
    CHECK_THAT(e.message, Contains("not a regular file"));
  }
}

TEST_CASE("a value beyond f16's range: f16 refuses and names it, bf16 and q8 store it", "[convert]") {
  ScopedTempDir dir("overflow");
  SyntheticCheckpointSpec s;
  s.expert_ffn = 32;
  const std::string tensor = "model.layers.0.self_attn.q_proj.weight";  // [32, 32]
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "hf", s));
  poke_f32(dir / "hf/model.safetensors", tensor, 3 * 32 + 1, -99840.0f);  // row 3, column 1

  Error e = testing::convert(dir / "hf", dir / "f16.colibri", image::DType::F16);
  REQUIRE(e);
  CHECK(e.kind == ErrorKind::NonFinite);
  CHECK_THAT(e.message, Contains(tensor) && Contains("row 3, column 1") && Contains("beyond the range of f16") &&
                            Contains("--dtype bf16 or f32"));
  CHECK_FALSE(std::filesystem::exists(dir / "f16.colibri"));
  // 65504 is f16's largest value and converts.
  poke_f32(dir / "hf/model.safetensors", tensor, 3 * 32 + 1, 65504.0f);
  REQUIRE_FALSE(testing::convert(dir / "hf", dir / "f16.colibri", image::DType::F16));
  poke_f32(dir / "hf/model.safetensors", tensor, 3 * 32 + 1, -99840.0f);
  for (image::DType dtype : {image::DType::BF16, image::DType::Q8, image::DType::F32}) {
    const std::string out = dir / (std::string(image::dtype_name(dtype)) + ".colibri");
    REQUIRE_FALSE(testing::convert(dir / "hf", out, dtype));
    auto img = testing::open_image(out);
    const std::vector<float> values = testing::image_values(*img, *img->find("blk.0.attn_q"));
    CHECK(std::fabs(values[3 * 32 + 1] + 99840.0f) <= 99840.0f / 127);  // bf16/q8 rounding
  }

  // repack of the f32 image to f16 refuses the same value.
  std::vector<std::string> args = {"repack", dir / "f32.colibri", dir / "repacked.colibri", "--dtype", "f16"};
  std::vector<char *> argv;
  for (std::string &a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  CHECK(modeltool::run_repack(static_cast<int>(args.size()), argv.data()) == modeltool::kExitCorrupt);
  CHECK_FALSE(std::filesystem::exists(dir / "repacked.colibri"));
}

TEST_CASE("Ctrl-C: convert and repack stop with exit 130 and leave no file behind", "[convert][signal]") {
  ScopedTempDir dir("interrupt");
  SyntheticCheckpointSpec s;
  s.expert_ffn = 32;
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "hf", s));
  REQUIRE_FALSE(testing::convert(dir / "hf", dir / "f32.colibri", image::DType::F32));
  auto listing = [&] {
    std::set<std::string> names;
    for (const auto &entry : std::filesystem::directory_iterator(dir.path()))
      names.insert(entry.path().filename().string());
    return names;
  };
  const std::set<std::string> before = listing();

  modeltool::install_interrupt_handler();
  std::raise(SIGINT);  // what Ctrl-C does; the handler only sets the flag
  CHECK(modeltool::interrupted());
  Error e = testing::convert(dir / "hf", dir / "m.colibri", image::DType::Q8);
  CHECK(e.kind == ErrorKind::Cancelled);
  CHECK(modeltool::exit_code_for(e) == modeltool::kExitInterrupted);
  for (const char *mode : {"--dtype", "--compress"}) {
    INFO(mode);
    std::vector<std::string> args = {"repack", dir / "f32.colibri", dir / "r.colibri", mode};
    if (std::string(mode) == "--dtype") args.push_back("f16");
    std::vector<char *> argv;
    for (std::string &a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    CHECK(modeltool::run_repack(static_cast<int>(args.size()), argv.data()) == modeltool::kExitInterrupted);
  }
  CHECK(listing() == before);  // no m.colibri, r.colibri or *.tmp.* left
  modeltool::clear_interrupted();

  // The signal arriving while the image is being written (its temporary file exists): a
  // checkpoint of ~200 MB, and a thread that raises SIGINT as soon as the .tmp file appears.
  SyntheticCheckpointSpec big;
  big.hidden = 512;
  big.heads = 8;
  big.kv_heads = 4;
  big.experts = 8;
  big.expert_ffn = 1024;
  big.layers = 4;
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "big", big));
  const std::set<std::string> before_big = listing();
  std::atomic<bool> saw_temp{false}, done{false};
  std::thread watcher([&] {
    while (!done) {
      for (const auto &entry : std::filesystem::directory_iterator(dir.path()))
        if (entry.path().filename().string().find(".tmp.") != std::string::npos) {
          saw_temp = true;
          std::raise(SIGINT);
          return;
        }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  e = testing::convert(dir / "big", dir / "big.colibri", image::DType::Q8);
  done = true;
  watcher.join();
  REQUIRE(saw_temp);  // else the conversion ended before the signal: make the checkpoint larger
  CHECK(e.kind == ErrorKind::Cancelled);
  CHECK(listing() == before_big);  // no big.colibri and no big.colibri.tmp.* left
  modeltool::clear_interrupted();
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  REQUIRE_FALSE(testing::convert(dir / "hf", dir / "m.colibri", image::DType::Q8));  // the flag is gone
}

TEST_CASE("refused at once: a config.json far larger than its checkpoint, within the dimension limits", "[convert][errors]") {
  // 4096 layers of 65536 experts: inside ModelLimits, but 805 million expert tensors whose names
  // alone took tens of GB before the checkpoint was compared with them.
  SyntheticCheckpointSpec s;
  s.config_overrides = {{"num_hidden_layers", model::ModelLimits::kLayerCount},
                        {"num_local_experts", model::ModelLimits::kExpertCount}};
  Error e = convert_damaged(s, kNoDamage);
  CHECK(e.kind == ErrorKind::Corrupt);
  CHECK_THAT(e.message, Contains("describes a model of at least 805322752 tensors (4096 layers, 65536 experts)"));
}

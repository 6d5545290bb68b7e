// tests/modeltool/test_verify_agreement.cpp — `colibri-model verify` refuses exactly the
// images that opening and running a model refuses (issue 18, item 9).
//
// "Runs" is what `colibri run` does with an image: Model::load with tensor checksums (what
// --verify adds), the tokenizer the image carries, a session with the default options, a
// three-token prefill and one decode step with finite logits. "Verifies" is
// modeltool::verify_image, in-process. Two sets of images are compared:
//   * crafted: every fixed-header model field made inconsistent, every metadata field of the
//     model out of range, of the wrong type, missing or inconsistent with the tensors, every
//     tensor missing, misshaped, of another dtype or renamed, and an unexpected extra tensor,
//     over several model variants (dense layers, shared expert, biases, q/k norms, tied
//     embeddings, q8). Before the fix, verify passed 42 of the issue's 77 such images.
//   * random: hundreds of seeded mutations of the header, directory and metadata bytes with the
//     header checksum recomputed (so the reader's checksum does not stop them at the door).
// Every case must agree; the ones built to be broken must also fail both ways.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>

#include "image/reader.h"
#include "model/header_fields.h"
#include "model/model.h"
#include "model/tensor_names.h"
#include "modeltool/verify.h"
#include "runtime/session.h"
#include "support/synthetic_image.h"
#include "support/synthetic_model.h"
#include "tokenizer/tokenizer.h"

using namespace colibri;
using Catch::Contains;
using nlohmann::json;

namespace {

struct Outcome {
  bool ok = false;
  std::string message;
};

Outcome verifies(const std::string &path, bool deep = false) {
  modeltool::VerifyOptions o;
  o.deep = deep;
  o.threads = 1;
  modeltool::VerifyReport r;
  Error e = modeltool::verify_image(path, o, &r);
  return {e.ok(), e.message};
}

Outcome runs(const std::string &path) {
  Error e;
  model::LoadOptions lo;
  lo.image.verify_checksums = true;
  auto m = model::Model::load(path, lo, &e);
  if (!m) return {false, "open: " + e.message};
  if (!m->tokenizer().json.empty() && !tokenizer::Tokenizer::from_json(m->tokenizer().json, &e))
    return {false, "tokenizer: " + e.message};
  runtime::SessionOptions so;
  so.threads = 1;
  auto s = runtime::Session::create(*m, so, &e);
  if (!s) return {false, "session: " + e.message};
  const int32_t V = static_cast<int32_t>(m->config().vocab_size);
  std::vector<runtime::BatchEntry> prefill = {{0, 0, 1 % V, 0}, {0, 1, 3 % V, 0}, {0, 2, 4 % V, 1}};
  if (Error f = s->forward(prefill.data(), prefill.size())) return {false, "forward: " + f.message};
  int32_t best = 0;
  for (int32_t i = 0; i < V; ++i) {
    if (!std::isfinite(s->logits(0)[i])) return {false, "forward: non-finite logits"};
    if (s->logits(0)[i] > s->logits(0)[best]) best = i;
  }
  runtime::BatchEntry decode{0, 3, best, 1};
  if (Error f = s->forward(&decode, 1)) return {false, "decode: " + f.message};
  return {true, ""};
}

// Writes `parts` to `path` and compares; returns the verify outcome.
struct Compared {
  Outcome verify, run;
};

Compared compare(const std::string &path) { return {verifies(path), runs(path)}; }

// One INFO per line: Catch2 v2's console line wrapper throws on some multi-line messages.
#define REQUIRE_AGREE(c, what)                                      \
  do {                                                              \
    INFO(what);                                                     \
    INFO("verify: " << ((c).verify.ok ? "OK" : (c).verify.message)); \
    INFO("run: " << ((c).run.ok ? "OK" : (c).run.message));          \
    REQUIRE((c).verify.ok == (c).run.ok);                           \
  } while (0)

struct Variant {
  const char *name;
  model::ModelConfig config;
  image::DType dtype;
};

std::vector<Variant> variants() {
  std::vector<Variant> v;
  v.push_back({"mixtral f32", testing::tiny_model_config(), image::DType::F32});
  {
    model::ModelConfig c = testing::tiny_model_config();
    c.family = model::kFamilyQwen2Moe;
    c.hf_architecture = "Qwen2MoeForCausalLM";
    c.attention_bias = true;
    c.shared_expert_ffn_size = 32;
    c.shared_expert_gate = true;
    c.dense_ffn_size = 48;
    c.layer_is_moe = {0, 1};
    c.norm_topk_prob = false;
    v.push_back({"qwen2_moe dense+shared q8", c, image::DType::Q8});
  }
  {
    model::ModelConfig c = testing::tiny_model_config();
    c.family = model::kFamilyQwen3Moe;
    c.hf_architecture = "Qwen3MoeForCausalLM";
    c.qk_norm = "per_head";
    v.push_back({"qwen3_moe per-head qk norm f16", c, image::DType::F16});
  }
  {
    model::ModelConfig c = testing::tiny_model_config();
    c.family = model::kFamilyOlmoe;
    c.hf_architecture = "OlmoeForCausalLM";
    c.qk_norm = "full";
    c.clip_qkv = 8.0;
    c.tie_word_embeddings = true;
    v.push_back({"olmoe full qk norm, tied", c, image::DType::BF16});
  }
  return v;
}

void set_u64(std::vector<unsigned char> &bytes, size_t offset, uint64_t value) {
  std::memcpy(bytes.data() + offset, &value, sizeof value);
}

struct HeaderField {
  const char *name;
  size_t offset;
};

const HeaderField kHeaderModelFields[] = {
    {"expert_count", offsetof(image::FileHeader, expert_count)},
    {"expert_size_bytes", offsetof(image::FileHeader, expert_size_bytes)},
    {"hidden_size", offsetof(image::FileHeader, hidden_size)},
    {"ffn_hidden_size", offsetof(image::FileHeader, ffn_hidden_size)},
    {"top_k", offsetof(image::FileHeader, top_k)},
    {"weight_data_offset", offsetof(image::FileHeader, weight_data_offset)},
    {"gate_weight_offset", offsetof(image::FileHeader, gate_weight_offset)},
    {"layer_count", offsetof(image::FileHeader, layer_count)},
};

}  // namespace

TEST_CASE("the synthetic model variants verify and run", "[verify]") {
  const std::string dir = testing::memory_temp_dir("agree-ok");
  for (const Variant &v : variants()) {
    const std::string path = dir + "/m.colibri";
    REQUIRE_FALSE(testing::write_synthetic_model(path, v.config, v.dtype));
    Compared c = compare(path);
    INFO(v.name << ": " << c.verify.message << " / " << c.run.message);
    CHECK(c.verify.ok);
    CHECK(c.run.ok);
    CHECK(verifies(path, /*deep=*/true).ok);
  }
}

TEST_CASE("a fixed-header model field that disagrees with the metadata fails verify and open, naming the field",
          "[verify][header]") {
  const std::string dir = testing::memory_temp_dir("agree-header");
  for (const Variant &v : variants()) {
    const std::string good = dir + "/good.colibri";
    REQUIRE_FALSE(testing::write_synthetic_model(good, v.config, v.dtype));
    const auto original = testing::read_file(good);
    image::FileHeader h;
    std::memcpy(&h, original.data(), sizeof h);
    // Another tensor's start: a gate offset the reader accepts (it is the start of a tensor).
    Error e;
    auto img = image::Image::open(good, {}, &e);
    REQUIRE(img);
    const uint64_t other_tensor = img->find(model::names::kOutputNorm)->offset;
    for (const HeaderField &f : kHeaderModelFields) {
      uint64_t stored;
      std::memcpy(&stored, original.data() + f.offset, sizeof stored);
      for (uint64_t value : {stored + 1, stored == 0 ? 1 : uint64_t{0}, uint64_t{1} << 31,
                             std::string(f.name) == "gate_weight_offset" ? other_tensor : stored + 2}) {
        auto bytes = original;
        set_u64(bytes, f.offset, value);
        REQUIRE(testing::refresh_header_checksum(bytes));
        const std::string path = dir + "/bad.colibri";
        testing::write_file(path, bytes);
        Compared c = compare(path);
        REQUIRE_AGREE(c, v.name << ": header " << f.name << " " << stored << " -> " << value);
        CHECK_FALSE(c.verify.ok);
        // The reader's messages spell the field with spaces ("gate weight offset").
        std::string spaced = f.name;
        std::replace(spaced.begin(), spaced.end(), '_', ' ');
        CHECK_THAT(c.verify.message, Contains(f.name) || Contains(spaced));
      }
    }
  }
}

TEST_CASE("a header mismatch message names the field, both values and the fix",
          "[verify][header]") {
  const std::string dir = testing::memory_temp_dir("agree-message");
  const std::string path = dir + "/m.colibri";
  REQUIRE_FALSE(testing::write_synthetic_model(path));
  auto bytes = testing::read_file(path);
  set_u64(bytes, offsetof(image::FileHeader, expert_count), 8);
  REQUIRE(testing::refresh_header_checksum(bytes));
  testing::write_file(path, bytes);
  Outcome v = verifies(path);
  REQUIRE_FALSE(v.ok);
  CHECK_THAT(v.message, Contains("header field expert_count is 8") && Contains("gives 4") && Contains("repack"));
  Outcome r = runs(path);
  CHECK_THAT(r.message, Contains("header field expert_count is 8"));
}

TEST_CASE("metadata fields out of range, mistyped, missing or inconsistent get the same answer from verify and run",
          "[verify][metadata]") {
  const std::string dir = testing::memory_temp_dir("agree-meta");
  size_t cases = 0, failing = 0;
  for (const Variant &v : variants()) {
    const testing::ModelImageParts base = testing::model_parts(v.config, v.dtype);
    // Each edit changes the "model" object only; tensors and header stay those of the config.
    std::vector<std::pair<std::string, std::function<void(json &)>>> edits;
    for (auto it = base.metadata["model"].begin(); it != base.metadata["model"].end(); ++it) {
      const std::string key = it.key();
      edits.push_back({key + " removed", [key](json &m) { m.erase(key); }});
      edits.push_back({key + " as a string", [key](json &m) { m[key] = "x"; }});
      edits.push_back({key + " null", [key](json &m) { m[key] = nullptr; }});
      if (it->is_number()) {
        for (double x : {0.0, -1.0, 2147483648.0, 1e300}) {
          // %g, not std::to_string: 1e300 would be a 301-digit word, which Catch2's line
          // wrapper cannot break (it throws while printing a failure).
          char text[32];
          std::snprintf(text, sizeof text, "%g", x);
          edits.push_back({key + " = " + text, [key, x](json &m) {
                             if (m[key].is_number_unsigned() && x >= 0 && x < 1e19)
                               m[key] = static_cast<uint64_t>(x);
                             else
                               m[key] = x;
                           }});
        }
        if (it->is_number_unsigned()) {
          edits.push_back({key + " + 1", [key](json &m) { m[key] = m[key].get<uint64_t>() + 1; }});
          edits.push_back({key + " + 8", [key](json &m) { m[key] = m[key].get<uint64_t>() + 8; }});
        }
      } else if (it->is_boolean()) {
        edits.push_back({key + " flipped", [key](json &m) { m[key] = !m[key].get<bool>(); }});
      } else if (it->is_string()) {
        edits.push_back({key + " unknown", [key](json &m) { m[key] = "no-such-" + key; }});
      } else if (it->is_array()) {
        edits.push_back({key + " shorter", [key](json &m) { m[key].erase(m[key].size() - 1); }});
        edits.push_back({key + " longer", [key](json &m) { m[key].push_back(1); }});
        edits.push_back({key + " flipped", [key](json &m) {
                           for (auto &x : m[key]) x = x.get<uint64_t>() ? 0 : 1;
                         }});
      }
    }
    edits.push_back({"model is an array", [](json &m) { m = json::array(); }});
    edits.push_back({"top_k 9 of 4 experts", [](json &m) { m["top_k"] = 9; }});
    edits.push_back({"expert_count 0", [](json &m) { m["expert_count"] = 0; }});
    edits.push_back({"hidden 2^31", [](json &m) { m["hidden_size"] = uint64_t{1} << 31; }});
    edits.push_back({"heads not a multiple of kv heads", [](json &m) { m["kv_head_count"] = 3; }});
    edits.push_back({"rms_norm_eps below fp32", [](json &m) { m["rms_norm_eps"] = 1e-300; }});
    edits.push_back({"rope_theta beyond fp32", [](json &m) { m["rope_theta"] = 1e300; }});
    edits.push_back({"clip_qkv NaN-like", [](json &m) { m["clip_qkv"] = -0.5; }});
    for (const auto &[what, edit] : edits) {
      testing::ModelImageParts parts = base;
      edit(parts.metadata["model"]);
      const std::string path = dir + "/m.colibri";
      REQUIRE_FALSE(testing::write_model_parts(path, parts));
      Compared c = compare(path);
      REQUIRE_AGREE(c, v.name << ": " << what);
      ++cases;
      failing += c.run.ok ? 0 : 1;
    }
  }
  INFO(cases << " cases, " << failing << " refused");
  CHECK(failing > cases / 2);
  CHECK(failing < cases);  // benign edits (rope_theta, norm_topk_prob, ...) still run
}

TEST_CASE("a tensor missing, misshaped, retyped or renamed, or an extra one, gets the same answer from verify and run",
          "[verify][tensors]") {
  const std::string dir = testing::memory_temp_dir("agree-tensors");
  size_t cases = 0;
  for (const Variant &v : variants()) {
    const testing::ModelImageParts base = testing::model_parts(v.config, v.dtype);
    for (size_t i = 0; i < base.tensors.size(); ++i) {
      const image::TensorSpec &t = base.tensors[i];
      std::vector<std::pair<std::string, std::function<void(testing::ModelImageParts &)>>> edits;
      edits.push_back({"missing", [i](testing::ModelImageParts &p) { p.tensors.erase(p.tensors.begin() + i); }});
      edits.push_back({"outer dimension + 1", [i](testing::ModelImageParts &p) { p.tensors[i].shape[0] += 1; }});
      edits.push_back({"one more dimension", [i](testing::ModelImageParts &p) {
                         p.tensors[i].shape.insert(p.tensors[i].shape.begin(), 1);
                       }});
      edits.push_back({"renamed", [i](testing::ModelImageParts &p) { p.tensors[i].name += "_renamed"; }});
      if (t.shape.size() == 1 || t.dtype == image::DType::F32)
        edits.push_back({"f16 instead of f32", [i](testing::ModelImageParts &p) {
                           p.tensors[i].dtype = image::DType::F16;
                           p.tensors[i].group_size = 0;
                         }});
      for (const auto &[what, edit] : edits) {
        testing::ModelImageParts parts = base;
        edit(parts);
        // Header fields follow the edited directory, so that only the binding can object.
        model::ModelConfig c;
        REQUIRE(model::ModelConfig::from_json(parts.metadata["model"], &c).ok());
        parts.header = model::header_fields(c, parts.tensors);
        bool gate_present = false;
        for (const auto &s : parts.tensors) gate_present = gate_present || s.name == parts.header.gate_tensor_name;
        if (!gate_present) parts.header.gate_tensor_name.clear();
        const std::string path = dir + "/m.colibri";
        REQUIRE_FALSE(testing::write_model_parts(path, parts));
        Compared r = compare(path);
        const bool vector_to_f16 = what == std::string("f16 instead of f32") && t.shape.size() > 1 &&
                                   t.name.find(model::names::kRouter) == std::string::npos &&
                                   t.name.find(model::names::kSharedExpertGate) == std::string::npos;
        REQUIRE_AGREE(r, v.name << ": tensor " << t.name << " " << what);
        if (!vector_to_f16) {  // a float matrix in f16 is a valid model: it runs
          INFO(v.name << ": tensor " << t.name << " " << what);
          CHECK_FALSE(r.verify.ok);
        }
        ++cases;
      }
    }
    {
      testing::ModelImageParts parts = base;
      parts.tensors.push_back({"blk.0.unexpected", image::DType::F32, 0, {4}});
      const std::string path = dir + "/m.colibri";
      REQUIRE_FALSE(testing::write_model_parts(path, parts));
      Compared r = compare(path);
      REQUIRE_AGREE(r, v.name << ": extra tensor");
      CHECK_THAT(r.verify.message, Contains("blk.0.unexpected"));
    }
  }
  INFO(cases << " cases");
  CHECK(cases > 200);
}

TEST_CASE("a tokenizer.json that cannot be loaded fails verify as it fails a text run", "[verify][tokenizer]") {
  const std::string dir = testing::memory_temp_dir("agree-tok");
  testing::ModelImageParts parts = testing::model_parts(testing::tiny_model_config());
  parts.metadata["tokenizer"]["json"] = R"({"model": {"type": "WordPiece", "vocab": {}}})";
  const std::string path = dir + "/m.colibri";
  REQUIRE_FALSE(testing::write_model_parts(path, parts));
  Compared c = compare(path);
  REQUIRE_AGREE(c, "unsupported tokenizer");
  CHECK_THAT(c.verify.message, Contains("tokenizer"));
  // A chat template that does not parse leaves plain completion working: a warning only.
  parts = testing::model_parts(testing::tiny_model_config());
  parts.metadata["tokenizer"]["chat_template"] = "{% for %}";
  REQUIRE_FALSE(testing::write_model_parts(path, parts));
  modeltool::VerifyReport report;
  CHECK(modeltool::verify_image(path, {}, &report).ok());
  REQUIRE(report.warnings.size() == 1);
  CHECK_THAT(report.warnings[0], Contains("chat template"));
  CHECK(runs(path).ok);
}

TEST_CASE("random checksum-fixed mutations of header, directory and metadata fail verify exactly when they fail a run",
          "[verify][property]") {
  const std::string dir = testing::memory_temp_dir("agree-random");
  size_t mutants = 0, refused = 0;
  for (const Variant &v : variants()) {
    const std::string good = dir + "/good.colibri";
    REQUIRE_FALSE(testing::write_synthetic_model(good, v.config, v.dtype));
    const auto original = testing::read_file(good);
    image::FileHeader h;
    std::memcpy(&h, original.data(), sizeof h);
    const uint64_t directory_end = h.metadata_offset;
    const uint64_t metadata_end = h.metadata_offset + h.metadata_size;
    std::mt19937_64 rng(0xC011B121u + mutants);
    // 125 mutants per variant: 500 in all.
    for (int n = 0; n < 125; ++n, ++mutants) {
      auto bytes = original;
      std::string what;
      const int edits = 1 + static_cast<int>(rng() % 3);
      for (int k = 0; k < edits; ++k) {
        // The three regions equally often (the metadata is most of the bytes).
        const int region = static_cast<int>(rng() % 3);
        const uint64_t begin = region == 0 ? 0 : region == 1 ? image::kHeaderSize : directory_end;
        const uint64_t end = region == 0 ? image::kHeaderSize : region == 1 ? directory_end : metadata_end;
        uint64_t pos = begin + rng() % (end - begin);
        if (region < 2 && rng() % 2 == 0) {
          // A whole 8-byte field set to an interesting value.
          pos &= ~uint64_t{7};
          const uint64_t values[] = {0, 1, 2, 3, 31, 32, 64, 4096, uint64_t{1} << 31, ~uint64_t{0}, rng()};
          uint64_t value = values[rng() % (sizeof values / sizeof values[0])];
          uint64_t old;
          std::memcpy(&old, bytes.data() + pos, 8);
          if (rng() % 3 == 0) value = old + 1 + rng() % 4;
          set_u64(bytes, pos, value);
          what += " u64@" + std::to_string(pos) + "=" + std::to_string(value);
        } else {
          const unsigned char value = static_cast<unsigned char>(rng());
          what += " byte@" + std::to_string(pos) + "=" + std::to_string(value);
          bytes[pos] = value;
        }
      }
      if (!testing::refresh_header_checksum(bytes)) continue;  // the sizes no longer fit: the reader's job
      const std::string path = dir + "/m.colibri";
      testing::write_file(path, bytes);
      Compared c = compare(path);
      REQUIRE_AGREE(c, v.name << ": mutant " << n << ":" << what);
      refused += c.run.ok ? 0 : 1;
    }
  }
  INFO(mutants << " mutants, " << refused << " refused");
  CHECK(refused > mutants / 4);
  CHECK(refused < mutants);
}

TEST_CASE("verify --deep requires zero padding between tensors, which plain verify and run do not read", "[verify][padding]") {
  const std::string dir = testing::memory_temp_dir("agree-pad");
  testing::ModelImageParts parts = testing::model_parts(testing::tiny_model_config());
  parts.alignment = 4096;  // gaps between tensors
  const std::string path = dir + "/m.colibri";
  REQUIRE_FALSE(testing::write_model_parts(path, parts));
  modeltool::VerifyOptions deep;
  deep.deep = true;
  modeltool::VerifyReport report;
  REQUIRE(modeltool::verify_image(path, deep, &report).ok());
  CHECK(report.padding_bytes > 0);
  auto bytes = testing::read_file(path);
  image::FileHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  // One byte in the gap between the metadata and the first tensor, one between two tensors.
  for (uint64_t pos : {h.weight_data_offset - 1, h.metadata_offset + h.metadata_size + 3}) {
    auto damaged = bytes;
    damaged[pos] = 0x5A;
    testing::write_file(path, damaged);
    CHECK(verifies(path).ok);
    CHECK(runs(path).ok);
    Error e = modeltool::verify_image(path, deep, &report);
    REQUIRE_FALSE(e.ok());
    CHECK_THAT(e.message, Contains("byte " + std::to_string(pos) + " is 0x5A") && Contains("padding"));
  }
}

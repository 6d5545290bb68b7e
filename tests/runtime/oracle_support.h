// tests/runtime/oracle_support.h — loading the committed transformers oracle fixtures
// (tests/fixtures/oracle/<case>/) and converting them to images with colibri-model.
#pragma once

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.h"
#include "runtime/session.h"
#include "support/synthetic_image.h"

namespace colibri::testing {

inline const std::vector<std::string> kOracleCases = {"mixtral_gqa", "mixtral_tied_top3", "qwen2_moe_shared",
                                                      "qwen3_moe_qknorm", "olmoe_clip", "glm4_moe_groups",
                                                      "minimax_m2_sigmoid", "qwen3_moe_yarn", "gpt_oss_sinks",
                                                      "gpt_oss_mxfp4", "deepseek_v3_mla", "deepseek_v3_direct_q"};

struct OracleCase {
  std::string name;
  nlohmann::json oracle;
  std::vector<int32_t> input_ids;
  std::vector<int32_t> greedy_tokens;
  std::vector<float> logits;  // [input_ids.size(), vocab]
  size_t vocab = 0;
};

inline std::string fixture_dir(const std::string &name) { return std::string(COLIBRI_SOURCE_DIR) + "/tests/fixtures/oracle/" + name; }

inline OracleCase load_oracle(const std::string &name) {
  OracleCase c;
  c.name = name;
  std::ifstream in(fixture_dir(name) + "/oracle.json");
  c.oracle = nlohmann::json::parse(in);
  c.input_ids = c.oracle["input_ids"].get<std::vector<int32_t>>();
  c.greedy_tokens = c.oracle["greedy_tokens"].get<std::vector<int32_t>>();
  c.vocab = c.oracle["logits_shape"][1].get<size_t>();
  auto bytes = read_file(fixture_dir(name) + "/logits.bin");
  c.logits.resize(bytes.size() / 4);
  std::memcpy(c.logits.data(), bytes.data(), bytes.size());
  return c;
}

// Converts the fixture with colibri-model (any --dtype) into a temp dir; returns the path.
// dtype "": the converter's default (no --dtype).
inline std::string convert_fixture(const std::string &name, const std::string &dtype) {
  static const std::string dir = temp_dir("oracle");
  std::string out = dir + "/" + name + "." + (dtype.empty() ? "default" : dtype) + ".colibri";
  std::string cmd = std::string(COLIBRI_MODEL_EXE) + " convert " + fixture_dir(name) + " -o " + out +
                    (dtype.empty() ? "" : " --dtype " + dtype) + " --force > /dev/null";
  if (std::system(cmd.c_str()) != 0) return "";
  return out;
}

inline std::unique_ptr<model::Model> load_model(const std::string &path) {
  Error err;
  auto m = model::Model::load(path, {}, &err);
  if (!m) std::fprintf(stderr, "load failed: %s\n", err.message.c_str());
  return m;
}

}  // namespace colibri::testing

// tests/runtime/test_bundled_model.cpp — the bundled model (models/colibri-tiny-moe, a
// trained Qwen3-MoE stored in bf16) converts and matches the transformers reference stored
// beside it: logits of the first 32 held-out tokens and the 32-token greedy continuation.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <fstream>

#include "runtime/oracle_support.h"

using namespace colibri;

TEST_CASE("the bundled model matches its transformers reference logits and greedy tokens", "[oracle][bundled]") {
  const std::string dir = std::string(COLIBRI_SOURCE_DIR) + "/models/colibri-tiny-moe";
  std::ifstream in(dir + "/reference.json");
  REQUIRE(in.good());
  auto ref = nlohmann::json::parse(in);
  std::string image = testing::temp_dir("bundled") + "/tiny.colibri";
  std::string cmd = std::string(COLIBRI_MODEL_EXE) + " convert " + dir + " -o " + image + " > /dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  auto m = testing::load_model(image);
  REQUIRE(m);
  const size_t V = m->config().vocab_size;

  auto ids = ref["reference_logits"]["token_ids"].get<std::vector<int32_t>>();
  auto bytes = testing::read_file(dir + "/reference_logits.bin");
  REQUIRE(bytes.size() == ids.size() * V * 4);
  std::vector<float> expected(ids.size() * V);
  std::memcpy(expected.data(), bytes.data(), bytes.size());

  runtime::SessionOptions so;
  so.context_length = 256;
  so.max_batch_tokens = 64;
  so.max_logit_rows = 64;
  so.threads = 2;
  Error err;
  auto s = runtime::Session::create(*m, so, &err);
  REQUIRE(s);
  std::vector<runtime::BatchEntry> batch;
  for (size_t i = 0; i < ids.size(); ++i) batch.push_back({0, static_cast<uint32_t>(i), ids[i], 1});
  REQUIRE(s->forward(batch.data(), batch.size()).ok());
  double worst = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    for (size_t v = 0; v < V; ++v) worst = std::max(worst, static_cast<double>(std::fabs(s->logits(i)[v] - expected[i * V + v])));
  WARN("bundled model: max |logit diff| vs transformers = " << worst);
  CHECK(worst < 1e-3);

  auto prompt = ref["greedy"]["prompt_ids"].get<std::vector<int32_t>>();
  auto want = ref["greedy"]["generated_ids"].get<std::vector<int32_t>>();
  s->reset_all();
  batch.clear();
  for (size_t i = 0; i < prompt.size(); ++i) batch.push_back({0, static_cast<uint32_t>(i), prompt[i], i + 1 == prompt.size()});
  REQUIRE(s->forward(batch.data(), batch.size()).ok());
  std::vector<int32_t> got;
  for (size_t step = 0; step < want.size(); ++step) {
    int32_t next = static_cast<int32_t>(std::max_element(s->logits(0), s->logits(0) + V) - s->logits(0));
    got.push_back(next);
    runtime::BatchEntry e{0, static_cast<uint32_t>(prompt.size() + step), next, 1};
    REQUIRE(s->forward(&e, 1).ok());
  }
  CHECK(got == want);
}

// tests/runtime/test_oracle.cpp — the forward pass matches transformers on every oracle
// fixture: logits at every position, and the 16-token greedy continuation.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>

#include "runtime/oracle_support.h"

using namespace colibri;

namespace {

struct Comparison {
  double max_abs_diff = 0;
  std::vector<int32_t> greedy;
};

int32_t argmax(const float *row, size_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

// Prefill the prompt in one batch (logits at every position), then greedy-decode 16 tokens.
// isa caps the kernel level (the session gets the best the CPU has at or below it).
Comparison run_case(const testing::OracleCase &oc, const model::Model &m, size_t threads, kernels::Isa isa,
                    std::vector<float> *all_logits = nullptr) {
  runtime::SessionOptions so;
  so.context_length = 64;
  so.max_batch_tokens = 32;
  so.max_logit_rows = 32;
  so.threads = threads;
  so.max_isa = isa;
  Error err;
  auto s = runtime::Session::create(m, so, &err);
  REQUIRE(s);
  std::vector<runtime::BatchEntry> batch;
  for (size_t i = 0; i < oc.input_ids.size(); ++i)
    batch.push_back({0, static_cast<uint32_t>(i), oc.input_ids[i], 1});
  Error fe = s->forward(batch.data(), batch.size());
  INFO(fe.message);
  REQUIRE(fe.ok());
  Comparison c;
  for (size_t i = 0; i < oc.input_ids.size(); ++i)
    for (size_t v = 0; v < oc.vocab; ++v) {
      double d = std::fabs(static_cast<double>(s->logits(i)[v]) - oc.logits[i * oc.vocab + v]);
      c.max_abs_diff = std::max(c.max_abs_diff, d);
      if (all_logits) all_logits->push_back(s->logits(i)[v]);
    }
  int32_t next = argmax(s->logits(oc.input_ids.size() - 1), oc.vocab);
  for (size_t step = 0; step < oc.greedy_tokens.size(); ++step) {
    c.greedy.push_back(next);
    runtime::BatchEntry e{0, static_cast<uint32_t>(oc.input_ids.size() + step), next, 1};
    REQUIRE(s->forward(&e, 1).ok());
    next = argmax(s->logits(0), oc.vocab);
  }
  return c;
}

}  // namespace

TEST_CASE("f32 images match transformers logits within 1e-4 and greedy tokens exactly", "[oracle]") {
  for (const std::string &name : testing::kOracleCases) {
    SECTION(name) {
      auto oc = testing::load_oracle(name);
      std::string path = testing::convert_fixture(name, "f32");
      REQUIRE(!path.empty());
      auto m = testing::load_model(path);
      REQUIRE(m);
      Comparison c = run_case(oc, *m, 2, kernels::Isa::Avx512);
      WARN(name << ": max |logit diff| vs transformers (f32) = " << c.max_abs_diff);
      CHECK(c.max_abs_diff < 1e-4);
      CHECK(c.greedy == oc.greedy_tokens);
    }
  }
}

// The error here is the weights' rounding, not the engine's arithmetic (which is fp32): the
// oracle ran the fp32 weights. f16 keeps 11 significant bits and stays within 2e-2 on every
// fixture. bf16 keeps 8: on these deliberately sharp random models (weights std 0.15, logits
// up to |10|) its rounding alone moves logits by up to ~0.11, and in qwen3_moe_qknorm (router
// margin 1.06e-3) it flips a routing decision, which changes the continuation. Those are
// the documented bounds (docs/numerics.md); the engine's own error is the f32 row (~1e-5).
TEST_CASE("f16 images stay within 2e-2 of transformers and keep the greedy tokens", "[oracle]") {
  for (const std::string &name : testing::kOracleCases) {
    SECTION(name) {
      auto oc = testing::load_oracle(name);
      std::string path = testing::convert_fixture(name, "f16");
      REQUIRE(!path.empty());
      auto m = testing::load_model(path);
      REQUIRE(m);
      Comparison c = run_case(oc, *m, 2, kernels::Isa::Avx512);
      WARN(name << "/f16: max |logit diff| vs transformers = " << c.max_abs_diff);
      CHECK(c.max_abs_diff <= 2e-2);
      // Near-ties (top-2 gap < 1e-3 in the oracle) may flip; the fixtures have none (min gap 0.018).
      CHECK(c.greedy == oc.greedy_tokens);
    }
  }
}

TEST_CASE("bf16 images stay within the documented bf16 rounding bound", "[oracle]") {
  for (const std::string &name : testing::kOracleCases) {
    SECTION(name) {
      auto oc = testing::load_oracle(name);
      std::string path = testing::convert_fixture(name, "bf16");
      REQUIRE(!path.empty());
      auto m = testing::load_model(path);
      REQUIRE(m);
      std::vector<float> logits;
      Comparison c = run_case(oc, *m, 2, kernels::Isa::Avx512, &logits);
      WARN(name << "/bf16: max |logit diff| vs transformers = " << c.max_abs_diff);
      if (oc.oracle.contains("bf16_logits_file")) {
        // The fixture holds transformers' logits for the same bf16-rounded matrices (gpt-oss:
        // its rounding alone moves logits by 0.142): the engine's own error is fp32 arithmetic.
        auto bytes = testing::read_file(testing::fixture_dir(name) + "/" + oc.oracle["bf16_logits_file"].get<std::string>());
        REQUIRE(bytes.size() == logits.size() * sizeof(float));
        std::vector<float> expected(logits.size());
        std::memcpy(expected.data(), bytes.data(), bytes.size());
        double worst = 0;
        for (size_t i = 0; i < logits.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(logits[i] - expected[i])));
        WARN(name << "/bf16: max |logit diff| vs transformers on the bf16-rounded weights = " << worst);
        CHECK(worst < 1e-4);
        CHECK(c.max_abs_diff <= oc.oracle["bf16_rounding_max_abs_diff"].get<double>() + 1e-3);
        CHECK(c.greedy == oc.oracle["bf16_greedy_tokens"].get<std::vector<int32_t>>());
      } else if (name == "qwen3_moe_qknorm") {
        // Routing flip (margin 1.06e-3 < the bf16 perturbation): logits move by ~2.2 at the
        // affected positions. Bounded, reported, and documented rather than hidden.
        CHECK(c.max_abs_diff <= 2.5);
      } else if (oc.oracle.contains("bf16_greedy_tokens")) {
        // Sigmoid routers (GLM-4.5, MiniMax-M2): bf16 rounding changes the continuation in
        // transformers too; the fixture holds transformers' greedy tokens for the same
        // bf16-rounded matrices, and the engine must produce exactly those.
        CHECK(c.max_abs_diff <= 0.12);
        CHECK(c.greedy == oc.oracle["bf16_greedy_tokens"].get<std::vector<int32_t>>());
      } else {
        CHECK(c.max_abs_diff <= 0.12);
        CHECK(c.greedy == oc.greedy_tokens);
      }
    }
  }
}

// gpt-oss as OpenAI ships it: converted with no --dtype, the experts stay the checkpoint's MXFP4
// blocks (the f32 case above decodes them exactly and matches within 1e-4). The MXFP4 experts run
// on int8-quantised activations (docs/numerics.md), so the bound here is that quantisation's, not
// fp32 arithmetic's (measured 0.159 with logits up to |10.4|); the greedy continuation must be
// transformers'.
TEST_CASE("an MXFP4 checkpoint converted as shipped keeps transformers' greedy tokens", "[oracle]") {
  auto oc = testing::load_oracle("gpt_oss_mxfp4");
  std::string path = testing::convert_fixture("gpt_oss_mxfp4", "");
  REQUIRE(!path.empty());
  auto m = testing::load_model(path);
  REQUIRE(m);
  CHECK(m->image().find("blk.0.ffn_gate_exps")->dtype == image::DType::MXFP4);
  Comparison c = run_case(oc, *m, 2, kernels::Isa::Avx512);
  WARN("gpt_oss_mxfp4/as shipped: max |logit diff| vs transformers = " << c.max_abs_diff);
  CHECK(c.max_abs_diff <= 0.25);
  CHECK(c.greedy == oc.greedy_tokens);
}

TEST_CASE("results are bitwise identical for 1, 2 and 3 threads, scalar and AVX2 kernels agree within 1e-5 (q8 activations: until a code flips)", "[oracle][determinism]") {
  // The q8-activation dtypes quantise each activation row, and their kernels are bitwise equal
  // across ISAs for equal inputs (kernels_tests); the f32 work before them (attention, norms)
  // differs by rounding, and an activation within that rounding of a q8 code boundary gets a
  // different code. A flip at prompt position p moves p's logits and, through attention, those
  // after it, by up to the dtype's own quantisation noise (0.3 to 2.7 against transformers on
  // these sharp random fixtures); positions before p stay at the f32 level. A kernel that
  // disagrees would show from position 0 on, in every run. So per run: the positions before the
  // first one beyond the f32 bound agree within it, position 0 among them; no difference exceeds
  // 3; and at most a quarter of the runs (fixture × dtype × ISA) see a flip at all.
  size_t q8_runs = 0, q8_runs_with_flip = 0;
  for (const std::string &name : {std::string("mixtral_gqa"), std::string("qwen2_moe_shared"),
                                  std::string("glm4_moe_groups"), std::string("gpt_oss_sinks"),
                                  std::string("gpt_oss_mxfp4"), std::string("deepseek_v3_mla")}) {
    auto oc = testing::load_oracle(name);
    // q8f16, q4 and mxfp4 (format version 2) take the q8-activation kernels as q8 does.
    for (const char *dtype : {"f32", "q8", "q8f16", "q4", "mxfp4"}) {
      std::string path = testing::convert_fixture(name, dtype);
      REQUIRE(!path.empty());
      auto m = testing::load_model(path);
      REQUIRE(m);
      std::vector<float> one, two, three, scalar, avx2;
      run_case(oc, *m, 1, kernels::Isa::Avx512, &one);
      run_case(oc, *m, 2, kernels::Isa::Avx512, &two);
      run_case(oc, *m, 3, kernels::Isa::Avx512, &three);
      run_case(oc, *m, 2, kernels::Isa::Scalar, &scalar);
      // On an AVX-512 machine this runs the AVX2 kernels; elsewhere it repeats the best level.
      run_case(oc, *m, 2, kernels::Isa::Avx2, &avx2);
      CHECK(std::memcmp(one.data(), two.data(), one.size() * 4) == 0);
      CHECK(std::memcmp(one.data(), three.data(), one.size() * 4) == 0);
      // Per prompt position, the largest |best - other| over the vocabulary. The f32 paths
      // differ by rounding only: 1e-5 relative to the largest logit, |10|.
      constexpr double kF32Bound = 1e-5 * 16;
      const bool q8_activations = std::string(dtype) != "f32";
      auto check_agreement = [&](const std::vector<float> &other, const char *what) {
        std::vector<double> per_position(oc.input_ids.size(), 0.0);
        for (size_t i = 0; i < one.size(); ++i)
          per_position[i / oc.vocab] = std::max(per_position[i / oc.vocab], static_cast<double>(std::fabs(one[i] - other[i])));
        const double worst = *std::max_element(per_position.begin(), per_position.end());
        size_t first_flip = 0;
        while (first_flip < per_position.size() && per_position[first_flip] <= kF32Bound) ++first_flip;
        WARN(name << "/" << dtype << ": max |best - " << what << "| = " << worst << " (first position beyond "
                  << kF32Bound << ": " << first_flip << " of " << per_position.size() << ")");
        if (q8_activations) {
          ++q8_runs;
          if (first_flip < per_position.size()) ++q8_runs_with_flip;
          CHECK(first_flip > 0);
          CHECK(worst <= 3.0);
        } else {
          CHECK(worst <= kF32Bound);
        }
      };
      check_agreement(scalar, "scalar");
      check_agreement(avx2, "avx2");  // on an AVX-512 machine the AVX2 kernels; else the best level again
    }
  }
  WARN("q8-activation runs with a code flip: " << q8_runs_with_flip << " of " << q8_runs);
  CHECK(q8_runs_with_flip * 4 <= q8_runs);
}

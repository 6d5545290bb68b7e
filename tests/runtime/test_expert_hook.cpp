// tests/runtime/test_expert_hook.cpp — the per-expert compute hook (Session::set_expert_hook,
// the engine side of the C API's colibri_expert_fn): the engine routes, dispatches and merges;
// the hook computes each active expert on its gathered rows.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/oracle_support.h"

using namespace colibri;

namespace {

// A reference SwiGLU expert on f32 weights: out = W_down · (silu(W_gate · x) ⊙ (W_up · x)).
struct ReferenceExperts {
  const model::Model *model = nullptr;
  std::vector<uint32_t> calls_layer, calls_expert;
  std::vector<size_t> calls_rows;
  int32_t fail_at_call = -1;  // return 7 at this call index

  static int32_t compute(void *user, uint32_t layer, uint32_t expert, const float *rows_in, size_t row_count,
                         size_t hidden, float *rows_out) {
    auto *self = static_cast<ReferenceExperts *>(user);
    if (static_cast<int32_t>(self->calls_layer.size()) == self->fail_at_call) return 7;
    self->calls_layer.push_back(layer);
    self->calls_expert.push_back(expert);
    self->calls_rows.push_back(row_count);
    const model::LayerWeights &w = self->model->layers()[layer];
    const size_t F = w.experts_gate.rows;
    auto gate = reinterpret_cast<const float *>(w.experts_gate.matrix(expert));
    auto up = reinterpret_cast<const float *>(w.experts_up.matrix(expert));
    auto down = reinterpret_cast<const float *>(w.experts_down.matrix(expert));
    std::vector<float> h(F);
    for (size_t r = 0; r < row_count; ++r) {
      const float *x = rows_in + r * hidden;
      for (size_t f = 0; f < F; ++f) {
        double g = 0, u = 0;
        for (size_t i = 0; i < hidden; ++i) {
          g += static_cast<double>(gate[f * hidden + i]) * x[i];
          u += static_cast<double>(up[f * hidden + i]) * x[i];
        }
        h[f] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
      }
      for (size_t o = 0; o < hidden; ++o) {
        double acc = 0;
        for (size_t f = 0; f < F; ++f) acc += static_cast<double>(down[o * F + f]) * h[f];
        rows_out[r * hidden + o] = static_cast<float>(acc);
      }
    }
    return 0;
  }
};

std::unique_ptr<runtime::Session> make_session(const model::Model &m) {
  runtime::SessionOptions so;
  so.context_length = 64;
  so.max_batch_tokens = 32;
  so.threads = 2;
  Error err;
  auto s = runtime::Session::create(m, so, &err);
  REQUIRE(s);
  return s;
}

}  // namespace

TEST_CASE("expert hook: called once per active expert in ascending order, results match the built-in experts",
          "[engine][moe][hook]") {
  std::string path = testing::convert_fixture("mixtral_gqa", "f32");
  REQUIRE(!path.empty());
  auto m = testing::load_model(path);
  REQUIRE(m);
  const size_t H = m->config().hidden_size, K = m->config().top_k;
  const size_t tokens = 5;
  std::vector<float> hidden(tokens * H), builtin(tokens * H), hooked(tokens * H);
  for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = std::cos(0.11f * static_cast<float>(i));

  auto s = make_session(*m);
  REQUIRE(s->moe_layer(1, hidden.data(), tokens, nullptr, builtin.data()).ok());

  ReferenceExperts ref;
  ref.model = m.get();
  s->set_expert_hook({&ReferenceExperts::compute, &ref});
  REQUIRE(s->moe_layer(1, hidden.data(), tokens, nullptr, hooked.data()).ok());
  REQUIRE(!ref.calls_expert.empty());
  CHECK(std::is_sorted(ref.calls_expert.begin(), ref.calls_expert.end()));
  CHECK(std::adjacent_find(ref.calls_expert.begin(), ref.calls_expert.end()) == ref.calls_expert.end());
  size_t rows = 0;
  for (size_t i = 0; i < ref.calls_rows.size(); ++i) {
    CHECK(ref.calls_layer[i] == 1);
    rows += ref.calls_rows[i];
  }
  CHECK(rows == tokens * K);  // every (token, slot) pair went to exactly one call
  double diff = 0;
  for (size_t i = 0; i < builtin.size(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(builtin[i] - hooked[i])));
  CHECK(diff < 1e-4);

  // Removing the hook restores the built-in kernels bitwise.
  s->set_expert_hook({});
  std::vector<float> again(tokens * H);
  REQUIRE(s->moe_layer(1, hidden.data(), tokens, nullptr, again.data()).ok());
  CHECK(std::memcmp(again.data(), builtin.data(), again.size() * sizeof(float)) == 0);
}

TEST_CASE("expert hook: used by the forward pass too, and a non-zero return aborts with the layer and expert",
          "[engine][moe][hook]") {
  std::string path = testing::convert_fixture("mixtral_gqa", "f32");
  REQUIRE(!path.empty());
  auto m = testing::load_model(path);
  REQUIRE(m);
  auto s = make_session(*m);
  ReferenceExperts ref;
  ref.model = m.get();
  s->set_expert_hook({&ReferenceExperts::compute, &ref});
  runtime::BatchEntry e{0, 0, 1, 1};
  REQUIRE(s->forward(&e, 1).ok());
  // One token, top-k experts in each of the model's MoE layers.
  CHECK(ref.calls_expert.size() == m->config().top_k * m->config().layer_count);

  ref.calls_layer.clear();
  ref.calls_expert.clear();
  ref.calls_rows.clear();
  ref.fail_at_call = 1;
  s->reset_all();
  Error err = s->forward(&e, 1);
  CHECK(err.kind == ErrorKind::InvalidArgument);
  CHECK_THAT(err.message, Catch::Contains("expert function returned 7") && Catch::Contains("layer 0"));
}

// core/runtime/moe.cpp — the FFN block: the MoE block (router → top-k → dispatch →
// experts → weighted merge, plus the optional shared expert) or a dense SwiGLU FFN.
//
// Routing (docs/architecture.md §4): router logits in fp32, softmax with the max subtracted, top-k
// with ties to the lower expert index, weights renormalised iff norm_topk_prob (Mixtral:
// always); or sigmoid scores with a selection bias and group limits (select_top_k_sigmoid). Dispatch groups the batch's (token, slot) pairs by expert once per layer with a
// counting sort, so each active expert's weights are read once per batch however many
// tokens chose it. Experts run in two parallel phases over (expert, row block) tasks: gate
// and up projections fused with SiLU·mul (gpt-oss: biases and the clamped SwiGLU) per row
// stripe, then the down projection (and its bias). The merge
// sums each token's k expert outputs in slot order: no atomics, and the result does not
// depend on the thread count or on the other tokens in the batch.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/buffers.h"
#include "runtime/router.h"
#include "runtime/session.h"
#include "util/strings.h"

namespace colibri::runtime {

using util::strprintf;

namespace {

// The logistic function in fp32 (sigmoid routers' scores, the Qwen2-MoE shared-expert gate).
inline float logistic(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// gpt-oss's clamped SwiGLU (transformers GptOssExperts): the gate clamped from above and the
// up projection on both sides to ±limit, then (up + 1) · gate · σ(alpha · gate), in fp32 in
// the modeling code's order. out may alias gate.
void swiglu_clamped(float *out, const float *gate, const float *up, size_t n, float limit, float alpha) {
  for (size_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], limit), u = std::clamp(up[i], -limit, limit);
    const float glu = g * logistic(g * alpha);
    out[i] = (u + 1.0f) * glu;
  }
}

void add_rows(float *row, const float *bias, size_t n) {
  for (size_t i = 0; i < n; ++i) row[i] += bias[i];
}

}  // namespace

void Session::route(const model::LayerWeights &w, const float *input, size_t count) {
  const model::ModelConfig &c = model_.config();
  Buffers &b = *buffers_;
  const size_t E = c.expert_count, K = c.top_k;
  const bool sigmoid = c.router_score == "sigmoid";
  {
    StageTimer timer(stats_, Stage::Router);
    matmul(w.router, input, count, b.router_logits.data(), E);
    if (w.router_bias.present())  // gpt-oss: top-k of the biased logits, softmax over the k
      pool_->parallel_for(count, [&](size_t t, size_t) { add_rows(&b.router_logits[t * E], w.router_bias.data, E); });
    if (sigmoid)
      pool_->parallel_for(count, [&](size_t t, size_t) {
        float *row = &b.router_logits[t * E];
        for (size_t e = 0; e < E; ++e) row[e] = logistic(row[e]);
      });
    else
      pool_->parallel_for(count, [&](size_t t, size_t) { kernels_->softmax(&b.router_logits[t * E], E); });
  }
  StageTimer timer(stats_, Stage::TopK);
  if (sigmoid) {
    SigmoidRouting r;
    r.bias = w.router_select_bias.data;
    r.group_count = c.expert_group_count;
    r.group_top = c.expert_group_top;
    r.renormalise = c.norm_topk_prob;
    r.epsilon = static_cast<float>(c.topk_norm_epsilon);
    r.scale = static_cast<float>(c.routed_scaling_factor);
    for (size_t t = 0; t < count; ++t)
      select_top_k_sigmoid(&b.router_logits[t * E], E, K, r, b.router_scratch.data(), &b.topk_expert[t * K],
                           &b.topk_weight[t * K]);
    return;
  }
  for (size_t t = 0; t < count; ++t)
    select_top_k(&b.router_logits[t * E], E, K, c.norm_topk_prob, &b.topk_expert[t * K], &b.topk_weight[t * K]);
}

Error Session::run_experts(uint32_t layer, const model::LayerWeights &w, const float *input, size_t count,
                           float *output) {
  const model::ModelConfig &c = model_.config();
  Buffers &b = *buffers_;
  const size_t E = c.expert_count, K = c.top_k, H = c.hidden_size, F = c.expert_ffn_size;
  {
    // Counting sort of (token, slot) pairs by expert; rows of one expert keep token order.
    StageTimer timer(stats_, Stage::Dispatch);
    std::fill(b.expert_count.begin(), b.expert_count.begin() + static_cast<long>(E), 0u);
    for (size_t i = 0; i < count * K; ++i) ++b.expert_count[static_cast<size_t>(b.topk_expert[i])];
    b.expert_offset[0] = 0;
    for (size_t e = 0; e < E; ++e) b.expert_offset[e + 1] = b.expert_offset[e] + b.expert_count[e];
    std::copy(b.expert_offset.begin(), b.expert_offset.begin() + static_cast<long>(E), b.expert_count.begin());
    for (size_t t = 0; t < count; ++t)
      for (size_t slot = 0; slot < K; ++slot) {
        uint32_t row = b.expert_count[static_cast<size_t>(b.topk_expert[t * K + slot])]++;
        b.slot_row[t * K + slot] = row;
        b.row_token[row] = static_cast<uint32_t>(t);
      }
  }
  // Experts of the q8-activation dtypes (q8, q4, q8f16, mxfp4): quantise each token's
  // activations once and share them among its k experts (bitwise the same as letting every
  // kernel call quantise its own copy).
  const model::WeightMatrix &gate_w = w.experts_gate, &up_w = w.experts_up, &down_w = w.experts_down;
  const uint32_t in_group = kernels::activation_group_size(gate_w.dtype, gate_w.group_size);
  const uint32_t down_group = kernels::activation_group_size(down_w.dtype, down_w.group_size);
  const bool q8_in = !expert_hook_.fn && kernels::takes_q8_activations(gate_w.dtype) &&
                     kernels::takes_q8_activations(up_w.dtype) &&
                     in_group == kernels::activation_group_size(up_w.dtype, up_w.group_size);
  const bool q8_down = !expert_hook_.fn && kernels::takes_q8_activations(down_w.dtype);
  const size_t in_row_q8 = q8_in ? kernels::row_bytes(kernels::DType::Q8, in_group, H) : 0;
  const size_t down_row_q8 = q8_down ? kernels::row_bytes(kernels::DType::Q8, down_group, F) : 0;
  // The f32 rows grouped by expert, for the float-weight kernels and the expert hook; the
  // q8-activation path copies only the q8 rows (36 bytes per 32 values: 3.6× fewer than f32).
  if (!q8_in) {
    StageTimer timer(stats_, Stage::Dispatch);
    pool_->parallel_for(count * K, [&](size_t row, size_t) {
      std::memcpy(&b.gathered[row * H], &input[b.row_token[row] * H], H * sizeof(float));
    });
  }
  if (q8_in) {
    StageTimer timer(stats_, Stage::Dispatch);
    pool_->parallel_for(count, [&](size_t t, size_t) {
      kernels_->quantize_row_q8(&input[t * H], H, in_group, &b.tokens_q8[t * in_row_q8]);
    });
    pool_->parallel_for(count * K, [&](size_t row, size_t) {
      std::memcpy(&b.gathered_q8[row * in_row_q8], &b.tokens_q8[b.row_token[row] * in_row_q8], in_row_q8);
    });
  }
  if (expert_hook_.fn) {
    // The caller computes each active expert on its gathered rows, on this thread.
    StageTimer timer(stats_, Stage::Experts);
    for (size_t e = 0; e < E; ++e) {
      const size_t first = b.expert_offset[e], n = b.expert_offset[e + 1] - first;
      if (n == 0) continue;
      int32_t rc = expert_hook_.fn(expert_hook_.user, layer, static_cast<uint32_t>(e), &b.gathered[first * H], n, H,
                                   &b.expert_out[first * H]);
      if (rc != 0)
        return make_error(ErrorKind::InvalidArgument,
                          strprintf("the expert function returned %d for layer %u, expert %zu", rc, layer, e));
    }
    stats_.expert_activations += count * K;
  } else {
    StageTimer timer(stats_, Stage::Experts);
    const size_t threads = pool_->thread_count();
    // Row blocks per expert matrix: enough tasks to balance the pool, each a stripe of rows.
    // An expert with more than 8 tokens (the prefill kernel) is also cut into stripes of at
    // most kExpertPrefillStripeRows rows: experts get unequal token counts, and with one task per
    // expert a thread could be left alone with the largest expert's whole matrix at the end
    // of the phase (the pool balances at task granularity).
    auto build_tasks = [&](size_t rows) {
      b.tasks.clear();
      size_t active = 0;
      for (size_t e = 0; e < E; ++e) active += b.expert_offset[e + 1] > b.expert_offset[e] ? 1 : 0;
      const size_t base_blocks = std::max<size_t>(1, (4 * threads + active - 1) / std::max<size_t>(active, 1));
      for (size_t e = 0; e < E; ++e) {
        const size_t tokens = b.expert_offset[e + 1] - b.expert_offset[e];
        if (tokens == 0) continue;
        size_t blocks = base_blocks;
        if (tokens > 8) blocks = std::max(blocks, (rows + kExpertPrefillStripeRows - 1) / kExpertPrefillStripeRows);
        blocks = std::min(blocks, rows);
        const size_t per = (rows + blocks - 1) / blocks;
        for (size_t r0 = 0; r0 < rows; r0 += per)
          b.tasks.push_back({static_cast<uint32_t>(e), static_cast<uint32_t>(r0), static_cast<uint32_t>(std::min(rows, r0 + per))});
      }
    };
    const bool clamped = c.expert_activation == "swiglu_clamped";
    const float swiglu_limit = static_cast<float>(c.swiglu_limit), swiglu_alpha = static_cast<float>(c.swiglu_alpha);
    // The driver for n tokens of an expert matrix of this dtype (the gate/up and down matrices
    // may differ in dtype).
    auto decode_driver = [&](kernels::DType dtype, size_t n) { return n <= kernels::decode_driver_max_tokens(kernels_->isa, dtype); };
    auto matmul_fn = [&](kernels::DType dtype, size_t n) { return decode_driver(dtype, n) ? kernels_->matmul_rows : kernels_->gemm_rows; };
    auto matmul_q8_fn = [&](kernels::DType dtype, size_t n) {
      return decode_driver(dtype, n) ? kernels_->matmul_rows_q8 : kernels_->gemm_rows_q8;
    };
    // Phase 1: gate and up stripes, then SiLU(gate)·up on the same stripe.
    build_tasks(F);
    pool_->parallel_for(b.tasks.size(), [&](size_t i, size_t) {
      const ExpertTask task = b.tasks[i];
      const size_t first = b.expert_offset[task.expert], n = b.expert_offset[task.expert + 1] - first;
      if (q8_in) {
        auto fn = matmul_q8_fn(gate_w.dtype, n);
        fn(gate_w.matrix(task.expert), gate_w.dtype, gate_w.group_size, H, task.row_begin, task.row_end,
           &b.gathered_q8[first * in_row_q8], n, &b.gate[first * F], F);
        fn(up_w.matrix(task.expert), up_w.dtype, up_w.group_size, H, task.row_begin, task.row_end,
           &b.gathered_q8[first * in_row_q8], n, &b.up[first * F], F);
      } else {
        auto fn = matmul_fn(gate_w.dtype, n);
        fn(gate_w.matrix(task.expert), gate_w.dtype, gate_w.group_size, H, task.row_begin, task.row_end,
           &b.gathered[first * H], n, &b.gate[first * F], F);
        fn(up_w.matrix(task.expert), up_w.dtype, up_w.group_size, H, task.row_begin, task.row_end,
           &b.gathered[first * H], n, &b.up[first * F], F);
      }
      const size_t r0 = task.row_begin, rows = task.row_end - task.row_begin;
      for (size_t r = first; r < first + n; ++r) {
        float *gate = &b.gate[r * F + r0], *up = &b.up[r * F + r0];
        if (w.experts_gate_bias.present()) {
          add_rows(gate, w.experts_gate_bias.data + task.expert * F + r0, rows);
          add_rows(up, w.experts_up_bias.data + task.expert * F + r0, rows);
        }
        if (clamped) swiglu_clamped(gate, gate, up, rows, swiglu_limit, swiglu_alpha);
        else kernels_->silu_mul(gate, gate, up, rows);
      }
    });
    // Phase 2: down projection stripes over the hidden rows (q8: each activation row
    // quantised once, not once per stripe).
    if (q8_down)
      pool_->parallel_for(count * K, [&](size_t row, size_t) {
        kernels_->quantize_row_q8(&b.gate[row * F], F, down_group, &b.gathered_q8[row * down_row_q8]);
      });
    build_tasks(H);
    pool_->parallel_for(b.tasks.size(), [&](size_t i, size_t) {
      const ExpertTask task = b.tasks[i];
      const size_t first = b.expert_offset[task.expert], n = b.expert_offset[task.expert + 1] - first;
      if (q8_down)
        matmul_q8_fn(down_w.dtype, n)(down_w.matrix(task.expert), down_w.dtype, down_w.group_size, F, task.row_begin, task.row_end,
                        &b.gathered_q8[first * down_row_q8], n, &b.expert_out[first * H], H);
      else
        matmul_fn(down_w.dtype, n)(down_w.matrix(task.expert), down_w.dtype, down_w.group_size, F, task.row_begin, task.row_end,
                     &b.gate[first * F], n, &b.expert_out[first * H], H);
      if (w.experts_down_bias.present())
        for (size_t r = first; r < first + n; ++r)
          add_rows(&b.expert_out[r * H + task.row_begin], w.experts_down_bias.data + task.expert * H + task.row_begin,
                   task.row_end - task.row_begin);
    });
    for (size_t e = 0; e < E; ++e)
      if (b.expert_offset[e + 1] > b.expert_offset[e])
        stats_.weight_bytes_read += w.experts_gate.matrix_bytes + w.experts_up.matrix_bytes + w.experts_down.matrix_bytes;
    stats_.expert_activations += count * K;
  }
  StageTimer timer(stats_, Stage::Merge);
  // Weighted merge in slot order per token.
  pool_->parallel_for(count, [&](size_t t, size_t) {
    float *out = &output[t * H];
    std::fill(out, out + H, 0.0f);
    for (size_t slot = 0; slot < K; ++slot)
      kernels_->scale_add(out, b.topk_weight[t * K + slot], &b.expert_out[b.slot_row[t * K + slot] * H], H);
  });
  return {};
}

void Session::dense_ffn(const model::WeightMatrix &gate, const model::WeightMatrix &up, const model::WeightMatrix &down,
                        const float *input, size_t count, float *gate_buf, float *up_buf, float *output) {
  const size_t F = gate.rows;
  const MatmulJob gate_up[] = {{&gate, gate_buf, F}, {&up, up_buf, F}};
  matmuls(gate_up, 2, input, count);
  pool_->parallel_for(count, [&](size_t t, size_t) { kernels_->silu_mul(&gate_buf[t * F], &gate_buf[t * F], &up_buf[t * F], F); });
  matmul(down, gate_buf, count, output, down.rows);
}

Error Session::ffn(uint32_t layer, size_t count, const Route *routes, const float *input, float *output,
                   const BatchEntry *entries) {
  const model::ModelConfig &c = model_.config();
  const model::LayerWeights &w = model_.layers()[layer];
  Buffers &b = *buffers_;
  const size_t H = c.hidden_size;
  if (!w.is_moe) {
    StageTimer timer(stats_, Stage::Experts);
    dense_ffn(w.dense_gate, w.dense_up, w.dense_down, input, count, b.gate.data(), b.up.data(), output);
    return guard_non_finite(output, count, H, {"dense FFN output", layer, true}, entries);
  }
  // The non-finite guard sits where NaN/Inf would otherwise be routed and spread, and after
  // the block (its experts' weights, an expert hook's rows, the shared expert).
  if (Error e = guard_non_finite(const_cast<float *>(input), count, H, {"MoE input", layer, true}, entries)) return e;
  if (routes) {
    for (size_t i = 0; i < count * c.top_k; ++i) {
      b.topk_expert[i] = routes[i].expert;
      b.topk_weight[i] = routes[i].weight;
    }
  } else {
    route(w, input, count);
  }
  if (Error e = run_experts(layer, w, input, count, output)) return e;
  if (w.shared_gate.present()) {
    // Qwen2-MoE shared expert: output += sigmoid(shared_expert_gate · x) · SwiGLU_shared(x).
    StageTimer timer(stats_, Stage::Experts);
    float *shared = b.expert_out.data();  // free again after the merge
    dense_ffn(w.shared_gate, w.shared_up, w.shared_down, input, count, b.gate.data(), b.up.data(), shared);
    if (w.shared_expert_gate.present()) matmul(w.shared_expert_gate, input, count, b.shared_gate_logit.data(), 1);
    pool_->parallel_for(count, [&](size_t t, size_t) {
      float g = w.shared_expert_gate.present() ? logistic(b.shared_gate_logit[t]) : 1.0f;
      kernels_->scale_add(&output[t * H], g, &shared[t * H], H);
    });
  }
  return guard_non_finite(output, count, H, {"MoE output", layer, true}, entries);
}

}  // namespace colibri::runtime

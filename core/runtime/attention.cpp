// core/runtime/attention.cpp — the attention block: x += o_proj(Attention(RMSNorm(x))).
// Grouped-query attention over the KV cache (causal), with the family hooks: q/k/v biases
// (Qwen2-MoE), q/k RMSNorm per head (Qwen3-MoE) or over the whole projection (OLMoE),
// clip_qkv (OLMoE), and RoPE in the Hugging Face rotate_half convention.
// References: transformers models/{mixtral,qwen2_moe,qwen3_moe,olmoe}/modeling_*.py.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "runtime/buffers.h"
#include "runtime/session.h"

namespace colibri::runtime {

namespace {

// RoPE, rotate_half form: pairs (i, i + r/2) of the first r = rotary_dim values of a head
// rotate by position · θ^(−2i/r). The inverse
// frequencies (Buffers::rope_inv_freq) and the angle are fp32 as transformers computes them,
// cos/sin in double. The angles of one position serve every q and k head of its token in
// every layer: they are computed once per forward step (prepare_rope).
void rope_angles(const float *inv_freq, size_t half, uint32_t position, float *cos_out, float *sin_out) {
  for (size_t i = 0; i < half; ++i) {
    const float angle = static_cast<float>(position) * inv_freq[i];
    cos_out[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
    sin_out[i] = static_cast<float>(std::sin(static_cast<double>(angle)));
  }
}

void apply_rope(float *vec, size_t half, const float *cos_v, const float *sin_v) {
  for (size_t i = 0; i < half; ++i) {
    const float x1 = vec[i], x2 = vec[i + half];
    vec[i] = x1 * cos_v[i] - x2 * sin_v[i];
    vec[i + half] = x2 * cos_v[i] + x1 * sin_v[i];
  }
}

// DeepSeek's rope_interleave: pair i is (x[2i], x[2i + 1]), and the rotated pair is written in
// the rotate_half layout, x[i] and x[i + half] (transformers apply_rotary_pos_emb_interleave),
// which is what the keys it caches and the queries it scores hold. half ≤ ModelLimits::kHeadDim / 2.
void apply_rope_interleaved(float *vec, size_t half, const float *cos_v, const float *sin_v) {
  float pairs[model::ModelLimits::kHeadDim];
  std::memcpy(pairs, vec, 2 * half * sizeof(float));
  for (size_t i = 0; i < half; ++i) {
    const float x1 = pairs[2 * i], x2 = pairs[2 * i + 1];
    vec[i] = x1 * cos_v[i] - x2 * sin_v[i];
    vec[i + half] = x2 * cos_v[i] + x1 * sin_v[i];
  }
}

// YaRN's correction dimension: the dim whose wavelength makes num_rotations turns over
// max_positions (transformers find_correction_dim), in double as Python computes it.
double yarn_correction_dim(double num_rotations, double dim, double base, double max_positions) {
  return (dim * std::log(max_positions / (num_rotations * 2.0 * std::numbers::pi))) / (2.0 * std::log(base));
}

}  // namespace

void rope_inverse_frequencies(const model::ModelConfig &c, float *out) {
  const size_t half = c.rotary_dim / 2;
  const float base = static_cast<float>(c.rope_theta), dim = static_cast<float>(c.rotary_dim);
  // pos_freqs = θ^(2i/r) in fp32; the default RoPE inverts it.
  for (size_t i = 0; i < half; ++i) out[i] = 1.0f / std::pow(base, static_cast<float>(2 * i) / dim);
  if (c.rope_scaling != "yarn") return;
  // transformers _compute_yarn_parameters: a ramp from extrapolation (the plain frequencies)
  // to interpolation (divided by factor) over the dims [low, high] of the correction range.
  const double d = static_cast<double>(c.rotary_dim), theta = c.rope_theta;
  const double original = static_cast<double>(c.rope_original_max_positions);
  double low = yarn_correction_dim(c.rope_beta_fast, d, theta, original);
  double high = yarn_correction_dim(c.rope_beta_slow, d, theta, original);
  if (c.rope_truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, d - 1.0);
  if (low == high) high += 0.001;  // transformers: prevents a division by zero
  const float factor = static_cast<float>(c.rope_factor), low_f = static_cast<float>(low);
  const float span = static_cast<float>(high - low);
  for (size_t i = 0; i < half; ++i) {
    const float pos_freq = std::pow(base, static_cast<float>(2 * i) / dim);
    const float extrapolation = 1.0f / pos_freq, interpolation = 1.0f / (factor * pos_freq);
    const float ramp = std::clamp((static_cast<float>(i) - low_f) / span, 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    const float a = interpolation * (1.0f - extrapolation_factor);
    const float b = extrapolation * extrapolation_factor;
    out[i] = a + b;
  }
}

namespace {

void add_bias(float *row, const model::WeightVector &bias, size_t n) {
  if (!bias.present()) return;
  for (size_t i = 0; i < n; ++i) row[i] += bias.data[i];
}

void clip(float *row, size_t n, float limit) {
  for (size_t i = 0; i < n; ++i) row[i] = std::clamp(row[i], -limit, limit);
}

}  // namespace

void Session::prepare_rope(const BatchEntry *entries, size_t count) {
  StageTimer timer(stats_, Stage::Attention);
  Buffers &b = *buffers_;
  const size_t D = model_.config().head_dim, R = model_.config().rotary_dim;
  // YaRN scales cos and sin by its attention factor (transformers: emb.cos() * attention_scaling).
  const float scaling = static_cast<float>(model_.config().rope_attention_factor);
  const bool scaled = model_.config().rope_scaling != "none";
  pool_->parallel_for(count, [&](size_t t, size_t) {
    float *cos_v = &b.rope_trig[t * D], *sin_v = cos_v + R / 2;
    rope_angles(b.rope_inv_freq.data(), R / 2, entries[t].position, cos_v, sin_v);
    if (scaled)
      for (size_t i = 0; i < R / 2; ++i) {
        cos_v[i] *= scaling;
        sin_v[i] *= scaling;
      }
  });
}

Error Session::attention(uint32_t layer, const BatchEntry *entries, size_t count) {
  if (model_.config().mla()) return attention_mla(layer, entries, count);
  StageTimer timer(stats_, Stage::Attention);
  const model::ModelConfig &c = model_.config();
  const model::LayerWeights &w = model_.layers()[layer];
  Buffers &b = *buffers_;
  const size_t H = c.hidden_size, Q = model_.q_dim(), KV = model_.kv_dim(), D = c.head_dim;
  const size_t heads = c.head_count, group = c.head_count / c.kv_head_count;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const bool f16_cache = options_.kv_dtype == KvDtype::F16;
  KvCache &kv = *kv_;
  // B positions per block; layer_rows: rows of this layer per block (B, or a sliding layer's ring).
  const size_t B = kv.block_tokens(), layer_rows = kv.layer_rows(layer), value_off = kv.value_offset(layer);

  // Normalise the residual stream, then project to q, k, v for the whole batch.
  pool_->parallel_for(count, [&](size_t t, size_t) { kernels_->rmsnorm(&b.xn[t * H], &b.x[t * H], w.attn_norm.data, eps, H); });
  const MatmulJob qkv[] = {{&w.attn_q, b.q.data(), Q}, {&w.attn_k, b.k.data(), KV}, {&w.attn_v, b.v.data(), KV}};
  matmuls(qkv, 3, b.xn.data(), count);

  // Per token: biases, q/k norms, clipping, RoPE; then store k and v in the cache.
  pool_->parallel_for(count, [&](size_t t, size_t) {
    float *q = &b.q[t * Q], *k = &b.k[t * KV], *v = &b.v[t * KV];
    add_bias(q, w.attn_q_bias, Q);
    add_bias(k, w.attn_k_bias, KV);
    add_bias(v, w.attn_v_bias, KV);
    if (c.qk_norm == "full") {  // OLMoE: RMSNorm over the whole projection
      kernels_->rmsnorm(q, q, w.attn_q_norm.data, eps, Q);
      kernels_->rmsnorm(k, k, w.attn_k_norm.data, eps, KV);
    } else if (c.qk_norm == "per_head") {  // Qwen3-MoE: RMSNorm per head, weight shared by heads
      for (size_t h = 0; h < heads; ++h) kernels_->rmsnorm(q + h * D, q + h * D, w.attn_q_norm.data, eps, D);
      for (size_t h = 0; h < c.kv_head_count; ++h) kernels_->rmsnorm(k + h * D, k + h * D, w.attn_k_norm.data, eps, D);
    }
    if (c.clip_qkv > 0.0) {
      float limit = static_cast<float>(c.clip_qkv);
      clip(q, Q, limit);
      clip(k, KV, limit);
      clip(v, KV, limit);
    }
    // Partial rotary (rotary_dim < head_dim): only the first rotary_dim values of a head rotate.
    const size_t R = c.rotary_dim;
    const float *cos_v = &b.rope_trig[t * D], *sin_v = cos_v + R / 2;
    for (size_t h = 0; h < heads; ++h) apply_rope(q + h * D, R / 2, cos_v, sin_v);
    for (size_t h = 0; h < c.kv_head_count; ++h) apply_rope(k + h * D, R / 2, cos_v, sin_v);
    // Position p of a sequence lives in row p % layer_rows of its block table's entry p / B
    // (layer_rows = B but in a ring layer of a contiguous cache, whose single block holds every
    // position: there p / B = 0).
    const uint32_t position = entries[t].position;
    const size_t key_at = kv.offset(kv.blocks(entries[t].sequence)[position / B], layer) + (position % layer_rows) * KV;
    const size_t value_at = key_at + value_off;
    if (f16_cache) {
      kernels_->f32_to_f16(k, kv.f16() + key_at, KV);
      kernels_->f32_to_f16(v, kv.f16() + value_at, KV);
    } else {
      std::memcpy(kv.f32() + key_at, k, KV * sizeof(float));
      std::memcpy(kv.f32() + value_at, v, KV * sizeof(float));
    }
  });

  // Scaled dot-product attention per (token, KV head) over the positions a query sees: 0..position
  // (causal), or on a sliding layer the last sliding_window of them. The `group` query heads that
  // share a KV head go through one call per run of cache rows, which reads each cached key and
  // value row once for all of them. Scores land in one row (index p − first); values accumulate
  // run after run from zero: the bits of one call over contiguous rows (a score depends on its
  // query and key row only; the value sums run in ascending position). An attention sink
  // (gpt-oss) is one more logit at the end of the row: it joins the softmax and adds no value.
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const size_t stride = Buffers::score_stride(options_);
  const size_t window = w.sliding ? c.sliding_window : 0;
  pool_->parallel_for(count * c.kv_head_count, [&](size_t task, size_t thread) {
    const size_t t = task / c.kv_head_count, kvh = task % c.kv_head_count, h0 = kvh * group;
    const BatchEntry &e = entries[t];
    const float *q = &b.q[t * Q + h0 * D];
    const uint32_t *table = kv.blocks(e.sequence);
    float *scores = &b.scores[thread * group * stride];
    const size_t end = size_t(e.position) + 1, first = window && end > window ? end - window : 0, n = end - first;
    float *out = &b.attn[t * Q + h0 * D];
    std::fill(out, out + group * D, 0.0f);
    // Runs of at most `max_rows` positions of [first, end) that never cross a cache block or
    // a ring's wrap.
    auto for_each_run = [&](size_t max_rows, auto &&fn) {
      for (size_t p0 = first; p0 < end;) {
        const size_t len = std::min({max_rows, layer_rows - p0 % layer_rows, end - p0});
        fn(p0, len, kv.offset(table[p0 / B], layer) + (p0 % layer_rows) * KV + kvh * D);
        p0 += len;
      }
    };
    auto softmax = [&] {
      if (w.attn_sinks.present()) {
        for (size_t g = 0; g < group; ++g) scores[g * stride + n] = w.attn_sinks.data[h0 + g];
        kernels_->attention_softmax(scores, stride, group, n + 1);
      } else {
        kernels_->attention_softmax(scores, stride, group, n);
      }
    };
    if (f16_cache) {
      // Runs of kF16KvChunkRows positions are widened to f32 once for all the heads of the
      // group, then go through the f32 path's kernels: the same bits as an f32 cache holding
      // the widened values.
      float *rows = &b.kv_rows[thread * kF16KvChunkRows * D];
      auto widen = [&](size_t at, size_t len) {
        for (size_t r = 0; r < len; ++r) kernels_->f16_to_f32(kv.f16() + at + r * KV, rows + r * D, D);
      };
      for_each_run(kF16KvChunkRows, [&](size_t p0, size_t len, size_t at) {
        widen(at, len);
        kernels_->attention_scores(q, D, group, rows, D, len, D, scale, scores + (p0 - first), stride);
      });
      softmax();
      for_each_run(kF16KvChunkRows, [&](size_t p0, size_t len, size_t at) {
        widen(at + value_off, len);
        kernels_->attention_values_accumulate(scores + (p0 - first), stride, group, rows, D, len, D, out, D);
      });
    } else {
      for_each_run(B, [&](size_t p0, size_t len, size_t at) {
        kernels_->attention_scores(q, D, group, kv.f32() + at, KV, len, D, scale, scores + (p0 - first), stride);
      });
      softmax();
      for_each_run(B, [&](size_t p0, size_t len, size_t at) {
        kernels_->attention_values_accumulate(scores + (p0 - first), stride, group, kv.f32() + at + value_off, KV, len,
                                              D, out, D);
      });
    }
  });

  // Output projection and residual.
  matmul(w.attn_output, b.attn.data(), count, b.ffn_out.data(), H);
  if (w.attn_output_bias.present())
    pool_->parallel_for(count, [&](size_t t, size_t) { add_bias(&b.ffn_out[t * H], w.attn_output_bias, H); });
  if (Error e = guard_non_finite(b.ffn_out.data(), count, H, {"attention output", layer, true}, entries)) return e;
  pool_->parallel_for(count, [&](size_t t, size_t) { kernels_->add(&b.x[t * H], &b.x[t * H], &b.ffn_out[t * H], H); });
  return {};
}


void Session::per_head_matmul(const model::WeightMatrix &m, const float *x, size_t x_stride, size_t x_head,
                              size_t count, float *y, size_t y_stride, size_t y_head) {
  Buffers &b = *buffers_;
  const size_t cols = m.cols, gather = b.mla_gather.size() / pool_->thread_count();
  const bool decode = count <= kernels::decode_driver_max_tokens(kernels_->isa, m.dtype);
  stats_.weight_bytes_read += m.count * m.matrix_bytes;
  pool_->parallel_for(m.count, [&](size_t h, size_t thread) {
    float *in = &b.mla_gather[thread * gather];
    for (size_t t = 0; t < count; ++t) std::memcpy(in + t * cols, x + t * x_stride + h * x_head, cols * sizeof(float));
    (decode ? kernels_->matmul_rows : kernels_->gemm_rows)(m.matrix(h), m.dtype, m.group_size, cols, 0, m.rows, in, count,
                                                            y + h * y_head, y_stride);
  });
}

// Multi-head latent attention (DeepSeek-V2/V3; transformers DeepseekV3Attention), always in the
// absorbed form, so that prefill and decode compute the same bits:
//   q_h = [q_nope_h | q_rope_h] from attn_q, or attn_q_b(RMSNorm(attn_q_a(x)));
//   [latent | k_rope] = attn_kv_a_mqa(x), latent RMSNorm'ed, k_rope rotated: the cache row;
//   score_h(p) = scale · (q̃_h · latent_p + q_rope_h · k_rope_p), q̃_h = attn_k_b[h] · q_nope_h
//     (= q_nope_h · (W_UK,h · latent_p), the expanded key's dot product, summed in another order);
//   out_h = attn_v_b[h] · Σ_p softmax(score_h)(p) · latent_p (= Σ_p p · W_UV,h · latent_p).
// Every head reads the same cache rows; up to Buffers::kMlaHeadsPerTask heads share a task and
// each run of rows they read.
Error Session::attention_mla(uint32_t layer, const BatchEntry *entries, size_t count) {
  StageTimer timer(stats_, Stage::Attention);
  const model::ModelConfig &c = model_.config();
  const model::LayerWeights &w = model_.layers()[layer];
  Buffers &b = *buffers_;
  const size_t H = c.hidden_size, Q = model_.q_dim(), KV = model_.kv_dim(), D = c.head_dim, R = c.kv_lora_rank;
  const size_t heads = c.head_count, nope = c.qk_nope_head_dim, qh = nope + D, row = R + D, V = c.v_head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const bool f16_cache = options_.kv_dtype == KvDtype::F16;
  KvCache &kv = *kv_;
  const size_t B = kv.block_tokens(), layer_rows = kv.layer_rows(layer);

  pool_->parallel_for(count, [&](size_t t, size_t) { kernels_->rmsnorm(&b.xn[t * H], &b.x[t * H], w.attn_norm.data, eps, H); });
  if (c.q_lora_rank) {
    const MatmulJob first[] = {{&w.attn_q_a, b.mla_q_a.data(), c.q_lora_rank}, {&w.attn_kv_a_mqa, b.k.data(), KV}};
    matmuls(first, 2, b.xn.data(), count);
    pool_->parallel_for(count, [&](size_t t, size_t) {
      float *qa = &b.mla_q_a[t * c.q_lora_rank];
      kernels_->rmsnorm(qa, qa, w.attn_q_a_norm.data, eps, c.q_lora_rank);
    });
    matmul(w.attn_q_b, b.mla_q_a.data(), count, b.q.data(), Q);
  } else {
    const MatmulJob first[] = {{&w.attn_q, b.q.data(), Q}, {&w.attn_kv_a_mqa, b.k.data(), KV}};
    matmuls(first, 2, b.xn.data(), count);
  }

  // Per token: RoPE on every head's rope part and on the rope key, the latent normed; the row
  // [latent | k_rope] goes into the cache; the queries' rope parts into their absorbed rows.
  auto rope = c.rope_interleave ? apply_rope_interleaved : apply_rope;
  pool_->parallel_for(count, [&](size_t t, size_t) {
    float *q = &b.q[t * Q], *kva = &b.k[t * KV];
    const float *cos_v = &b.rope_trig[t * D], *sin_v = cos_v + D / 2;
    kernels_->rmsnorm(kva, kva, w.attn_kv_a_norm.data, eps, R);
    rope(kva + R, D / 2, cos_v, sin_v);
    float *absorbed = &b.mla_query[t * heads * row];
    for (size_t h = 0; h < heads; ++h) {
      rope(q + h * qh + nope, D / 2, cos_v, sin_v);
      std::memcpy(absorbed + h * row + R, q + h * qh + nope, D * sizeof(float));
    }
    const uint32_t position = entries[t].position;
    const size_t at = kv.offset(kv.blocks(entries[t].sequence)[position / B], layer) + (position % layer_rows) * KV;
    if (f16_cache) kernels_->f32_to_f16(kva, kv.f16() + at, KV);
    else std::memcpy(kv.f32() + at, kva, KV * sizeof(float));
  });
  // q̃_h = attn_k_b[h] · q_nope_h, into the first R values of each absorbed row.
  per_head_matmul(w.attn_k_b, b.q.data(), Q, qh, count, b.mla_query.data(), heads * row, row);

  // Scores over 0..position (causal), softmax, the weighted latents; tasks of up to
  // kMlaHeadsPerTask heads of one token.
  const float scale = static_cast<float>(c.attention_scale);
  const size_t stride = Buffers::score_stride(options_), group = Buffers::attention_group(c);
  const size_t tasks_per_token = (heads + group - 1) / group;
  pool_->parallel_for(count * tasks_per_token, [&](size_t task, size_t thread) {
    const size_t t = task / tasks_per_token, h0 = task % tasks_per_token * group, g = std::min(group, heads - h0);
    const BatchEntry &e = entries[t];
    const float *q = &b.mla_query[(t * heads + h0) * row];
    const uint32_t *table = kv.blocks(e.sequence);
    float *scores = &b.scores[thread * group * stride];
    const size_t n = size_t(e.position) + 1;
    float *out = &b.mla_context[(t * heads + h0) * R];
    std::fill(out, out + g * R, 0.0f);
    auto for_each_run = [&](size_t max_rows, auto &&fn) {
      for (size_t p0 = 0; p0 < n;) {
        const size_t len = std::min({max_rows, layer_rows - p0 % layer_rows, n - p0});
        fn(p0, len, kv.offset(table[p0 / B], layer) + (p0 % layer_rows) * KV);
        p0 += len;
      }
    };
    if (f16_cache) {
      float *rows = &b.kv_rows[thread * kF16KvChunkRows * KV];
      auto widen = [&](size_t at, size_t len) {
        for (size_t r = 0; r < len; ++r) kernels_->f16_to_f32(kv.f16() + at + r * KV, rows + r * KV, KV);
      };
      for_each_run(kF16KvChunkRows, [&](size_t p0, size_t len, size_t at) {
        widen(at, len);
        kernels_->attention_scores(q, row, g, rows, KV, len, row, scale, scores + p0, stride);
      });
      kernels_->attention_softmax(scores, stride, g, n);
      for_each_run(kF16KvChunkRows, [&](size_t p0, size_t len, size_t at) {
        widen(at, len);
        kernels_->attention_values_accumulate(scores + p0, stride, g, rows, KV, len, R, out, R);
      });
    } else {
      for_each_run(B, [&](size_t p0, size_t len, size_t at) {
        kernels_->attention_scores(q, row, g, kv.f32() + at, KV, len, row, scale, scores + p0, stride);
      });
      kernels_->attention_softmax(scores, stride, g, n);
      for_each_run(B, [&](size_t p0, size_t len, size_t at) {
        kernels_->attention_values_accumulate(scores + p0, stride, g, kv.f32() + at, KV, len, R, out, R);
      });
    }
  });
  // out_h = attn_v_b[h] · context_h, then o_proj and the residual.
  per_head_matmul(w.attn_v_b, b.mla_context.data(), heads * R, R, count, b.attn.data(), heads * V, V);
  matmul(w.attn_output, b.attn.data(), count, b.ffn_out.data(), H);
  if (Error e = guard_non_finite(b.ffn_out.data(), count, H, {"attention output", layer, true}, entries)) return e;
  pool_->parallel_for(count, [&](size_t t, size_t) { kernels_->add(&b.x[t * H], &b.x[t * H], &b.ffn_out[t * H], H); });
  return {};
}

}  // namespace colibri::runtime

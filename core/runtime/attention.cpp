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

// What attend() needs of an attention form. A task is up to `group` query heads of one entry
// that read the same cache rows: a KV head's group (GQA), or up to kMlaHeadsPerTask heads of the
// one latent row (MLA). Task k of an entry holds heads [k·group, min(heads, (k + 1)·group)).
struct Session::AttentionLayout {
  size_t heads = 0;            // query heads per entry
  size_t group = 0;            // query heads per task
  size_t tasks_per_entry = 0;  // ceil(heads / group)
  const float *q = nullptr;    // head h of entry t: q + t·q_entry + h·q_head
  size_t q_entry = 0, q_head = 0;
  size_t key_dim = 0;          // length of a score's dot product
  size_t task_offset = 0;      // task k's keys start k·task_offset floats into a cache row
  size_t value_offset = 0;     // from a key to its value, in cache elements
  size_t value_dim = 0;        // output dims per head
  float *out = nullptr;        // head h of entry t: out + t·out_entry + h·out_head
  size_t out_entry = 0, out_head = 0;
  const float *sinks = nullptr;  // one extra logit per head (gpt-oss), or null
  size_t window = 0;             // a sliding layer's window; 0: every position up to the query's
  float scale = 1.0f;
};

// Every query head of every entry over the positions [first, end) it sees: scores, the floored
// softmax (with the sink), then the probability-weighted values summed in ascending position
// from zero. The cache is read in runs of kAttentionRunRows positions that never cross a block
// or a ring's wrap; a score depends on its query and key row only and each output element is
// one fma chain in ascending position, so neither the runs, nor the tiles, nor the split
// change a bit (tests/runtime/test_engine.cpp, "attention gives the same bits ...").
//   Tiles (prefill): a task is one KV head (or MLA head group) of up to attention_tile_tokens
//   consecutive entries of one sequence; each run of keys, then of values, is read (an f16
//   run widened) once for all of them. The tile's score rows are the thread's scores buffer.
//   Split (a batch with fewer tasks than threads, positions > kAttentionSplitRows): three
//   parallel passes, scores over slices of positions, the softmax per head, and the values
//   over slices of kAttentionSplitDims dims, so that one decode step uses every thread.
void Session::attend(const AttentionLayout &l, uint32_t layer, const BatchEntry *entries, size_t count) {
  Buffers &b = *buffers_;
  KvCache &kv = *kv_;
  const bool f16_cache = options_.kv_dtype == KvDtype::F16;
  const size_t B = kv.block_tokens(), layer_rows = kv.layer_rows(layer), KV = model_.kv_dim();
  const size_t stride = Buffers::score_stride(options_), group = l.group, tasks = l.tasks_per_entry;
  const size_t task_rows = group * stride, threads = pool_->thread_count();
  const size_t widened_per_thread = f16_cache ? b.kv_rows.size() / threads : 0;
  auto first_of = [&](size_t t) {
    const size_t end = size_t(entries[t].position) + 1;
    return l.window && end > l.window ? end - l.window : 0;
  };
  auto end_of = [&](size_t t) { return size_t(entries[t].position) + 1; };
  auto query = [&](size_t t, size_t h) { return l.q + t * l.q_entry + h * l.q_head; };
  auto output = [&](size_t t, size_t h) { return l.out + t * l.out_entry + h * l.out_head; };
  // fn(p0, len, cache offset of p0's row) for the runs of positions [lo, hi) of a sequence.
  auto for_each_run = [&](const uint32_t *table, size_t lo, size_t hi, auto &&fn) {
    for (size_t p0 = lo; p0 < hi;) {
      const size_t len = std::min({kAttentionRunRows, layer_rows - p0 % layer_rows, hi - p0});
      fn(p0, len, kv.offset(table[p0 / B], layer) + (p0 % layer_rows) * KV);
      p0 += len;
    }
  };
  // `width` dims of `len` cache rows from offset `at` as f32 rows *row_stride apart: the cache
  // itself, or an f16 cache's rows widened into the thread's kv_rows.
  auto rows_of = [&](size_t at, size_t len, size_t width, size_t thread, size_t *row_stride) -> const float * {
    if (!f16_cache) {
      *row_stride = KV;
      return kv.f32() + at;
    }
    float *rows = &b.kv_rows[thread * widened_per_thread];
    for (size_t r = 0; r < len; ++r) kernels_->f16_to_f32(kv.f16() + at + r * KV, rows + r * width, width);
    *row_stride = width;
    return rows;
  };
  // The floored softmax of g heads' rows of n scores (from head h0), with their sinks.
  auto softmax = [&](float *rows, size_t h0, size_t g, size_t n) {
    if (l.sinks) {
      for (size_t i = 0; i < g; ++i) rows[i * stride + n] = l.sinks[h0 + i];
      kernels_->attention_softmax(rows, stride, g, n + 1);
    } else {
      kernels_->attention_softmax(rows, stride, g, n);
    }
  };

  size_t longest = 0;
  for (size_t t = 0; t < count; ++t) longest = std::max(longest, end_of(t) - first_of(t));
  if (count * tasks < threads && longest > kAttentionSplitRows) {
    ++stats_.attention_split;
    // Entry t's task k keeps its score rows at task_scores(t, k): count·tasks < threads task
    // rows fit the buffer of threads · tile tokens of them.
    auto task_scores = [&](size_t t, size_t k) { return &b.scores[(t * tasks + k) * task_rows]; };
    const size_t slices = (longest + kAttentionSplitRows - 1) / kAttentionSplitRows;
    pool_->parallel_for(count * tasks * slices, [&](size_t task, size_t thread) {
      const size_t s = task % slices, k = task / slices % tasks, t = task / slices / tasks;
      const size_t first = first_of(t), end = end_of(t), lo = first + s * kAttentionSplitRows;
      if (lo >= end) return;
      const size_t h0 = k * group, g = std::min(group, l.heads - h0);
      float *scores = task_scores(t, k);
      for_each_run(kv.blocks(entries[t].sequence, layer), lo, std::min(end, lo + kAttentionSplitRows),
                   [&](size_t p0, size_t len, size_t at) {
                     size_t rs = 0;
                     const float *keys = rows_of(at + k * l.task_offset, len, l.key_dim, thread, &rs);
                     kernels_->attention_scores(query(t, h0), l.q_head, g, keys, rs, len, l.key_dim, l.scale,
                                                scores + (p0 - first), stride);
                   });
    });
    pool_->parallel_for(count * l.heads, [&](size_t task, size_t) {
      const size_t t = task / l.heads, h = task % l.heads;
      softmax(task_scores(t, h / group) + h % group * stride, h, 1, end_of(t) - first_of(t));
    });
    const size_t dim_slices = (l.value_dim + kAttentionSplitDims - 1) / kAttentionSplitDims;
    pool_->parallel_for(count * tasks * dim_slices, [&](size_t task, size_t thread) {
      const size_t s = task % dim_slices, k = task / dim_slices % tasks, t = task / dim_slices / tasks;
      const size_t h0 = k * group, g = std::min(group, l.heads - h0), first = first_of(t);
      const size_t d0 = s * kAttentionSplitDims, width = std::min(kAttentionSplitDims, l.value_dim - d0);
      float *out = output(t, h0) + d0;
      for (size_t i = 0; i < g; ++i) std::fill(out + i * l.out_head, out + i * l.out_head + width, 0.0f);
      const float *probs = task_scores(t, k);
      for_each_run(kv.blocks(entries[t].sequence, layer), first, end_of(t), [&](size_t p0, size_t len, size_t at) {
        size_t rs = 0;
        const float *values = rows_of(at + k * l.task_offset + l.value_offset + d0, len, width, thread, &rs);
        kernels_->attention_values_accumulate(probs + (p0 - first), stride, g, values, rs, len, width, out, l.out_head);
      });
    });
    return;
  }

  // Tiles: runs of consecutive entries of one sequence, at most tile_cap long.
  const size_t tile_cap = Buffers::attention_tile_tokens(model_.config(), options_);
  uint32_t *tiles = b.attention_tiles.data();
  size_t tile_count = 0;
  for (size_t t = 0; t < count; ++t)
    if (t == 0 || entries[t].sequence != entries[t - 1].sequence || t - tiles[tile_count - 1] == tile_cap)
      tiles[tile_count++] = static_cast<uint32_t>(t);
  tiles[tile_count] = static_cast<uint32_t>(count);
  for (size_t i = 0; i < tile_count; ++i) stats_.attention_tiles += tiles[i + 1] - tiles[i] > 1;
  pool_->parallel_for(tile_count * tasks, [&](size_t task, size_t thread) {
    const size_t tile = task / tasks, k = task % tasks, t0 = tiles[tile], t1 = tiles[tile + 1];
    const size_t h0 = k * group, g = std::min(group, l.heads - h0);
    const uint32_t *table = kv.blocks(entries[t0].sequence, layer);
    float *scores = &b.scores[thread * tile_cap * task_rows];  // entry t's rows at (t − t0)·task_rows
    size_t lo = SIZE_MAX, hi = 0;
    for (size_t t = t0; t < t1; ++t) {
      lo = std::min(lo, first_of(t));
      hi = std::max(hi, end_of(t));
      for (size_t i = 0; i < g; ++i) std::fill_n(output(t, h0 + i), l.value_dim, 0.0f);
    }
    // Each entry's share [a, z) of a run [p0, p0 + len).
    auto each_entry = [&](size_t p0, size_t len, auto &&fn) {
      for (size_t t = t0; t < t1; ++t) {
        const size_t first = first_of(t), a = std::max(p0, first), z = std::min(p0 + len, end_of(t));
        if (a < z) fn(t, first, a, z);
      }
    };
    for_each_run(table, lo, hi, [&](size_t p0, size_t len, size_t at) {
      size_t rs = 0;
      const float *keys = rows_of(at + k * l.task_offset, len, l.key_dim, thread, &rs);
      each_entry(p0, len, [&](size_t t, size_t first, size_t a, size_t z) {
        kernels_->attention_scores(query(t, h0), l.q_head, g, keys + (a - p0) * rs, rs, z - a, l.key_dim, l.scale,
                                   scores + (t - t0) * task_rows + (a - first), stride);
      });
    });
    for (size_t t = t0; t < t1; ++t) softmax(scores + (t - t0) * task_rows, h0, g, end_of(t) - first_of(t));
    for_each_run(table, lo, hi, [&](size_t p0, size_t len, size_t at) {
      size_t rs = 0;
      const float *values = rows_of(at + k * l.task_offset + l.value_offset, len, l.value_dim, thread, &rs);
      each_entry(p0, len, [&](size_t t, size_t first, size_t a, size_t z) {
        kernels_->attention_values_accumulate(scores + (t - t0) * task_rows + (a - first), stride, g,
                                              values + (a - p0) * rs, rs, z - a, l.value_dim, output(t, h0), l.out_head);
      });
    });
  });
}

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
    const size_t key_at = kv.offset(kv.blocks(entries[t].sequence, layer)[position / B], layer) + (position % layer_rows) * KV;
    const size_t value_at = key_at + value_off;
    if (f16_cache) {
      kernels_->f32_to_f16(k, kv.f16() + key_at, KV);
      kernels_->f32_to_f16(v, kv.f16() + value_at, KV);
    } else {
      std::memcpy(kv.f32() + key_at, k, KV * sizeof(float));
      std::memcpy(kv.f32() + value_at, v, KV * sizeof(float));
    }
  });

  // Scaled dot-product attention of every query head over the positions its token sees:
  // 0..position (causal), or on a sliding layer the last sliding_window of them. The `group`
  // query heads that share a KV head form one task of attend(). An attention sink (gpt-oss) is
  // one more logit per head: it joins the softmax and adds no value.
  AttentionLayout layout;
  layout.heads = heads;
  layout.group = group;
  layout.tasks_per_entry = c.kv_head_count;
  layout.q = b.q.data();
  layout.q_entry = Q;
  layout.q_head = D;
  layout.key_dim = D;
  layout.task_offset = D;
  layout.value_offset = kv.value_offset(layer);
  layout.value_dim = D;
  layout.out = b.attn.data();
  layout.out_entry = Q;
  layout.out_head = D;
  layout.sinks = w.attn_sinks.present() ? w.attn_sinks.data : nullptr;
  layout.window = w.sliding ? c.sliding_window : 0;
  layout.scale = 1.0f / std::sqrt(static_cast<float>(D));
  attend(layout, layer, entries, count);

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
    const size_t at = kv.offset(kv.blocks(entries[t].sequence, layer)[position / B], layer) + (position % layer_rows) * KV;
    if (f16_cache) kernels_->f32_to_f16(kva, kv.f16() + at, KV);
    else std::memcpy(kv.f32() + at, kva, KV * sizeof(float));
  });
  // q̃_h = attn_k_b[h] · q_nope_h, into the first R values of each absorbed row.
  per_head_matmul(w.attn_k_b, b.q.data(), Q, qh, count, b.mla_query.data(), heads * row, row);

  // Scores over 0..position (causal), softmax, the weighted latents: attend() with tasks of up
  // to kMlaHeadsPerTask heads of one token, keys and values both the cache row (the values its
  // first R dims, the latent).
  AttentionLayout layout;
  layout.heads = heads;
  layout.group = Buffers::attention_group(c);
  layout.tasks_per_entry = (heads + layout.group - 1) / layout.group;
  layout.q = b.mla_query.data();
  layout.q_entry = heads * row;
  layout.q_head = row;
  layout.key_dim = row;
  layout.task_offset = 0;
  layout.value_offset = 0;
  layout.value_dim = R;
  layout.out = b.mla_context.data();
  layout.out_entry = heads * R;
  layout.out_head = R;
  layout.sinks = nullptr;
  layout.window = 0;
  layout.scale = static_cast<float>(c.attention_scale);
  attend(layout, layer, entries, count);
  // out_h = attn_v_b[h] · context_h, then o_proj and the residual.
  per_head_matmul(w.attn_v_b, b.mla_context.data(), heads * R, R, count, b.attn.data(), heads * V, V);
  matmul(w.attn_output, b.attn.data(), count, b.ffn_out.data(), H);
  if (Error e = guard_non_finite(b.ffn_out.data(), count, H, {"attention output", layer, true}, entries)) return e;
  pool_->parallel_for(count, [&](size_t t, size_t) { kernels_->add(&b.x[t * H], &b.x[t * H], &b.ffn_out[t * H], H); });
  return {};
}

}  // namespace colibri::runtime

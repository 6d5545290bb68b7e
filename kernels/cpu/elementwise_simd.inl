// kernels/cpu/elementwise_simd.inl — the element-wise helpers of the forward pass over the
// `Simd` vocabulary (AVX2 and AVX-512 translation units include it in their anonymous
// namespace). Besides the matmul ops it needs: set1, add, sub, mul, div, max, store,
// store_partial, exp, hsum, hmax, and the row conversions *_row.
//
// These are reductions over one vector (softmax sum, rmsnorm sum of squares): their order is
// fixed per ISA, so the result never depends on threads; across ISAs they agree to ~1e-6.

float dot_f32_impl(const float *a, const float *b, size_t n) {
  using F = typename Simd::F;
  constexpr size_t kL = Simd::kLanes;
  F acc0 = Simd::zero(), acc1 = Simd::zero(), acc2 = Simd::zero(), acc3 = Simd::zero();
  size_t i = 0;
  for (; i + 4 * kL <= n; i += 4 * kL) {
    acc0 = Simd::madd(Simd::load_f32(a + i), Simd::load_f32(b + i), acc0);
    acc1 = Simd::madd(Simd::load_f32(a + i + kL), Simd::load_f32(b + i + kL), acc1);
    acc2 = Simd::madd(Simd::load_f32(a + i + 2 * kL), Simd::load_f32(b + i + 2 * kL), acc2);
    acc3 = Simd::madd(Simd::load_f32(a + i + 3 * kL), Simd::load_f32(b + i + 3 * kL), acc3);
  }
  for (; i + kL <= n; i += kL) acc0 = Simd::madd(Simd::load_f32(a + i), Simd::load_f32(b + i), acc0);
  if (i < n)
    acc1 = Simd::madd(Simd::load_f32_partial(a + i, n - i), Simd::load_f32_partial(b + i, n - i), acc1);
  return Simd::hsum(Simd::add(Simd::add(acc0, acc1), Simd::add(acc2, acc3)));
}

void rmsnorm_impl(float *out, const float *x, const float *weight, float eps, size_t n) {
  constexpr size_t kL = Simd::kLanes;
  const float sum_squares = dot_f32_impl(x, x, n);
  const float inverse_rms = 1.0f / __builtin_sqrtf(sum_squares / static_cast<float>(n) + eps);
  const auto scale = Simd::set1(inverse_rms);
  size_t i = 0;
  for (; i + kL <= n; i += kL)
    Simd::store(out + i, Simd::mul(Simd::mul(Simd::load_f32(x + i), scale), Simd::load_f32(weight + i)));
  if (i < n) {
    const auto v = Simd::mul(Simd::mul(Simd::load_f32_partial(x + i, n - i), scale),
                             Simd::load_f32_partial(weight + i, n - i));
    Simd::store_partial(out + i, v, n - i);
  }
}

// Softmax of one row in place. kFloor (attention probabilities, see kernels.h): a logit more
// than -kAttentionLogitFloor below the row's maximum gets probability 0 exactly, and exp is
// never evaluated below the floor, so no subnormal number is computed.
template <bool kFloor>
void softmax_row(float *x, size_t n) {
  using F = typename Simd::F;
  constexpr size_t kL = Simd::kLanes;
  // Max: a NaN lane is skipped here but poisons the sum below, so NaN propagates.
  F max_vector = Simd::set1(x[0]);
  size_t i = 0;
  for (; i + kL <= n; i += kL) max_vector = Simd::max(Simd::load_f32(x + i), max_vector);
  float max_value = Simd::hmax(max_vector);
  for (; i < n; ++i)
    if (x[i] > max_value) max_value = x[i];
  const F max_broadcast = Simd::set1(max_value);
  const F floor = Simd::set1(kAttentionLogitFloor);
  auto exp_of = [&](F v) __attribute__((always_inline)) {
    const F shifted = Simd::sub(v, max_broadcast);
    if constexpr (kFloor) {
      // max(floor, shifted) keeps a NaN (the second operand is returned when unordered).
      return Simd::zero_where_less(Simd::exp(Simd::max(floor, shifted)), shifted, floor);
    } else {
      return Simd::exp(shifted);
    }
  };
  F sum = Simd::zero();
  for (i = 0; i + kL <= n; i += kL) {
    const F e = exp_of(Simd::load_f32(x + i));
    Simd::store(x + i, e);
    sum = Simd::add(sum, e);
  }
  if (i < n) {
    // Padding lanes hold exp(0 - max); sum the stored lanes only (reloaded zero-padded).
    const F e = exp_of(Simd::load_f32_partial(x + i, n - i));
    Simd::store_partial(x + i, e, n - i);
    sum = Simd::add(sum, Simd::load_f32_partial(x + i, n - i));
  }
  const F total = Simd::set1(Simd::hsum(sum));
  for (i = 0; i + kL <= n; i += kL) Simd::store(x + i, Simd::div(Simd::load_f32(x + i), total));
  if (i < n) Simd::store_partial(x + i, Simd::div(Simd::load_f32_partial(x + i, n - i), total), n - i);
}

void softmax_impl(float *x, size_t n) { softmax_row<false>(x, n); }

void attention_softmax_impl(float *x, size_t stride, size_t heads, size_t n) {
  for (size_t h = 0; h < heads; ++h) softmax_row<true>(x + h * stride, n);
}

void silu_mul_impl(float *out, const float *gate, const float *up, size_t n) {
  using F = typename Simd::F;
  constexpr size_t kL = Simd::kLanes;
  const F one = Simd::set1(1.0f);
  const F zero = Simd::zero();
  auto silu_times = [&](F g, F u) { return Simd::mul(Simd::div(g, Simd::add(one, Simd::exp(Simd::sub(zero, g)))), u); };
  size_t i = 0;
  for (; i + kL <= n; i += kL) Simd::store(out + i, silu_times(Simd::load_f32(gate + i), Simd::load_f32(up + i)));
  if (i < n)
    Simd::store_partial(out + i, silu_times(Simd::load_f32_partial(gate + i, n - i), Simd::load_f32_partial(up + i, n - i)), n - i);
}

void add_impl(float *out, const float *a, const float *b, size_t n) {
  constexpr size_t kL = Simd::kLanes;
  size_t i = 0;
  for (; i + kL <= n; i += kL) Simd::store(out + i, Simd::add(Simd::load_f32(a + i), Simd::load_f32(b + i)));
  if (i < n)
    Simd::store_partial(out + i, Simd::add(Simd::load_f32_partial(a + i, n - i), Simd::load_f32_partial(b + i, n - i)), n - i);
}

void scale_add_impl(float *y, float alpha, const float *x, size_t n) {
  constexpr size_t kL = Simd::kLanes;
  const auto a = Simd::set1(alpha);
  size_t i = 0;
  for (; i + kL <= n; i += kL) Simd::store(y + i, Simd::madd(a, Simd::load_f32(x + i), Simd::load_f32(y + i)));
  if (i < n)
    Simd::store_partial(y + i, Simd::madd(a, Simd::load_f32_partial(x + i, n - i), Simd::load_f32_partial(y + i, n - i)), n - i);
}

// Scores of one head over positions [p_begin, n), 8 keys at a time: one accumulator vector
// per key along d, the 8 reduced together by Simd::reduce8 (the same fixed tree for every key,
// whatever its place in a group). The grouped kernel below reproduces this order.
void attention_scores_one(const float *q, const float *keys, size_t stride, size_t p_begin, size_t n, size_t d,
                          float scale, float *scores) {
  using F = typename Simd::F;
  constexpr size_t kL = Simd::kLanes;
  for (size_t p0 = p_begin; p0 < n; p0 += 8) {
    const size_t m = min_size(8, n - p0);
    F acc[8];
    for (int j = 0; j < 8; ++j) acc[j] = Simd::zero();
    size_t i = 0;
    for (; i + kL <= d; i += kL) {
      const F qv = Simd::load_f32(q + i);
      for (size_t j = 0; j < m; ++j) acc[j] = Simd::madd(qv, Simd::load_f32(keys + (p0 + j) * stride + i), acc[j]);
    }
    if (i < d) {
      const F qv = Simd::load_f32_partial(q + i, d - i);
      for (size_t j = 0; j < m; ++j)
        acc[j] = Simd::madd(qv, Simd::load_f32_partial(keys + (p0 + j) * stride + i, d - i), acc[j]);
    }
    float sums[8];
    Simd::reduce8(acc, sums);
    for (size_t j = 0; j < m; ++j) scores[p0 + j] = sums[j] * scale;
  }
}

// kM heads × (8 / kM) positions per register block: each key row is loaded once for kM
// heads. Every (head, position) pair keeps its own accumulator, walked over d in the same
// steps as attention_scores_one, and goes through the same reduce8 tree: the same bits.
template <int kM>
void attention_scores_heads(const float *q, size_t q_stride, const float *keys, size_t stride, size_t n, size_t d,
                            float scale, float *scores, size_t scores_stride) {
  using F = typename Simd::F;
  constexpr size_t kL = Simd::kLanes;
  constexpr int kP = 8 / kM;
  size_t p0 = 0;
  for (; p0 + kP <= n; p0 += kP) {
    F acc[8];
    for (int j = 0; j < 8; ++j) acc[j] = Simd::zero();
    size_t i = 0;
    for (; i + kL <= d; i += kL) {
      F kv[kP];
      for (int j = 0; j < kP; ++j) kv[j] = Simd::load_f32(keys + (p0 + j) * stride + i);
      for (int h = 0; h < kM; ++h) {
        F qv = Simd::load_f32(q + h * q_stride + i);
        Simd::pin(qv);
        for (int j = 0; j < kP; ++j) acc[h * kP + j] = Simd::madd(qv, kv[j], acc[h * kP + j]);
      }
    }
    if (i < d) {
      F kv[kP];
      for (int j = 0; j < kP; ++j) kv[j] = Simd::load_f32_partial(keys + (p0 + j) * stride + i, d - i);
      for (int h = 0; h < kM; ++h) {
        const F qv = Simd::load_f32_partial(q + h * q_stride + i, d - i);
        for (int j = 0; j < kP; ++j) acc[h * kP + j] = Simd::madd(qv, kv[j], acc[h * kP + j]);
      }
    }
    float sums[8];
    Simd::reduce8(acc, sums);
    for (int h = 0; h < kM; ++h)
      for (int j = 0; j < kP; ++j) scores[h * scores_stride + p0 + j] = sums[h * kP + j] * scale;
  }
  for (int h = 0; h < kM; ++h) attention_scores_one(q + h * q_stride, keys, stride, p0, n, d, scale, scores + h * scores_stride);
}

void attention_scores_impl(const float *q, size_t q_stride, size_t heads, const float *keys, size_t stride, size_t n,
                           size_t d, float scale, float *scores, size_t scores_stride) {
  size_t h = 0;
  for (; h + 4 <= heads; h += 4)
    attention_scores_heads<4>(q + h * q_stride, q_stride, keys, stride, n, d, scale, scores + h * scores_stride, scores_stride);
  for (; h + 2 <= heads; h += 2)
    attention_scores_heads<2>(q + h * q_stride, q_stride, keys, stride, n, d, scale, scores + h * scores_stride, scores_stride);
  for (; h < heads; ++h) attention_scores_one(q + h * q_stride, keys, stride, 0, n, d, scale, scores + h * scores_stride);
}

// One head, dims [0, d) of `values` (the caller offsets values and out to start elsewhere):
// chunks of up to 4 vectors held in registers across all n positions. kAccumulate: the
// accumulators start from out (a previous block's sum) instead of zero, so that a sequence's
// positions summed block by block (the paged KV cache) give the bits of one call over all of
// them (fma(w, v, 0) is w·v rounded once, as the first step from zero).
template <bool kAccumulate>
void attention_values_one(const float *probs, const float *values, size_t stride, size_t n, size_t d, float *out) {
  using F = typename Simd::F;
  constexpr size_t kL = Simd::kLanes;
  constexpr size_t kChunk = 4 * kL;
  size_t i = 0;
  for (; i + kChunk <= d; i += kChunk) {
    F acc[4];
    for (int c = 0; c < 4; ++c) acc[c] = kAccumulate ? Simd::load_f32(out + i + c * kL) : Simd::zero();
    for (size_t p = 0; p < n; ++p) {
      const F w = Simd::set1(probs[p]);
      const float *row = values + p * stride + i;
      for (int c = 0; c < 4; ++c) acc[c] = Simd::madd(w, Simd::load_f32(row + c * kL), acc[c]);
    }
    for (int c = 0; c < 4; ++c) Simd::store(out + i + c * kL, acc[c]);
  }
  for (; i < d; i += kL) {
    const size_t lanes = min_size(kL, d - i);
    F acc = !kAccumulate ? Simd::zero() : lanes == kL ? Simd::load_f32(out + i) : Simd::load_f32_partial(out + i, lanes);
    for (size_t p = 0; p < n; ++p) {
      const float *row = values + p * stride + i;
      const F v = lanes == kL ? Simd::load_f32(row) : Simd::load_f32_partial(row, lanes);
      acc = Simd::madd(Simd::set1(probs[p]), v, acc);
    }
    if (lanes == kL) Simd::store(out + i, acc);
    else Simd::store_partial(out + i, acc, lanes);
  }
}

// 4 heads × 2 vectors of dims per register block: each value row chunk is loaded once for
// 4 heads. Every output element is Σ_p probs[p]·v[p][i] accumulated in ascending p from
// zero (kAccumulate: from out), as in attention_values_one: the same bits.
template <bool kAccumulate>
void attention_values_four(const float *probs, size_t probs_stride, const float *values, size_t stride, size_t n,
                           size_t d, float *out, size_t out_stride) {
  using F = typename Simd::F;
  constexpr size_t kL = Simd::kLanes;
  size_t i = 0;
  for (; i + 2 * kL <= d; i += 2 * kL) {
    F acc[4][2];
    for (int h = 0; h < 4; ++h) {
      acc[h][0] = kAccumulate ? Simd::load_f32(out + h * out_stride + i) : Simd::zero();
      acc[h][1] = kAccumulate ? Simd::load_f32(out + h * out_stride + i + kL) : Simd::zero();
    }
    for (size_t p = 0; p < n; ++p) {
      const float *row = values + p * stride + i;
      F v0 = Simd::load_f32(row), v1 = Simd::load_f32(row + kL);
      Simd::pin(v0);
      Simd::pin(v1);
      for (int h = 0; h < 4; ++h) {
        const F w = Simd::set1(probs[h * probs_stride + p]);
        acc[h][0] = Simd::madd(w, v0, acc[h][0]);
        acc[h][1] = Simd::madd(w, v1, acc[h][1]);
      }
    }
    for (int h = 0; h < 4; ++h) {
      Simd::store(out + h * out_stride + i, acc[h][0]);
      Simd::store(out + h * out_stride + i + kL, acc[h][1]);
    }
  }
  if (i < d)
    for (int h = 0; h < 4; ++h)
      attention_values_one<kAccumulate>(probs + h * probs_stride, values + i, stride, n, d - i, out + h * out_stride + i);
}

template <bool kAccumulate>
void attention_values_heads(const float *probs, size_t probs_stride, size_t heads, const float *values, size_t stride,
                            size_t n, size_t d, float *out, size_t out_stride) {
  size_t h = 0;
  for (; h + 4 <= heads; h += 4)
    attention_values_four<kAccumulate>(probs + h * probs_stride, probs_stride, values, stride, n, d, out + h * out_stride,
                                       out_stride);
  for (; h < heads; ++h)
    attention_values_one<kAccumulate>(probs + h * probs_stride, values, stride, n, d, out + h * out_stride);
}

void attention_values_impl(const float *probs, size_t probs_stride, size_t heads, const float *values, size_t stride,
                           size_t n, size_t d, float *out, size_t out_stride) {
  attention_values_heads<false>(probs, probs_stride, heads, values, stride, n, d, out, out_stride);
}

void attention_values_accumulate_impl(const float *probs, size_t probs_stride, size_t heads, const float *values,
                                      size_t stride, size_t n, size_t d, float *out, size_t out_stride) {
  attention_values_heads<true>(probs, probs_stride, heads, values, stride, n, d, out, out_stride);
}

void f16_to_f32_impl(const uint16_t *in, float *out, size_t n) {
  constexpr size_t kL = Simd::kLanes;
  size_t i = 0;
  for (; i + kL <= n; i += kL) Simd::store(out + i, Simd::load_f16(in + i));
  if (i < n) Simd::store_partial(out + i, Simd::load_f16_partial(in + i, n - i), n - i);
}

void bf16_to_f32_impl(const uint16_t *in, float *out, size_t n) {
  constexpr size_t kL = Simd::kLanes;
  size_t i = 0;
  for (; i + kL <= n; i += kL) Simd::store(out + i, Simd::load_bf16(in + i));
  if (i < n) Simd::store_partial(out + i, Simd::load_bf16_partial(in + i, n - i), n - i);
}

void f32_to_f16_impl(const float *in, uint16_t *out, size_t n) {
  constexpr size_t kL = Simd::kLanes;
  size_t i = 0;
  for (; i + kL <= n; i += kL) Simd::store_f16(out + i, Simd::load_f32(in + i));
  for (; i < n; ++i) out[i] = detail::f32_to_f16_scalar(in[i]);
}

void f32_to_bf16_impl(const float *in, uint16_t *out, size_t n) {
  constexpr size_t kL = Simd::kLanes;
  size_t i = 0;
  for (; i + kL <= n; i += kL) Simd::store_bf16(out + i, Simd::load_f32(in + i));
  for (; i < n; ++i) out[i] = detail::f32_to_bf16_scalar(in[i]);
}

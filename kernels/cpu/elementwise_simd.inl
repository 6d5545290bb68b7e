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

void softmax_impl(float *x, size_t n) {
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
  F sum = Simd::zero();
  for (i = 0; i + kL <= n; i += kL) {
    const F e = Simd::exp(Simd::sub(Simd::load_f32(x + i), max_broadcast));
    Simd::store(x + i, e);
    sum = Simd::add(sum, e);
  }
  if (i < n) {
    // Padding lanes hold exp(0 - max); sum the stored lanes only (reloaded zero-padded).
    const F e = Simd::exp(Simd::sub(Simd::load_f32_partial(x + i, n - i), max_broadcast));
    Simd::store_partial(x + i, e, n - i);
    sum = Simd::add(sum, Simd::load_f32_partial(x + i, n - i));
  }
  const F total = Simd::set1(Simd::hsum(sum));
  for (i = 0; i + kL <= n; i += kL) Simd::store(x + i, Simd::div(Simd::load_f32(x + i), total));
  if (i < n) Simd::store_partial(x + i, Simd::div(Simd::load_f32_partial(x + i, n - i), total), n - i);
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

// Scores of 8 keys at a time: one accumulator vector per key along d, the 8 reduced together
// by Simd::reduce8 (the same fixed tree for every key, whatever its place in a group).
void attention_scores_impl(const float *q, const float *keys, size_t stride, size_t n, size_t d, float scale,
                           float *scores) {
  using F = typename Simd::F;
  constexpr size_t kL = Simd::kLanes;
  for (size_t p0 = 0; p0 < n; p0 += 8) {
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

// out in chunks of up to 4 vectors held in registers across all n positions.
void attention_values_impl(const float *probs, const float *values, size_t stride, size_t n, size_t d, float *out) {
  using F = typename Simd::F;
  constexpr size_t kL = Simd::kLanes;
  constexpr size_t kChunk = 4 * kL;
  size_t i = 0;
  for (; i + kChunk <= d; i += kChunk) {
    F acc[4] = {Simd::zero(), Simd::zero(), Simd::zero(), Simd::zero()};
    for (size_t p = 0; p < n; ++p) {
      const F w = Simd::set1(probs[p]);
      const float *row = values + p * stride + i;
      for (int c = 0; c < 4; ++c) acc[c] = Simd::madd(w, Simd::load_f32(row + c * kL), acc[c]);
    }
    for (int c = 0; c < 4; ++c) Simd::store(out + i + c * kL, acc[c]);
  }
  for (; i < d; i += kL) {
    const size_t lanes = min_size(kL, d - i);
    F acc = Simd::zero();
    for (size_t p = 0; p < n; ++p) {
      const float *row = values + p * stride + i;
      const F v = lanes == kL ? Simd::load_f32(row) : Simd::load_f32_partial(row, lanes);
      acc = Simd::madd(Simd::set1(probs[p]), v, acc);
    }
    if (lanes == kL) Simd::store(out + i, acc);
    else Simd::store_partial(out + i, acc, lanes);
  }
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

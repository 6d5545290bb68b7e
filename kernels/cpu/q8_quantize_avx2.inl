// kernels/cpu/q8_quantize_avx2.inl — the q8 quantiser in AVX2 (scalar.cpp holds the rule it
// reproduces bit for bit). Included inside an anonymous namespace by q8_avx2.inl (so by the
// AVX2 and AVX-512 tables) and by convert_avx2.cpp, which gives it to the tools in the small
// library colibri_kernels_scalar (conversion_quantize_row_q8, kernels.h). Needs <immintrin.h>,
// <cstring> and kernels.h; group_size is 32 or 64.

// 8 int32 in [-127, 127] per vector, 4 vectors -> 32 int8 in order.
inline __m256i pack_epi32_to_epi8(__m256i q0, __m256i q1, __m256i q2, __m256i q3) {
  const __m256i a = _mm256_packs_epi32(q0, q1);
  const __m256i b = _mm256_packs_epi32(q2, q3);
  const __m256i c = _mm256_packs_epi16(a, b);
  return _mm256_permutevar8x32_epi32(c, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// The scalar quantiser's rule, 8 values at a time (see scalar.cpp for the definition).
inline __m256i quantize8(__m256 v, __m256 scale) {
  const __m256 t = _mm256_div_ps(v, scale);
  __m256 r = _mm256_round_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 fraction = _mm256_sub_ps(t, r);
  const __m256 one = _mm256_set1_ps(1.0f);
  r = _mm256_add_ps(r, _mm256_and_ps(_mm256_cmp_ps(fraction, _mm256_set1_ps(0.5f), _CMP_GE_OQ), one));
  r = _mm256_sub_ps(r, _mm256_and_ps(_mm256_cmp_ps(fraction, _mm256_set1_ps(-0.5f), _CMP_LE_OQ), one));
  const __m256 magnitude = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), t);
  r = _mm256_and_ps(r, _mm256_cmp_ps(magnitude, _mm256_set1_ps(127.5f), _CMP_LE_OQ));
  r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
  return _mm256_cvttps_epi32(r);
}

void quantize_row_q8_impl(const float *x, size_t cols, uint32_t group_size, void *out) {
  unsigned char *block = static_cast<unsigned char *>(out);
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  for (size_t c0 = 0; c0 < cols; c0 += group_size, block += q8_block_bytes(group_size)) {
    __m256 amax = _mm256_setzero_ps();
    __m256 non_finite = _mm256_setzero_ps();  // stays ±0 unless a NaN/Inf is seen
    for (uint32_t i = 0; i < group_size; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + c0 + i);
      amax = _mm256_max_ps(_mm256_andnot_ps(sign_bit, v), amax);  // a NaN lane keeps amax
      non_finite = _mm256_add_ps(non_finite, _mm256_mul_ps(v, _mm256_setzero_ps()));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    __m128 n = _mm_add_ps(_mm256_castps256_ps128(non_finite), _mm256_extractf128_ps(non_finite, 1));
    n = _mm_add_ps(n, _mm_movehl_ps(n, n));
    n = _mm_add_ss(n, _mm_shuffle_ps(n, n, 1));
    const float scale = _mm_cvtss_f32(m) / 127.0f + _mm_cvtss_f32(n);
    std::memcpy(block, &scale, 4);
    const __m256 vscale = _mm256_set1_ps(scale);
    for (uint32_t i = 0; i < group_size; i += 32) {
      const float *src = x + c0 + i;
      const __m256i q = pack_epi32_to_epi8(
          quantize8(_mm256_loadu_ps(src), vscale), quantize8(_mm256_loadu_ps(src + 8), vscale),
          quantize8(_mm256_loadu_ps(src + 16), vscale), quantize8(_mm256_loadu_ps(src + 24), vscale));
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(block + 4 + i), q);
    }
  }
}

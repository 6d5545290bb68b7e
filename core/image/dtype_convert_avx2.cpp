// core/image/dtype_convert_avx2.cpp — AVX2 twins of the f16 widening and the q4, q8f16 and
// mxfp4 quantisers of dtype_convert.cpp (see dtype_convert_avx2.h). Every step is the scalar
// rule's operation on eight lanes: the same IEEE division (no reciprocal), truncation, compares
// and clamps, so the bytes are the scalar ones; only the order of the max/min reductions
// differs, which changes no result.
#include "image/dtype_convert_avx2.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "image/dtype_convert.h"
#include "image/format.h"

namespace colibri::image::detail {

void f16_to_f32_avx2(const uint16_t *in, float *out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(in + i))));
  for (; i < n; ++i) out[i] = f16_to_f32(in[i]);
}

namespace {

int32_t hmax_epi32(__m256i v) {
  __m128i m = _mm_max_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_max_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm_max_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(m);
}

int32_t hmin_epi32(__m256i v) {
  __m128i m = _mm_min_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_min_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm_min_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(m);
}

double hmax_pd(__m256d v) {
  __m128d m = _mm_max_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  m = _mm_max_pd(m, _mm_unpackhi_pd(m, m));
  return _mm_cvtsd_f64(m);
}

// The magnitude bits of eight values (sign cleared), NaN patterns as 0: max_magnitude's keys.
__m256i magnitude_bits(const float *x) {
  const __m256i bits = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(x)),
                                        _mm256_set1_epi32(0x7FFFFFFF));
  return _mm256_andnot_si256(_mm256_cmpgt_epi32(bits, _mm256_set1_epi32(0x7F800000)), bits);
}

// max_magnitude's bits over a group of n (a multiple of 8) values.
int32_t max_magnitude_bits(const float *g, uint32_t n) {
  __m256i m = _mm256_setzero_si256();
  for (uint32_t i = 0; i < n; i += 8) m = _mm256_max_epi32(m, magnitude_bits(g + i));
  return hmax_epi32(m);
}

float max_magnitude(const float *g, uint32_t n) {
  const int32_t bits = max_magnitude_bits(g, n);
  float magnitude;
  std::memcpy(&magnitude, &bits, 4);
  return magnitude;
}

// round_clamped(t, lo, hi) of eight quotients: clamp to [lo - 8, hi + 8], round half away from
// zero (truncate, then ±1 by the fraction), clamp to [lo, hi]. Exact small integers as floats.
__m256 round_clamped(__m256 t, float lo, float hi) {
  t = _mm256_min_ps(_mm256_max_ps(t, _mm256_set1_ps(lo - 8.0f)), _mm256_set1_ps(hi + 8.0f));
  const __m256 r = _mm256_cvtepi32_ps(_mm256_cvttps_epi32(t));
  const __m256 fraction = _mm256_sub_ps(t, r);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 up = _mm256_and_ps(_mm256_cmp_ps(fraction, _mm256_set1_ps(0.5f), _CMP_GE_OQ), one);
  const __m256 down = _mm256_and_ps(_mm256_cmp_ps(fraction, _mm256_set1_ps(-0.5f), _CMP_LE_OQ), one);
  const __m256 q = _mm256_sub_ps(_mm256_add_ps(r, up), down);
  return _mm256_min_ps(_mm256_max_ps(q, _mm256_set1_ps(lo)), _mm256_set1_ps(hi));
}

// |x - s·q| in double for eight lanes, folded into *err.
void fold_error(__m256 x, __m256 stored, __m256d *err) {
  const __m256d sign = _mm256_set1_pd(-0.0);
  const __m256d lo =
      _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), _mm256_cvtps_pd(_mm256_castps256_ps128(stored)));
  const __m256d hi =
      _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), _mm256_cvtps_pd(_mm256_extractf128_ps(stored, 1)));
  *err = _mm256_max_pd(*err, _mm256_max_pd(_mm256_andnot_pd(sign, lo), _mm256_andnot_pd(sign, hi)));
}

// The 4-bit codes of 32 values (four vectors of eight, in value order) into 16 bytes: byte j =
// code j | code j + 16 << 4 (pack_nibbles of dtype_convert.cpp).
void pack_nibbles(const __m256i *codes, unsigned char *out) {
  const __m256i lo = _mm256_or_si256(codes[0], _mm256_slli_epi32(codes[2], 4));  // bytes 0..7
  const __m256i hi = _mm256_or_si256(codes[1], _mm256_slli_epi32(codes[3], 4));  // bytes 8..15
  const __m128i lo16 = _mm_packs_epi32(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1));
  const __m128i hi16 = _mm_packs_epi32(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i *>(out), _mm_packus_epi16(lo16, hi16));
}

}  // namespace

double quantize_row_q4_avx2(const float *x, size_t cols, uint32_t group_size, unsigned char *out) {
  __m256d err = _mm256_setzero_pd();
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (size_t c = 0; c < cols; c += group_size, out += q4_block_bytes(group_size)) {
    const float *g = x + c;
    // The largest magnitude, then the first index holding it (max_magnitude and the index
    // search of quantize_q4, as integer reductions).
    const __m256i amax = _mm256_set1_epi32(max_magnitude_bits(g, group_size));
    __m256i first = _mm256_set1_epi32(static_cast<int32_t>(group_size));
    for (uint32_t i = 0; i < group_size; i += 8) {
      const __m256i index = _mm256_add_epi32(lane, _mm256_set1_epi32(static_cast<int32_t>(i)));
      const __m256i hit = _mm256_cmpeq_epi32(magnitude_bits(g + i), amax);
      first = _mm256_min_epi32(first, _mm256_blendv_epi8(first, index, hit));
    }
    const int32_t at = hmin_epi32(first);
    const float extreme = _mm256_cvtsi256_si32(amax) != 0 ? g[at] : 0.0f;
    const uint16_t h = f32_to_f16(extreme / -8.0f);
    const float scale = f16_to_f32(h);
    std::memcpy(out, &h, 2);
    const __m256 s = _mm256_set1_ps(scale);
    const __m256 zero = _mm256_setzero_ps();
    const __m256i offset = _mm256_set1_epi32(kQ4CodeOffset);
    for (uint32_t sub = 0; sub < group_size / kSubBlock; ++sub) {
      // Codes of values j and j + 16 of the sub-block share byte j.
      __m256i codes[4];
      for (int k = 0; k < 4; ++k) {
        const __m256 v = _mm256_loadu_ps(g + sub * kSubBlock + 8 * k);
        const __m256 q = scale == 0.0f ? zero : round_clamped(_mm256_div_ps(v, s), -8.0f, 7.0f);
        fold_error(v, _mm256_mul_ps(s, q), &err);
        codes[k] = _mm256_add_epi32(_mm256_cvttps_epi32(q), offset);
      }
      pack_nibbles(codes, out + 2 + sub * (kSubBlock / 2));
    }
  }
  return hmax_pd(err);
}

double quantize_row_q8f16_avx2(const float *x, size_t cols, unsigned char *out) {
  __m256d err = _mm256_setzero_pd();
  for (size_t c = 0; c < cols; c += kQ8F16GroupSize, out += kQ8F16BlockBytes) {
    const float *g = x + c;
    const float amax = max_magnitude(g, kQ8F16GroupSize);
    const uint16_t h = f32_to_f16(amax / 127.0f);
    const float scale = f16_to_f32(h);
    std::memcpy(out, &h, 2);
    const __m256 s = _mm256_set1_ps(scale);
    __m256i q32[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 v = _mm256_loadu_ps(g + 8 * k);
      const __m256 q = scale == 0.0f ? _mm256_setzero_ps() : round_clamped(_mm256_div_ps(v, s), -127.0f, 127.0f);
      fold_error(v, _mm256_mul_ps(s, q), &err);
      q32[k] = _mm256_cvttps_epi32(q);
    }
    // int32 → int8 in order (the 128-bit halves packed pairwise: no lane crossing to undo).
    __m128i q16[4];
    for (int k = 0; k < 4; ++k) q16[k] = _mm_packs_epi32(_mm256_castsi256_si128(q32[k]), _mm256_extracti128_si256(q32[k], 1));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(out + 2), _mm_packs_epi16(q16[0], q16[1]));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(out + 18), _mm_packs_epi16(q16[2], q16[3]));
  }
  return hmax_pd(err);
}

double quantize_row_mxfp4_avx2(const float *x, size_t cols, unsigned char *out) {
  __m256d err = _mm256_setzero_pd();
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  for (size_t c = 0; c < cols; c += kMxfp4GroupSize, out += kMxfp4BlockBytes) {
    const float *g = x + c;
    const float amax = max_magnitude(g, kMxfp4GroupSize);
    const int shared = mxfp4_shared_exponent(amax);  // once per group: the scalar rule's
    out[0] = static_cast<unsigned char>(shared + static_cast<int>(kE8m0Bias));
    // x · 2^-shared: the float product of x and an exact power of two rounds once, as the
    // scalar rule's exact double product cast to float does. The stored value is 2^shared
    // times the code's e2m1 value (e8m0_value, e2m1_value).
    const __m256 inverse = _mm256_set1_ps(std::ldexp(1.0f, -shared));
    const __m256 scale = _mm256_set1_ps(static_cast<float>(std::ldexp(1.0, shared)));
    __m256i codes[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 v = _mm256_loadu_ps(g + 8 * k);
      const __m256 scaled = _mm256_mul_ps(v, inverse);
      const __m256 magnitude = _mm256_andnot_ps(sign_mask, scaled);
      // e2m1_magnitude_code: the nearest of the 8 magnitudes, a tie to the even code.
      __m256 best_distance = magnitude, best_value = _mm256_setzero_ps();
      __m256i best = _mm256_setzero_si256();
      for (int code = 1; code < 8; ++code) {
        const __m256 value = _mm256_set1_ps(static_cast<float>(kE2m1Doubled[code]) * 0.5f);
        const __m256 distance = _mm256_andnot_ps(sign_mask, _mm256_sub_ps(magnitude, value));
        __m256 take = _mm256_cmp_ps(distance, best_distance, _CMP_LT_OQ);
        if (code % 2 == 0) take = _mm256_or_ps(take, _mm256_cmp_ps(distance, best_distance, _CMP_EQ_OQ));
        best_distance = _mm256_blendv_ps(best_distance, distance, take);
        best_value = _mm256_blendv_ps(best_value, value, take);
        best = _mm256_blendv_epi8(best, _mm256_set1_epi32(code), _mm256_castps_si256(take));
      }
      const __m256 sign = _mm256_and_ps(scaled, sign_mask);
      fold_error(v, _mm256_mul_ps(scale, _mm256_or_ps(best_value, sign)), &err);
      codes[k] = _mm256_or_si256(best, _mm256_srli_epi32(_mm256_castps_si256(sign), 28));  // sign → bit 3
    }
    pack_nibbles(codes, out + 1);
  }
  return hmax_pd(err);
}

}  // namespace colibri::image::detail

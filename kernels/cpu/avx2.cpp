// kernels/cpu/avx2.cpp — the AVX2 + FMA + F16C kernels (compiled with -mavx2 -mfma -mf16c).
// Everything here lives in an anonymous namespace; see the warning in internal.h.
#include <immintrin.h>

#include <cstring>
#include <utility>

#include "kernels/cpu/internal.h"

namespace colibri::kernels::avx2 {
namespace {

#include "kernels/cpu/tile_args.inl"

struct Simd {
  using F = __m256;
  static constexpr size_t kLanes = 8;
  // Keeps v in a register: stops the compiler from re-loading it as a memory operand of
  // every FMA that uses it (which would double the loads of a tile).
  static void pin(F &v) { asm("" : "+x"(v)); }
  static void prefetch_l1(const char *p) { __builtin_prefetch(p, 0, 3); }  // prefetcht0
  static void prefetch_l2(const char *p) { __builtin_prefetch(p, 0, 2); }  // prefetcht1

  static __m256i tail_mask(size_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float v) { return _mm256_set1_ps(v); }
  static F load_f32(const float *p) { return _mm256_loadu_ps(p); }
  static F load_f32_partial(const float *p, size_t n) { return _mm256_maskload_ps(p, tail_mask(n)); }
  static F load_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
  }
  static F load_f16_partial(const uint16_t *p, size_t n) {
    alignas(16) uint16_t padded[8] = {};
    std::memcpy(padded, p, n * sizeof(uint16_t));
    return load_f16(padded);
  }
  static F load_bf16(const uint16_t *p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  static F load_bf16_partial(const uint16_t *p, size_t n) {
    alignas(16) uint16_t padded[8] = {};
    std::memcpy(padded, p, n * sizeof(uint16_t));
    return load_bf16(padded);
  }
  static void store(float *p, F v) { _mm256_storeu_ps(p, v); }
  static void store_partial(float *p, F v, size_t n) { _mm256_maskstore_ps(p, tail_mask(n), v); }
  static void store_f16(uint16_t *p, F v) {
    _mm_storeu_si128(reinterpret_cast<__m128i *>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static void store_bf16(uint16_t *p, F v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), odd), 16);
    const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)),
                                              _mm256_set1_epi32(0x7F800000));
    const __m256i h = _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0xD8);
    _mm_storeu_si128(reinterpret_cast<__m128i *>(p), _mm256_castsi256_si128(packed));
  }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  // value, with the lanes where x < limit set to 0 (a NaN x keeps its lane).
  static F zero_where_less(F value, F x, F limit) { return _mm256_andnot_ps(_mm256_cmp_ps(x, limit, _CMP_LT_OQ), value); }
  static F madd(F a, F b, F acc) { return _mm256_fmadd_ps(a, b, acc); }

  // The canonical 8-lane tree ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)) for 8 vectors at once.
  static void reduce8(const F *v, float *out) {
    const __m256 h01 = _mm256_hadd_ps(v[0], v[1]);
    const __m256 h23 = _mm256_hadd_ps(v[2], v[3]);
    const __m256 h45 = _mm256_hadd_ps(v[4], v[5]);
    const __m256 h67 = _mm256_hadd_ps(v[6], v[7]);
    const __m256 h0123 = _mm256_hadd_ps(h01, h23);
    const __m256 h4567 = _mm256_hadd_ps(h45, h67);
    const __m256 lo = _mm256_permute2f128_ps(h0123, h4567, 0x20);
    const __m256 hi = _mm256_permute2f128_ps(h0123, h4567, 0x31);
    _mm256_storeu_ps(out, _mm256_add_ps(lo, hi));
  }
  static float hsum(F v) {
    const __m256 h = _mm256_hadd_ps(v, v);
    const __m256 h2 = _mm256_hadd_ps(h, h);
    return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(h2), _mm256_extractf128_ps(h2, 1)));
  }
  static float hmax(F v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
  }

  // e^x to ~1 ulp (Cephes expf polynomial); NaN propagates, overflow gives +inf, and inputs
  // below -104 give 0. 2^n is applied in two halves so n = ±128 neither wraps nor flushes.
  static F exp(F x) {
    x = _mm256_min_ps(_mm256_set1_ps(88.8f), x);  // x second: a NaN x is kept
    x = _mm256_max_ps(_mm256_set1_ps(-104.0f), x);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    const __m256i n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  }
};

// Register budget (16 ymm): rows × tokens accumulators + rows weight vectors + 1 activation.
constexpr int kDecodeRows(int tokens) {
  return tokens == 1 ? 8 : tokens == 2 ? 4 : tokens == 3 ? 3 : tokens <= 6 ? 2 : 1;
}
// Prefill tile 2 rows × 6 tokens (12 accumulators + 2 weights + 1 activation): f16/bf16
// weights are widened once per row and step, so fewer rows per tile means fewer conversions
// per FMA (2 per 12 instead of 3). kernels_bench --isa avx2, T = 128, 2 threads, f16:
// 98–104 → 111–123 GFLOP/s against 3 × 4 (noisy VM, alternating runs).
constexpr int kGemmRows = 2;
constexpr int kGemmTokens = 6;
// Tokens the float decode tile holds in one sweep; 7 or 8 go as 6 + the rest over L2 panels.
// The 1-row tile of 7-8 tokens loads 9 vectors per 8 FMAs (16 ymm leave no second row):
// kernels_bench --batch, f16 2816×1024 from DRAM, 2 threads, Zen 3: 8 tokens in one sweep
// 79 GFLOP/s against 120 for 6 (see docs/performance.md, "Attention ... and the decode chunk").
constexpr size_t kFloatDecodeChunk = 6;
// q8-activation formats: two ymm accumulators per (row, token) pair (16 lanes), plus the
// sub-block's codes per row and values per token. The prefill tile is 1 row × 8 tokens, the
// decode tile's shape at 8 tokens: each row's codes (and |w|) are loaded once for 8 tokens
// instead of 2 (the 2 × 2 tile ran at 0.76–0.89 of the decode driver's GFLOP/s on the same
// weights, kernels_bench T = 128; engine q8 pp128 1.18×, pp512 1.15×, docs/performance.md).
constexpr int kQ8DecodeRows(int tokens) { return tokens == 1 ? 4 : tokens == 2 ? 2 : 1; }
constexpr int kQ8GemmRows = 1;
constexpr int kQ8GemmTokens = 8;

// Exact f16 -> fp32 of a block scale (F16C), the same bits as the scalar conversion.
inline float f16_scale(uint16_t h) { return _cvtsh_ss(h); }

#include "kernels/cpu/quant_formats.inl"
#include "kernels/cpu/q8_avx2.inl"
#include "kernels/cpu/matmul_generic.inl"
#include "kernels/cpu/elementwise_simd.inl"

constexpr KernelTable kTable = {
    Isa::Avx2,        matmul_rows_impl, matmul_rows_q8_impl, gemm_rows_impl,   gemm_rows_q8_impl,
    quantize_row_q8_impl, dot_f32_impl, rmsnorm_impl,        softmax_impl,     silu_mul_impl,
    add_impl,         scale_add_impl,   f16_to_f32_impl,     bf16_to_f32_impl, f32_to_f16_impl,
    f32_to_bf16_impl, attention_scores_impl, attention_softmax_impl, attention_values_impl,
    attention_values_accumulate_impl,
};

}  // namespace
}  // namespace colibri::kernels::avx2

namespace colibri::kernels::detail {
const KernelTable &avx2_table() { return avx2::kTable; }
}  // namespace colibri::kernels::detail

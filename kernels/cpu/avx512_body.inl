// kernels/cpu/avx512_body.inl — the AVX-512 kernels, compiled twice: by avx512.cpp (F, BW,
// VL, DQ) and by avx512_vnni.cpp (the same plus VNNI for the q8 int8 dot). The includer
// defines COLIBRI_AVX512_NAMESPACE and COLIBRI_AVX512_TABLE_GETTER (and COLIBRI_Q8_VNNI for
// the VNNI build). Everything lives in an anonymous namespace; see the warning in internal.h.
// The q8-activation tile is q8_avx512.inl (one zmm of 16 lanes per output); the quantiser and
// the 32-value loaders come from q8_avx2.inl.
// GCC 12's avx512fintrin.h initialises _mm512_undefined_*() values from themselves, which
// -Wuninitialized reports inside the header (GCC PR 105593); silence it for the header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstring>
#include <utility>

#include "kernels/cpu/internal.h"

namespace colibri::kernels::COLIBRI_AVX512_NAMESPACE {
namespace {

#include "kernels/cpu/tile_args.inl"

struct Simd {
  using F = __m512;
  static constexpr size_t kLanes = 16;
  // Keeps v in a register: stops the compiler from re-loading it as a memory operand of
  // every FMA that uses it (which would double the loads of a tile).
  static void pin(F &v) { asm("" : "+v"(v)); }
  static void prefetch_l1(const char *p) { __builtin_prefetch(p, 0, 3); }  // prefetcht0
  static void prefetch_l2(const char *p) { __builtin_prefetch(p, 0, 2); }  // prefetcht1

  static __mmask16 tail_mask(size_t n) { return static_cast<__mmask16>((1u << n) - 1u); }
  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static F load_f32(const float *p) { return _mm512_loadu_ps(p); }
  static F load_f32_partial(const float *p, size_t n) { return _mm512_maskz_loadu_ps(tail_mask(n), p); }
  static F load_f16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
  }
  static F load_f16_partial(const uint16_t *p, size_t n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail_mask(n), p));
  }
  static F widen_bf16(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static F load_bf16(const uint16_t *p) {
    return widen_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
  }
  static F load_bf16_partial(const uint16_t *p, size_t n) {
    return widen_bf16(_mm256_maskz_loadu_epi16(tail_mask(n), p));
  }
  static void store(float *p, F v) { _mm512_storeu_ps(p, v); }
  static void store_partial(float *p, F v, size_t n) { _mm512_mask_storeu_ps(p, tail_mask(n), v); }
  static void store_f16(uint16_t *p, F v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static void store_bf16(uint16_t *p, F v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), odd), 16);
    const __m512i quiet_nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
                                                     _mm512_set1_epi32(0x7F800000));
    const __m512i h = _mm512_mask_blend_epi32(is_nan, rounded, quiet_nan);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(p), _mm512_cvtepi32_epi16(h));
  }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  // value, with the lanes where x < limit set to 0 (a NaN x keeps its lane).
  static F zero_where_less(F value, F x, F limit) {
    return _mm512_maskz_mov_ps(static_cast<__mmask16>(~_mm512_cmp_ps_mask(x, limit, _CMP_LT_OQ)), value);
  }
  static F madd(F a, F b, F acc) { return _mm512_fmadd_ps(a, b, acc); }

  // The canonical 16-lane tree: lane i + lane i+8, then the 8-lane tree of avx2.cpp,
  // ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)), for 8 vectors at once.
  static __m256 fold(F v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  }
  static void reduce8(const F *v, float *out) {
    const __m256 h01 = _mm256_hadd_ps(fold(v[0]), fold(v[1]));
    const __m256 h23 = _mm256_hadd_ps(fold(v[2]), fold(v[3]));
    const __m256 h45 = _mm256_hadd_ps(fold(v[4]), fold(v[5]));
    const __m256 h67 = _mm256_hadd_ps(fold(v[6]), fold(v[7]));
    const __m256 h0123 = _mm256_hadd_ps(h01, h23);
    const __m256 h4567 = _mm256_hadd_ps(h45, h67);
    const __m256 lo = _mm256_permute2f128_ps(h0123, h4567, 0x20);
    const __m256 hi = _mm256_permute2f128_ps(h0123, h4567, 0x31);
    _mm256_storeu_ps(out, _mm256_add_ps(lo, hi));
  }
  static float hsum(F v) {
    const __m256 f = fold(v);
    const __m256 h = _mm256_hadd_ps(f, f);
    const __m256 h2 = _mm256_hadd_ps(h, h);
    return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(h2), _mm256_extractf128_ps(h2, 1)));
  }
  static float hmax(F v) {
    __m256 m8 = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
  }

  // e^x, the avx2.cpp algorithm on 16 lanes.
  static F exp(F x) {
    x = _mm512_min_ps(_mm512_set1_ps(88.8f), x);  // x second: a NaN x is kept
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    const __m512i ni = _mm512_cvtps_epi32(n);
    const __m512i n1 = _mm512_srai_epi32(ni, 1);
    const __m512i n2 = _mm512_sub_epi32(ni, n1);
    const __m512i bias = _mm512_set1_epi32(127);
    const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
    const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
    return _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
  }
};

// Register budget (32 zmm): rows × tokens accumulators + rows weight vectors + 1 activation.
constexpr int kDecodeRows(int tokens) {
  return tokens == 1 ? 8 : tokens == 2 ? 6 : tokens <= 6 ? 4 : 3;
}
constexpr int kGemmRows = 4;
constexpr int kGemmTokens = 6;
// Tokens the float decode tile holds in one sweep (more go in chunks over L2 panels).
constexpr size_t kFloatDecodeChunk = 8;
// q8-activation formats: one zmm accumulator per (row, token) pair, plus per row its codes and
// scales (and, for q8 weights with several tokens, a correction), per token its values.
constexpr int kQ8DecodeRows(int tokens) { return tokens == 1 ? 16 : tokens == 2 ? 4 : tokens <= 4 ? 3 : 2; }
constexpr int kQ8GemmRows = 2;
constexpr int kQ8GemmTokens = 8;

// Exact f16 -> fp32 of a block scale (F16C), the same bits as the scalar conversion.
inline float f16_scale(uint16_t h) { return _cvtsh_ss(h); }

#include "kernels/cpu/quant_formats.inl"
#define COLIBRI_Q8_NO_YMM_TILE 1
#include "kernels/cpu/q8_avx2.inl"
#include "kernels/cpu/q8_avx512.inl"
#include "kernels/cpu/matmul_generic.inl"
#include "kernels/cpu/elementwise_simd.inl"

constexpr KernelTable kTable = {
    Isa::Avx512,      matmul_rows_impl, matmul_rows_q8_impl, gemm_rows_impl,   gemm_rows_q8_impl,
    quantize_row_q8_impl, dot_f32_impl, rmsnorm_impl,        softmax_impl,     silu_mul_impl,
    add_impl,         scale_add_impl,   f16_to_f32_impl,     bf16_to_f32_impl, f32_to_f16_impl,
    f32_to_bf16_impl, attention_scores_impl, attention_softmax_impl, attention_values_impl,
    attention_values_accumulate_impl,
};

}  // namespace
}  // namespace colibri::kernels::COLIBRI_AVX512_NAMESPACE

namespace colibri::kernels::detail {
const KernelTable &COLIBRI_AVX512_TABLE_GETTER() { return COLIBRI_AVX512_NAMESPACE::kTable; }
}  // namespace colibri::kernels::detail

// kernels/cpu/scalar.cpp — the portable kernels (no ISA flags) and the scalar fp16/bf16
// conversions every level shares.
//
// The float matmul emulates 8 SIMD lanes with plain arrays so that the compiler can use the
// baseline SSE2 registers and so that its reduction tree is the AVX2 one (results differ from
// AVX2 only by FMA rounding). The q8 path is the reference lane rule every ISA reproduces
// bit for bit.
#include <cmath>
#include <cstring>
#include <utility>

#include "kernels/cpu/internal.h"

namespace colibri::kernels {
namespace detail {

// The three cases as selects, so that the row loop (scalar::f16_to_f32) vectorises.
float f16_to_f32_scalar(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  // Zero or subnormal: mantissa · 2^-24 is exact in fp32.
  const float sub = static_cast<float>(static_cast<int32_t>(mantissa)) * 5.9604644775390625e-8f;
  uint32_t sub_bits;
  std::memcpy(&sub_bits, &sub, 4);
  // Inf, or NaN made quiet (what F16C's vcvtph2ps does).
  const uint32_t special = 0x7F800000u | (mantissa << 13) | (mantissa != 0 ? 0x00400000u : 0u);
  const uint32_t normal = ((exponent + 112u) << 23) | (mantissa << 13);
  const uint32_t bits = sign | (exponent == 0 ? sub_bits : exponent == 31 ? special : normal);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, overflow to Inf, NaN to a quiet NaN, subnormals kept
// (F. Giesen, "float_to_half_fast3_rtne", public domain).
uint16_t f32_to_f16_scalar(float value) {
  uint32_t u;
  std::memcpy(&u, &value, 4);
  const uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint32_t out;
  if (u >= (127u + 16u) << 23) {
    out = u > 0x7F800000u ? 0x7E00u | ((u >> 13) & 0x3FFu) : 0x7C00u;
  } else if (u < 113u << 23) {
    const uint32_t magic_bits = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    float magic, f;
    std::memcpy(&magic, &magic_bits, 4);
    std::memcpy(&f, &u, 4);
    f += magic;
    std::memcpy(&u, &f, 4);
    out = u - magic_bits;
  } else {
    const uint32_t mantissa_odd = (u >> 13) & 1u;
    u += (static_cast<uint32_t>(15 - 127) << 23) + 0xFFFu;
    u += mantissa_odd;
    out = u >> 13;
  }
  return static_cast<uint16_t>(out | (sign >> 16));
}

float bf16_to_f32_scalar(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_bf16_scalar(float value) {
  uint32_t u;
  std::memcpy(&u, &value, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace detail

namespace scalar {
namespace {

// The row conversions are what the converters and repack run on every weight (the image
// layer links only this table). Built for baseline x86-64 they use SSE2: GCC also compiles
// them for AVX2 and picks the version at load time (an ifunc). The same source with the same
// integer operations on bit patterns, so both versions write the same bits; the sanitizer
// builds keep the baseline version only, so the test suite runs it there. (A q8 repack of the
// 1.28 GB f16 benchmark image: the f16 widening went from 13% to 3% of its samples. The q8
// quantiser compiled the same way ran 2.2x slower than its SSE2 build, so it is not cloned:
// the tools take the AVX2 tables' hand-written one, conversion_quantize_row_q8 in kernels.h.)
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define COLIBRI_CONVERSION_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define COLIBRI_CONVERSION_CLONES
#endif

#include "kernels/cpu/tile_args.inl"

// Eight emulated lanes; madd is a separate multiply and add (no FMA at this level).
struct Simd {
  struct F {
    float v[8];
  };
  static constexpr size_t kLanes = 8;
  static void pin(F &) {}
  static void prefetch_l1(const char *p) { __builtin_prefetch(p, 0, 3); }
  static void prefetch_l2(const char *p) { __builtin_prefetch(p, 0, 2); }

  static F zero() {
    F r;
    for (float &lane : r.v) lane = 0.0f;
    return r;
  }
  static F load_f32(const float *p) {
    F r;
    for (int i = 0; i < 8; ++i) r.v[i] = p[i];
    return r;
  }
  static F load_f32_partial(const float *p, size_t n) {
    F r = zero();
    for (size_t i = 0; i < n; ++i) r.v[i] = p[i];
    return r;
  }
  static F load_f16(const uint16_t *p) { return load_f16_partial(p, 8); }
  static F load_f16_partial(const uint16_t *p, size_t n) {
    F r = zero();
    for (size_t i = 0; i < n; ++i) r.v[i] = detail::f16_to_f32_scalar(p[i]);
    return r;
  }
  static F load_bf16(const uint16_t *p) { return load_bf16_partial(p, 8); }
  static F load_bf16_partial(const uint16_t *p, size_t n) {
    F r = zero();
    for (size_t i = 0; i < n; ++i) r.v[i] = detail::bf16_to_f32_scalar(p[i]);
    return r;
  }
  static void store(float *p, const F &v) {
    for (int i = 0; i < 8; ++i) p[i] = v.v[i];
  }
  static F madd(const F &a, const F &b, const F &acc) {
    F r;
    for (int i = 0; i < 8; ++i) r.v[i] = acc.v[i] + a.v[i] * b.v[i];
    return r;
  }
  // The canonical 8-lane tree: ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)).
  static float tree(const F &a) {
    return ((a.v[0] + a.v[1]) + (a.v[2] + a.v[3])) + ((a.v[4] + a.v[5]) + (a.v[6] + a.v[7]));
  }
  static void reduce8(const F *v, float *out) {
    for (int j = 0; j < 8; ++j) out[j] = tree(v[j]);
  }
};

constexpr int kDecodeRows(int tokens) { return tokens == 1 ? 4 : tokens == 2 ? 2 : 1; }
constexpr int kGemmRows = 2;
constexpr int kGemmTokens = 4;
constexpr size_t kFloatDecodeChunk = 8;

float f16_scale(uint16_t h) { return detail::f16_to_f32_scalar(h); }

#include "kernels/cpu/quant_formats.inl"

// The reference lane rule of the q8-activation formats (kernels.h, quant_formats.inl): 16 fp32
// lanes per (row, token), carried between k-blocks in `state`, summed by the fixed tree.
template <class WF, Path /* scalar: no prefetch */>
struct QTile {
  static constexpr size_t kStep = 2 * kSubBlock;
  static constexpr size_t kBlockK = 2048;
  static constexpr size_t state_floats(int rows, int tokens) { return size_t(rows) * tokens * kLaneCount; }
  static constexpr int decode_rows(int tokens) { return kDecodeRows(tokens); }
  static constexpr int kGemmR = kGemmRows;
  static constexpr int kGemmT = kGemmTokens;
  static constexpr size_t kDecodeChunk = 8;

  template <int R, int TT>
  static void span(const TileArgs &a, size_t k_begin, size_t k_end, float *state, bool first, bool last) {
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < TT; ++t) {
        float lanes[kLaneCount];
        float *saved = first && last ? nullptr : state + (r * TT + t) * kLaneCount;
        for (int i = 0; i < kLaneCount; ++i) lanes[i] = first ? 0.0f : saved[i];
        reference_lanes<WF>(a.w + r * a.w_stride, a.x + t * a.x_stride, 0, k_begin / WF::kAct, k_end / WF::kAct,
                            lanes);
        if (last) {
          a.y[t * a.y_stride + r] = reduce_lanes(lanes);
        } else {
          for (int i = 0; i < kLaneCount; ++i) saved[i] = lanes[i];
        }
      }
    }
  }

  template <int R, int TT>
  static void run(const TileArgs &a) {
    span<R, TT>(a, 0, a.cols, nullptr, true, true);
  }
};

// scale = max|x| / 127 (NaN if the group holds a NaN or an infinity); q = t = x / scale rounded
// half away from zero and clamped to ±127 when |t| <= 127.5, else 0 (t not a number: scale 0 or
// NaN). Written so that the compiler vectorises it (selects, no branch, no libm call: this file
// is built with -fno-trapping-math, which changes no value).
void quantize_row_q8_impl(const float *x, size_t cols, uint32_t group_size, void *out) {
  unsigned char *block = static_cast<unsigned char *>(out);
  for (size_t c0 = 0; c0 < cols; c0 += group_size, block += block_bytes_q8(group_size)) {
    // max |x| on the bit patterns: for non-negative floats (sign cleared) the integer order is
    // the float order, and an integer max reduction vectorises where a float one may not.
    // Patterns from 0x7F800000 up are infinities and NaNs.
    uint32_t amax_bits = 0;
    for (uint32_t i = 0; i < group_size; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &x[c0 + i], 4);
      bits &= 0x7FFFFFFFu;
      amax_bits = bits > amax_bits ? bits : amax_bits;
    }
    float amax;
    std::memcpy(&amax, &amax_bits, 4);
    const float scale = amax_bits >= 0x7F800000u ? std::nanf("") : amax / 127.0f;
    std::memcpy(block, &scale, 4);
    int8_t *q = reinterpret_cast<int8_t *>(block + 4);
    for (uint32_t i = 0; i < group_size; ++i) {
      const float t = x[c0 + i] / scale;
      const bool in_range = t >= -127.5f && t <= 127.5f;  // false for NaN
      float rounded = round_half_away_bounded(in_range ? t : 0.0f);
      rounded = rounded > 127.0f ? 127.0f : rounded;
      rounded = rounded < -127.0f ? -127.0f : rounded;
      q[i] = static_cast<int8_t>(static_cast<int32_t>(rounded));
    }
  }
}

#include "kernels/cpu/matmul_generic.inl"

// ---- element-wise --------------------------------------------------------------------------

float dot_f32(const float *a, const float *b, size_t n) {
  Simd::F acc = Simd::zero();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) acc = Simd::madd(Simd::load_f32(a + i), Simd::load_f32(b + i), acc);
  if (i < n) acc = Simd::madd(Simd::load_f32_partial(a + i, n - i), Simd::load_f32_partial(b + i, n - i), acc);
  return Simd::tree(acc);
}

void rmsnorm(float *out, const float *x, const float *weight, float eps, size_t n) {
  const float sum_squares = dot_f32(x, x, n);
  const float inverse_rms = 1.0f / std::sqrt(sum_squares / static_cast<float>(n) + eps);
  for (size_t i = 0; i < n; ++i) out[i] = (x[i] * inverse_rms) * weight[i];
}

// kFloor: the attention rule of kernels.h (probability 0 more than -kAttentionLogitFloor
// below the maximum).
template <bool kFloor>
void softmax_row(float *x, size_t n) {
  float max_value = x[0];
  for (size_t i = 1; i < n; ++i)
    if (x[i] > max_value) max_value = x[i];
  float lanes[8] = {};
  for (size_t i = 0; i < n; ++i) {
    const float shifted = x[i] - max_value;
    x[i] = kFloor && shifted < kAttentionLogitFloor ? 0.0f : std::exp(shifted);
    lanes[i % 8] += x[i];
  }
  const float sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                    ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  for (size_t i = 0; i < n; ++i) x[i] = x[i] / sum;
}

void softmax(float *x, size_t n) { softmax_row<false>(x, n); }

void attention_softmax(float *x, size_t stride, size_t heads, size_t n) {
  for (size_t h = 0; h < heads; ++h) softmax_row<true>(x + h * stride, n);
}

void silu_mul(float *out, const float *gate, const float *up, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void add(float *out, const float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void scale_add(float *y, float alpha, const float *x, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = y[i] + alpha * x[i];
}

COLIBRI_CONVERSION_CLONES void f16_to_f32(const uint16_t *in, float *out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = detail::f16_to_f32_scalar(in[i]);
}
COLIBRI_CONVERSION_CLONES void bf16_to_f32(const uint16_t *in, float *out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = detail::bf16_to_f32_scalar(in[i]);
}
COLIBRI_CONVERSION_CLONES void f32_to_f16(const float *in, uint16_t *out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = detail::f32_to_f16_scalar(in[i]);
}
COLIBRI_CONVERSION_CLONES void f32_to_bf16(const float *in, uint16_t *out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = detail::f32_to_bf16_scalar(in[i]);
}

void attention_scores(const float *q, size_t q_stride, size_t heads, const float *keys, size_t stride, size_t n,
                      size_t d, float scale, float *scores, size_t scores_stride) {
  for (size_t h = 0; h < heads; ++h)
    for (size_t p = 0; p < n; ++p) scores[h * scores_stride + p] = dot_f32(q + h * q_stride, keys + p * stride, d) * scale;
}

void attention_values_accumulate(const float *probs, size_t probs_stride, size_t heads, const float *values,
                                 size_t stride, size_t n, size_t d, float *out, size_t out_stride) {
  for (size_t h = 0; h < heads; ++h) {
    float *o = out + h * out_stride;
    const float *w = probs + h * probs_stride;
    for (size_t p = 0; p < n; ++p)
      for (size_t i = 0; i < d; ++i) o[i] = o[i] + w[p] * values[p * stride + i];
  }
}

void attention_values(const float *probs, size_t probs_stride, size_t heads, const float *values, size_t stride,
                      size_t n, size_t d, float *out, size_t out_stride) {
  for (size_t h = 0; h < heads; ++h)
    for (size_t i = 0; i < d; ++i) out[h * out_stride + i] = 0.0f;
  attention_values_accumulate(probs, probs_stride, heads, values, stride, n, d, out, out_stride);
}

constexpr KernelTable kTable = {
    Isa::Scalar,   matmul_rows_impl, matmul_rows_q8_impl, gemm_rows_impl, gemm_rows_q8_impl,
    quantize_row_q8_impl, dot_f32,   rmsnorm,             softmax,        silu_mul,
    add,           scale_add,        f16_to_f32,          bf16_to_f32,    f32_to_f16,
    f32_to_bf16,   attention_scores, attention_softmax, attention_values,
    attention_values_accumulate,
};

}  // namespace
}  // namespace scalar

const KernelTable &detail::scalar_table() { return scalar::kTable; }
const KernelTable &scalar_kernel_table() { return scalar::kTable; }

}  // namespace colibri::kernels

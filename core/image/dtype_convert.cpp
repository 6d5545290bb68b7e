// core/image/dtype_convert.cpp — dtype conversions for the converter and repack: the scalar
// rules, and where the CPU has AVX2 their twins of dtype_convert_avx2.cpp for the f16 widening
// and the q4, q8f16 and mxfp4 quantisers (same bytes).
#include "image/dtype_convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "image/dtype_convert_avx2.h"
#include "kernels/cpu/kernels.h"

namespace colibri::image {

namespace {

// Whether the AVX2 twins of dtype_convert_avx2.h run here: built in, and the CPU has AVX2, FMA
// and F16C (the kernels' probe, evaluated once there).
bool use_avx2() { return detail::kHaveAvx2Conversions && kernels::best_isa() >= kernels::Isa::Avx2; }

}  // namespace

// The element conversions are defined once, in kernels/ (kernels.h: the *_value functions,
// which every ISA's row conversions match bit for bit); the image layer forwards to them so
// that the converter and the engine cannot disagree on a rounding. Exhaustively checked equal
// to the converter's former own definitions for every input, except that an f16 signalling
// NaN now widens to a quiet NaN (as F16C's vcvtph2ps does).
float f16_to_f32(uint16_t h) { return kernels::f16_to_f32_value(h); }
uint16_t f32_to_f16(float f) { return kernels::f32_to_f16_value(f); }
float bf16_to_f32(uint16_t b) { return kernels::bf16_to_f32_value(b); }
uint16_t f32_to_bf16(float f) { return kernels::f32_to_bf16_value(f); }

// Whole rows go through the scalar kernel table's row conversions (one call per row, the
// scalar definitions inlined there), or for f16 → f32 F16C's (every pattern the same bits,
// tested): bit for bit the element functions above on every machine, NaN payloads included,
// which the SIMD tables do not promise for the narrowing conversions.
void decode_floats(DType dtype, const void *src, size_t count, float *dst) {
  const kernels::KernelTable &scalar = kernels::scalar_kernel_table();
  switch (dtype) {
    case DType::F32:
      std::memcpy(dst, src, count * 4);
      break;
    case DType::F16:  // 8% of a q4 repack in the scalar loop
      if (use_avx2()) detail::f16_to_f32_avx2(static_cast<const uint16_t *>(src), dst, count);
      else scalar.f16_to_f32(static_cast<const uint16_t *>(src), dst, count);
      break;
    case DType::BF16:
      scalar.bf16_to_f32(static_cast<const uint16_t *>(src), dst, count);
      break;
    default:
      break;  // not a float dtype: callers use dequantize_row
  }
}

void encode_floats(DType dtype, const float *src, size_t count, void *dst) {
  const kernels::KernelTable &scalar = kernels::scalar_kernel_table();
  switch (dtype) {
    case DType::F32:
      std::memcpy(dst, src, count * 4);
      break;
    case DType::F16:
      scalar.f32_to_f16(src, static_cast<uint16_t *>(dst), count);
      break;
    case DType::BF16:
      scalar.f32_to_bf16(src, static_cast<uint16_t *>(dst), count);
      break;
    default:
      break;  // not a float dtype: callers use quantize_row
  }
}

// q8: the kernels' quantiser writes the bytes (conversion_quantize_row_q8: the AVX2 tables' code
// where the CPU has it, the scalar table's bytes either way), so the converter, repack and the
// engine's activation quantisation follow one definition of docs/format.md's rule (x / scale,
// round half away from zero). It used to be a second implementation here that multiplied by
// 1 / scale, which rounds differently when x / scale lies within an ulp of a half.
float quantize_row_q8(const float *src, size_t cols, uint32_t group_size, void *dst, float *max_scale) {
  kernels::conversion_quantize_row_q8()(src, cols, group_size, dst);
  const unsigned char *block = static_cast<const unsigned char *>(dst);
  float worst = 0.0f;
  for (size_t g = 0; g < cols / group_size; ++g, block += q8_block_bytes(group_size)) {
    float scale;
    std::memcpy(&scale, block, 4);
    const int8_t *q = reinterpret_cast<const int8_t *>(block + 4);
    // The largest error on bit patterns (non-negative floats order as integers; the reduction
    // vectorises). A NaN error (a group holding a NaN or an infinity, which callers refuse
    // first) ranks above every number: such a group is left out of the result.
    uint32_t worst_bits = 0;
    for (uint32_t i = 0; i < group_size; ++i) {
      const float error = std::fabs(src[g * group_size + i] - scale * static_cast<float>(q[i]));
      uint32_t bits;
      std::memcpy(&bits, &error, 4);
      worst_bits = bits > worst_bits ? bits : worst_bits;
    }
    float group_worst;
    std::memcpy(&group_worst, &worst_bits, 4);
    if (worst_bits <= 0x7F800000u && group_worst > worst) worst = group_worst;
    if (max_scale && scale > *max_scale) *max_scale = scale;
  }
  return worst;
}

namespace {

// The first index in src[0, count) where bad(value) holds, or count. Blocks of 64 are screened
// with a branch-free OR of the predicate (vectorises for the predicates below); the first
// block that has one is searched.
template <class Bad>
size_t first_where(const float *src, size_t count, Bad bad) {
  constexpr size_t kBlock = 64;
  size_t i = 0;
  for (; i + kBlock <= count; i += kBlock) {
    uint32_t any = 0;
    for (size_t j = 0; j < kBlock; ++j) any |= bad(src[i + j]) ? 1u : 0u;
    if (any) break;
  }
  for (; i < count; ++i)
    if (bad(src[i])) return i;
  return count;
}

}  // namespace

size_t first_non_finite(const float *src, size_t count) {
  return first_where(src, count, [](float v) {  // exponent all ones, on the bits
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    return (bits & 0x7F800000u) == 0x7F800000u;
  });
}

size_t first_overflow(DType dtype, const float *src, size_t count) {
  // The largest finite value of the dtype: only values at or above it can round to infinity.
  float largest;
  if (dtype == DType::F16) largest = 65504.0f;
  else if (dtype == DType::BF16) largest = 3.38953139e38f;
  else return count;
  for (size_t i = 0; i < count; ++i) {
    const float a = std::fabs(src[i]);
    if (a >= largest && std::isfinite(a)) {
      const float stored = dtype == DType::F16 ? f16_to_f32(f32_to_f16(src[i])) : bf16_to_f32(f32_to_bf16(src[i]));
      if (std::isinf(stored)) return i;
    }
  }
  return count;
}

// Block dtypes with an f16 scale cannot scale groups whose magnitudes reach these (the scale
// would overflow f16's 65504).
static constexpr float kQ8F16MaxMagnitude = 65504.0f * 127.0f;
static constexpr float kQ4MaxMagnitude = 65504.0f * 8.0f;

size_t first_unstorable(DType dtype, const float *src, size_t count) {
  switch (dtype) {
    case DType::Q8:
    case DType::MXFP4: return first_non_finite(src, count);
    case DType::Q8F16:
    case DType::Q4: {
      // NaN compares false, so it counts as unstorable with the infinities.
      const float limit = dtype == DType::Q4 ? kQ4MaxMagnitude : kQ8F16MaxMagnitude;
      return first_where(src, count, [limit](float v) { return !(std::fabs(v) < limit); });
    }
    default: return first_overflow(dtype, src, count);
  }
}

const char *unstorable_reason(DType dtype) {
  switch (dtype) {
    case DType::Q8: return "q8 cannot store NaN or infinity";
    case DType::MXFP4: return "mxfp4 cannot store NaN or infinity";
    case DType::Q8F16: return "q8f16 cannot store NaN, infinity or a group whose scale (max |x| / 127) overflows f16";
    case DType::Q4: return "q4 cannot store NaN, infinity or a group whose scale (max |x| / 8) overflows f16";
    case DType::F16: return "beyond the range of f16, it would be stored as infinity";
    case DType::BF16: return "beyond the range of bf16, it would be stored as infinity";
    case DType::F32: break;
  }
  return "f32 stores every value";
}

const char *storable_alternatives(DType dtype) {
  switch (dtype) {
    case DType::Q8:
    case DType::MXFP4: return "f16, bf16 or f32";
    case DType::Q8F16:
    case DType::Q4: return "q8, bf16 or f32";
    case DType::F16: return "bf16 or f32";
    case DType::BF16:
    case DType::F32: break;
  }
  return "f32";
}

void dequantize_row_q8(const void *src, size_t cols, uint32_t group_size, float *dst) {
  const unsigned char *in = static_cast<const unsigned char *>(src);
  for (size_t g = 0; g < cols / group_size; ++g) {
    float scale;
    std::memcpy(&scale, in, 4);
    const int8_t *q = reinterpret_cast<const int8_t *>(in + 4);
    for (uint32_t i = 0; i < group_size; ++i) dst[g * group_size + i] = scale * static_cast<float>(q8_value(q[i]));
    in += q8_block_bytes(group_size);
  }
}

uint64_t row_bytes(DType dtype, uint32_t group_size, uint64_t cols) {
  switch (dtype) {
    case DType::F32: return cols * 4;
    case DType::F16:
    case DType::BF16: return cols * 2;
    case DType::Q8: return cols / group_size * q8_block_bytes(group_size);
    case DType::Q4: return cols / group_size * q4_block_bytes(group_size);
    case DType::Q8F16: return cols / kQ8F16GroupSize * kQ8F16BlockBytes;
    case DType::MXFP4: return cols / kMxfp4GroupSize * kMxfp4BlockBytes;
  }
  return 0;
}

bool is_block_dtype(DType dtype) {
  return dtype == DType::Q8 || dtype == DType::Q4 || dtype == DType::Q8F16 || dtype == DType::MXFP4;
}

namespace {

float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

// The integer code of t under "round half away from zero, then clamp to [lo, hi]", for finite or
// infinite t: t is first clamped to [lo - 8, hi + 8], which changes no result (beyond hi, or
// below lo, the rounded value clamps to the same end) and bounds it for the kernels' rounding.
float round_clamped(float t, float lo, float hi) {
  return clampf(kernels::round_half_away_bounded(clampf(t, lo - 8.0f, hi + 8.0f)), lo, hi);
}

// The largest |x[i]|, NaNs left out (the writers refuse NaN and infinity first). On the bit
// patterns: with the sign cleared, non-negative floats order as their integers, and an integer
// max reduction vectorises where the float one (a loop-carried compare and move, 41% of a q4
// repack) does not. Patterns above 0x7F800000 are NaNs and count as 0.
float max_magnitude(const float *x, uint32_t n) {
  int32_t m = 0;  // signed: SSE2 has a signed 32-bit compare, not an unsigned one
  for (uint32_t i = 0; i < n; ++i) {
    int32_t bits;
    std::memcpy(&bits, &x[i], 4);
    bits &= 0x7FFFFFFF;
    bits = bits > 0x7F800000 ? 0 : bits;
    m = bits > m ? bits : m;
  }
  float magnitude;
  std::memcpy(&magnitude, &m, 4);
  return magnitude;
}

// The 4-bit codes of 32 values into 16 bytes: byte j = code j | code j + 16 << 4.
void pack_nibbles(const uint8_t *codes, unsigned char *out) {
  for (uint32_t j = 0; j < kSubBlock / 2; ++j)
    out[j] = static_cast<unsigned char>((codes[j] & 0x0F) | (codes[j + kSubBlock / 2] << 4));
}

uint8_t nibble(const unsigned char *packed, uint32_t i) {
  return i < kSubBlock / 2 ? packed[i] & 0x0F : packed[i - kSubBlock / 2] >> 4;
}

}  // namespace

void detail::quantize_q8f16_scalar(const float *x, unsigned char *block) {
  const float amax = max_magnitude(x, kQ8F16GroupSize);
  const uint16_t h = f32_to_f16(amax / 127.0f);
  const float scale = f16_to_f32(h);
  std::memcpy(block, &h, 2);
  int8_t q[kQ8F16GroupSize] = {};
  if (scale != 0.0f)
    for (uint32_t i = 0; i < kQ8F16GroupSize; ++i) q[i] = static_cast<int8_t>(round_clamped(x[i] / scale, -127.0f, 127.0f));
  std::memcpy(block + 2, q, kQ8F16GroupSize);
}

void detail::quantize_q4_scalar(const float *x, uint32_t group_size, unsigned char *block) {
  // The value of largest magnitude, the first of them if several: its sign sets the scale's.
  const float amax = max_magnitude(x, group_size);
  // The first index of that magnitude, as an integer min reduction over the bit patterns
  // (vectorises; the search loop it replaces stopped on a mispredicted branch, 13% of a q4
  // repack). All zero: +0, whatever zeros' signs.
  int32_t amax_bits;
  std::memcpy(&amax_bits, &amax, 4);
  int32_t first = static_cast<int32_t>(group_size);
  for (uint32_t i = 0; i < group_size; ++i) {
    int32_t bits;
    std::memcpy(&bits, &x[i], 4);
    const int32_t candidate = (bits & 0x7FFFFFFF) == amax_bits ? static_cast<int32_t>(i) : first;
    first = candidate < first ? candidate : first;
  }
  const float extreme = amax > 0.0f ? x[first] : 0.0f;
  const uint16_t h = f32_to_f16(extreme / -8.0f);
  const float scale = f16_to_f32(h);
  std::memcpy(block, &h, 2);
  uint8_t codes[kSubBlock];
  for (uint32_t s = 0; s < group_size / kSubBlock; ++s) {
    if (scale == 0.0f) {
      std::memset(codes, kQ4CodeOffset, sizeof codes);
    } else {
      for (uint32_t i = 0; i < kSubBlock; ++i)
        codes[i] = static_cast<uint8_t>(static_cast<int>(round_clamped(x[s * kSubBlock + i] / scale, -8.0f, 7.0f)) +
                                        kQ4CodeOffset);
    }
    pack_nibbles(codes, block + 2 + s * (kSubBlock / 2));
  }
}

namespace {

// Nearest e2m1 code of a magnitude (ties to the even code, saturating at 6).
uint8_t e2m1_magnitude_code(float m) {
  uint8_t best = 0;
  float best_distance = m;
  for (uint8_t c = 1; c < 8; ++c) {
    const float d = std::fabs(m - static_cast<float>(kE2m1Doubled[c]) * 0.5f);
    if (d < best_distance || (d == best_distance && (c & 1) == 0)) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

}  // namespace

int detail::mxfp4_shared_exponent(float amax) {
  constexpr int kE2m1MaxExponent = 2;  // 6 = 1.5 · 2^2
  int shared = -static_cast<int>(kE8m0Bias);
  if (amax > 0.0f) {
    int exponent = 0;
    std::frexp(amax, &exponent);  // amax = f · 2^exponent, f in [0.5, 1): floor(log2) = exponent − 1
    shared = exponent - 1 - kE2m1MaxExponent;
    if (shared < -static_cast<int>(kE8m0Bias)) shared = -static_cast<int>(kE8m0Bias);
    if (shared > static_cast<int>(kE8m0Bias)) shared = static_cast<int>(kE8m0Bias);
  }
  return shared;
}

void detail::quantize_mxfp4_scalar(const float *x, unsigned char *block) {
  float amax = 0.0f;
  for (uint32_t i = 0; i < kMxfp4GroupSize; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const int shared = mxfp4_shared_exponent(amax);
  block[0] = static_cast<unsigned char>(shared + static_cast<int>(kE8m0Bias));
  uint8_t codes[kSubBlock];
  for (uint32_t i = 0; i < kMxfp4GroupSize; ++i) {
    const float v = static_cast<float>(std::ldexp(static_cast<double>(x[i]), -shared));
    codes[i] = static_cast<uint8_t>(e2m1_magnitude_code(std::fabs(v)) | (std::signbit(v) ? 8 : 0));
  }
  pack_nibbles(codes, block + 1);
}

float e2m1_value(uint8_t code) {
  const float magnitude = static_cast<float>(kE2m1Doubled[code & 7]) * 0.5f;
  return (code & 8) ? -magnitude : magnitude;
}

float e8m0_value(uint8_t e) {
  if (e == kE8m0Nan) return std::nanf("");
  return static_cast<float>(std::ldexp(1.0, static_cast<int>(e) - static_cast<int>(kE8m0Bias)));
}

namespace {

// The AVX2 twin of quantize_row for the block dtypes that have one (q4, q8f16, mxfp4), which
// measures the round trip's error as it goes (*error); false where none runs.
bool quantize_row_avx2(DType dtype, uint32_t group_size, const float *src, size_t cols, void *dst, double *error) {
  if (!use_avx2()) return false;
  unsigned char *out = static_cast<unsigned char *>(dst);
  switch (dtype) {
    case DType::Q4: *error = detail::quantize_row_q4_avx2(src, cols, group_size, out); return true;
    case DType::Q8F16: *error = detail::quantize_row_q8f16_avx2(src, cols, out); return true;
    case DType::MXFP4: *error = detail::quantize_row_mxfp4_avx2(src, cols, out); return true;
    default: return false;
  }
}

}  // namespace

void quantize_row(DType dtype, uint32_t group_size, const float *src, size_t cols, void *dst) {
  double unused;
  if (quantize_row_avx2(dtype, group_size, src, cols, dst, &unused)) return;
  unsigned char *out = static_cast<unsigned char *>(dst);
  switch (dtype) {
    case DType::Q8:  // the bytes of quantize_row_q8, without its error pass (9% of a q8 convert)
      kernels::conversion_quantize_row_q8()(src, cols, group_size, dst);
      return;
    case DType::Q8F16:
      for (size_t c = 0; c < cols; c += kQ8F16GroupSize, out += kQ8F16BlockBytes)
        detail::quantize_q8f16_scalar(src + c, out);
      return;
    case DType::Q4:
      for (size_t c = 0; c < cols; c += group_size, out += q4_block_bytes(group_size))
        detail::quantize_q4_scalar(src + c, group_size, out);
      return;
    case DType::MXFP4:
      for (size_t c = 0; c < cols; c += kMxfp4GroupSize, out += kMxfp4BlockBytes)
        detail::quantize_mxfp4_scalar(src + c, out);
      return;
    default: return;
  }
}

double quantize_row_measured(DType dtype, uint32_t group_size, const float *src, size_t cols, void *dst,
                             float *scratch) {
  double error = 0.0;
  if (quantize_row_avx2(dtype, group_size, src, cols, dst, &error)) return error;  // no second pass
  quantize_row(dtype, group_size, src, cols, dst);
  dequantize_row(dtype, group_size, dst, cols, scratch);
  for (size_t c = 0; c < cols; ++c) error = std::max(error, std::fabs(static_cast<double>(src[c]) - scratch[c]));
  return error;
}

void round_trip_extremes(const float *src, const float *back, size_t count, double *max_abs_value,
                         double *max_abs_error) {
  // Integer maxima over the magnitudes' bit patterns (non-negative floats order as their
  // integers), infinities and NaNs masked to 0: the loop vectorises, where a double max with a
  // finiteness branch per element took half of a bf16 repack.
  int32_t value = 0, error = 0;
  for (size_t c = 0; c < count; ++c) {
    const float e = std::fabs(src[c] - back[c]);
    int32_t v_bits, e_bits;
    std::memcpy(&v_bits, &src[c], 4);
    std::memcpy(&e_bits, &e, 4);
    v_bits &= 0x7FFFFFFF;
    const bool finite = v_bits < 0x7F800000;
    v_bits = finite ? v_bits : 0;
    e_bits = finite ? e_bits : 0;
    value = v_bits > value ? v_bits : value;
    error = e_bits > error ? e_bits : error;
  }
  float v, e;
  std::memcpy(&v, &value, 4);
  std::memcpy(&e, &error, 4);
  *max_abs_value = v;
  *max_abs_error = e;
}

void dequantize_row(DType dtype, uint32_t group_size, const void *src, size_t cols, float *dst) {
  const unsigned char *in = static_cast<const unsigned char *>(src);
  switch (dtype) {
    case DType::Q8: dequantize_row_q8(src, cols, group_size, dst); return;
    case DType::Q8F16:
      for (size_t c = 0; c < cols; c += kQ8F16GroupSize, in += kQ8F16BlockBytes) {
        uint16_t h;
        std::memcpy(&h, in, 2);
        const float scale = f16_to_f32(h);
        for (uint32_t i = 0; i < kQ8F16GroupSize; ++i)
          dst[c + i] = scale * static_cast<float>(q8_value(static_cast<int8_t>(in[2 + i])));
      }
      return;
    case DType::Q4:
      for (size_t c = 0; c < cols; c += group_size, in += q4_block_bytes(group_size)) {
        uint16_t h;
        std::memcpy(&h, in, 2);
        const float scale = f16_to_f32(h);
        // nibble()'s layout, a sub-block at a time (so that the loop vectorises).
        for (uint32_t s = 0; s < group_size / kSubBlock; ++s) {
          const unsigned char *packed = in + 2 + s * (kSubBlock / 2);
          float *out = dst + c + s * kSubBlock;
          for (uint32_t j = 0; j < kSubBlock / 2; ++j) {
            out[j] = scale * static_cast<float>((packed[j] & 0x0F) - kQ4CodeOffset);
            out[j + kSubBlock / 2] = scale * static_cast<float>((packed[j] >> 4) - kQ4CodeOffset);
          }
        }
      }
      return;
    case DType::MXFP4:
      for (size_t c = 0; c < cols; c += kMxfp4GroupSize, in += kMxfp4BlockBytes) {
        const float scale = e8m0_value(in[0]);
        for (uint32_t i = 0; i < kMxfp4GroupSize; ++i) dst[c + i] = scale * e2m1_value(nibble(in + 1, i));
      }
      return;
    default: return;
  }
}

void mxfp4_block_from_checkpoint(const uint8_t *pair_packed_codes, uint8_t e8m0, uint8_t *out) {
  uint8_t codes[kSubBlock];
  for (uint32_t j = 0; j < kSubBlock / 2; ++j) {
    codes[2 * j] = pair_packed_codes[j] & 0x0F;
    codes[2 * j + 1] = pair_packed_codes[j] >> 4;
  }
  out[0] = e8m0;
  pack_nibbles(codes, out + 1);
}

}  // namespace colibri::image

// core/image/dtype_convert.cpp — scalar dtype conversions.
#include "image/dtype_convert.h"

#include <cmath>
#include <cstring>

namespace colibri::image {

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1F;
  uint32_t mantissa = h & 0x3FF;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mantissa <<= 1;
      } while ((mantissa & 0x400) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mantissa & 0x3FF) << 13);
    }
  } else if (exponent == 31) {
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t abs = x & 0x7FFFFFFF;
  if (abs > 0x7F800000) return static_cast<uint16_t>(sign | 0x7E00 | ((abs >> 13) & 0x3FF));  // NaN stays NaN
  if (abs >= 0x477FF000) return static_cast<uint16_t>(sign | 0x7C00);  // rounds to ≥ 65520: infinity
  if (abs < 0x38800000) {  // below the smallest normal f16 (2^-14): subnormal or zero
    if (abs < 0x33000000) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to zero
    uint32_t exponent = abs >> 23;
    uint32_t mantissa = (abs & 0x7FFFFF) | 0x800000;
    // value = mantissa × 2^(exponent − 127 − 23) in units of 2^−24 (the f16 subnormal step).
    uint32_t shift = 126 - exponent;
    uint32_t value = mantissa >> shift;
    uint32_t remainder = mantissa & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (value & 1))) ++value;
    return static_cast<uint16_t>(sign | value);
  }
  // Normal: rebias the exponent and round the mantissa to nearest even.
  uint32_t rebased = abs - ((127 - 15) << 23);
  uint32_t value = rebased >> 13;
  uint32_t remainder = rebased & 0x1FFF;
  if (remainder > 0x1000 || (remainder == 0x1000 && (value & 1))) ++value;
  return static_cast<uint16_t>(sign | value);
}

float bf16_to_f32(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  uint32_t rounding = 0x7FFF + ((x >> 16) & 1);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

void decode_floats(DType dtype, const void *src, size_t count, float *dst) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(dst, src, count * 4);
      break;
    case DType::F16: {
      const uint16_t *s = static_cast<const uint16_t *>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = f16_to_f32(s[i]);
      break;
    }
    case DType::BF16: {
      const uint16_t *s = static_cast<const uint16_t *>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = bf16_to_f32(s[i]);
      break;
    }
    case DType::Q8:
      break;  // not a float dtype: callers use dequantize_row_q8
  }
}

void encode_floats(DType dtype, const float *src, size_t count, void *dst) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(dst, src, count * 4);
      break;
    case DType::F16: {
      uint16_t *d = static_cast<uint16_t *>(dst);
      for (size_t i = 0; i < count; ++i) d[i] = f32_to_f16(src[i]);
      break;
    }
    case DType::BF16: {
      uint16_t *d = static_cast<uint16_t *>(dst);
      for (size_t i = 0; i < count; ++i) d[i] = f32_to_bf16(src[i]);
      break;
    }
    case DType::Q8:
      break;
  }
}

float quantize_row_q8(const float *src, size_t cols, uint32_t group_size, void *dst, float *max_scale) {
  unsigned char *out = static_cast<unsigned char *>(dst);
  float worst = 0.0f;
  for (size_t g = 0; g < cols / group_size; ++g) {
    const float *x = src + g * group_size;
    float amax = 0.0f;
    for (uint32_t i = 0; i < group_size; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    float scale = amax / 127.0f;
    float inverse = scale > 0.0f ? 1.0f / scale : 0.0f;
    std::memcpy(out, &scale, 4);
    int8_t *q = reinterpret_cast<int8_t *>(out + 4);
    for (uint32_t i = 0; i < group_size; ++i) {
      float r = std::round(x[i] * inverse);  // round half away from zero
      if (r > 127.0f) r = 127.0f;
      if (r < -127.0f) r = -127.0f;
      q[i] = static_cast<int8_t>(r);
      worst = std::fmax(worst, std::fabs(x[i] - scale * static_cast<float>(q[i])));
    }
    if (max_scale && scale > *max_scale) *max_scale = scale;
    out += q8_block_bytes(group_size);
  }
  return worst;
}

void dequantize_row_q8(const void *src, size_t cols, uint32_t group_size, float *dst) {
  const unsigned char *in = static_cast<const unsigned char *>(src);
  for (size_t g = 0; g < cols / group_size; ++g) {
    float scale;
    std::memcpy(&scale, in, 4);
    const int8_t *q = reinterpret_cast<const int8_t *>(in + 4);
    for (uint32_t i = 0; i < group_size; ++i) dst[g * group_size + i] = scale * static_cast<float>(q[i]);
    in += q8_block_bytes(group_size);
  }
}

uint64_t row_bytes(DType dtype, uint32_t group_size, uint64_t cols) {
  switch (dtype) {
    case DType::F32: return cols * 4;
    case DType::F16:
    case DType::BF16: return cols * 2;
    case DType::Q8: return cols / group_size * q8_block_bytes(group_size);
  }
  return 0;
}

}  // namespace colibri::image

// core/image/dtype_convert.cpp — scalar dtype conversions for the converter and repack.
#include "image/dtype_convert.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu/kernels.h"

namespace colibri::image {

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
// scalar definitions inlined there): bit for bit the element functions above on every
// machine, NaN payloads included, which the SIMD tables do not promise.
void decode_floats(DType dtype, const void *src, size_t count, float *dst) {
  const kernels::KernelTable &scalar = kernels::scalar_kernel_table();
  switch (dtype) {
    case DType::F32:
      std::memcpy(dst, src, count * 4);
      break;
    case DType::F16:
      scalar.f16_to_f32(static_cast<const uint16_t *>(src), dst, count);
      break;
    case DType::BF16:
      scalar.bf16_to_f32(static_cast<const uint16_t *>(src), dst, count);
      break;
    case DType::Q8:
      break;  // not a float dtype: callers use dequantize_row_q8
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
    case DType::Q8:
      break;
  }
}

// q8: the kernels' quantiser (scalar table) writes the bytes, so the converter, repack and the
// engine's activation quantisation follow one definition of docs/format.md's rule (x / scale,
// round half away from zero). It used to be a second implementation here that multiplied by
// 1 / scale, which rounds differently when x / scale lies within an ulp of a half.
float quantize_row_q8(const float *src, size_t cols, uint32_t group_size, void *dst, float *max_scale) {
  kernels::scalar_kernel_table().quantize_row_q8(src, cols, group_size, dst);
  const unsigned char *block = static_cast<const unsigned char *>(dst);
  float worst = 0.0f;
  for (size_t g = 0; g < cols / group_size; ++g, block += q8_block_bytes(group_size)) {
    float scale;
    std::memcpy(&scale, block, 4);
    const int8_t *q = reinterpret_cast<const int8_t *>(block + 4);
    for (uint32_t i = 0; i < group_size; ++i)
      worst = std::fmax(worst, std::fabs(src[g * group_size + i] - scale * static_cast<float>(q[i])));
    if (max_scale && scale > *max_scale) *max_scale = scale;
  }
  return worst;
}

size_t first_non_finite(const float *src, size_t count) {
  for (size_t i = 0; i < count; ++i)
    if (!std::isfinite(src[i])) return i;
  return count;
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

size_t first_unstorable(DType dtype, const float *src, size_t count) {
  return dtype == DType::Q8 ? first_non_finite(src, count) : first_overflow(dtype, src, count);
}

const char *unstorable_reason(DType dtype) {
  switch (dtype) {
    case DType::Q8: return "q8 cannot store NaN or infinity";
    case DType::F16: return "beyond the range of f16, it would be stored as infinity";
    case DType::BF16: return "beyond the range of bf16, it would be stored as infinity";
    case DType::F32: break;
  }
  return "f32 stores every value";
}

const char *storable_alternatives(DType dtype) {
  switch (dtype) {
    case DType::Q8: return "f16, bf16 or f32";
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
  }
  return 0;
}

}  // namespace colibri::image

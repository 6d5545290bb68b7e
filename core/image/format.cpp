// core/image/format.cpp — dtype names and tensor size arithmetic for the image format.
#include "image/format.h"

#include <cstring>

namespace colibri::image {

const char *dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::Q8: return "q8";
    case DType::Q4: return "q4";
    case DType::Q8F16: return "q8f16";
    case DType::MXFP4: return "mxfp4";
  }
  return "unknown";
}

bool dtype_from_name(const char *name, DType *out) {
  for (uint32_t raw = 0; raw < kDTypeCount; ++raw) {
    DType d = static_cast<DType>(raw);
    if (std::strcmp(name, dtype_name(d)) == 0) {
      *out = d;
      return true;
    }
  }
  return false;
}

bool dtype_is_valid(uint32_t raw) { return raw < kDTypeCount; }

bool group_size_valid(DType dtype, uint32_t group_size) {
  switch (dtype) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: return group_size == 0;
    case DType::Q8:
      for (uint32_t g : kQ8GroupSizes)
        if (g == group_size) return true;
      return false;
    case DType::Q4:
      for (uint32_t g : kQ4GroupSizes)
        if (g == group_size) return true;
      return false;
    case DType::Q8F16: return group_size == kQ8F16GroupSize;
    case DType::MXFP4: return group_size == kMxfp4GroupSize;
  }
  return false;
}

static uint64_t block_bytes(DType dtype, uint32_t group_size) {
  switch (dtype) {
    case DType::Q8: return q8_block_bytes(group_size);
    case DType::Q4: return q4_block_bytes(group_size);
    case DType::Q8F16: return kQ8F16BlockBytes;
    case DType::MXFP4: return kMxfp4BlockBytes;
    default: return 0;
  }
}

static bool mul_overflows(uint64_t a, uint64_t b, uint64_t *out) {
  return __builtin_mul_overflow(a, b, out);
}

bool tensor_data_bytes(DType dtype, uint32_t group_size, uint32_t rank, const uint64_t *shape,
                       uint64_t *out_bytes) {
  if (rank < 1 || rank > kMaxTensorRank) return false;
  uint64_t elements = 1;
  for (uint32_t i = 0; i < rank; ++i) {
    if (shape[i] == 0) return false;
    if (mul_overflows(elements, shape[i], &elements)) return false;
  }
  uint64_t bytes = 0;
  switch (dtype) {
    case DType::F32:
      if (group_size != 0 || mul_overflows(elements, 4, &bytes)) return false;
      break;
    case DType::F16:
    case DType::BF16:
      if (group_size != 0 || mul_overflows(elements, 2, &bytes)) return false;
      break;
    case DType::Q8:
    case DType::Q4:
    case DType::Q8F16:
    case DType::MXFP4: {
      if (!group_size_valid(dtype, group_size)) return false;
      uint64_t cols = shape[rank - 1];
      if (cols % group_size != 0) return false;
      if (mul_overflows(elements / group_size, block_bytes(dtype, group_size), &bytes)) return false;
      break;
    }
    default:
      return false;
  }
  *out_bytes = bytes;
  return true;
}

}  // namespace colibri::image

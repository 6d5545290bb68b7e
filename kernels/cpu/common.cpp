// kernels/cpu/common.cpp — what every table shares and needs no ISA: the CPU feature probes
// (best_isa), the argument checks, the small public helpers of kernels.h and the single-value
// conversions. Compiled without ISA flags, into colibri_kernels_scalar together with the scalar
// table (kernels/CMakeLists.txt).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#if defined(COLIBRI_KERNELS_X86)
#include <cpuid.h>
#endif

#include "kernels/cpu/internal.h"

namespace colibri::kernels {
namespace detail {

namespace {

[[noreturn]] void fail(const char *what, unsigned long long a, unsigned long long b) {
  std::fprintf(stderr, "colibri kernels: precondition violated: %s (%llu, %llu)\n", what, a, b);
  std::abort();
}

}  // namespace

void check_q8_args(uint32_t group_size, size_t cols) {
  if (group_size != kQ8GroupSizeSmall && group_size != kQ8GroupSizeLarge)
    fail("q8 group_size must be 32 or 64", group_size, cols);
  if (cols % group_size != 0) fail("q8 cols must be a multiple of group_size", cols, group_size);
}

void check_q8_activation_dtype(DType dtype) {
  if (!takes_q8_activations(dtype))
    fail("the q8-activation entries take q8, q4, q8f16 or mxfp4 weights", static_cast<uint32_t>(dtype), 0);
}

void check_matmul_args(const void *weights, DType dtype, uint32_t group_size, size_t cols,
                       size_t row_begin, size_t row_end, const void *x, size_t token_count,
                       const float *y, size_t y_stride) {
  if (static_cast<uint32_t>(dtype) > static_cast<uint32_t>(DType::MXFP4))
    fail("unknown weight dtype", static_cast<uint32_t>(dtype), 0);
  if (dtype == DType::Q8) check_q8_args(group_size, cols);
  if (takes_q8_activations(dtype) && !weights_supported(dtype, group_size, cols))
    fail("group_size not taken by this dtype, or cols not a multiple of it", group_size, cols);
  if (row_begin > row_end) fail("row_begin > row_end", row_begin, row_end);
  if (row_begin == row_end || token_count == 0) return;
  if (weights == nullptr || x == nullptr || y == nullptr) fail("null weights, x or y", 0, 0);
  if (token_count > 1 && y_stride < row_end) fail("y_stride < row_end", y_stride, row_end);
}

namespace {

struct CpuFeatures {
  bool avx2 = false;
  bool avx512 = false;
  bool avx512_vnni = false;
};

#if defined(COLIBRI_KERNELS_X86)
// CPUID.1:ECX bit 29. (Clang 14's __builtin_cpu_supports does not know "f16c".)
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
}
#endif

// __builtin_cpu_supports also checks that the OS saves the YMM/ZMM state (XGETBV).
CpuFeatures probe_cpu() {
  CpuFeatures f;
#if defined(COLIBRI_KERNELS_X86)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  f.avx512 = f.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  f.avx512_vnni = f.avx512 && __builtin_cpu_supports("avx512vnni");
#endif
  return f;
}

const CpuFeatures &cpu() {
  static const CpuFeatures features = probe_cpu();
  return features;
}

}  // namespace

bool cpu_supports_avx2() { return cpu().avx2; }
bool cpu_supports_avx512() { return cpu().avx512; }
bool cpu_supports_avx512_vnni() { return cpu().avx512_vnni; }

}  // namespace detail

Isa best_isa() {
  if (detail::cpu_supports_avx512()) return Isa::Avx512;
  if (detail::cpu_supports_avx2()) return Isa::Avx2;
  return Isa::Scalar;
}

size_t row_bytes(DType dtype, uint32_t group_size, size_t cols) {
  switch (dtype) {
    case DType::F32: return cols * 4;
    case DType::F16:
    case DType::BF16: return cols * 2;
    case DType::Q8: return group_size == 0 ? 0 : cols / group_size * q8_block_bytes(group_size);
    case DType::Q4: return group_size == 0 ? 0 : cols / group_size * q4_block_bytes(group_size);
    case DType::Q8F16: return cols / kSubBlock * kQ8F16BlockBytes;
    case DType::MXFP4: return cols / kSubBlock * kMxfp4BlockBytes;
  }
  return 0;
}

bool weights_supported(DType dtype, uint32_t group_size, size_t cols) {
  switch (dtype) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: return true;
    case DType::Q8:
      return (group_size == kQ8GroupSizeSmall || group_size == kQ8GroupSizeLarge) &&
             cols % group_size == 0;
    case DType::Q4:
      for (uint32_t g : kQ4GroupSizes)
        if (g == group_size) return cols % group_size == 0;
      return false;
    case DType::Q8F16:
    case DType::MXFP4: return group_size == kSubBlock && cols % kSubBlock == 0;
  }
  return false;
}

const char *isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "unknown";
}

bool parse_isa(const char *name, Isa *isa) {
  for (Isa candidate : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (std::strcmp(name, isa_name(candidate)) == 0) {
      *isa = candidate;
      return true;
    }
  }
  return false;
}

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

float f16_to_f32_value(uint16_t h) { return detail::f16_to_f32_scalar(h); }
float bf16_to_f32_value(uint16_t h) { return detail::bf16_to_f32_scalar(h); }
uint16_t f32_to_f16_value(float f) { return detail::f32_to_f16_scalar(f); }
uint16_t f32_to_bf16_value(float f) { return detail::f32_to_bf16_scalar(f); }

size_t decode_driver_max_tokens(Isa isa, DType dtype) {
  switch (isa) {
    case Isa::Avx512:
      switch (dtype) {
        case DType::Q4:
        case DType::MXFP4: return 1;
        case DType::Q8:
        case DType::Q8F16: return 8;
        default: return 16;
      }
    case Isa::Avx2: return 16;
    case Isa::Scalar: break;
  }
  return 8;
}

QuantizeQ8Fn conversion_quantize_row_q8() {
#if defined(COLIBRI_KERNELS_X86)
  if (detail::cpu_supports_avx2()) return detail::quantize_row_q8_avx2;
#endif
  return detail::scalar_table().quantize_row_q8;
}

}  // namespace colibri::kernels

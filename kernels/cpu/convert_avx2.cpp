// kernels/cpu/convert_avx2.cpp — the AVX2 q8 quantiser for the converters and repack, in the
// small library colibri_kernels_scalar (kernels/CMakeLists.txt), which does not compile the SIMD
// tables. Compiled with the AVX2 table's flags; reached only through
// conversion_quantize_row_q8() (common.cpp), which checks the CPU first. The source is the one
// the AVX2 and AVX-512 tables use (q8_quantize_avx2.inl), so the three give the same bytes as the
// scalar rule (tests/unit/kernels_quantize_test.cpp). See internal.h for why everything here
// but the exported function sits in an anonymous namespace.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/internal.h"

namespace colibri::kernels::detail {
namespace {
#include "kernels/cpu/q8_quantize_avx2.inl"
}  // namespace

void quantize_row_q8_avx2(const float *x, size_t cols, uint32_t group_size, void *out) {
  quantize_row_q8_impl(x, cols, group_size, out);
}

}  // namespace colibri::kernels::detail

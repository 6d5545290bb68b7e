// core/image/dtype_convert_avx2.h — the AVX2 twins of four of dtype_convert.cpp's row loops,
// compiled with AVX2 + FMA + F16C flags on x86-64 only (core/CMakeLists.txt). Internal to the
// image layer: dtype_convert.cpp calls them only after kernels::best_isa() says the CPU has
// AVX2, and they write the bytes of the scalar rules (tests/image/test_dtype_convert.cpp
// compares them on every f16 pattern and on groups built to sit on the rules' rounding edges).
#pragma once

#include <cstddef>
#include <cstdint>

namespace colibri::image::detail {

// quantize_row's rules for one q4, q8f16 or mxfp4 group (dtype_convert.cpp): the references
// the AVX2 row quantisers are tested against, and what quantize_row runs without AVX2.
void quantize_q4_scalar(const float *x, uint32_t group_size, unsigned char *block);
void quantize_q8f16_scalar(const float *x, unsigned char *block);
void quantize_mxfp4_scalar(const float *x, unsigned char *block);
// mxfp4's shared exponent e − 127 of a group whose largest magnitude is amax (both quantisers').
int mxfp4_shared_exponent(float amax);

// Whether this build has the functions below (x86-64) — the CPU must still be checked.
#if defined(COLIBRI_IMAGE_AVX2)
inline constexpr bool kHaveAvx2Conversions = true;
#else
inline constexpr bool kHaveAvx2Conversions = false;
#endif

// f16 → f32 for n values (vcvtph2ps: exact, a NaN made quiet with its payload kept: the
// scalar definition's bits for every input).
void f16_to_f32_avx2(const uint16_t *in, float *out, size_t n);

// One q4 row of `cols` finite values whose groups' scales fit f16 (first_unstorable said so),
// cols % group_size == 0, group_size 32, 64 or 128: quantize_row(Q4)'s bytes. Returns the
// largest |x - stored value| in double, the value dequantize_row would give back (0 for an
// empty row).
double quantize_row_q4_avx2(const float *x, size_t cols, uint32_t group_size, unsigned char *out);
// The same for q8f16 and mxfp4 (cols % 32 == 0; mxfp4 takes every finite value).
double quantize_row_q8f16_avx2(const float *x, size_t cols, unsigned char *out);
double quantize_row_mxfp4_avx2(const float *x, size_t cols, unsigned char *out);

}  // namespace colibri::image::detail

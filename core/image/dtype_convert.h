// core/image/dtype_convert.h — element conversions between image dtypes (scalar, exact
// IEEE rounding: round-to-nearest-even for f16/bf16, NaN stays NaN). Used by the converter
// and repack, which stream rows. The four element conversions are the kernels' definitions
// (kernels/cpu/kernels.h, *_value), so the converter and the engine round identically.
#pragma once

#include <cstddef>
#include <cstdint>

#include "image/format.h"

namespace colibri::image {

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float bf16_to_f32(uint16_t b);
uint16_t f32_to_bf16(float f);

// Decodes `count` elements of a float dtype (F32, F16, BF16) into f32.
void decode_floats(DType dtype, const void *src, size_t count, float *dst);
// Encodes f32 into a float dtype (F32, F16, BF16).
void encode_floats(DType dtype, const float *src, size_t count, void *dst);

// Quantises one row of `cols` floats (cols % group_size == 0) into Q8 blocks
// {f32 scale; int8 q[group_size]} with docs/format.md's rule (scale = max|x| / 127,
// q = round half away from zero of x / scale). Returns the largest absolute rounding error and
// stores the largest scale seen in *max_scale (the error bound is max_scale / 2).
// q8 cannot represent NaN or infinity: callers refuse such rows first (first_non_finite); a
// group holding one gets a NaN scale (the kernels' activation rule).
float quantize_row_q8(const float *src, size_t cols, uint32_t group_size, void *dst, float *max_scale);
// Index of the first NaN or infinity in src[0, count), or count when all are finite.
size_t first_non_finite(const float *src, size_t count);
// Index of the first finite value in src[0, count) that `dtype` can only store as an infinity
// (beyond f16's ±65504 or bf16's ±3.39e38 after rounding), or count when there is none (and
// always for F32 and Q8).
size_t first_overflow(DType dtype, const float *src, size_t count);
// What the writers (convert, repack) refuse to store in `dtype`: the index of the first value of
// src[0, count) that `dtype` cannot hold faithfully (q8: NaN or infinity; f16/bf16: a finite
// value it would store as infinity), or count. f32 stores everything.
size_t first_unstorable(DType dtype, const float *src, size_t count);
// For the error message about such a value: why it cannot be stored ("q8 cannot store NaN or
// infinity"), and the dtypes that can store it ("f16, bf16 or f32").
const char *unstorable_reason(DType dtype);
const char *storable_alternatives(DType dtype);
// Dequantises one Q8 row back to floats.
void dequantize_row_q8(const void *src, size_t cols, uint32_t group_size, float *dst);

// Whether `dtype` is a block dtype (Q8, Q4, Q8F16, MXFP4): stored as per-row blocks that
// quantise_row / dequantize_row read and write (the others are decode_floats/encode_floats').
bool is_block_dtype(DType dtype);

// Quantises one row of `cols` finite floats (cols % group_size == 0) into blocks of a block
// dtype, with docs/format.md's rule for it:
//   Q8     scale = max|x| / 127 (f32), q = round-half-away(x / scale)
//   Q8F16  s = f16(max|x| / 127), q = round-half-away(x / s) clamped to ±127 (s = 0: q = 0)
//   Q4     m = the value of largest magnitude (the first), s = f16(m / −8),
//          q = round-half-away(x / s) clamped to [−8, 7], code q + 8 (s = 0: code 8)
//   MXFP4  e = clamp(floor(log2 max|x|) − 2, −127, 127) + 127 (max|x| = 0: e = 0), each
//          x / 2^(e − 127) rounded to the nearest e2m1 value, ties to the even code,
//          beyond ±6 saturating (OCP Microscaling Formats v1.0, §6.3)
// Callers refuse non-finite values and scales that overflow f16 first (first_unstorable).
void quantize_row(DType dtype, uint32_t group_size, const float *src, size_t cols, void *dst);
// quantize_row, returning the largest |src[c] − the value dequantize_row gives back| (in
// double) — repack's report for the block dtypes it gives no bound for. `scratch` holds `cols`
// floats (the round trip, where the quantiser does not measure the error itself).
double quantize_row_measured(DType dtype, uint32_t group_size, const float *src, size_t cols, void *dst,
                             float *scratch);
// Over the c in [0, count) where src[c] is finite: the largest |src[c]| (*max_abs_value) and the
// largest |src[c] − back[c]| (*max_abs_error), where back is src's round trip through f32, f16
// or bf16 (what first_unstorable let through). Computed in float and exact: |x| is, and a
// rounding to a narrower float lies within a factor of 2 of x, so x − back is exact (Sterbenz);
// the same values as the double arithmetic of |double(x) − back|.
void round_trip_extremes(const float *src, const float *back, size_t count, double *max_abs_value,
                         double *max_abs_error);
// Dequantises one row of a block dtype: value = scale × integer (exact in fp32 except where a
// product falls below fp32's subnormal range).
void dequantize_row(DType dtype, uint32_t group_size, const void *src, size_t cols, float *dst);

// The e2m1 value of a 4-bit code (bit 3 the sign, then 2 exponent bits and 1 mantissa bit).
float e2m1_value(uint8_t code);
// 2^(e − 127), the value of an e8m0 scale; NaN for 255.
float e8m0_value(uint8_t e);

// One MXFP4 block from the layout gpt-oss checkpoints ship ("*_blocks" u8 [..., 16] and
// "*_scales" u8 e8m0): there, byte j of a block holds element 2j in its low nibble and element
// 2j + 1 in its high nibble. Rewrites the 32 codes into the image's MXFP4 block (kMxfp4BlockBytes
// bytes: the scale, then byte j = element j | element j + 16 << 4). No value changes.
void mxfp4_block_from_checkpoint(const uint8_t *pair_packed_codes, uint8_t e8m0, uint8_t *out);

// Bytes of one row of `cols` elements in `dtype` (the block dtypes need cols % group_size == 0).
uint64_t row_bytes(DType dtype, uint32_t group_size, uint64_t cols);

}  // namespace colibri::image

// kernels/cpu/internal.h — what the per-ISA translation units share: their table getters,
// argument checks and the scalar fp16/bf16 conversions. Not part of the public API.
//
// A warning for anyone adding code to avx2.cpp / avx512.cpp: those files are compiled with
// ISA flags, so any inline function or template they instantiate with external linkage
// (std::min, std::array::operator[], std::exp(float), ...) may be emitted there with AVX
// instructions and then picked by the linker for every other caller, which would crash on
// older CPUs. Keep all of their code in an anonymous namespace, use the local helpers of the
// .inl files they include inside it (tile_args.inl's min_size, the Simd vocabulary of
// matmul_generic.inl and elementwise_simd.inl), and call only non-inline functions from
// outside (like the ones here).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/kernels.h"

namespace colibri::kernels::detail {

const KernelTable &scalar_table();
const KernelTable &avx2_table();
const KernelTable &avx512_table();
const KernelTable &avx512_vnni_table();  // same results as avx512_table, q8 via VNNI

// CPU feature probes (common.cpp; cached, cheap after the first call).
bool cpu_supports_avx2();
bool cpu_supports_avx512();
bool cpu_supports_avx512_vnni();

// The AVX2 tables' q8 quantiser built into colibri_kernels_scalar (convert_avx2.cpp, x86 only):
// call it only when cpu_supports_avx2().
void quantize_row_q8_avx2(const float *x, size_t cols, uint32_t group_size, void *out);

// Precondition checks shared by every table. A violated precondition is a bug in the
// caller, so these print what was wrong and abort (they cost a few compares per call).
void check_matmul_args(const void *weights, DType dtype, uint32_t group_size, size_t cols,
                       size_t row_begin, size_t row_end, const void *x, size_t token_count,
                       const float *y, size_t y_stride);
void check_q8_args(uint32_t group_size, size_t cols);
// The *_q8 entries take only the dtypes that multiply q8 activations (takes_q8_activations).
void check_q8_activation_dtype(DType dtype);

// Scalar conversions (IEEE binary16 and bfloat16, round to nearest even on narrowing).
float f16_to_f32_scalar(uint16_t h);
uint16_t f32_to_f16_scalar(float f);
float bf16_to_f32_scalar(uint16_t h);
uint16_t f32_to_bf16_scalar(float f);

// Bytes of stack the float-activation q8 entries may use for quantised tokens.
inline constexpr size_t kQ8StackBytes = 64 * 1024;

}  // namespace colibri::kernels::detail

// kernels/cpu/kernels.h — the CPU compute kernels: weight-row matmuls (decode and prefill),
// q8 activation quantisation, and the element-wise helpers of the forward pass.
//
// Owns: numerics only. Knows nothing about models, images, threads or allocation; it depends
// on nothing else in the project (docs/architecture.md §1). Callers split work into row ranges
// and hand each range to a thread; every kernel writes only the outputs of its range.
//
// One implementation per instruction set (scalar, AVX2+FMA+F16C, AVX-512 F/BW/VL/DQ),
// chosen at run time through kernel_table(). Nothing here allocates: scratch lives on the
// stack and is bounded (at most ~66 KiB per call).
//
// Numerics (the contract the tests check):
//   * Accumulation is fp32 everywhere.
//   * Determinism: for one ISA, the value of an output element y[t][r] is a function of
//     weight row r and activation row t only. It does not depend on the row range a call
//     covers (so not on how rows are split between threads), on the number of tokens T in
//     the call, or on whether matmul_rows or gemm_rows computed it: all four float entry
//     points reduce in the same order (one fp32 accumulator per SIMD lane along cols, lane
//     partial sums combined by one fixed tree). They are bitwise identical.
//   * Across ISAs, f32/f16/bf16 results agree within 1e-5 · Σ|w·x| (different lane counts and
//     FMA vs. separate multiply-add). q8, q4, q8f16 and mxfp4 results are bitwise identical
//     across ISAs (the lane rule below): the integer sums are exact in int32, and every one of
//     the 16 fp32 lanes takes the same sequence of FMAs on every ISA.
//   * Non-finite inputs propagate (a NaN/Inf activation makes the affected outputs
//     non-finite); they never turn into silent finite garbage.
#pragma once

#include <cstddef>
#include <cstdint>

namespace colibri::kernels {

// Instruction-set levels, in increasing order. Avx2 means AVX2 + FMA + F16C; Avx512 means
// AVX-512 F + BW + VL + DQ (plus AVX2/FMA/F16C). VNNI, when present, is used inside the
// Avx512 level without changing any result (integer sums are exact).
enum class Isa : uint32_t { Scalar = 0, Avx2 = 1, Avx512 = 2 };

// Weight element types. The numeric values equal colibri::image::DType (core/image/format.h)
// so core can convert with a static_cast (core static_asserts the equality).
enum class DType : uint32_t { F32 = 0, F16 = 1, BF16 = 2, Q8 = 3, Q4 = 4, Q8F16 = 5, MXFP4 = 6 };

// Q8 layout (same as the image format): a row of `cols` values is cols / group_size blocks,
// each { float scale; int8_t q[group_size]; } with no padding. Value i = scale *
// q8_value(q[i]): q lies in [-127, 127], and a stored -128 (which no quantiser writes) reads
// as -127 (docs/format.md), so that the SIMD dot products can put either operand on the
// unsigned side of an int8 multiply. group_size is 32 or 64; cols must be a multiple of it.
// Activations quantised for a q8 matmul use the same layout and the same group size as the
// weights.
inline constexpr uint32_t kQ8GroupSizeSmall = 32;
inline constexpr uint32_t kQ8GroupSizeLarge = 64;
inline constexpr int kQ8MinValue = -127;
inline constexpr size_t q8_block_bytes(uint32_t group_size) { return 4u + group_size; }
inline constexpr int32_t q8_value(int8_t q) { return q < kQ8MinValue ? kQ8MinValue : q; }
// Round half away from zero, the quantisers' rule (docs/format.md), for |t| < 2^31 (callers
// bound t first): truncation through int32 is then exact. Written as selects, with no libm
// call, so that loops over it vectorise (their files build with -fno-trapping-math).
inline float round_half_away_bounded(float t) {
  const float r = static_cast<float>(static_cast<int32_t>(t));
  const float fraction = t - r;
  return r + (fraction >= 0.5f ? 1.0f : 0.0f) - (fraction <= -0.5f ? 1.0f : 0.0f);
}

// The 4/8-bit block formats of image format version 2 (docs/format.md has the byte layout):
//   Q4     groups of G = 32, 64 or 128: { f16 scale; u8 codes[G/2] }, value = scale·(code − 8)
//   Q8F16  groups of 32: { f16 scale; int8 q[32] }, value = scale·q8_value(q)
//   MXFP4  groups of 32: { u8 e8m0; u8 codes[16] }, value = 2^(e8m0 − 127)·e2m1(code)
// The 4-bit codes of every 32 values are 16 bytes: byte j holds value j (low nibble) and value
// j + 16 (high nibble). These weights, like Q8, multiply q8-quantised activations, here always
// in blocks of 32 (kQ8GroupSizeSmall).
//
// The lane rule, how every ISA computes y = Σ w·x for these dtypes, the same bits everywhere:
// an output owns 16 fp32 lanes, all starting at +0. The row is cut into 32-value sub-blocks u
// (a Q8 group of 64 is two); in sub-block u, each group of 4 neighbouring values j = 0..7
// (values 4j..4j+3) gives isum(u, j) = Σ w_int·q8_value(x_q), exact in int32, and
//   lane[8·(j / 4) + 4·(u mod 2) + j mod 4] = fma(float(isum(u, j)), s_u, that lane)
// for u ascending, with s_u = dw·dx the fp32 product of the scales of the weight block and of
// the activation block that hold u. Then t_i = lane[i] + lane[i + 8] (i < 8) and
// y = ((t0 + t1) + (t2 + t3)) + ((t4 + t5) + (t6 + t7)). w_int is the stored integer (Q8,
// Q8F16: q8_value(q); Q4: code − 8; MXFP4: twice the e2m1 value, an integer in −12..12) and
// dw the block's scale as fp32 (MXFP4: 2^(e8m0 − 128), which absorbs the doubling; e8m0 255
// gives NaN). The lanes are what one 512-bit vpdpbusd gives for two sub-blocks side by side,
// so no horizontal sum is needed inside the row (kernels/cpu/quant_formats.inl has the scalar
// reference, reference_lanes).
inline constexpr uint32_t kQ4GroupSizes[3] = {32, 64, 128};
inline constexpr uint32_t kSubBlock = 32;
inline constexpr int kQ4CodeOffset = 8;
inline constexpr int kE8m0Bias = 127;
inline constexpr uint32_t kE8m0Nan = 255;
inline constexpr size_t q4_block_bytes(uint32_t group_size) { return 2u + group_size / 2; }
inline constexpr size_t kQ8F16BlockBytes = 2 + kSubBlock;
inline constexpr size_t kMxfp4BlockBytes = 1 + kSubBlock / 2;
// Twice the e2m1 value of each 4-bit code (bit 3 is the sign; −0 is 0).
inline constexpr int8_t kE2m1Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Whether weights of this dtype multiply q8-quantised activations (Q8, Q4, Q8F16, MXFP4).
inline constexpr bool takes_q8_activations(DType dtype) {
  return dtype == DType::Q8 || dtype == DType::Q4 || dtype == DType::Q8F16 || dtype == DType::MXFP4;
}
// The q8 group size of the activations such weights multiply: Q8's own, 32 for the others.
inline constexpr uint32_t activation_group_size(DType dtype, uint32_t group_size) {
  return dtype == DType::Q8 ? group_size : kQ8GroupSizeSmall;
}

// Attention probabilities of scores more than 69 below their row's maximum are 0 exactly
// (attention_softmax): e^-69 ≈ 1e-30, so such a probability is below fp32 resolution next to
// the maximum's (which is >= 1/n) for any n, and what is kept stays normal after the division
// by the sum for n up to 2^24. Computing the tail exactly would produce subnormal numbers,
// and x86 cores take a microcode assist of ~100+ cycles per subnormal operation: with the
// benchmark model's wide score ranges that made long-prompt attention 1.3–1.5x slower.
// transformers keeps those subnormals; the difference to its outputs is < n · 1e-30 · max|v|.
inline constexpr float kAttentionLogitFloor = -69.0f;

// Bytes of one row of `cols` elements. For the block dtypes, cols must be a multiple of
// group_size; group_size is ignored for the float dtypes.
size_t row_bytes(DType dtype, uint32_t group_size, size_t cols);

// True when dtype/group_size/cols describe a matrix the kernels accept.
bool weights_supported(DType dtype, uint32_t group_size, size_t cols);

// The most capable level this CPU (and OS, for AVX-512 state) supports.
Isa best_isa();
const char *isa_name(Isa isa);    // "scalar", "avx2", "avx512"
// The inverse of isa_name: false (and *isa untouched) for any other name.
bool parse_isa(const char *name, Isa *isa);
const char *dtype_name(DType dtype);  // "f32", "f16", "bf16", "q8", "q4", "q8f16", "mxfp4"

// Weight-row matmul: for rows r in [row_begin, row_end) and tokens t in [0, token_count):
//   y[t * y_stride + r] = dot(W[r, 0:cols], x[t * cols .. t * cols + cols))
// weights points at row 0 of W ([rows, cols] row-major in `dtype`); x is [token_count, cols]
// fp32; y is indexed by absolute row (y_stride >= row_end). Only the outputs of the range
// are written. Each weight row is read once per call and applied to all tokens.
//
// For weights that take q8 activations (takes_q8_activations) this entry quantises x itself
// (into a bounded stack buffer, in token chunks that fit 64 KiB); when several matrices share
// one activation (the k experts of a token), quantise once with quantize_row_q8 and call the
// *_q8 entry instead.
using MatmulFn = void (*)(const void *weights, DType dtype, uint32_t group_size, size_t cols,
                          size_t row_begin, size_t row_end, const float *x, size_t token_count,
                          float *y, size_t y_stride);

// As MatmulFn for weights that take q8 activations (takes_q8_activations(dtype)), with the
// activations already quantised: x_q8 is token_count rows of row_bytes(Q8, g, cols) bytes
// each, made by quantize_row_q8 with g = activation_group_size(dtype, group_size).
using MatmulQ8Fn = void (*)(const void *weights, DType dtype, uint32_t group_size, size_t cols,
                            size_t row_begin, size_t row_end, const void *x_q8,
                            size_t token_count, float *y, size_t y_stride);

// Quantise one activation row to q8 blocks (scale = max|x| / 127, q = round-half-away(x /
// scale); |x - scale·q| <= scale / 2). A block holding a NaN/Inf gets a NaN scale, so the
// dot products it feeds become NaN. out must hold row_bytes(Q8, group_size, cols) bytes.
using QuantizeQ8Fn = void (*)(const float *x, size_t cols, uint32_t group_size, void *out);

// The driver a caller picks for a matmul of T tokens of `dtype` weights: matmul_rows for T <=
// this, gemm_rows above (the results are the same bits either way). Measured with
// `kernels_bench --batch` (an expert's matrix streamed from DRAM; docs/performance.md): on
// AVX-512 the decode driver is ahead of the GEMM tile up to 16 tokens for the float dtypes
// (f16 at 12 tokens: 214 against 151 GFLOP/s, 2 threads), while the q8-activation GEMM tile,
// which prepares each token's side of the activations once per panel, is ahead from 2 tokens
// for q4/mxfp4 and from 9 for q8/q8f16; on AVX2 the decode driver is ahead up to 16 tokens for
// every dtype (its float tile sweeps at most 6 tokens at a time: f16 2816×1024 at 16 tokens 141
// against 113 GFLOP/s on a Zen 3, 2 threads). A continuous-batching step gives each active
// expert about 8 to 16 tokens.
size_t decode_driver_max_tokens(Isa isa, DType dtype);

struct KernelTable {
  Isa isa;

  // Decode path (token_count small, typically 1..16; any count is accepted): up to 8 tokens
  // (AVX2 float weights: 6), weights streamed once with T accumulators per row held in
  // registers; more tokens run in such chunks over row panels that stay in L2 between the
  // chunks (weights still read from DRAM once). Callers pick it up to
  // decode_driver_max_tokens() tokens.
  MatmulFn matmul_rows;
  MatmulQ8Fn matmul_rows_q8;

  // Prefill path (token_count large): register tiles of rows × tokens (4 × 6 on AVX-512),
  // row panels kept in L2 and reused by every token tile, k-blocks of a token tile kept in
  // L1. Bitwise identical to matmul_rows / matmul_rows_q8.
  MatmulFn gemm_rows;
  MatmulQ8Fn gemm_rows_q8;

  QuantizeQ8Fn quantize_row_q8;

  // Element-wise helpers. n is the element count; out may alias an input.
  float (*dot_f32)(const float *a, const float *b, size_t n);
  // out[i] = x[i] * weight[i] / sqrt(mean(x²) + eps)   (RMSNorm, Zhang & Sennrich 2019)
  void (*rmsnorm)(float *out, const float *x, const float *weight, float eps, size_t n);
  // x[i] = exp(x[i] - max x) / Σ exp(x[j] - max x), in place. n >= 1.
  void (*softmax)(float *x, size_t n);
  // out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g))   (SwiGLU FFN)
  void (*silu_mul)(float *out, const float *gate, const float *up, size_t n);
  // out[i] = a[i] + b[i]
  void (*add)(float *out, const float *a, const float *b, size_t n);
  // y[i] += alpha * x[i]
  void (*scale_add)(float *y, float alpha, const float *x, size_t n);
  // Row conversions. To f16/bf16: round to nearest even; NaN stays NaN, overflow gives Inf.
  void (*f16_to_f32)(const uint16_t *in, float *out, size_t n);
  void (*bf16_to_f32)(const uint16_t *in, float *out, size_t n);
  void (*f32_to_f16)(const float *in, uint16_t *out, size_t n);
  void (*f32_to_bf16)(const float *in, uint16_t *out, size_t n);

  // Attention of `heads` query heads that share one KV head (grouped-query attention) over n
  // cached positions (cache rows `stride` floats apart, d of each used). Head h's query is at
  // q + h·q_stride, its scores or probabilities at scores/probs + h·*_stride, its output at
  // out + h·out_stride:
  //   scores[h][p] = scale · dot(q_h, keys[p · stride .. + d))               attention_scores
  //   out[h][i]    = Σ_p probs[h][p] · values[p · stride + i], p ascending    attention_values
  // The heads of a call share every key and value row load. Each score is a function of its
  // query and key row only, each output of its head's probabilities and the value rows (not
  // of n, of `heads` or of the other rows): decode and prefill agree, and calling once per
  // head gives the same bits as one grouped call.
  void (*attention_scores)(const float *q, size_t q_stride, size_t heads, const float *keys, size_t stride, size_t n,
                           size_t d, float scale, float *scores, size_t scores_stride);
  // Attention probabilities: softmax of `heads` rows of n scores (row h at x + h·stride) in
  // place, as `softmax`, except that a score more than -kAttentionLogitFloor below its row's
  // maximum gets probability 0 exactly (see kAttentionLogitFloor).
  void (*attention_softmax)(float *x, size_t stride, size_t heads, size_t n);
  void (*attention_values)(const float *probs, size_t probs_stride, size_t heads, const float *values, size_t stride,
                           size_t n, size_t d, float *out, size_t out_stride);
  // attention_values continuing from the sums already in out (out[h][i] += Σ_p ..., the same
  // ascending-p accumulation): a sequence's cache blocks summed one after another from zeroed
  // out give the bits of one attention_values call over all positions (the paged KV cache).
  void (*attention_values_accumulate)(const float *probs, size_t probs_stride, size_t heads, const float *values,
                                      size_t stride, size_t n, size_t d, float *out, size_t out_stride);
};

// The kernels for `isa`. Asking for a level the CPU lacks gives the best supported level
// below it (kernel_table(Isa::Avx512) on an AVX2 machine returns the AVX2 table), so
// table.isa says what you got. The tables are immutable and live for the whole program.
const KernelTable &kernel_table(Isa isa);

// kernel_table(best_isa()).
const KernelTable &default_kernel_table();

// The scalar table: the same object as kernel_table(Isa::Scalar), the reference every other
// table is tested against. Tools that want the reference rounding and nothing else (the
// converter's row conversions) call this one: it is in the small library
// colibri_kernels_scalar, which links without the SIMD tables.
const KernelTable &scalar_kernel_table();

// The q8 quantiser of the converters and repack, also in colibri_kernels_scalar: the AVX2
// tables' code when the CPU has AVX2 (3-4x the scalar one's speed), else the scalar table's.
// Either writes the scalar rule's bytes for finite input (tested); a group holding a NaN or an
// infinity gets a NaN scale and zero codes from both, but the NaN's bits may differ (the
// writers refuse such values before quantising).
QuantizeQ8Fn conversion_quantize_row_q8();

// Single-value conversions (exact definitions the row conversions follow).
float f16_to_f32_value(uint16_t h);
float bf16_to_f32_value(uint16_t h);
uint16_t f32_to_f16_value(float f);
uint16_t f32_to_bf16_value(float f);

}  // namespace colibri::kernels

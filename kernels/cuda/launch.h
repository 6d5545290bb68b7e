// kernels/cuda/launch.h — the CUDA kernels of the device backend, as host launch functions
// (docs/architecture.md §13). Kernels only: no model knowledge, no allocation, no
// synchronisation; every function enqueues work on `stream` and returns the launch status
// (cudaGetLastError after the launch), so that a caller can check every launch.
//
// Conventions: activations are fp32 rows [tokens, width] (token t at base + t * width);
// weights are raw rows of dtype COLIBRI_DEVICE_DTYPE_* (f32, f16, bf16) decoded in registers;
// every dot product accumulates in fp32. `tokens` ≤ COLIBRI_DEVICE_MAX_CHUNK_TOKENS. Per-token
// scalars that change every step (token ids, positions, sequences, expert choices) are read
// from device memory, never passed by value, so that a captured CUDA graph can be replayed.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels/cuda/routing_map.h"  // COLIBRI_HOST_DEVICE

namespace colibri::cuda {

// One chunk's per-token parameters in device memory (uploaded before each pass).
struct StepParams {
  int32_t token[8];
  uint32_t sequence[8];
  uint32_t position[8];
};

// The routing map of one MoE layer, built on the device (expert ids never go to the host):
// the chunk's (token, slot) pairs grouped by expert in ascending expert order, a group's
// pairs in ascending pair order (pair = token * top_k + slot).
struct ExpertGroups {
  uint32_t active_count;   // experts chosen by at least one token
  uint32_t reserved;
  // Followed in memory by: expert[max_pairs], offset[max_pairs + 1], pair[max_pairs] (uint32).
};
inline size_t expert_groups_bytes(size_t max_pairs) { return sizeof(ExpertGroups) + (3 * max_pairs + 1) * sizeof(uint32_t); }

// x[t] = the embedding row of params->token[t], decoded to fp32 (q8: scale · value).
cudaError_t embed(const unsigned char *table, uint32_t dtype, uint32_t group, uint64_t row_bytes, uint32_t hidden,
                  const StepParams *params, uint32_t tokens, float *x, cudaStream_t stream);

// q8 weights (COLIBRI_DEVICE_DTYPE_Q8) multiply activations quantised to q8 per token, as the CPU
// does (kernels/cpu scalar quantize_row_q8: scale = max|x| / 127 per block of `group`, values
// rounded half away from zero, NaN scale for a block with a NaN/Inf): quantize_q8 writes rows
// [rows, cols / group blocks of 4 + group bytes], and the q8 products take them (x_q8) with one
// fp32 multiply-add per block, (weight scale · activation scale) · exact int32 block sum.
COLIBRI_HOST_DEVICE inline size_t q8_row_bytes(uint32_t cols, uint32_t group) {
  return static_cast<size_t>(cols / group) * (4 + group);
}
cudaError_t quantize_q8(const float *x, uint32_t cols, uint32_t rows, uint32_t group, unsigned char *out,
                        cudaStream_t stream);

// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, for `rows` rows of n (in place allowed).
cudaError_t rmsnorm_rows(const float *x, float *out, const float *weight, float eps, uint32_t n, uint32_t rows,
                         cudaStream_t stream);

// y[t, r] (+)= W[r] · x[t] (+ bias[r]) for every row r of W [rows, cols], tokens t < tokens.
// accumulate: y += result (the residual add), else y = result. One warp per row.
// q8 weights: x_q8 holds x quantised with the weights' group (quantize_q8), x is not read.
cudaError_t matvec(const unsigned char *w, uint32_t dtype, uint32_t group, uint64_t row_bytes, uint32_t rows,
                   uint32_t cols, const float *x, const unsigned char *x_q8, uint32_t x_stride, uint32_t tokens, float *y,
                   uint32_t y_stride, const float *bias, int accumulate, cudaStream_t stream);

// Per token: optional clamp of q, k, v to [-clip, clip] (clip > 0), RoPE (rotate_half, angle
// = position · inv_freq[i] in fp32, cos/sin in double, as the CPU session) on q in place and
// on k, then k and v stored at the token's (sequence, position) of the contiguous KV cache
// [sequences][layers][2][context][kv_dim] (f32, or f16 rounded on write).
cudaError_t rope_store_kv(float *q, float *k, float *v, const float *inv_freq, uint32_t heads, uint32_t kv_heads,
                          uint32_t head_dim, float clip, const StepParams *params, uint32_t tokens, void *kv_cache,
                          int kv_f16, uint32_t layer, uint32_t layers, uint32_t context, cudaStream_t stream);

// Causal grouped-query attention of each token's q heads over positions 0..position of its
// sequence: softmax(q·k / sqrt(head_dim)) with the max subtracted and the CPU's floor rule
// (a score more than 69 below the max has probability 0), then the values summed in
// ascending position. scores: scratch [tokens, heads, context]. out [tokens, heads·head_dim].
cudaError_t attention_decode(const float *q, const void *kv_cache, int kv_f16, uint32_t layer, uint32_t layers,
                             uint32_t context, uint32_t heads, uint32_t kv_heads, uint32_t head_dim,
                             const StepParams *params, uint32_t tokens, float *scores, float *out, cudaStream_t stream);

// Router: softmax over each token's E logits (fp32, max subtracted), top-k by repeated
// arg-max with ties to the lower expert index (runtime/router.cpp), weights renormalised to
// sum 1 iff renormalise. logits [tokens, E] is overwritten with the probabilities.
// ids / weights: [tokens, k]. Fused: one block per token.
cudaError_t router_softmax_top_k(float *logits, uint32_t experts, uint32_t top_k, int renormalise, uint32_t tokens,
                                 int32_t *ids, float *weights, cudaStream_t stream);

// Groups the chunk's tokens·k pairs by expert into groups (see ExpertGroups), on the device.
cudaError_t group_by_expert(const int32_t *ids, uint32_t pairs, uint32_t max_pairs, ExpertGroups *groups,
                            cudaStream_t stream);

// Fused gate + up + SiLU·mul for every active expert in one launch (grid.y = group j, up to
// max_groups): h[pair, r] = silu(gate_e[r] · x[token]) · (up_e[r] · x[token]).
// q8 experts: x_q8 [tokens, q8 row of hidden] (quantize_q8), x not read.
cudaError_t experts_gate_up(const unsigned char *gate, const unsigned char *up, uint32_t dtype, uint32_t group,
                            uint64_t row_bytes, uint64_t matrix_bytes, uint32_t ffn, uint32_t hidden, uint32_t top_k,
                            const float *x, const unsigned char *x_q8, const ExpertGroups *groups, uint32_t max_pairs,
                            uint32_t max_groups, float *h, cudaStream_t stream);

// Down projection of every active expert in one launch, the routing weight applied in the
// epilogue: y[pair, r] = weight[pair] · (down_e[r] · h[pair]).
// q8 experts: h_q8 [pairs, q8 row of ffn], h not read.
cudaError_t experts_down(const unsigned char *down, uint32_t dtype, uint32_t group, uint64_t row_bytes,
                         uint64_t matrix_bytes, uint32_t hidden, uint32_t ffn, const float *weights, const float *h,
                         const unsigned char *h_q8, const ExpertGroups *groups, uint32_t max_pairs, uint32_t max_groups,
                         float *y, cudaStream_t stream);

// The weighted merge and the residual: x[t] += (sum over slots s in order of y[t·k + s])
// (+ sigmoid(shared_logit[t]) · shared[t], or + shared[t] when shared_logit is null).
cudaError_t moe_merge(float *x, const float *y, uint32_t top_k, uint32_t hidden, uint32_t tokens, const float *shared,
                      const float *shared_logit, cudaStream_t stream);

// gate[t, i] = silu(gate[t, i]) · up[t, i] (dense and shared SwiGLU FFNs).
cudaError_t silu_mul(float *gate, const float *up, size_t n, cudaStream_t stream);

}  // namespace colibri::cuda

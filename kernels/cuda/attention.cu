// kernels/cuda/attention.cu — RoPE with the KV-cache store, and causal grouped-query attention
// of a chunk's tokens over the device KV cache (launch.h states the contracts). The cache is
// contiguous: [sequences][layers][2 (keys, values)][context][kv_dim], f32 or f16.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"

namespace colibri::cuda {
namespace {

using namespace detail;

// The CPU's attention floor (kernels/cpu/kernels.h kAttentionLogitFloor).
constexpr float kAttentionLogitFloor = -69.0f;

__device__ __forceinline__ size_t kv_offset(uint32_t sequence, uint32_t layer, uint32_t layers, uint32_t context,
                                            uint32_t kv_dim, uint32_t which, uint32_t position) {
  return (((static_cast<size_t>(sequence) * layers + layer) * 2 + which) * context + position) * kv_dim;
}

template <typename KvT>
__device__ __forceinline__ void store(KvT *at, float v) {
  if constexpr (sizeof(KvT) == 2)
    *at = __float2half_rn(v);
  else
    *at = v;
}

template <typename KvT>
__device__ __forceinline__ float load(const KvT *at) {
  if constexpr (sizeof(KvT) == 2)
    return __half2float(*at);
  else
    return *at;
}

template <typename KvT>
__global__ void rope_store_kv_kernel(float *q, float *k, float *v, const float *inv_freq, uint32_t heads,
                                     uint32_t kv_heads, uint32_t head_dim, float clip, const StepParams *params,
                                     KvT *cache, uint32_t layer, uint32_t layers, uint32_t context) {
  const uint32_t t = blockIdx.x;
  const uint32_t half = head_dim / 2, Q = heads * head_dim, KV = kv_heads * head_dim;
  const uint32_t position = params->position[t], sequence = params->sequence[t];
  float *qt = q + static_cast<size_t>(t) * Q, *kt = k + static_cast<size_t>(t) * KV, *vt = v + static_cast<size_t>(t) * KV;
  KvT *keys = cache + kv_offset(sequence, layer, layers, context, KV, 0, position);
  KvT *values = cache + kv_offset(sequence, layer, layers, context, KV, 1, position);
  auto clamp = [clip](float x) { return clip > 0.0f ? fminf(fmaxf(x, -clip), clip) : x; };
  // Each thread owns whole (head, i) pairs, so reading both halves before writing is safe.
  for (uint32_t idx = threadIdx.x; idx < (heads + kv_heads) * half; idx += blockDim.x) {
    const uint32_t h = idx / half, i = idx % half;
    const float angle = static_cast<float>(position) * inv_freq[i];
    const float c = static_cast<float>(cos(static_cast<double>(angle)));
    const float s = static_cast<float>(sin(static_cast<double>(angle)));
    if (h < heads) {
      float *x = qt + h * head_dim;
      const float x1 = clamp(x[i]), x2 = clamp(x[i + half]);
      x[i] = x1 * c - x2 * s;
      x[i + half] = x2 * c + x1 * s;
    } else {
      const uint32_t kh = h - heads;
      const float *x = kt + kh * head_dim;
      const float x1 = clamp(x[i]), x2 = clamp(x[i + half]);
      store(&keys[kh * head_dim + i], x1 * c - x2 * s);
      store(&keys[kh * head_dim + i + half], x2 * c + x1 * s);
    }
  }
  for (uint32_t i = threadIdx.x; i < KV; i += blockDim.x) store(&values[i], clamp(vt[i]));
}

// One block per (query head, token): scores in global scratch, a block-wide max and sum,
// probabilities normalised, then each thread sums its output elements in ascending position.
template <typename KvT>
__global__ void attention_kernel(const float *q, const KvT *cache, uint32_t layer, uint32_t layers, uint32_t context,
                                 uint32_t heads, uint32_t kv_heads, uint32_t head_dim, const StepParams *params,
                                 float *scores, float *out) {
  const uint32_t h = blockIdx.x, t = blockIdx.y;
  const uint32_t Q = heads * head_dim, KV = kv_heads * head_dim, kvh = h / (heads / kv_heads);
  const uint32_t n = params->position[t] + 1, sequence = params->sequence[t];
  const float *qh = q + static_cast<size_t>(t) * Q + h * head_dim;
  const KvT *keys = cache + kv_offset(sequence, layer, layers, context, KV, 0, 0) + kvh * head_dim;
  const KvT *values = cache + kv_offset(sequence, layer, layers, context, KV, 1, 0) + kvh * head_dim;
  float *row = scores + (static_cast<size_t>(t) * heads + h) * context;
  const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));
  const uint32_t lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  for (uint32_t p = warp; p < n; p += warps) {
    const KvT *key = keys + static_cast<size_t>(p) * KV;
    float dot = 0.0f;
    for (uint32_t d = lane; d < head_dim; d += kWarp) dot += qh[d] * load(&key[d]);
    dot = warp_sum(dot);
    if (lane == 0) row[p] = dot * scale;
  }
  __syncthreads();
  float m = -INFINITY;
  for (uint32_t p = threadIdx.x; p < n; p += blockDim.x) m = fmaxf(m, row[p]);
  m = block_reduce<true>(m);
  float sum = 0.0f;
  for (uint32_t p = threadIdx.x; p < n; p += blockDim.x) {
    const float shifted = row[p] - m;
    const float e = shifted < kAttentionLogitFloor ? 0.0f : expf(shifted);
    row[p] = e;
    sum += e;
  }
  sum = block_reduce<false>(sum);
  __syncthreads();
  for (uint32_t p = threadIdx.x; p < n; p += blockDim.x) row[p] = row[p] / sum;
  __syncthreads();
  float *o = out + static_cast<size_t>(t) * Q + h * head_dim;
  for (uint32_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float acc = 0.0f;
    for (uint32_t p = 0; p < n; ++p) acc = acc + row[p] * load(&values[static_cast<size_t>(p) * KV + d]);
    o[d] = acc;
  }
}

}  // namespace

cudaError_t rope_store_kv(float *q, float *k, float *v, const float *inv_freq, uint32_t heads, uint32_t kv_heads,
                          uint32_t head_dim, float clip, const StepParams *params, uint32_t tokens, void *kv_cache,
                          int kv_f16, uint32_t layer, uint32_t layers, uint32_t context, cudaStream_t stream) {
  if (kv_f16)
    rope_store_kv_kernel<__half><<<tokens, 128, 0, stream>>>(q, k, v, inv_freq, heads, kv_heads, head_dim, clip, params,
                                                             static_cast<__half *>(kv_cache), layer, layers, context);
  else
    rope_store_kv_kernel<float><<<tokens, 128, 0, stream>>>(q, k, v, inv_freq, heads, kv_heads, head_dim, clip, params,
                                                            static_cast<float *>(kv_cache), layer, layers, context);
  return cudaGetLastError();
}

cudaError_t attention_decode(const float *q, const void *kv_cache, int kv_f16, uint32_t layer, uint32_t layers,
                             uint32_t context, uint32_t heads, uint32_t kv_heads, uint32_t head_dim,
                             const StepParams *params, uint32_t tokens, float *scores, float *out, cudaStream_t stream) {
  const dim3 grid(heads, tokens);
  if (kv_f16)
    attention_kernel<__half><<<grid, 128, 0, stream>>>(q, static_cast<const __half *>(kv_cache), layer, layers, context,
                                                       heads, kv_heads, head_dim, params, scores, out);
  else
    attention_kernel<float><<<grid, 128, 0, stream>>>(q, static_cast<const float *>(kv_cache), layer, layers, context,
                                                      heads, kv_heads, head_dim, params, scores, out);
  return cudaGetLastError();
}

}  // namespace colibri::cuda

// kernels/cuda/router.cu — the fused router softmax + top-k, and the device-side grouping of
// a chunk's (token, slot) pairs by expert (launch.h states the contracts; the semantics are
// runtime/router.cpp's: fp32, max subtracted, ties to the lower expert index).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/routing_map.h"

namespace colibri::cuda {
namespace {

using namespace detail;

constexpr int kRouterThreads = 256;

__device__ __forceinline__ bool better(float p, int32_t e, float q, int32_t f) { return routing_better(p, e, q, f); }

__global__ void router_kernel(float *logits, uint32_t experts, uint32_t top_k, int renormalise, int32_t *ids,
                              float *weights) {
  const uint32_t t = blockIdx.x;
  float *p = logits + static_cast<size_t>(t) * experts;
  float m = -INFINITY;
  for (uint32_t e = threadIdx.x; e < experts; e += blockDim.x) m = fmaxf(m, p[e]);
  m = block_reduce<true>(m);
  float sum = 0.0f;
  for (uint32_t e = threadIdx.x; e < experts; e += blockDim.x) {
    p[e] = expf(p[e] - m);
    sum += p[e];
  }
  sum = block_reduce<false>(sum);
  for (uint32_t e = threadIdx.x; e < experts; e += blockDim.x) p[e] = p[e] / sum;
  __syncthreads();
  __shared__ float best_p[kRouterThreads / kWarp];
  __shared__ int32_t best_e[kRouterThreads / kWarp];
  __shared__ float selected_sum;
  if (threadIdx.x == 0) selected_sum = 0.0f;
  const uint32_t lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  for (uint32_t slot = 0; slot < top_k; ++slot) {
    float bp = -1.0f;  // probabilities are >= 0; a taken expert is marked -1
    int32_t be = -1;
    for (uint32_t e = threadIdx.x; e < experts; e += blockDim.x)
      if (p[e] >= 0.0f && better(p[e], static_cast<int32_t>(e), bp, be)) {  // -1: already taken
        bp = p[e];
        be = static_cast<int32_t>(e);
      }
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      const float op = __shfl_xor_sync(kFullMask, bp, offset);
      const int32_t oe = __shfl_xor_sync(kFullMask, be, offset);
      if (better(op, oe, bp, be)) {
        bp = op;
        be = oe;
      }
    }
    if (lane == 0) {
      best_p[warp] = bp;
      best_e[warp] = be;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float wp = best_p[0];
      int32_t we = best_e[0];
      for (uint32_t w = 1; w < warps; ++w)
        if (better(best_p[w], best_e[w], wp, we)) {
          wp = best_p[w];
          we = best_e[w];
        }
      // we >= 0: top_k <= experts (the model's config guarantees it, check_model checks it).
      ids[t * top_k + slot] = we;
      weights[t * top_k + slot] = wp;
      selected_sum += wp;
      if (we >= 0) p[we] = -1.0f;
    }
    __syncthreads();
  }
  if (renormalise && threadIdx.x == 0)
    for (uint32_t slot = 0; slot < top_k; ++slot) weights[t * top_k + slot] /= selected_sum;
}

// One thread: the chunk's pairs (tokens · k, at most 8 · k) grouped by expert
// (routing_map.h): small enough that a single thread beats a parallel sort's launches.
__global__ void group_kernel(const int32_t *ids, uint32_t pairs, uint32_t max_pairs, ExpertGroups *groups) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  uint32_t *base = reinterpret_cast<uint32_t *>(groups + 1);
  groups->active_count = group_pairs_by_expert(ids, pairs, base, base + max_pairs, base + 2 * max_pairs + 1);
}

}  // namespace

cudaError_t router_softmax_top_k(float *logits, uint32_t experts, uint32_t top_k, int renormalise, uint32_t tokens,
                                 int32_t *ids, float *weights, cudaStream_t stream) {
  router_kernel<<<tokens, kRouterThreads, 0, stream>>>(logits, experts, top_k, renormalise, ids, weights);
  return cudaGetLastError();
}

cudaError_t group_by_expert(const int32_t *ids, uint32_t pairs, uint32_t max_pairs, ExpertGroups *groups,
                            cudaStream_t stream) {
  group_kernel<<<1, 1, 0, stream>>>(ids, pairs, max_pairs, groups);
  return cudaGetLastError();
}

}  // namespace colibri::cuda

// kernels/cuda/common.cuh — device helpers shared by the kernels: weight decoding (f32, f16,
// bf16 to fp32 in registers), warp and block reductions, the launch-status check.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/device_api.h"

namespace colibri::cuda::detail {

inline constexpr unsigned kFullMask = 0xffffffffu;
inline constexpr int kWarp = 32;
// Warps per block of the row kernels (one warp per output row).
inline constexpr int kRowWarps = 4;
inline constexpr uint32_t kMaxTokens = COLIBRI_DEVICE_MAX_CHUNK_TOKENS;

template <uint32_t kDtype>
__device__ __forceinline__ float load_weight(const unsigned char *row, uint32_t i) {
  if constexpr (kDtype == COLIBRI_DEVICE_DTYPE_F16)
    return __half2float(reinterpret_cast<const __half *>(row)[i]);
  else if constexpr (kDtype == COLIBRI_DEVICE_DTYPE_BF16)
    return __bfloat162float(reinterpret_cast<const __nv_bfloat16 *>(row)[i]);
  else
    return reinterpret_cast<const float *>(row)[i];
}

template <uint32_t kDtype>
inline constexpr uint32_t kWeightBytes = kDtype == COLIBRI_DEVICE_DTYPE_F32 ? 4 : 2;

// The vector path of the row kernels: 8 weights per lane per step, loaded 16 bytes at a time
// (f16/bf16: one 16-byte load; f32: two), so that a warp reads 256 or 512 contiguous bytes
// per step. Needs cols % 8 == 0 (rows then start on 16-byte boundaries: the arena aligns each
// tensor to 256 bytes); other widths take the scalar path.
inline constexpr uint32_t kVector = 8;

template <uint32_t kDtype>
__device__ __forceinline__ void load_weights8(const unsigned char *p, float (&w)[kVector]) {
  if constexpr (kDtype == COLIBRI_DEVICE_DTYPE_F32) {
    const float4 a = reinterpret_cast<const float4 *>(p)[0], b = reinterpret_cast<const float4 *>(p)[1];
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
  } else {
    const uint4 raw = *reinterpret_cast<const uint4 *>(p);
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const unsigned short lo = static_cast<unsigned short>(words[i] & 0xffffu);
      const unsigned short hi = static_cast<unsigned short>(words[i] >> 16);
      if constexpr (kDtype == COLIBRI_DEVICE_DTYPE_F16) {
        w[2 * i] = __half2float(__ushort_as_half(lo));
        w[2 * i + 1] = __half2float(__ushort_as_half(hi));
      } else {
        w[2 * i] = __bfloat162float(__ushort_as_bfloat16(lo));
        w[2 * i + 1] = __bfloat162float(__ushort_as_bfloat16(hi));
      }
    }
  }
}

// q8 (docs/format.md, kernels/cpu/kernels.h): a row is cols / group blocks of { float scale;
// int8 q[group] }, group 32 or 64; a stored -128 reads as -127 (the CPU's q8_value).
__device__ __forceinline__ int q8_value(int v) { return v < -127 ? -127 : v; }
__device__ __forceinline__ float q8_block_scale(const unsigned char *block) { return *reinterpret_cast<const float *>(block); }
// The exact int32 sum over one block of weights and activations (both q8 of the same group).
__device__ __forceinline__ int32_t q8_block_dot(const unsigned char *w, const unsigned char *x, uint32_t group) {
  const int32_t *wq = reinterpret_cast<const int32_t *>(w + 4), *xq = reinterpret_cast<const int32_t *>(x + 4);
  int32_t sum = 0;
  for (uint32_t i = 0; i < group / 4; ++i) {
    const int32_t a = wq[i], b = xq[i];
#pragma unroll
    for (int byte = 0; byte < 4; ++byte)
      sum += q8_value(static_cast<int8_t>(a >> (8 * byte))) * q8_value(static_cast<int8_t>(b >> (8 * byte)));
  }
  return sum;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Block-wide sum or max (blockDim.x a multiple of 32, at most 1024); every thread gets it.
template <bool kMax>
__device__ float block_reduce(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float r = lane < warps ? partial[lane] : (kMax ? -INFINITY : 0.0f);
  r = kMax ? warp_max(r) : warp_sum(r);
  return r;
}

inline unsigned row_blocks(uint32_t rows) { return (rows + kRowWarps - 1) / kRowWarps; }

}  // namespace colibri::cuda::detail

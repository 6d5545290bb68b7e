// kernels/cuda/elementwise.cu — embedding gather, RMSNorm rows, SiLU·mul and the MoE merge
// (launch.h states each one's contract).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"

namespace colibri::cuda {
namespace {

using namespace detail;

template <uint32_t kDtype>
__global__ void embed_kernel(const unsigned char *table, uint64_t row_bytes, uint32_t hidden, const StepParams *params,
                             float *x) {
  const uint32_t t = blockIdx.x;
  const unsigned char *row = table + static_cast<uint64_t>(params->token[t]) * row_bytes;
  for (uint32_t i = threadIdx.x; i < hidden; i += blockDim.x) x[static_cast<size_t>(t) * hidden + i] = load_weight<kDtype>(row, i);
}

__global__ void embed_q8_kernel(const unsigned char *table, uint64_t row_bytes, uint32_t group, uint32_t hidden,
                                const StepParams *params, float *x) {
  const uint32_t t = blockIdx.x;
  const unsigned char *row = table + static_cast<uint64_t>(params->token[t]) * row_bytes;
  for (uint32_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    const unsigned char *block = row + static_cast<size_t>(i / group) * (4 + group);
    x[static_cast<size_t>(t) * hidden + i] = q8_block_scale(block) * static_cast<float>(q8_value(static_cast<int8_t>(block[4 + i % group])));
  }
}

// One warp per q8 block (lanes over its values, two each for group 64): the CPU's
// quantize_row_q8 rounding, value for value.
__global__ void quantize_q8_kernel(const float *x, uint32_t cols, uint32_t rows, uint32_t group, unsigned char *out) {
  const uint32_t lane = threadIdx.x % kWarp;
  const uint32_t blocks_per_row = cols / group;
  const size_t block = static_cast<size_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (block >= static_cast<size_t>(blocks_per_row) * rows) return;
  const size_t r = block / blocks_per_row, b = block % blocks_per_row;
  const float *xb = x + r * cols + b * group;
  unsigned char *ob = out + r * q8_row_bytes(cols, group) + b * (4 + group);
  float amax = 0.0f;
  bool non_finite = false;
  for (uint32_t i = lane; i < group; i += kWarp) {
    const float a = fabsf(xb[i]);
    if (!(a <= 3.40282347e38f)) non_finite = true;
    else amax = fmaxf(amax, a);
  }
  amax = warp_max(amax);
  non_finite = __any_sync(kFullMask, non_finite);
  const float scale = non_finite ? __int_as_float(0x7fc00000) : amax / 127.0f;
  if (lane == 0) *reinterpret_cast<float *>(ob) = scale;
  for (uint32_t i = lane; i < group; i += kWarp) {
    const float v = xb[i] / scale;
    float rounded = 0.0f;
    if (v >= -127.5f && v <= 127.5f) {
      rounded = truncf(v);
      const float fraction = v - rounded;
      if (fraction >= 0.5f) rounded += 1.0f;
      if (fraction <= -0.5f) rounded -= 1.0f;
      rounded = fminf(fmaxf(rounded, -127.0f), 127.0f);
    }
    ob[4 + i] = static_cast<unsigned char>(static_cast<int8_t>(rounded));
  }
}

__global__ void rmsnorm_kernel(const float *x, float *out, const float *weight, float eps, uint32_t n) {
  const float *row = x + static_cast<size_t>(blockIdx.x) * n;
  float *o = out + static_cast<size_t>(blockIdx.x) * n;
  float sum = 0.0f;
  for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) sum += row[i] * row[i];
  sum = block_reduce<false>(sum);
  const float inverse_rms = 1.0f / sqrtf(sum / static_cast<float>(n) + eps);
  for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) o[i] = (row[i] * inverse_rms) * weight[i];
}

__global__ void silu_mul_kernel(float *gate, const float *up, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

__global__ void moe_merge_kernel(float *x, const float *y, uint32_t top_k, uint32_t hidden, const float *shared,
                                 const float *shared_logit) {
  const uint32_t t = blockIdx.y;
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= hidden) return;
  float out = 0.0f;
  for (uint32_t s = 0; s < top_k; ++s) out = out + y[(static_cast<size_t>(t) * top_k + s) * hidden + i];
  if (shared) {
    const float g = shared_logit ? 1.0f / (1.0f + expf(-shared_logit[t])) : 1.0f;
    out = out + g * shared[static_cast<size_t>(t) * hidden + i];
  }
  x[static_cast<size_t>(t) * hidden + i] += out;
}

}  // namespace

cudaError_t embed(const unsigned char *table, uint32_t dtype, uint32_t group, uint64_t row_bytes, uint32_t hidden,
                  const StepParams *params, uint32_t tokens, float *x, cudaStream_t stream) {
  switch (dtype) {
    case COLIBRI_DEVICE_DTYPE_Q8: embed_q8_kernel<<<tokens, 256, 0, stream>>>(table, row_bytes, group, hidden, params, x); break;
    case COLIBRI_DEVICE_DTYPE_F16: embed_kernel<COLIBRI_DEVICE_DTYPE_F16><<<tokens, 256, 0, stream>>>(table, row_bytes, hidden, params, x); break;
    case COLIBRI_DEVICE_DTYPE_BF16: embed_kernel<COLIBRI_DEVICE_DTYPE_BF16><<<tokens, 256, 0, stream>>>(table, row_bytes, hidden, params, x); break;
    case COLIBRI_DEVICE_DTYPE_F32: embed_kernel<COLIBRI_DEVICE_DTYPE_F32><<<tokens, 256, 0, stream>>>(table, row_bytes, hidden, params, x); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t quantize_q8(const float *x, uint32_t cols, uint32_t rows, uint32_t group, unsigned char *out,
                        cudaStream_t stream) {
  if (group == 0 || cols % group) return cudaErrorInvalidValue;
  const size_t blocks = static_cast<size_t>(cols / group) * rows;
  constexpr unsigned kWarpsPerBlock = 4;
  quantize_q8_kernel<<<static_cast<unsigned>((blocks + kWarpsPerBlock - 1) / kWarpsPerBlock), kWarpsPerBlock * kWarp, 0,
                       stream>>>(x, cols, rows, group, out);
  return cudaGetLastError();
}

cudaError_t rmsnorm_rows(const float *x, float *out, const float *weight, float eps, uint32_t n, uint32_t rows,
                         cudaStream_t stream) {
  rmsnorm_kernel<<<rows, 256, 0, stream>>>(x, out, weight, eps, n);
  return cudaGetLastError();
}

cudaError_t silu_mul(float *gate, const float *up, size_t n, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
  silu_mul_kernel<<<blocks, 256, 0, stream>>>(gate, up, n);
  return cudaGetLastError();
}

cudaError_t moe_merge(float *x, const float *y, uint32_t top_k, uint32_t hidden, uint32_t tokens, const float *shared,
                      const float *shared_logit, cudaStream_t stream) {
  const dim3 grid((hidden + 255) / 256, tokens);
  moe_merge_kernel<<<grid, 256, 0, stream>>>(x, y, top_k, hidden, shared, shared_logit);
  return cudaGetLastError();
}

}  // namespace colibri::cuda

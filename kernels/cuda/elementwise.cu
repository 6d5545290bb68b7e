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

cudaError_t embed(const unsigned char *table, uint32_t dtype, uint64_t row_bytes, uint32_t hidden,
                  const StepParams *params, uint32_t tokens, float *x, cudaStream_t stream) {
  switch (dtype) {
    case COLIBRI_DEVICE_DTYPE_F16: embed_kernel<COLIBRI_DEVICE_DTYPE_F16><<<tokens, 256, 0, stream>>>(table, row_bytes, hidden, params, x); break;
    case COLIBRI_DEVICE_DTYPE_BF16: embed_kernel<COLIBRI_DEVICE_DTYPE_BF16><<<tokens, 256, 0, stream>>>(table, row_bytes, hidden, params, x); break;
    case COLIBRI_DEVICE_DTYPE_F32: embed_kernel<COLIBRI_DEVICE_DTYPE_F32><<<tokens, 256, 0, stream>>>(table, row_bytes, hidden, params, x); break;
    default: return cudaErrorInvalidValue;
  }
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

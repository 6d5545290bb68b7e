// kernels/cuda/matvec.cu — the few-token matrix-vector products: the dense one (q/k/v, output
// projection, dense and shared FFNs, router, LM head) and the two expert kernels that run every
// active expert of a layer in one launch (fused gate+up+SiLU·mul, then down with the routing
// weight in the epilogue). One warp per output row; each weight row is read once for all the
// chunk's tokens (≤ 8 accumulators per lane), fp32 accumulation, lanes striding the columns so
// that a warp's loads are contiguous (16-byte loads of 8 weights where the width allows).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"

namespace colibri::cuda {
namespace {

using namespace detail;

template <uint32_t kDtype>
__global__ void matvec_kernel(const unsigned char *w, uint64_t row_bytes, uint32_t rows, uint32_t cols, const float *x,
                              uint32_t x_stride, uint32_t tokens, float *y, uint32_t y_stride, const float *bias,
                              int accumulate) {
  const uint32_t lane = threadIdx.x % kWarp;
  const uint32_t row = blockIdx.x * kRowWarps + threadIdx.x / kWarp;
  if (row >= rows) return;
  const unsigned char *wr = w + row * row_bytes;
  float acc[kMaxTokens] = {};
  if (cols % kVector == 0) {
    for (uint32_t c = lane * kVector; c < cols; c += kWarp * kVector) {
      float wv[kVector];
      load_weights8<kDtype>(wr + static_cast<size_t>(c) * kWeightBytes<kDtype>, wv);
#pragma unroll
      for (uint32_t t = 0; t < kMaxTokens; ++t)
        if (t < tokens) {
          const float *xt = x + static_cast<size_t>(t) * x_stride + c;
#pragma unroll
          for (uint32_t j = 0; j < kVector; ++j) acc[t] += wv[j] * xt[j];
        }
    }
  } else {
    for (uint32_t c = lane; c < cols; c += kWarp) {
      const float wv = load_weight<kDtype>(wr, c);
#pragma unroll
      for (uint32_t t = 0; t < kMaxTokens; ++t)
        if (t < tokens) acc[t] += wv * x[static_cast<size_t>(t) * x_stride + c];
    }
  }
#pragma unroll
  for (uint32_t t = 0; t < kMaxTokens; ++t) {
    if (t >= tokens) break;
    float v = warp_sum(acc[t]);
    if (lane == 0) {
      if (bias) v += bias[row];
      float &out = y[static_cast<size_t>(t) * y_stride + row];
      out = accumulate ? out + v : v;
    }
  }
}

// The group's (pair, token) lists live after the ExpertGroups header.
struct GroupView {
  const uint32_t *expert, *offset, *pair;
  __device__ GroupView(const ExpertGroups *g, uint32_t max_pairs) {
    const uint32_t *base = reinterpret_cast<const uint32_t *>(g + 1);
    expert = base;
    offset = base + max_pairs;
    pair = base + 2 * max_pairs + 1;
  }
};

template <uint32_t kDtype>
__global__ void experts_gate_up_kernel(const unsigned char *gate, const unsigned char *up, uint64_t row_bytes,
                                       uint64_t matrix_bytes, uint32_t ffn, uint32_t hidden, uint32_t top_k,
                                       const float *x, const ExpertGroups *groups, uint32_t max_pairs, float *h) {
  const uint32_t j = blockIdx.y;
  if (j >= groups->active_count) return;
  const GroupView g(groups, max_pairs);
  const uint32_t lane = threadIdx.x % kWarp;
  const uint32_t row = blockIdx.x * kRowWarps + threadIdx.x / kWarp;
  if (row >= ffn) return;
  const uint32_t expert = g.expert[j], first = g.offset[j];
  const uint32_t n = min(g.offset[j + 1] - first, kMaxTokens);  // a token picks an expert once
  const unsigned char *gr = gate + expert * matrix_bytes + row * row_bytes;
  const unsigned char *ur = up + expert * matrix_bytes + row * row_bytes;
  uint32_t token[kMaxTokens];
#pragma unroll
  for (uint32_t i = 0; i < kMaxTokens; ++i) token[i] = i < n ? g.pair[first + i] / top_k : 0;
  float ga[kMaxTokens] = {}, ua[kMaxTokens] = {};
  if (hidden % kVector == 0) {
    for (uint32_t c = lane * kVector; c < hidden; c += kWarp * kVector) {
      float gv[kVector], uv[kVector];
      load_weights8<kDtype>(gr + static_cast<size_t>(c) * kWeightBytes<kDtype>, gv);
      load_weights8<kDtype>(ur + static_cast<size_t>(c) * kWeightBytes<kDtype>, uv);
#pragma unroll
      for (uint32_t i = 0; i < kMaxTokens; ++i)
        if (i < n) {
          const float *xt = x + static_cast<size_t>(token[i]) * hidden + c;
#pragma unroll
          for (uint32_t j = 0; j < kVector; ++j) {
            ga[i] += gv[j] * xt[j];
            ua[i] += uv[j] * xt[j];
          }
        }
    }
  } else {
    for (uint32_t c = lane; c < hidden; c += kWarp) {
      const float gv = load_weight<kDtype>(gr, c), uv = load_weight<kDtype>(ur, c);
#pragma unroll
      for (uint32_t i = 0; i < kMaxTokens; ++i)
        if (i < n) {
          const float xv = x[static_cast<size_t>(token[i]) * hidden + c];
          ga[i] += gv * xv;
          ua[i] += uv * xv;
        }
    }
  }
#pragma unroll
  for (uint32_t i = 0; i < kMaxTokens; ++i) {
    if (i >= n) break;
    const float gs = warp_sum(ga[i]), us = warp_sum(ua[i]);
    if (lane == 0) h[static_cast<size_t>(g.pair[first + i]) * ffn + row] = gs / (1.0f + expf(-gs)) * us;
  }
}

template <uint32_t kDtype>
__global__ void experts_down_kernel(const unsigned char *down, uint64_t row_bytes, uint64_t matrix_bytes,
                                    uint32_t hidden, uint32_t ffn, const float *weights, const float *h,
                                    const ExpertGroups *groups, uint32_t max_pairs, float *y) {
  const uint32_t j = blockIdx.y;
  if (j >= groups->active_count) return;
  const GroupView g(groups, max_pairs);
  const uint32_t lane = threadIdx.x % kWarp;
  const uint32_t row = blockIdx.x * kRowWarps + threadIdx.x / kWarp;
  if (row >= hidden) return;
  const uint32_t expert = g.expert[j], first = g.offset[j];
  const uint32_t n = min(g.offset[j + 1] - first, kMaxTokens);
  const unsigned char *dr = down + expert * matrix_bytes + row * row_bytes;
  uint32_t pair[kMaxTokens];
#pragma unroll
  for (uint32_t i = 0; i < kMaxTokens; ++i) pair[i] = i < n ? g.pair[first + i] : 0;
  float acc[kMaxTokens] = {};
  if (ffn % kVector == 0) {
    for (uint32_t c = lane * kVector; c < ffn; c += kWarp * kVector) {
      float dv[kVector];
      load_weights8<kDtype>(dr + static_cast<size_t>(c) * kWeightBytes<kDtype>, dv);
#pragma unroll
      for (uint32_t i = 0; i < kMaxTokens; ++i)
        if (i < n) {
          const float *ht = h + static_cast<size_t>(pair[i]) * ffn + c;
#pragma unroll
          for (uint32_t j = 0; j < kVector; ++j) acc[i] += dv[j] * ht[j];
        }
    }
  } else {
    for (uint32_t c = lane; c < ffn; c += kWarp) {
      const float dv = load_weight<kDtype>(dr, c);
#pragma unroll
      for (uint32_t i = 0; i < kMaxTokens; ++i)
        if (i < n) acc[i] += dv * h[static_cast<size_t>(pair[i]) * ffn + c];
    }
  }
#pragma unroll
  for (uint32_t i = 0; i < kMaxTokens; ++i) {
    if (i >= n) break;
    const float v = warp_sum(acc[i]);
    if (lane == 0) y[static_cast<size_t>(pair[i]) * hidden + row] = weights[pair[i]] * v;
  }
}

// q8 weights against q8 activations: lanes over the row's blocks, one fp32 multiply-add per
// block and token ((weight scale · activation scale) · exact int32 block sum); the CPU sums the
// same products in 16 fp32 lanes (kernels/cpu/kernels.h, the lane rule), so the two agree
// within rounding, not bitwise.
__global__ void matvec_q8_kernel(const unsigned char *w, uint32_t group, uint64_t row_bytes, uint32_t rows,
                                 uint32_t cols, const unsigned char *x_q8, uint32_t tokens, float *y, uint32_t y_stride,
                                 const float *bias, int accumulate) {
  const uint32_t lane = threadIdx.x % kWarp;
  const uint32_t row = blockIdx.x * kRowWarps + threadIdx.x / kWarp;
  if (row >= rows) return;
  const unsigned char *wr = w + row * row_bytes;
  const uint32_t blocks = cols / group, block_bytes = 4 + group;
  const size_t x_row = q8_row_bytes(cols, group);
  float acc[kMaxTokens] = {};
  for (uint32_t b = lane; b < blocks; b += kWarp) {
    const unsigned char *wb = wr + static_cast<size_t>(b) * block_bytes;
    const float ws = q8_block_scale(wb);
#pragma unroll
    for (uint32_t t = 0; t < kMaxTokens; ++t)
      if (t < tokens) {
        const unsigned char *xb = x_q8 + t * x_row + static_cast<size_t>(b) * block_bytes;
        acc[t] = acc[t] + (ws * q8_block_scale(xb)) * static_cast<float>(q8_block_dot(wb, xb, group));
      }
  }
#pragma unroll
  for (uint32_t t = 0; t < kMaxTokens; ++t) {
    if (t >= tokens) break;
    float v = warp_sum(acc[t]);
    if (lane == 0) {
      if (bias) v += bias[row];
      float &out = y[static_cast<size_t>(t) * y_stride + row];
      out = accumulate ? out + v : v;
    }
  }
}

__global__ void experts_gate_up_q8_kernel(const unsigned char *gate, const unsigned char *up, uint32_t group,
                                          uint64_t row_bytes, uint64_t matrix_bytes, uint32_t ffn, uint32_t hidden,
                                          uint32_t top_k, const unsigned char *x_q8, const ExpertGroups *groups,
                                          uint32_t max_pairs, float *h) {
  const uint32_t j = blockIdx.y;
  if (j >= groups->active_count) return;
  const GroupView g(groups, max_pairs);
  const uint32_t lane = threadIdx.x % kWarp;
  const uint32_t row = blockIdx.x * kRowWarps + threadIdx.x / kWarp;
  if (row >= ffn) return;
  const uint32_t expert = g.expert[j], first = g.offset[j];
  const uint32_t n = min(g.offset[j + 1] - first, kMaxTokens);
  const unsigned char *gr = gate + expert * matrix_bytes + row * row_bytes;
  const unsigned char *ur = up + expert * matrix_bytes + row * row_bytes;
  const uint32_t blocks = hidden / group, block_bytes = 4 + group;
  const size_t x_row = q8_row_bytes(hidden, group);
  float ga[kMaxTokens] = {}, ua[kMaxTokens] = {};
  for (uint32_t b = lane; b < blocks; b += kWarp) {
    const unsigned char *gb = gr + static_cast<size_t>(b) * block_bytes, *ub = ur + static_cast<size_t>(b) * block_bytes;
    const float gs = q8_block_scale(gb), us = q8_block_scale(ub);
#pragma unroll
    for (uint32_t i = 0; i < kMaxTokens; ++i)
      if (i < n) {
        const unsigned char *xb = x_q8 + (g.pair[first + i] / top_k) * x_row + static_cast<size_t>(b) * block_bytes;
        const float xs = q8_block_scale(xb);
        ga[i] = ga[i] + (gs * xs) * static_cast<float>(q8_block_dot(gb, xb, group));
        ua[i] = ua[i] + (us * xs) * static_cast<float>(q8_block_dot(ub, xb, group));
      }
  }
#pragma unroll
  for (uint32_t i = 0; i < kMaxTokens; ++i) {
    if (i >= n) break;
    const float gsum = warp_sum(ga[i]), usum = warp_sum(ua[i]);
    if (lane == 0) h[static_cast<size_t>(g.pair[first + i]) * ffn + row] = gsum / (1.0f + expf(-gsum)) * usum;
  }
}

__global__ void experts_down_q8_kernel(const unsigned char *down, uint32_t group, uint64_t row_bytes,
                                       uint64_t matrix_bytes, uint32_t hidden, uint32_t ffn, const float *weights,
                                       const unsigned char *h_q8, const ExpertGroups *groups, uint32_t max_pairs,
                                       float *y) {
  const uint32_t j = blockIdx.y;
  if (j >= groups->active_count) return;
  const GroupView g(groups, max_pairs);
  const uint32_t lane = threadIdx.x % kWarp;
  const uint32_t row = blockIdx.x * kRowWarps + threadIdx.x / kWarp;
  if (row >= hidden) return;
  const uint32_t expert = g.expert[j], first = g.offset[j];
  const uint32_t n = min(g.offset[j + 1] - first, kMaxTokens);
  const unsigned char *dr = down + expert * matrix_bytes + row * row_bytes;
  const uint32_t blocks = ffn / group, block_bytes = 4 + group;
  const size_t h_row = q8_row_bytes(ffn, group);
  float acc[kMaxTokens] = {};
  for (uint32_t b = lane; b < blocks; b += kWarp) {
    const unsigned char *db = dr + static_cast<size_t>(b) * block_bytes;
    const float ds = q8_block_scale(db);
#pragma unroll
    for (uint32_t i = 0; i < kMaxTokens; ++i)
      if (i < n) {
        const unsigned char *hb = h_q8 + g.pair[first + i] * h_row + static_cast<size_t>(b) * block_bytes;
        acc[i] = acc[i] + (ds * q8_block_scale(hb)) * static_cast<float>(q8_block_dot(db, hb, group));
      }
  }
#pragma unroll
  for (uint32_t i = 0; i < kMaxTokens; ++i) {
    if (i >= n) break;
    const float v = warp_sum(acc[i]);
    const uint32_t pair = g.pair[first + i];
    if (lane == 0) y[static_cast<size_t>(pair) * hidden + row] = weights[pair] * v;
  }
}

}  // namespace

cudaError_t matvec(const unsigned char *w, uint32_t dtype, uint32_t group, uint64_t row_bytes, uint32_t rows,
                   uint32_t cols, const float *x, const unsigned char *x_q8, uint32_t x_stride, uint32_t tokens, float *y,
                   uint32_t y_stride, const float *bias, int accumulate, cudaStream_t stream) {
  if (tokens == 0 || tokens > kMaxTokens) return cudaErrorInvalidValue;
  const unsigned blocks = row_blocks(rows), threads = kRowWarps * kWarp;
  switch (dtype) {
    case COLIBRI_DEVICE_DTYPE_Q8:
      if (!x_q8 || group == 0 || cols % group) return cudaErrorInvalidValue;
      matvec_q8_kernel<<<blocks, threads, 0, stream>>>(w, group, row_bytes, rows, cols, x_q8, tokens, y, y_stride, bias, accumulate);
      break;
    case COLIBRI_DEVICE_DTYPE_F16:
      matvec_kernel<COLIBRI_DEVICE_DTYPE_F16><<<blocks, threads, 0, stream>>>(w, row_bytes, rows, cols, x, x_stride, tokens, y, y_stride, bias, accumulate);
      break;
    case COLIBRI_DEVICE_DTYPE_BF16:
      matvec_kernel<COLIBRI_DEVICE_DTYPE_BF16><<<blocks, threads, 0, stream>>>(w, row_bytes, rows, cols, x, x_stride, tokens, y, y_stride, bias, accumulate);
      break;
    case COLIBRI_DEVICE_DTYPE_F32:
      matvec_kernel<COLIBRI_DEVICE_DTYPE_F32><<<blocks, threads, 0, stream>>>(w, row_bytes, rows, cols, x, x_stride, tokens, y, y_stride, bias, accumulate);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t experts_gate_up(const unsigned char *gate, const unsigned char *up, uint32_t dtype, uint32_t group,
                            uint64_t row_bytes, uint64_t matrix_bytes, uint32_t ffn, uint32_t hidden, uint32_t top_k,
                            const float *x, const unsigned char *x_q8, const ExpertGroups *groups, uint32_t max_pairs,
                            uint32_t max_groups, float *h, cudaStream_t stream) {
  const dim3 grid(row_blocks(ffn), max_groups);
  const unsigned threads = kRowWarps * kWarp;
  switch (dtype) {
    case COLIBRI_DEVICE_DTYPE_Q8:
      if (!x_q8 || group == 0 || hidden % group) return cudaErrorInvalidValue;
      experts_gate_up_q8_kernel<<<grid, threads, 0, stream>>>(gate, up, group, row_bytes, matrix_bytes, ffn, hidden, top_k, x_q8, groups, max_pairs, h);
      break;
    case COLIBRI_DEVICE_DTYPE_F16:
      experts_gate_up_kernel<COLIBRI_DEVICE_DTYPE_F16><<<grid, threads, 0, stream>>>(gate, up, row_bytes, matrix_bytes, ffn, hidden, top_k, x, groups, max_pairs, h);
      break;
    case COLIBRI_DEVICE_DTYPE_BF16:
      experts_gate_up_kernel<COLIBRI_DEVICE_DTYPE_BF16><<<grid, threads, 0, stream>>>(gate, up, row_bytes, matrix_bytes, ffn, hidden, top_k, x, groups, max_pairs, h);
      break;
    case COLIBRI_DEVICE_DTYPE_F32:
      experts_gate_up_kernel<COLIBRI_DEVICE_DTYPE_F32><<<grid, threads, 0, stream>>>(gate, up, row_bytes, matrix_bytes, ffn, hidden, top_k, x, groups, max_pairs, h);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t experts_down(const unsigned char *down, uint32_t dtype, uint32_t group, uint64_t row_bytes,
                         uint64_t matrix_bytes, uint32_t hidden, uint32_t ffn, const float *weights, const float *h,
                         const unsigned char *h_q8, const ExpertGroups *groups, uint32_t max_pairs, uint32_t max_groups,
                         float *y, cudaStream_t stream) {
  const dim3 grid(row_blocks(hidden), max_groups);
  const unsigned threads = kRowWarps * kWarp;
  switch (dtype) {
    case COLIBRI_DEVICE_DTYPE_Q8:
      if (!h_q8 || group == 0 || ffn % group) return cudaErrorInvalidValue;
      experts_down_q8_kernel<<<grid, threads, 0, stream>>>(down, group, row_bytes, matrix_bytes, hidden, ffn, weights, h_q8, groups, max_pairs, y);
      break;
    case COLIBRI_DEVICE_DTYPE_F16:
      experts_down_kernel<COLIBRI_DEVICE_DTYPE_F16><<<grid, threads, 0, stream>>>(down, row_bytes, matrix_bytes, hidden, ffn, weights, h, groups, max_pairs, y);
      break;
    case COLIBRI_DEVICE_DTYPE_BF16:
      experts_down_kernel<COLIBRI_DEVICE_DTYPE_BF16><<<grid, threads, 0, stream>>>(down, row_bytes, matrix_bytes, hidden, ffn, weights, h, groups, max_pairs, y);
      break;
    case COLIBRI_DEVICE_DTYPE_F32:
      experts_down_kernel<COLIBRI_DEVICE_DTYPE_F32><<<grid, threads, 0, stream>>>(down, row_bytes, matrix_bytes, hidden, ffn, weights, h, groups, max_pairs, y);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace colibri::cuda

// tests/unit/kernels_test_util.h — shared helpers for the kernel tests: the ISA tables to
// test, random matrices stored in each dtype, and the double-precision reference.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"

namespace colibri::kernels::test {

struct NamedTable {
  std::string name;
  const KernelTable *table;
};

// Every table this CPU can run: scalar, avx2, avx512 and avx512+vnni where supported.
inline std::vector<NamedTable> available_tables() {
  std::vector<NamedTable> tables{{"scalar", &detail::scalar_table()}};
  if (kernel_table(Isa::Avx2).isa == Isa::Avx2) tables.push_back({"avx2", &detail::avx2_table()});
  if (kernel_table(Isa::Avx512).isa == Isa::Avx512) {
    tables.push_back({"avx512", &detail::avx512_table()});
    if (detail::cpu_supports_avx512_vnni())
      tables.push_back({"avx512_vnni", &detail::avx512_vnni_table()});
  }
  return tables;
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float &x : v) x = dist(rng);
  return v;
}

// A [rows, cols] matrix stored in `dtype`, with its exact (dequantised) values in fp32.
struct Matrix {
  DType dtype;
  uint32_t group_size;
  size_t rows, cols;
  std::vector<unsigned char> bytes;
  std::vector<float> values;  // what the stored bytes mean, row-major
  const void *data() const { return bytes.data(); }
};

// One row of a version-2 block dtype from random stored bytes (every code, scales of varied
// magnitude), with the values those bytes mean per docs/format.md, computed independently of
// the kernels: Q4 scale·(code − 8), Q8F16 scale·max(q, −127), MXFP4 2^(e − 127)·e2m1(code).
inline void fill_random_blocks(DType dtype, uint32_t group_size, size_t cols, uint32_t seed, unsigned char *dst,
                               float *val) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> scale_dist(0.0f, 0.05f);
  static const double kE2m1[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  auto nib = [](const unsigned char *c, size_t i) { return i < 16 ? c[i] & 0x0F : c[i - 16] >> 4; };
  if (dtype == DType::MXFP4) {
    for (size_t b = 0; b < cols / 32; ++b) {
      unsigned char *blk = dst + b * kMxfp4BlockBytes;
      blk[0] = static_cast<unsigned char>(120 + byte(rng) % 12);  // 2^-7 .. 2^4
      for (int j = 0; j < 16; ++j) blk[1 + j] = static_cast<unsigned char>(byte(rng));
      for (size_t i = 0; i < 32; ++i) {
        const int code = nib(blk + 1, i);
        const double v = std::ldexp(kE2m1[code & 7], blk[0] - 127);
        val[b * 32 + i] = static_cast<float>(code & 8 ? -v : v);
      }
    }
    return;
  }
  const size_t g = dtype == DType::Q4 ? group_size : 32;
  const size_t block = dtype == DType::Q4 ? q4_block_bytes(group_size) : kQ8F16BlockBytes;
  for (size_t b = 0; b < cols / g; ++b) {
    unsigned char *blk = dst + b * block;
    const uint16_t h = f32_to_f16_value(scale_dist(rng));
    std::memcpy(blk, &h, 2);
    const double scale = f16_to_f32_value(h);
    for (size_t j = 2; j < block; ++j) blk[j] = static_cast<unsigned char>(byte(rng));
    for (size_t i = 0; i < g; ++i) {
      double q;
      if (dtype == DType::Q4) {
        q = nib(blk + 2 + (i / 32) * 16, i % 32) - 8;
      } else {
        const int raw = static_cast<int8_t>(blk[2 + i]);
        q = raw < -127 ? -127 : raw;
      }
      val[b * g + i] = static_cast<float>(scale * q);
    }
  }
}

inline Matrix make_matrix(DType dtype, uint32_t group_size, size_t rows, size_t cols, uint32_t seed) {
  Matrix m{dtype, group_size, rows, cols, {}, {}};
  const std::vector<float> source = random_floats(rows * cols, seed);
  const size_t row_size = row_bytes(dtype, group_size, cols);
  m.bytes.assign(rows * row_size, 0);  // exact size: ASan catches any over-read
  m.values.resize(rows * cols);
  const KernelTable &scalar = detail::scalar_table();
  for (size_t r = 0; r < rows; ++r) {
    const float *src = source.data() + r * cols;
    unsigned char *dst = m.bytes.data() + r * row_size;
    float *val = m.values.data() + r * cols;
    switch (dtype) {
      case DType::F32:
        std::memcpy(dst, src, cols * 4);
        std::memcpy(val, src, cols * 4);
        break;
      case DType::F16:
        for (size_t c = 0; c < cols; ++c) {
          const uint16_t h = f32_to_f16_value(src[c]);
          std::memcpy(dst + 2 * c, &h, 2);
          val[c] = f16_to_f32_value(h);
        }
        break;
      case DType::BF16:
        for (size_t c = 0; c < cols; ++c) {
          const uint16_t h = f32_to_bf16_value(src[c]);
          std::memcpy(dst + 2 * c, &h, 2);
          val[c] = bf16_to_f32_value(h);
        }
        break;
      case DType::Q8: {
        scalar.quantize_row_q8(src, cols, group_size, dst);
        const size_t block_bytes = q8_block_bytes(group_size);
        for (size_t b = 0; b < cols / group_size; ++b) {
          float s;
          std::memcpy(&s, dst + b * block_bytes, 4);
          for (size_t i = 0; i < group_size; ++i)
            val[b * group_size + i] = s * static_cast<float>(static_cast<int8_t>(dst[b * block_bytes + 4 + i]));
        }
        break;
      }
      case DType::Q4:
      case DType::Q8F16:
      case DType::MXFP4:
        fill_random_blocks(dtype, group_size, cols, seed * 7919u + static_cast<uint32_t>(r), dst, val);
        break;
    }
  }
  return m;
}

// The activation values a q8 kernel actually multiplies: x quantised then dequantised.
inline std::vector<float> q8_effective_activations(const std::vector<float> &x, size_t cols, uint32_t group_size) {
  std::vector<float> out(x.size());
  const size_t rows = x.size() / cols;
  std::vector<unsigned char> q(row_bytes(DType::Q8, group_size, cols));
  const size_t block_bytes = q8_block_bytes(group_size);
  for (size_t t = 0; t < rows; ++t) {
    detail::scalar_table().quantize_row_q8(x.data() + t * cols, cols, group_size, q.data());
    for (size_t b = 0; b < cols / group_size; ++b) {
      float s;
      std::memcpy(&s, q.data() + b * block_bytes, 4);
      for (size_t i = 0; i < group_size; ++i)
        out[t * cols + b * group_size + i] = s * static_cast<float>(static_cast<int8_t>(q[b * block_bytes + 4 + i]));
    }
  }
  return out;
}

struct Reference {
  std::vector<double> y;          // [tokens, rows]
  std::vector<double> magnitude;  // Σ|w·x| per output, the scale of the rounding error
};

inline Reference reference_matmul(const Matrix &w, const std::vector<float> &x, size_t tokens) {
  Reference ref{std::vector<double>(tokens * w.rows), std::vector<double>(tokens * w.rows)};
  for (size_t t = 0; t < tokens; ++t)
    for (size_t r = 0; r < w.rows; ++r) {
      double sum = 0, mag = 0;
      for (size_t c = 0; c < w.cols; ++c) {
        const double p = double(w.values[r * w.cols + c]) * double(x[t * w.cols + c]);
        sum += p;
        mag += p < 0 ? -p : p;
      }
      ref.y[t * w.rows + r] = sum;
      ref.magnitude[t * w.rows + r] = mag;
    }
  return ref;
}

inline bool bitwise_equal(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace colibri::kernels::test

// tests/unit/kernels_matmul_test.cpp — the weight-row matmuls: accuracy against a double
// reference for every dtype × ISA, and the determinism contract of kernels/cpu/kernels.h
// (row split, token count and matmul-vs-gemm never change a bit; q8 equal across ISAs).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels_test_util.h"

using namespace colibri::kernels;
using namespace colibri::kernels::test;

namespace {

struct Case {
  DType dtype;
  uint32_t group_size;
  size_t cols;
};

// cols: lane multiples, odd tails (float dtypes) and group multiples (q8).
std::vector<Case> cases() {
  std::vector<Case> out;
  for (DType d : {DType::F32, DType::F16, DType::BF16})
    for (size_t cols : {1, 5, 16, 17, 33, 100, 256, 1056})
      out.push_back({d, 0, cols});
  for (uint32_t gs : {32u, 64u})
    for (size_t cols : {size_t(gs), size_t(3 * gs), size_t(1024 + gs), size_t(2816)})
      out.push_back({DType::Q8, gs, cols});
  for (uint32_t gs : {32u, 64u, 128u})
    for (size_t cols : {size_t(gs), size_t(3 * gs), size_t(1024 + gs), size_t(2816 / gs * gs)})
      out.push_back({DType::Q4, gs, cols});
  for (DType d : {DType::Q8F16, DType::MXFP4})
    for (size_t cols : {size_t(32), size_t(96), size_t(1056), size_t(2816)})
      out.push_back({d, 32, cols});
  return out;
}

std::string describe(const std::string &isa, const Case &c, size_t rows, size_t tokens) {
  return isa + " " + dtype_name(c.dtype) + " gs=" + std::to_string(c.group_size) +
         " rows=" + std::to_string(rows) + " cols=" + std::to_string(c.cols) +
         " tokens=" + std::to_string(tokens);
}

using MatmulFn = colibri::kernels::MatmulFn;

std::vector<float> run(MatmulFn fn, const Matrix &w, const std::vector<float> &x, size_t tokens) {
  std::vector<float> y(tokens * w.rows, -12345.0f);
  fn(w.data(), w.dtype, w.group_size, w.cols, 0, w.rows, x.data(), tokens, y.data(), w.rows);
  return y;
}

}  // namespace

TEST_CASE("matmul_rows and gemm_rows match a double-precision reference for every dtype and ISA",
          "[kernels][matmul]") {
  // Tolerance: |y - ref| <= 1e-5 · Σ|w·x| + 1e-30 (fp32 accumulation of cols products).
  double worst = 0;
  for (const NamedTable &isa : available_tables()) {
    for (const Case &c : cases()) {
      for (size_t rows : {1, 7, 13, 37}) {
        for (size_t tokens : {1, 2, 3, 5, 8, 11}) {
          INFO(describe(isa.name, c, rows, tokens));
          const Matrix w = make_matrix(c.dtype, c.group_size, rows, c.cols, uint32_t(rows * 131 + c.cols));
          const std::vector<float> x = random_floats(tokens * c.cols, uint32_t(tokens * 7 + c.cols));
          const std::vector<float> x_effective =
              takes_q8_activations(c.dtype)
                  ? q8_effective_activations(x, c.cols, activation_group_size(c.dtype, c.group_size))
                  : x;
          const Reference ref = reference_matmul(w, x_effective, tokens);
          for (MatmulFn fn : {isa.table->matmul_rows, isa.table->gemm_rows}) {
            const std::vector<float> y = run(fn, w, x, tokens);
            for (size_t i = 0; i < y.size(); ++i) {
              const double err = std::fabs(double(y[i]) - ref.y[i]);
              const double bound = 1e-5 * ref.magnitude[i] + 1e-30;
              if (ref.magnitude[i] > 0) worst = std::max(worst, err / ref.magnitude[i]);
              REQUIRE(err <= bound);
            }
          }
        }
      }
    }
  }
  WARN("worst |y - ref| / sum|w*x| over all cases: " << worst);
}

TEST_CASE("gemm_rows is bitwise equal to matmul_rows, whatever the token count", "[kernels][determinism]") {
  for (const NamedTable &isa : available_tables()) {
    for (const Case &c : cases()) {
      const size_t rows = 29, tokens = 37;
      INFO(describe(isa.name, c, rows, tokens));
      const Matrix w = make_matrix(c.dtype, c.group_size, rows, c.cols, 99);
      const std::vector<float> x = random_floats(tokens * c.cols, 5);
      const std::vector<float> gemm_all = run(isa.table->gemm_rows, w, x, tokens);
      const std::vector<float> matmul_all = run(isa.table->matmul_rows, w, x, tokens);
      REQUIRE(bitwise_equal(gemm_all, matmul_all));
      // Every token alone, and in batches of 1..8 tokens, gives the same bits.
      for (size_t batch = 1; batch <= 8; ++batch) {
        for (size_t t0 = 0; t0 < tokens; t0 += batch) {
          const size_t n = std::min(batch, tokens - t0);
          const std::vector<float> xs(x.begin() + t0 * c.cols, x.begin() + (t0 + n) * c.cols);
          for (MatmulFn fn : {isa.table->matmul_rows, isa.table->gemm_rows}) {
            const std::vector<float> y = run(fn, w, xs, n);
            REQUIRE(std::memcmp(y.data(), gemm_all.data() + t0 * rows, y.size() * sizeof(float)) == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("matmul_rows over more than 8 tokens and several L2 row panels gives the bits of one token at a time",
          "[kernels][determinism]") {
  // 16 KiB (f32), 8 KiB (f16) or ~4.3 KiB (q8/q4) rows: a 256 KiB decode panel holds 16, 24
  // or 48 of them, so 101 rows span several panels (the last one partial) and every count
  // of 9..21 tokens runs chunks of 8 and a rest over each panel.
  const Case panel_cases[] = {{DType::F32, 0, 4096}, {DType::F16, 0, 4096}, {DType::BF16, 0, 4093},
                              {DType::Q8, 32, 4096}, {DType::Q4, 32, 4096}};
  for (const NamedTable &isa : available_tables()) {
    for (const Case &c : panel_cases) {
      const size_t rows = 101, max_tokens = 21;
      const Matrix w = make_matrix(c.dtype, c.group_size, rows, c.cols, 41);
      const std::vector<float> x = random_floats(max_tokens * c.cols, 43);
      std::vector<float> alone(max_tokens * rows);
      for (size_t t = 0; t < max_tokens; ++t) {
        const std::vector<float> xt(x.begin() + t * c.cols, x.begin() + (t + 1) * c.cols);
        const std::vector<float> y = run(isa.table->matmul_rows, w, xt, 1);
        std::copy(y.begin(), y.end(), alone.begin() + t * rows);
      }
      for (size_t tokens : {9, 12, 16, 17, 21}) {
        INFO(describe(isa.name, c, rows, tokens));
        const std::vector<float> xs(x.begin(), x.begin() + tokens * c.cols);
        const std::vector<float> y = run(isa.table->matmul_rows, w, xs, tokens);
        REQUIRE(std::memcmp(y.data(), alone.data(), y.size() * sizeof(float)) == 0);
        REQUIRE(bitwise_equal(run(isa.table->gemm_rows, w, xs, tokens), y));
      }
    }
  }
}

TEST_CASE("results do not depend on how rows are split between calls", "[kernels][determinism]") {
  std::mt19937 rng(7);
  for (const NamedTable &isa : available_tables()) {
    for (const Case &c : cases()) {
      const size_t rows = 53, tokens = 6;
      INFO(describe(isa.name, c, rows, tokens));
      const Matrix w = make_matrix(c.dtype, c.group_size, rows, c.cols, 3);
      const std::vector<float> x = random_floats(tokens * c.cols, 4);
      for (MatmulFn fn : {isa.table->matmul_rows, isa.table->gemm_rows}) {
        const std::vector<float> whole = run(fn, w, x, tokens);
        for (int trial = 0; trial < 4; ++trial) {
          std::vector<float> pieces(tokens * rows, -1.0f);
          for (size_t r0 = 0; r0 < rows;) {
            const size_t r1 = std::min(rows, r0 + 1 + rng() % 11);
            fn(w.data(), w.dtype, w.group_size, w.cols, r0, r1, x.data(), tokens, pieces.data(), rows);
            r0 = r1;
          }
          REQUIRE(bitwise_equal(whole, pieces));
        }
      }
    }
  }
}

TEST_CASE("a call writes only the outputs of its row range", "[kernels][matmul]") {
  for (const NamedTable &isa : available_tables()) {
    for (const Case &c : cases()) {
      const Matrix w = make_matrix(c.dtype, c.group_size, 20, c.cols, 11);
      const std::vector<float> x = random_floats(3 * c.cols, 12);
      for (MatmulFn fn : {isa.table->matmul_rows, isa.table->gemm_rows}) {
        std::vector<float> y(3 * 24, 777.0f);  // y_stride 24 > rows
        fn(w.data(), w.dtype, w.group_size, w.cols, 5, 17, x.data(), 3, y.data(), 24);
        for (size_t t = 0; t < 3; ++t)
          for (size_t r = 0; r < 24; ++r) {
            const bool inside = r >= 5 && r < 17;
            REQUIRE((y[t * 24 + r] == 777.0f) == !inside);
          }
      }
    }
  }
}

TEST_CASE("q8 matmul is bitwise identical across ISAs and equals quantise + the q8 entry",
          "[kernels][q8][determinism]") {
  // 19 rows: a full one-token tile plus a remainder on every ISA; 1 token takes the one-token
  // tile (activation magnitudes on the unsigned side), 13 tokens the several-token tiles.
  for (uint32_t gs : {32u, 64u}) {
    for (size_t cols : {size_t(gs), size_t(1024), size_t(2816)}) {
      for (size_t tokens : {size_t(1), size_t(13)}) {
        const size_t rows = 19;
        const Matrix w = make_matrix(DType::Q8, gs, rows, cols, 21);
        const std::vector<float> x = random_floats(tokens * cols, 22, 3.0f);
        const std::vector<float> expected = run(detail::scalar_table().matmul_rows, w, x, tokens);
        for (const NamedTable &isa : available_tables()) {
          INFO(isa.name << " gs=" << gs << " cols=" << cols << " tokens=" << tokens);
          REQUIRE(bitwise_equal(run(isa.table->matmul_rows, w, x, tokens), expected));
          REQUIRE(bitwise_equal(run(isa.table->gemm_rows, w, x, tokens), expected));
          // Pre-quantised activations (one quantisation shared by several matrices).
          const size_t xrow = row_bytes(DType::Q8, gs, cols);
          std::vector<unsigned char> xq(tokens * xrow);
          for (size_t t = 0; t < tokens; ++t) isa.table->quantize_row_q8(x.data() + t * cols, cols, gs, xq.data() + t * xrow);
          for (MatmulQ8Fn fn : {isa.table->matmul_rows_q8, isa.table->gemm_rows_q8}) {
            std::vector<float> y(tokens * rows);
            fn(w.data(), DType::Q8, gs, cols, 0, rows, xq.data(), tokens, y.data(), rows);
            REQUIRE(bitwise_equal(y, expected));
          }
        }
      }
    }
  }
}

TEST_CASE("q4, q8f16 and mxfp4 matmuls are bitwise identical across ISAs, paths and the pre-quantised entry",
          "[kernels][q4][q8f16][mxfp4]") {
  // 19 rows: a full one-token tile plus a remainder on every ISA; 1 token takes the one-token
  // tile (activation magnitudes on the unsigned side), 13 tokens the several-token tiles.
  for (const Case &c : cases()) {
    if (c.dtype != DType::Q4 && c.dtype != DType::Q8F16 && c.dtype != DType::MXFP4) continue;
    for (size_t tokens : {size_t(1), size_t(2), size_t(13)}) {
      const size_t rows = 19;
      const Matrix w = make_matrix(c.dtype, c.group_size, rows, c.cols, 41);
      const std::vector<float> x = random_floats(tokens * c.cols, 42, 3.0f);
      const std::vector<float> expected = run(detail::scalar_table().matmul_rows, w, x, tokens);
      const uint32_t act = activation_group_size(c.dtype, c.group_size);
      REQUIRE(act == 32);
      const size_t xrow = row_bytes(DType::Q8, act, c.cols);
      for (const NamedTable &isa : available_tables()) {
        INFO(describe(isa.name, c, rows, tokens));
        REQUIRE(bitwise_equal(run(isa.table->matmul_rows, w, x, tokens), expected));
        REQUIRE(bitwise_equal(run(isa.table->gemm_rows, w, x, tokens), expected));
        std::vector<unsigned char> xq(tokens * xrow);
        for (size_t t = 0; t < tokens; ++t) isa.table->quantize_row_q8(x.data() + t * c.cols, c.cols, act, xq.data() + t * xrow);
        for (MatmulQ8Fn fn : {isa.table->matmul_rows_q8, isa.table->gemm_rows_q8}) {
          std::vector<float> y(tokens * rows);
          fn(w.data(), c.dtype, c.group_size, c.cols, 0, rows, xq.data(), tokens, y.data(), rows);
          REQUIRE(bitwise_equal(y, expected));
        }
      }
    }
  }
}

TEST_CASE("q4 and mxfp4 rows longer than the stack buffer take the chunked path with the same bits",
          "[kernels][q4][mxfp4]") {
  // 65536 cols: 73728 bytes per quantised activation row (blocks of 32), more than 64 KiB.
  const size_t rows = 3, tokens = 2, cols = 65536;
  for (const auto &[dtype, group] : {std::pair{DType::Q4, 128u}, std::pair{DType::MXFP4, 32u}}) {
    const Matrix w = make_matrix(dtype, group, rows, cols, 51);
    const std::vector<float> x = random_floats(tokens * cols, 52);
    const size_t xrow = row_bytes(DType::Q8, 32, cols);
    std::vector<unsigned char> xq(tokens * xrow);
    for (size_t t = 0; t < tokens; ++t) detail::scalar_table().quantize_row_q8(x.data() + t * cols, cols, 32, xq.data() + t * xrow);
    for (const NamedTable &isa : available_tables()) {
      INFO(isa.name << " " << dtype_name(dtype));
      std::vector<float> expected(tokens * rows);
      isa.table->matmul_rows_q8(w.data(), dtype, group, cols, 0, rows, xq.data(), tokens, expected.data(), rows);
      REQUIRE(bitwise_equal(run(isa.table->matmul_rows, w, x, tokens), expected));
      REQUIRE(bitwise_equal(run(isa.table->gemm_rows, w, x, tokens), expected));
    }
  }
}

TEST_CASE("a stored q8 weight of -128 reads as -127 on every ISA, path and token count", "[kernels][q8]") {
  // The quantiser never writes -128 (docs/format.md), but an image may hold one: every
  // reader takes it as -127, so the one-token tile (activation magnitudes on the unsigned
  // side of the int8 multiply) and the others (weight magnitudes there) agree bit for bit.
  for (uint32_t gs : {32u, 64u}) {
    const size_t rows = 21, cols = 4 * gs;
    Matrix w = make_matrix(DType::Q8, gs, rows, cols, 51);
    Matrix clamped = w;
    const size_t block = q8_block_bytes(gs), row_size = row_bytes(DType::Q8, gs, cols);
    size_t planted = 0;
    for (size_t r = 0; r < rows; ++r)
      for (size_t b = 0; b < cols / gs; ++b)
        for (size_t i = (r + b) % 5; i < gs; i += 5) {  // every fifth weight, both signs of x meet it
          w.bytes[r * row_size + b * block + 4 + i] = 0x80;  // -128
          clamped.bytes[r * row_size + b * block + 4 + i] = 0x81;  // -127
          ++planted;
        }
    REQUIRE(planted > rows * cols / 6);
    for (size_t tokens : {1, 2, 7, 9}) {
      const std::vector<float> x = random_floats(tokens * cols, 52 + static_cast<uint32_t>(tokens), 3.0f);
      const std::vector<float> expected = run(detail::scalar_table().matmul_rows, clamped, x, tokens);
      if (tokens == 1) {
        // Taken literally, -128 gives other results than the rule's: the test can tell them apart.
        std::vector<unsigned char> xq(row_bytes(DType::Q8, gs, cols));
        detail::scalar_table().quantize_row_q8(x.data(), cols, gs, xq.data());
        // The lane rule of kernels.h computed here from its definition, the stored bytes read
        // literally: on the clamped copy it gives the scalar table's bits (the documented rule
        // is the implemented one); on the -128 bytes it gives other results.
        auto lane_rule = [&](const Matrix &m, size_t r) {
          float lanes[16] = {};
          for (size_t b = 0; b < cols / gs; ++b) {
            const unsigned char *wb = m.bytes.data() + r * row_size + b * block, *xb = xq.data() + b * block;
            float dw, dx;
            std::memcpy(&dw, wb, 4);
            std::memcpy(&dx, xb, 4);
            for (size_t i0 = 0; i0 < gs; i0 += 4) {
              int32_t isum = 0;
              for (size_t i = i0; i < i0 + 4; ++i) isum += int32_t(int8_t(wb[4 + i])) * int32_t(int8_t(xb[4 + i]));
              const size_t u = b * (gs / 32) + i0 / 32, j = (i0 % 32) / 4;
              float &lane = lanes[8 * (j / 4) + 4 * (u % 2) + j % 4];
              lane = std::fma(static_cast<float>(isum), dw * dx, lane);
            }
          }
          float t[8];
          for (int i = 0; i < 8; ++i) t[i] = lanes[i] + lanes[i + 8];
          return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
        };
        size_t differ = 0;
        for (size_t r = 0; r < rows; ++r) {
          const float rule = lane_rule(clamped, r);
          REQUIRE(std::memcmp(&rule, &expected[r], 4) == 0);
          const float literal = lane_rule(w, r);
          differ += std::memcmp(&literal, &expected[r], 4) != 0 ? 1 : 0;
        }
        REQUIRE(differ > rows / 2);
      }
      for (const NamedTable &isa : available_tables()) {
        INFO(isa.name << " gs=" << gs << " tokens=" << tokens);
        CHECK(bitwise_equal(run(isa.table->matmul_rows, w, x, tokens), expected));
        CHECK(bitwise_equal(run(isa.table->gemm_rows, w, x, tokens), expected));
      }
    }
  }
}

TEST_CASE("q8 rows longer than the stack buffer take the chunked path with the same bits",
          "[kernels][q8]") {
  // 65536 cols at group 64 is 69632 bytes per quantised row, more than the 64 KiB buffer.
  const size_t rows = 3, tokens = 2, cols = 65536;
  const Matrix w = make_matrix(DType::Q8, 64, rows, cols, 31);
  const std::vector<float> x = random_floats(tokens * cols, 32);
  const size_t xrow = row_bytes(DType::Q8, 64, cols);
  std::vector<unsigned char> xq(tokens * xrow);
  for (size_t t = 0; t < tokens; ++t) detail::scalar_table().quantize_row_q8(x.data() + t * cols, cols, 64, xq.data() + t * xrow);
  for (const NamedTable &isa : available_tables()) {
    INFO(isa.name);
    std::vector<float> expected(tokens * rows);
    isa.table->matmul_rows_q8(w.data(), DType::Q8, 64, cols, 0, rows, xq.data(), tokens, expected.data(), rows);
    REQUIRE(bitwise_equal(run(isa.table->matmul_rows, w, x, tokens), expected));
    REQUIRE(bitwise_equal(run(isa.table->gemm_rows, w, x, tokens), expected));
  }
}

TEST_CASE("q8 quantisation: scale = max|x|/127, error <= scale/2, same bytes on every ISA", "[kernels][q8]") {
  for (uint32_t gs : {32u, 64u}) {
    const size_t cols = 64 * 40;
    std::vector<float> x = random_floats(cols, 41, 2.0f);
    // Edge blocks: all zero, one tiny value, exact halves, a single large outlier.
    for (size_t i = 0; i < gs; ++i) x[i] = 0.0f;
    x[gs] = 1e-30f;
    for (size_t i = 0; i < gs; ++i) x[2 * gs + i] = (float(i) - float(gs) / 2) * 0.5f;
    x[3 * gs + 5] = 1e6f;
    const size_t block_bytes = q8_block_bytes(gs);
    std::vector<unsigned char> expected(row_bytes(DType::Q8, gs, cols));
    detail::scalar_table().quantize_row_q8(x.data(), cols, gs, expected.data());
    for (size_t b = 0; b < cols / gs; ++b) {
      float scale;
      std::memcpy(&scale, expected.data() + b * block_bytes, 4);
      float amax = 0;
      for (size_t i = 0; i < gs; ++i) amax = std::max(amax, std::fabs(x[b * gs + i]));
      REQUIRE(scale == amax / 127.0f);
      for (size_t i = 0; i < gs; ++i) {
        const int q = static_cast<int8_t>(expected[b * block_bytes + 4 + i]);
        REQUIRE(q >= -127);
        REQUIRE(q <= 127);
        const double err = std::fabs(double(x[b * gs + i]) - double(scale) * q);
        REQUIRE(err <= double(scale) / 2 * (1 + 1e-6));
      }
    }
    for (const NamedTable &isa : available_tables()) {
      INFO(isa.name << " gs=" << gs);
      std::vector<unsigned char> got(expected.size(), 0xAB);
      isa.table->quantize_row_q8(x.data(), cols, gs, got.data());
      REQUIRE(got == expected);
    }
  }
}

TEST_CASE("a NaN or Inf activation makes the outputs it feeds non-finite", "[kernels][q8][nonfinite]") {
  for (const NamedTable &isa : available_tables()) {
    for (const Case &c : cases()) {
      if (c.cols < 16) continue;
      INFO(describe(isa.name, c, 4, 2));
      const Matrix w = make_matrix(c.dtype, c.group_size, 4, c.cols, 51);
      for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        std::vector<float> x = random_floats(2 * c.cols, 52);
        x[c.cols + 3] = bad;  // token 1 only
        for (MatmulFn fn : {isa.table->matmul_rows, isa.table->gemm_rows}) {
          const std::vector<float> y = run(fn, w, x, 2);
          for (size_t r = 0; r < 4; ++r) {
            REQUIRE(std::isfinite(y[r]));
            if (c.dtype == DType::Q8 || std::isnan(bad)) REQUIRE(std::isnan(y[4 + r]));
            else REQUIRE(!std::isfinite(y[4 + r]));
          }
        }
      }
    }
  }
}

TEST_CASE("kernel_table falls back to the best level the CPU has", "[kernels][dispatch]") {
  const Isa best = best_isa();
  REQUIRE(kernel_table(Isa::Scalar).isa == Isa::Scalar);
  // The image layer's reference table (colibri_kernels_scalar) is the engine's scalar table.
  REQUIRE(&scalar_kernel_table() == &kernel_table(Isa::Scalar));
  REQUIRE(kernel_table(Isa::Avx512).isa == best);
  REQUIRE(kernel_table(Isa::Avx2).isa == (best == Isa::Scalar ? Isa::Scalar : Isa::Avx2));
  REQUIRE(default_kernel_table().isa == best);
  REQUIRE(std::string(isa_name(Isa::Avx2)) == "avx2");
  REQUIRE(row_bytes(DType::Q8, 32, 64) == 72);
  REQUIRE(row_bytes(DType::Q8, 64, 128) == 136);
  REQUIRE(row_bytes(DType::BF16, 0, 10) == 20);
  REQUIRE(weights_supported(DType::Q8, 32, 96));
  REQUIRE_FALSE(weights_supported(DType::Q8, 64, 96));
  REQUIRE_FALSE(weights_supported(DType::Q8, 16, 96));
  // The version-2 block dtypes: 18 / 34 / 66 bytes per q4 group of 32 / 64 / 128, 34 per
  // q8f16 block, 17 per mxfp4 block.
  REQUIRE(row_bytes(DType::Q4, 32, 256) == 8 * 18);
  REQUIRE(row_bytes(DType::Q4, 64, 256) == 4 * 34);
  REQUIRE(row_bytes(DType::Q4, 128, 256) == 2 * 66);
  REQUIRE(row_bytes(DType::Q8F16, 32, 256) == 8 * 34);
  REQUIRE(row_bytes(DType::MXFP4, 32, 256) == 8 * 17);
  REQUIRE(weights_supported(DType::Q4, 128, 256));
  REQUIRE_FALSE(weights_supported(DType::Q4, 128, 192));
  REQUIRE_FALSE(weights_supported(DType::Q4, 16, 256));
  REQUIRE_FALSE(weights_supported(DType::Q8F16, 64, 256));
  REQUIRE_FALSE(weights_supported(DType::MXFP4, 32, 48));
  REQUIRE(activation_group_size(DType::Q8, 64) == 64);
  REQUIRE(activation_group_size(DType::Q4, 128) == 32);
  REQUIRE_FALSE(takes_q8_activations(DType::BF16));
  WARN("best ISA on this machine: " << isa_name(best)
       << (detail::cpu_supports_avx512_vnni() ? " (+vnni)" : ""));
}

TEST_CASE("parse_isa is the inverse of isa_name and rejects other names", "[kernels]") {
  using colibri::kernels::Isa;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    Isa parsed = Isa::Scalar == isa ? Isa::Avx512 : Isa::Scalar;
    REQUIRE(colibri::kernels::parse_isa(colibri::kernels::isa_name(isa), &parsed));
    REQUIRE(parsed == isa);
  }
  Isa untouched = Isa::Avx2;
  for (const char *bad : {"", "AVX2", "avx", "avx512f", "sse"}) {
    REQUIRE_FALSE(colibri::kernels::parse_isa(bad, &untouched));
    REQUIRE(untouched == Isa::Avx2);
  }
}

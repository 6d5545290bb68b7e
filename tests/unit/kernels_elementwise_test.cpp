// tests/unit/kernels_elementwise_test.cpp — the forward-pass helpers (rmsnorm, softmax,
// silu_mul, add, scale_add, dot) and the f16/bf16 row conversions, on every ISA.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels_test_util.h"

using namespace colibri::kernels;
using namespace colibri::kernels::test;

namespace {

const size_t kSizes[] = {1, 3, 8, 15, 16, 17, 31, 64, 100, 1000, 4099};

bool same_bits_or_both_nan(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, 4) == 0;
}

// bf16 round-to-nearest-even from the definition (exact arithmetic in double).
uint16_t bf16_reference(float f) {
  if (std::isnan(f)) return 0x7FC0;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t down = u & 0xFFFF0000u;
  const uint32_t up = down + 0x10000u;
  float fd, fu;
  std::memcpy(&fd, &down, 4);
  std::memcpy(&fu, &up, 4);
  const double dd = std::fabs(double(f) - double(fd));
  // up may be Inf (overflow): treat its distance as 2^128 - |f|, the IEEE rule.
  const double du = std::isinf(fu) ? std::ldexp(1.0, 128) - std::fabs(double(f)) : std::fabs(double(fu) - double(f));
  if (dd < du) return uint16_t(down >> 16);
  if (du < dd) return uint16_t(up >> 16);
  return ((down >> 16) & 1) ? uint16_t(up >> 16) : uint16_t(down >> 16);
}

std::vector<float> special_floats() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.0f, 65520.0f, 1e5f, -1e5f,
                          6.1e-5f, 6.0e-8f, 3.0e-8f, 2.9e-8f, 1e-10f, inf, -inf,
                          std::numeric_limits<float>::quiet_NaN(), 3.3895314e38f, 3.4028235e38f,
                          1.17549435e-38f, 1e-40f, 0.1f, 1.00390625f, 1.005859375f, 2049.0f};
  const std::vector<float> r = random_floats(3000, 77, 100.0f);
  v.insert(v.end(), r.begin(), r.end());
  std::mt19937 rng(78);
  for (int i = 0; i < 3000; ++i) {  // random bit patterns: every exponent
    const uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    v.push_back(f);
  }
  return v;
}

}  // namespace

TEST_CASE("f16 conversions are exact and round to nearest even on every ISA", "[kernels][convert]") {
  // Widening: all 65536 half values, bit-exact against the scalar definition.
  std::vector<uint16_t> halves(65536);
  for (uint32_t i = 0; i < 65536; ++i) halves[i] = uint16_t(i);
  std::vector<float> expected(65536);
  for (uint32_t i = 0; i < 65536; ++i) expected[i] = f16_to_f32_value(uint16_t(i));
#ifdef __FLT16_MAX__
  for (uint32_t i = 0; i < 65536; ++i) {
    _Float16 h;
    const uint16_t bits = uint16_t(i);
    std::memcpy(&h, &bits, 2);
    REQUIRE(same_bits_or_both_nan(expected[i], static_cast<float>(h)));
  }
#endif
  const std::vector<float> values = special_floats();
  for (const NamedTable &isa : available_tables()) {
    INFO(isa.name);
    std::vector<float> widened(65536);
    isa.table->f16_to_f32(halves.data(), widened.data(), halves.size());
    for (uint32_t i = 0; i < 65536; ++i) REQUIRE(same_bits_or_both_nan(widened[i], expected[i]));

    std::vector<uint16_t> narrowed(values.size());
    isa.table->f32_to_f16(values.data(), narrowed.data(), values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      INFO("value " << values[i]);
#ifdef __FLT16_MAX__
      const _Float16 h = static_cast<_Float16>(values[i]);
      uint16_t bits;
      std::memcpy(&bits, &h, 2);
      if (std::isnan(values[i])) {
        REQUIRE((narrowed[i] & 0x7C00) == 0x7C00);
        REQUIRE((narrowed[i] & 0x3FF) != 0);
      } else {
        REQUIRE(narrowed[i] == bits);
      }
#endif
      REQUIRE(narrowed[i] == f32_to_f16_value(values[i]));
    }
  }
}

TEST_CASE("bf16 conversions are exact and round to nearest even on every ISA", "[kernels][convert]") {
  const std::vector<float> values = special_floats();
  for (const NamedTable &isa : available_tables()) {
    INFO(isa.name);
    std::vector<uint16_t> narrowed(values.size());
    isa.table->f32_to_bf16(values.data(), narrowed.data(), values.size());
    std::vector<float> widened(values.size());
    isa.table->bf16_to_f32(narrowed.data(), widened.data(), narrowed.size());
    for (size_t i = 0; i < values.size(); ++i) {
      INFO("value " << values[i]);
      if (std::isnan(values[i])) {
        REQUIRE(std::isnan(widened[i]));
      } else {
        REQUIRE(narrowed[i] == bf16_reference(values[i]));
        REQUIRE(widened[i] == bf16_to_f32_value(narrowed[i]));
      }
      REQUIRE(narrowed[i] == f32_to_bf16_value(values[i]));
    }
  }
}

TEST_CASE("rmsnorm matches x * w / sqrt(mean(x^2) + eps)", "[kernels][elementwise]") {
  for (const NamedTable &isa : available_tables()) {
    for (size_t n : kSizes) {
      INFO(isa.name << " n=" << n);
      const std::vector<float> x = random_floats(n, 1, 3.0f), w = random_floats(n, 2);
      double ss = 0;
      for (float v : x) ss += double(v) * v;
      const double inv = 1.0 / std::sqrt(ss / double(n) + 1e-6);
      std::vector<float> out(n);
      isa.table->rmsnorm(out.data(), x.data(), w.data(), 1e-6f, n);
      for (size_t i = 0; i < n; ++i) REQUIRE(std::fabs(out[i] - x[i] * inv * w[i]) <= 1e-5 * std::fabs(x[i] * inv * w[i]) + 1e-30);
      std::vector<float> in_place = x;  // out may alias x
      isa.table->rmsnorm(in_place.data(), in_place.data(), w.data(), 1e-6f, n);
      REQUIRE(bitwise_equal(in_place, out));
    }
  }
}

TEST_CASE("softmax matches the double reference and sums to one", "[kernels][elementwise]") {
  for (const NamedTable &isa : available_tables()) {
    for (size_t n : kSizes) {
      INFO(isa.name << " n=" << n);
      std::vector<float> x = random_floats(n, 3, 8.0f);
      if (n > 4) x[2] = -std::numeric_limits<float>::infinity();  // masked position
      double max_value = -1e300;
      for (float v : x) max_value = std::max(max_value, double(v));
      std::vector<double> ref(n);
      double sum = 0;
      for (size_t i = 0; i < n; ++i) sum += ref[i] = std::exp(double(x[i]) - max_value);
      std::vector<float> y = x;
      isa.table->softmax(y.data(), n);
      double total = 0;
      for (size_t i = 0; i < n; ++i) {
        REQUIRE(std::fabs(y[i] - ref[i] / sum) <= 1e-5 * (ref[i] / sum) + 1e-7);
        total += y[i];
      }
      REQUIRE(std::fabs(total - 1.0) < 1e-5);
      if (n > 4) REQUIRE(y[2] == 0.0f);
    }
    std::vector<float> with_nan = random_floats(37, 4);
    with_nan[20] = std::numeric_limits<float>::quiet_NaN();
    isa.table->softmax(with_nan.data(), with_nan.size());
    for (float v : with_nan) REQUIRE(std::isnan(v));
  }
}

TEST_CASE("attention_softmax is softmax with a probability floor and never computes subnormals", "[kernels][elementwise]") {
  for (const NamedTable &isa : available_tables()) {
    for (size_t n : kSizes) {
      INFO(isa.name << " n=" << n);
      // Rows of 3 heads, 5 floats of padding between them that must stay untouched.
      const size_t heads = 3, stride = n + 5;
      std::vector<float> x(heads * stride, -7.0f);
      for (size_t h = 0; h < heads; ++h) {
        const std::vector<float> row = random_floats(n, 40 + h, h == 0 ? 8.0f : 60.0f);
        std::copy(row.begin(), row.end(), x.begin() + static_cast<long>(h * stride));
      }
      // Head 1 spans the floor: scores 0, -10, ..., -130 below the maximum at position 0.
      for (size_t i = 0; i < n; ++i) x[stride + i] = 5.0f - 10.0f * static_cast<float>(i % 14);
      if (n > 4) x[2 * stride + 2] = -std::numeric_limits<float>::infinity();  // a masked position
      std::vector<float> y = x;
      isa.table->attention_softmax(y.data(), stride, heads, n);
      for (size_t h = 0; h < heads; ++h) {
        std::vector<float> plain(x.begin() + static_cast<long>(h * stride), x.begin() + static_cast<long>(h * stride + n));
        float max_value = plain[0];
        for (float v : plain) max_value = std::max(max_value, v);
        const std::vector<float> scores = plain;
        isa.table->softmax(plain.data(), n);
        double total = 0;
        for (size_t i = 0; i < n; ++i) {
          const float got = y[h * stride + i];
          REQUIRE(std::fpclassify(got) != FP_SUBNORMAL);
          total += got;
          if (scores[i] - max_value < colibri::kernels::kAttentionLogitFloor) {
            REQUIRE(got == 0.0f);  // below the floor: exactly 0 (softmax gives at most ~1e-30 there)
            REQUIRE(plain[i] < 1e-29f);
          } else {
            REQUIRE(std::fabs(got - plain[i]) <= 1e-6f * plain[i]);
          }
        }
        REQUIRE(std::fabs(total - 1.0) < 1e-5);
        for (size_t i = n; i < stride && h * stride + i < y.size(); ++i) REQUIRE(y[h * stride + i] == -7.0f);
      }
      // Rows within the floor's range are exactly softmax.
      std::vector<float> narrow = random_floats(n, 47, 8.0f), narrow_softmax = narrow;
      isa.table->attention_softmax(narrow.data(), n, 1, n);
      isa.table->softmax(narrow_softmax.data(), n);
      REQUIRE(std::memcmp(narrow.data(), narrow_softmax.data(), n * sizeof(float)) == 0);
    }
    std::vector<float> with_nan = random_floats(37, 4);
    with_nan[20] = std::numeric_limits<float>::quiet_NaN();
    isa.table->attention_softmax(with_nan.data(), with_nan.size(), 1, with_nan.size());
    for (float v : with_nan) REQUIRE(std::isnan(v));
  }
}

TEST_CASE("silu_mul computes g / (1 + e^-g) * u, also for extreme gates", "[kernels][elementwise]") {
  for (const NamedTable &isa : available_tables()) {
    for (size_t n : kSizes) {
      INFO(isa.name << " n=" << n);
      std::vector<float> g = random_floats(n, 5, 6.0f), u = random_floats(n, 6);
      if (n >= 8) {
        g[0] = -1000.0f;
        g[1] = 1000.0f;
        g[2] = -88.0f;
        g[3] = 90.0f;
        g[4] = -0.0f;
      }
      std::vector<float> out(n);
      isa.table->silu_mul(out.data(), g.data(), u.data(), n);
      for (size_t i = 0; i < n; ++i) {
        const double ref = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * u[i];
        INFO("g=" << g[i] << " u=" << u[i] << " got " << out[i] << " ref " << ref);
        REQUIRE(std::fabs(out[i] - ref) <= 2e-6 * std::fabs(ref) + 1e-30);
      }
    }
    float g = std::numeric_limits<float>::quiet_NaN(), u = 1.0f, out = 0.0f;
    isa.table->silu_mul(&out, &g, &u, 1);
    REQUIRE(std::isnan(out));
  }
}

TEST_CASE("add, scale_add and dot_f32", "[kernels][elementwise]") {
  for (const NamedTable &isa : available_tables()) {
    for (size_t n : kSizes) {
      INFO(isa.name << " n=" << n);
      const std::vector<float> a = random_floats(n, 7), b = random_floats(n, 8);
      std::vector<float> out(n);
      isa.table->add(out.data(), a.data(), b.data(), n);
      for (size_t i = 0; i < n; ++i) REQUIRE(out[i] == a[i] + b[i]);
      std::vector<float> y = a;
      isa.table->scale_add(y.data(), 0.37f, b.data(), n);
      for (size_t i = 0; i < n; ++i) REQUIRE(std::fabs(y[i] - (a[i] + 0.37 * b[i])) <= 1e-6 * (std::fabs(a[i]) + std::fabs(0.37 * b[i])));
      double ref = 0, mag = 0;
      for (size_t i = 0; i < n; ++i) {
        ref += double(a[i]) * b[i];
        mag += std::fabs(double(a[i]) * b[i]);
      }
      REQUIRE(std::fabs(isa.table->dot_f32(a.data(), b.data(), n) - ref) <= 1e-5 * mag);
    }
  }
}

TEST_CASE("attention_scores and attention_values match a double reference on strided rows", "[kernels][elementwise]") {
  for (const NamedTable &isa : available_tables()) {
    for (size_t d : {size_t(8), size_t(60), size_t(64), size_t(80), size_t(128), size_t(200)}) {
      for (size_t n : {size_t(1), size_t(7), size_t(8), size_t(9), size_t(33)}) {
        INFO(isa.name << " d=" << d << " n=" << n);
        const size_t stride = d + 24;  // rows of a KV cache: other heads in between
        const std::vector<float> q = random_floats(d, 11), rows = random_floats(n * stride, 12);
        std::vector<float> probs = random_floats(n, 13);
        // Sentinels after the outputs: the kernels must write exactly n scores and d values.
        std::vector<float> scores(n + 1, -7.0f), out(d + 1, -7.0f);
        isa.table->attention_scores(q.data(), d, 1, rows.data(), stride, n, d, 0.125f, scores.data(), n);
        for (size_t p = 0; p < n; ++p) {
          double ref = 0, mag = 0;
          for (size_t i = 0; i < d; ++i) {
            ref += double(q[i]) * rows[p * stride + i];
            mag += std::fabs(double(q[i]) * rows[p * stride + i]);
          }
          REQUIRE(std::fabs(scores[p] - 0.125 * ref) <= 1e-5 * 0.125 * mag + 1e-30);
          // A score depends on its own key only: the single-row call gives the same bits.
          float alone = 0;
          isa.table->attention_scores(q.data(), d, 1, rows.data() + p * stride, stride, 1, d, 0.125f, &alone, 1);
          REQUIRE(alone == scores[p]);
        }
        REQUIRE(scores[n] == -7.0f);
        isa.table->attention_values(probs.data(), n, 1, rows.data(), stride, n, d, out.data(), d);
        for (size_t i = 0; i < d; ++i) {
          double ref = 0, mag = 0;
          for (size_t p = 0; p < n; ++p) {
            ref += double(probs[p]) * rows[p * stride + i];
            mag += std::fabs(double(probs[p]) * rows[p * stride + i]);
          }
          REQUIRE(std::fabs(out[i] - ref) <= 1e-5 * mag + 1e-30);
        }
        REQUIRE(out[d] == -7.0f);
      }
    }
  }
}

TEST_CASE("grouped attention calls give the bits of one call per head", "[kernels][elementwise]") {
  // The query heads of a KV head share one call (GQA); every head must get exactly what a
  // call of its own gives, whatever the group size, n or d (register blocks of 4 and 2 heads
  // and their remainders, position blocks and their remainders, partial vectors of d).
  for (const NamedTable &isa : available_tables()) {
    for (size_t heads : {size_t(1), size_t(2), size_t(3), size_t(4), size_t(5), size_t(7), size_t(8)}) {
      for (size_t d : {size_t(8), size_t(60), size_t(64), size_t(72), size_t(128)}) {
        for (size_t n : {size_t(1), size_t(2), size_t(3), size_t(5), size_t(8), size_t(17), size_t(64)}) {
          INFO(isa.name << " heads=" << heads << " d=" << d << " n=" << n);
          const size_t stride = d + 40, q_stride = d + 3, s_stride = n + 5, o_stride = d + 2;
          const std::vector<float> q = random_floats(heads * q_stride, 21), rows = random_floats(n * stride, 22);
          const std::vector<float> probs = random_floats(heads * s_stride, 23);
          std::vector<float> grouped(heads * s_stride, -7.0f), single(heads * s_stride, -7.0f);
          isa.table->attention_scores(q.data(), q_stride, heads, rows.data(), stride, n, d, 0.125f, grouped.data(), s_stride);
          for (size_t h = 0; h < heads; ++h)
            isa.table->attention_scores(q.data() + h * q_stride, q_stride, 1, rows.data(), stride, n, d, 0.125f,
                                        single.data() + h * s_stride, s_stride);
          REQUIRE(std::memcmp(grouped.data(), single.data(), grouped.size() * sizeof(float)) == 0);
          for (size_t h = 0; h < heads; ++h) REQUIRE(grouped[h * s_stride + n] == -7.0f);  // n scores, no more
          std::vector<float> out_grouped(heads * o_stride, -7.0f), out_single(heads * o_stride, -7.0f);
          isa.table->attention_values(probs.data(), s_stride, heads, rows.data(), stride, n, d, out_grouped.data(), o_stride);
          for (size_t h = 0; h < heads; ++h)
            isa.table->attention_values(probs.data() + h * s_stride, s_stride, 1, rows.data(), stride, n, d,
                                        out_single.data() + h * o_stride, o_stride);
          REQUIRE(std::memcmp(out_grouped.data(), out_single.data(), out_grouped.size() * sizeof(float)) == 0);
          for (size_t h = 0; h < heads; ++h) REQUIRE(out_grouped[h * o_stride + d] == -7.0f);
        }
      }
    }
  }
}

TEST_CASE("attention over paged KV blocks gives the bits of the contiguous call", "[kernels][elementwise][paged]") {
  // The paged KV cache keeps a sequence's rows in blocks of B positions at scattered places:
  // scores are computed block by block into one row, and values accumulated block by block
  // (attention_values_accumulate) from a zeroed output. Both must equal one call over the
  // same rows stored contiguously, bit for bit, for every ISA, block size and remainder.
  for (const NamedTable &isa : available_tables()) {
    for (size_t block : {size_t(1), size_t(3), size_t(8), size_t(16)}) {
      for (size_t heads : {size_t(1), size_t(2), size_t(4), size_t(5)}) {
        for (size_t d : {size_t(8), size_t(60), size_t(64), size_t(128)}) {
          for (size_t n : {size_t(1), size_t(7), size_t(16), size_t(17), size_t(50)}) {
            INFO(isa.name << " block=" << block << " heads=" << heads << " d=" << d << " n=" << n);
            const size_t stride = d + 8, blocks = (n + block - 1) / block;
            const std::vector<float> q = random_floats(heads * d, 31), rows = random_floats(n * stride, 32);
            // The same rows in blocks placed in reverse order, with a gap between blocks.
            const size_t block_floats = block * stride + 24;
            std::vector<float> paged(blocks * block_floats, 99.0f);
            auto block_at = [&](size_t j) { return &paged[(blocks - 1 - j) * block_floats]; };
            for (size_t p = 0; p < n; ++p)
              std::memcpy(block_at(p / block) + (p % block) * stride, &rows[p * stride], stride * sizeof(float));
            std::vector<float> s_flat(heads * n), s_paged(heads * n, -7.0f);
            isa.table->attention_scores(q.data(), d, heads, rows.data(), stride, n, d, 0.125f, s_flat.data(), n);
            for (size_t j = 0; j < blocks; ++j)
              isa.table->attention_scores(q.data(), d, heads, block_at(j), stride, std::min(block, n - j * block), d, 0.125f,
                                          s_paged.data() + j * block, n);
            REQUIRE(std::memcmp(s_flat.data(), s_paged.data(), s_flat.size() * sizeof(float)) == 0);
            isa.table->attention_softmax(s_flat.data(), n, heads, n);
            std::vector<float> o_flat(heads * d, -7.0f), o_paged(heads * d, 0.0f);
            isa.table->attention_values(s_flat.data(), n, heads, rows.data(), stride, n, d, o_flat.data(), d);
            for (size_t j = 0; j < blocks; ++j)
              isa.table->attention_values_accumulate(s_flat.data() + j * block, n, heads, block_at(j), stride,
                                                     std::min(block, n - j * block), d, o_paged.data(), d);
            REQUIRE(std::memcmp(o_flat.data(), o_paged.data(), o_flat.size() * sizeof(float)) == 0);
          }
        }
      }
    }
  }
}

// tests/unit/kernels_quantize_test.cpp — the q8 quantiser: its rule on hand-picked values, and the
// same bytes from every table and from conversion_quantize_row_q8 (the converters' and repack's
// entry, AVX2 code in colibri_kernels_scalar) on halves, their neighbours, zeros, subnormals,
// huge and random values.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels_test_util.h"

using namespace colibri::kernels;
using namespace colibri::kernels::test;

namespace {

struct Entry {
  std::string name;
  QuantizeQ8Fn fn;
};

std::vector<Entry> entries() {
  std::vector<Entry> out;
  for (const NamedTable &t : available_tables()) out.push_back({t.name, t.table->quantize_row_q8});
  out.push_back({"conversion_quantize_row_q8", conversion_quantize_row_q8()});
  return out;
}

std::vector<unsigned char> quantize(QuantizeQ8Fn fn, const std::vector<float> &x, uint32_t group) {
  std::vector<unsigned char> out(x.size() / group * q8_block_bytes(group));  // exact: ASan sees over-writes
  fn(x.data(), x.size(), group, out.data());
  return out;
}

float scale_of(const std::vector<unsigned char> &q, uint32_t group, size_t block) {
  float s;
  std::memcpy(&s, q.data() + block * q8_block_bytes(group), 4);
  return s;
}

int code_of(const std::vector<unsigned char> &q, uint32_t group, size_t i) {
  return static_cast<int8_t>(q[(i / group) * q8_block_bytes(group) + 4 + i % group]);
}

// Groups that hit every branch of the rule: values whose x / scale is a half or one ulp on either
// side of one, at scales exact (1) and inexact (0.1 / 127 steps); zeros of both signs; subnormal
// groups; groups near the float maximum; random groups at several magnitudes.
std::vector<float> hard_row(uint32_t group, uint32_t seed) {
  std::vector<float> x;
  std::mt19937 rng(seed);
  auto push_group = [&](auto value_of) {
    for (uint32_t i = 0; i < group; ++i) x.push_back(value_of(i));
  };
  for (float amax : {127.0f, 12.7f, 1.0f, 3.0e-3f}) {
    const float scale = amax / 127.0f;
    for (int side : {-1, 0, 1}) {
      push_group([&](uint32_t i) {
        if (i == 0) return amax;
        const float half = (static_cast<float>(i % 127) + 0.5f) * scale * ((i & 1) ? -1.0f : 1.0f);
        if (side == 0) return half;
        return std::nextafter(half, side > 0 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity());
      });
    }
  }
  push_group([](uint32_t) { return 0.0f; });
  push_group([](uint32_t i) { return (i & 1) ? -0.0f : 0.0f; });
  push_group([](uint32_t i) { return std::ldexp(static_cast<float>(i) - 13.0f, -140); });  // subnormal amax
  push_group([](uint32_t i) { return (i % 3 == 0 ? 3.4e38f : -1.0e38f) / static_cast<float>(i + 1); });
  push_group([](uint32_t i) { return i == 5 ? -2.0f : 1.0f; });  // the extreme is negative
  for (float magnitude : {1e-30f, 1e-3f, 1.0f, 1e4f, 1e30f}) {
    std::normal_distribution<float> dist(0.0f, magnitude);
    push_group([&](uint32_t) { return dist(rng); });
  }
  return x;
}

}  // namespace

TEST_CASE("the q8 quantiser follows the rule: scale max|x| / 127, halves away from zero, ±127", "[kernels][q8][quantize]") {
  for (const Entry &e : entries()) {
    INFO(e.name);
    for (uint32_t group : {kQ8GroupSizeSmall, kQ8GroupSizeLarge}) {
      std::vector<float> x(2 * group, 0.0f);
      // Group 0, scale exactly 1: x / scale is x itself.
      x[0] = 127.0f;
      x[1] = 0.5f;
      x[2] = -0.5f;
      x[3] = 126.5f;
      x[4] = -126.5f;
      x[5] = std::nextafter(0.5f, 0.0f);
      x[6] = -1.5f;
      x[7] = -127.0f;
      // Group 1 stays all zero: scale 0, codes 0.
      const std::vector<unsigned char> q = quantize(e.fn, x, group);
      CHECK(scale_of(q, group, 0) == 1.0f);
      CHECK(code_of(q, group, 0) == 127);
      CHECK(code_of(q, group, 1) == 1);
      CHECK(code_of(q, group, 2) == -1);
      CHECK(code_of(q, group, 3) == 127);
      CHECK(code_of(q, group, 4) == -127);
      CHECK(code_of(q, group, 5) == 0);
      CHECK(code_of(q, group, 6) == -2);
      CHECK(code_of(q, group, 7) == -127);
      CHECK(scale_of(q, group, 1) == 0.0f);
      for (uint32_t i = group; i < 2 * group; ++i) CHECK(code_of(q, group, i) == 0);
    }
  }
}

TEST_CASE("every q8 quantiser writes the scalar table's bytes, conversion_quantize_row_q8 included", "[kernels][q8][quantize]") {
  // The tools take the AVX2 code when the CPU has it: pin that the fast entry is the one used.
  CHECK((conversion_quantize_row_q8() != detail::scalar_table().quantize_row_q8) == detail::cpu_supports_avx2());
  for (uint32_t group : {kQ8GroupSizeSmall, kQ8GroupSizeLarge}) {
    for (uint32_t seed : {1u, 2u, 3u}) {
      const std::vector<float> x = hard_row(group, seed);
      const std::vector<unsigned char> expected = quantize(detail::scalar_table().quantize_row_q8, x, group);
      for (const Entry &e : entries()) {
        INFO(e.name << " group " << group << " seed " << seed);
        REQUIRE(quantize(e.fn, x, group) == expected);
      }
    }
    // Long random rows (many groups per call).
    const std::vector<float> x = random_floats(64 * group, 7 + group, 0.02f);
    const std::vector<unsigned char> expected = quantize(detail::scalar_table().quantize_row_q8, x, group);
    for (const Entry &e : entries()) {
      INFO(e.name << " group " << group << " random row");
      REQUIRE(quantize(e.fn, x, group) == expected);
    }
  }
}

TEST_CASE("a q8 group holding NaN or infinity gets a NaN scale and zero codes, its neighbours the same bytes", "[kernels][q8][quantize]") {
  for (uint32_t group : {kQ8GroupSizeSmall, kQ8GroupSizeLarge}) {
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
      std::vector<float> x = random_floats(3 * group, 11, 2.0f);
      x[group + 7] = bad;
      const std::vector<unsigned char> expected = quantize(detail::scalar_table().quantize_row_q8, x, group);
      for (const Entry &e : entries()) {
        INFO(e.name << " group " << group << " value " << bad);
        const std::vector<unsigned char> q = quantize(e.fn, x, group);
        CHECK(std::isnan(scale_of(q, group, 1)));
        for (uint32_t i = group; i < 2 * group; ++i) CHECK(code_of(q, group, i) == 0);
        const size_t block = q8_block_bytes(group);
        CHECK(std::memcmp(q.data(), expected.data(), block) == 0);
        CHECK(std::memcmp(q.data() + 2 * block, expected.data() + 2 * block, block) == 0);
      }
    }
  }
}

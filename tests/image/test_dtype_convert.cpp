// tests/image/test_dtype_convert.cpp — scalar dtype conversions are exact IEEE roundings,
// and Q8 quantisation error is bounded by scale / 2.
#include <immintrin.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "image/dtype_convert.h"
#include "image/dtype_convert_avx2.h"
#include "kernels/cpu/kernels.h"

using namespace colibri::image;

// The hardware reference needs F16C; without it the comparison cannot run (Catch2 v2 has
// no SKIP, so the test warns and returns).
#define SKIP_TEST_NO_F16C()                                        \
  do {                                                             \
    WARN("skipped: this CPU lacks F16C, the hardware reference"); \
    return;                                                        \
  } while (0)

TEST_CASE("f16 decode is exact for every f16 value", "[dtype]") {
  if (!__builtin_cpu_supports("f16c")) SKIP_TEST_NO_F16C();
  for (uint32_t h = 0; h < 65536; ++h) {
    float ours = f16_to_f32(static_cast<uint16_t>(h));
    float reference = _cvtsh_ss(static_cast<unsigned short>(h));
    if (std::isnan(reference)) {
      REQUIRE(std::isnan(ours));
    } else {
      REQUIRE(std::memcmp(&ours, &reference, 4) == 0);
    }
  }
}

TEST_CASE("f16 encode rounds to nearest even like the hardware", "[dtype]") {
  if (!__builtin_cpu_supports("f16c")) SKIP_TEST_NO_F16C();
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t x = bits(rng);
    float f;
    std::memcpy(&f, &x, 4);
    if (std::isnan(f)) continue;
    uint16_t ours = f32_to_f16(f);
    uint16_t reference = static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
    INFO("input bits " << x);
    REQUIRE(ours == reference);
  }
  CHECK(std::isnan(f16_to_f32(f32_to_f16(std::nanf("")))));
}

TEST_CASE("bf16 round trip keeps 8 significant bits and rounds to nearest even", "[dtype]") {
  CHECK(bf16_to_f32(f32_to_bf16(1.0f)) == 1.0f);
  CHECK(bf16_to_f32(f32_to_bf16(1.00390625f)) == 1.0f);     // halfway, even stays
  CHECK(bf16_to_f32(f32_to_bf16(1.01171875f)) == 1.015625f);  // halfway, odd rounds up
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

TEST_CASE("row conversions equal the element conversions bit for bit, NaN payloads included", "[dtype]") {
  // Every f16/bf16 bit pattern through decode_floats, then a spread of f32 bit patterns
  // (every 4099th, which covers all exponents, NaNs and subnormals) through encode_floats.
  std::vector<uint16_t> halves(65536);
  for (uint32_t i = 0; i < 65536; ++i) halves[i] = static_cast<uint16_t>(i);
  std::vector<float> wide(65536);
  for (DType dtype : {DType::F16, DType::BF16}) {
    decode_floats(dtype, halves.data(), halves.size(), wide.data());
    for (uint32_t i = 0; i < 65536; ++i) {
      const float one = dtype == DType::F16 ? f16_to_f32(halves[i]) : bf16_to_f32(halves[i]);
      INFO("dtype " << dtype_name(dtype) << " bits " << i);
      REQUIRE(std::memcmp(&wide[i], &one, 4) == 0);
    }
  }
  std::vector<float> values;
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 4099) {
    const uint32_t b = static_cast<uint32_t>(bits);
    float f;
    std::memcpy(&f, &b, 4);
    values.push_back(f);
  }
  std::vector<uint16_t> narrow(values.size());
  for (DType dtype : {DType::F16, DType::BF16}) {
    encode_floats(dtype, values.data(), values.size(), narrow.data());
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t one = dtype == DType::F16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
      INFO("dtype " << dtype_name(dtype) << " value " << values[i]);
      REQUIRE(narrow[i] == one);
    }
  }
}

TEST_CASE("q8 quantisation error is at most scale/2 and dequantises back", "[dtype]") {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (uint32_t group : {32u, 64u}) {
    const size_t cols = 256;
    std::vector<float> x(cols), back(cols);
    for (auto &v : x) v = normal(rng);
    std::vector<unsigned char> q(row_bytes(DType::Q8, group, cols));
    float max_scale = 0.0f;
    float err = quantize_row_q8(x.data(), cols, group, q.data(), &max_scale);
    dequantize_row_q8(q.data(), cols, group, back.data());
    for (size_t i = 0; i < cols; ++i) {
      float scale;
      std::memcpy(&scale, q.data() + (i / group) * q8_block_bytes(group), 4);
      REQUIRE(std::fabs(x[i] - back[i]) <= scale / 2 * (1 + 1e-6f));
    }
    CHECK(err <= max_scale / 2 * (1 + 1e-6f));
    CHECK(err > 0.0f);
  }
  // An all-zero group has scale 0 and decodes to zeros.
  std::vector<float> zeros(32, 0.0f), back(32, 1.0f);
  std::vector<unsigned char> q(row_bytes(DType::Q8, 32, 32));
  quantize_row_q8(zeros.data(), 32, 32, q.data(), nullptr);
  dequantize_row_q8(q.data(), 32, 32, back.data());
  for (float v : back) CHECK(v == 0.0f);
  // The quantiser never writes -128; a stored -128 reads as -127 (as in every kernel).
  std::vector<float> wide(32);
  for (size_t i = 0; i < 32; ++i) wide[i] = i % 2 ? -1.0f : 0.5f;
  quantize_row_q8(wide.data(), 32, 32, q.data(), nullptr);
  for (size_t i = 0; i < 32; ++i) CHECK(static_cast<int8_t>(q[4 + i]) >= -127);
  q[4] = 0x80;
  q[5] = 0x81;
  float scale;
  std::memcpy(&scale, q.data(), 4);
  dequantize_row_q8(q.data(), 32, 32, back.data());
  CHECK(back[0] == -127.0f * scale);
  CHECK(back[1] == -127.0f * scale);
}

TEST_CASE("q8: the image quantiser divides by the scale (format.md) and writes the kernels' bytes", "[dtype]") {
  // Groups where x / scale and x · (1 / scale) round to different integers: x / scale lies
  // within an ulp of a half (found by search; the first element sets the scale).
  struct Pair { float amax, x; int q; };
  const Pair pairs[] = {{0x1.1de2a8p+7f, 0x1.063fcap+7f, 116}, {0x1.917192p+7f, 0x1.2921aap+5f, 23},
                        {0x1.5fa17ep+6f, 0x1.0f565p+4f, 25}, {0x1.e4609ep+6f, 0x1.054238p+6f, 68}};
  const uint32_t group = 32;
  std::vector<float> x(group * 4, 0.0f);
  for (size_t g = 0; g < 4; ++g) {
    x[g * group] = pairs[g].amax;
    x[g * group + 1] = pairs[g].x;
    x[g * group + 2] = -pairs[g].x;
  }
  std::vector<unsigned char> image_q(row_bytes(DType::Q8, group, x.size()));
  quantize_row_q8(x.data(), x.size(), group, image_q.data(), nullptr);
  for (size_t g = 0; g < 4; ++g) {
    const unsigned char *block = image_q.data() + g * q8_block_bytes(group);
    float scale;
    std::memcpy(&scale, block, 4);
    INFO("group " << g);
    CHECK(std::round(pairs[g].x / scale) == float(pairs[g].q));
    CHECK(static_cast<int8_t>(block[4 + 1]) == pairs[g].q);
    CHECK(static_cast<int8_t>(block[4 + 2]) == -pairs[g].q);
  }
  // The same bytes as the kernels' activation quantiser, on these groups and on random rows.
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> random_row(64 * 64);
  for (float &v : random_row) v = normal(rng);
  for (const std::vector<float> *row : {&x, &random_row}) {
    std::vector<unsigned char> a(row_bytes(DType::Q8, group, row->size())), b(a.size(), 0xAB);
    quantize_row_q8(row->data(), row->size(), group, a.data(), nullptr);
    colibri::kernels::kernel_table(colibri::kernels::Isa::Scalar).quantize_row_q8(row->data(), row->size(), group, b.data());
    CHECK(a == b);
  }
}

TEST_CASE("q8: first_non_finite finds NaN and infinities", "[dtype]") {
  std::vector<float> v(40, 1.0f);
  CHECK(first_non_finite(v.data(), v.size()) == v.size());
  CHECK(first_non_finite(v.data(), 0) == 0);
  v[17] = std::numeric_limits<float>::infinity();
  CHECK(first_non_finite(v.data(), v.size()) == 17);
  v[3] = std::nanf("");
  CHECK(first_non_finite(v.data(), v.size()) == 3);
  v[3] = 3.4e38f;
  v[17] = -std::numeric_limits<float>::infinity();
  CHECK(first_non_finite(v.data(), v.size()) == 17);
}

TEST_CASE("first_overflow: the finite values f16 or bf16 can only store as infinity", "[dtype]") {
  std::vector<float> v(16, 1.0f);
  CHECK(first_overflow(DType::F16, v.data(), v.size()) == v.size());
  v[9] = 65504.0f;    // f16's largest finite value
  v[10] = -65519.0f;  // rounds down to -65504
  CHECK(first_overflow(DType::F16, v.data(), v.size()) == v.size());
  v[12] = 65520.0f;   // halfway to 65536: rounds to even, infinity
  CHECK(first_overflow(DType::F16, v.data(), v.size()) == 12);
  v[4] = -1e6f;
  CHECK(first_overflow(DType::F16, v.data(), v.size()) == 4);
  CHECK(first_overflow(DType::BF16, v.data(), v.size()) == v.size());
  CHECK(first_overflow(DType::F32, v.data(), v.size()) == v.size());
  CHECK(first_overflow(DType::Q8, v.data(), v.size()) == v.size());
  v[2] = std::numeric_limits<float>::infinity();  // already infinite: not an overflow
  CHECK(first_overflow(DType::F16, v.data(), v.size()) == 4);
  v[7] = std::numeric_limits<float>::max();
  CHECK(first_overflow(DType::BF16, v.data(), v.size()) == 7);
  v[7] = 3.38953139e38f;  // bf16's largest finite value
  CHECK(first_overflow(DType::BF16, v.data(), v.size()) == v.size());
}

// ---- format version 2: q4, q8f16, mxfp4 ---------------------------------------------------

namespace {

std::vector<float> gaussian_row(size_t n, uint32_t seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float &x : v) x = d(rng);
  return v;
}

}  // namespace

TEST_CASE("q4: the largest magnitude maps to -8, every error is at most one scale step, bytes as format.md", "[dtype][q4]") {
  for (uint32_t g : {32u, 64u, 128u}) {
    const size_t cols = 4 * g;
    const std::vector<float> x = gaussian_row(cols, g, 0.02f);
    std::vector<unsigned char> q(row_bytes(DType::Q4, g, cols));
    REQUIRE(q.size() == cols / g * (2 + g / 2));
    quantize_row(DType::Q4, g, x.data(), cols, q.data());
    std::vector<float> back(cols);
    dequantize_row(DType::Q4, g, q.data(), cols, back.data());
    for (size_t b = 0; b < cols / g; ++b) {
      uint16_t h;
      std::memcpy(&h, q.data() + b * (2 + g / 2), 2);
      const float scale = f16_to_f32(h);
      size_t extreme = b * g;
      for (size_t i = b * g; i < (b + 1) * g; ++i)
        if (std::fabs(x[i]) > std::fabs(x[extreme])) extreme = i;
      CHECK(scale == f16_to_f32(f32_to_f16(x[extreme] / -8.0f)));
      CHECK(back[extreme] == -8.0f * scale);
      for (size_t i = b * g; i < (b + 1) * g; ++i) {
        INFO("g=" << g << " i=" << i);
        // Half a step, except a value beyond +7 steps on the far side (clamped): one step.
        const double v = x[i] / scale;
        const double bound = v > 7.0 ? std::fabs(scale) * (v - 7.0) : std::fabs(scale) * 0.5;
        REQUIRE(std::fabs(double(x[i]) - back[i]) <= bound * (1 + 1e-6) + 1e-6 * std::fabs(scale));
        // The byte layout: in each 32 values, byte j holds value j low and value j + 16 high.
        const size_t sub = (i % g) / 32, j = i % 32;
        const unsigned char byte = q[b * (2 + g / 2) + 2 + sub * 16 + j % 16];
        const int code = j < 16 ? byte & 0x0F : byte >> 4;
        REQUIRE(back[i] == scale * static_cast<float>(code - 8));
      }
    }
  }
  // An all-zero group: scale ±0 (0 / −8 is −0), every code 8 (value 0).
  std::vector<float> zeros(32, 0.0f);
  std::vector<unsigned char> q(18, 0xFF);
  quantize_row(DType::Q4, 32, zeros.data(), 32, q.data());
  uint16_t h;
  std::memcpy(&h, q.data(), 2);
  CHECK(f16_to_f32(h) == 0.0f);
  for (int j = 2; j < 18; ++j) CHECK(q[j] == 0x88);
}

TEST_CASE("q8f16: an f16 scale max|x|/127, 34-byte blocks, llama.cpp Q8_0's layout", "[dtype][q8f16]") {
  const size_t cols = 256;
  const std::vector<float> x = gaussian_row(cols, 3, 0.05f);
  std::vector<unsigned char> q(row_bytes(DType::Q8F16, 32, cols));
  REQUIRE(q.size() == 8 * 34);
  quantize_row(DType::Q8F16, 32, x.data(), cols, q.data());
  std::vector<float> back(cols);
  dequantize_row(DType::Q8F16, 32, q.data(), cols, back.data());
  for (size_t b = 0; b < cols / 32; ++b) {
    float amax = 0;
    for (size_t i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[b * 32 + i]));
    uint16_t h;
    std::memcpy(&h, q.data() + b * 34, 2);
    const float scale = f16_to_f32(h);
    CHECK(h == f32_to_f16(amax / 127.0f));
    for (size_t i = 0; i < 32; ++i) {
      const float v = x[b * 32 + i];
      const int8_t stored = static_cast<int8_t>(q[b * 34 + 2 + i]);
      REQUIRE(back[b * 32 + i] == scale * stored);
      // Within half a step, or clamped at ±127 when the f16 scale rounded down.
      const double excess = std::max(0.0, std::fabs(double(v)) - 127.0 * scale);
      REQUIRE(std::fabs(double(v) - back[b * 32 + i]) <= 0.5 * scale + excess + 1e-12);
    }
  }
}

TEST_CASE("mxfp4: dequantisation of hand-computed OCP blocks (e8m0 scale, e2m1 codes)", "[dtype][mxfp4]") {
  CHECK(e2m1_value(0x0) == 0.0f);
  CHECK(e2m1_value(0x1) == 0.5f);
  CHECK(e2m1_value(0x2) == 1.0f);
  CHECK(e2m1_value(0x3) == 1.5f);
  CHECK(e2m1_value(0x4) == 2.0f);
  CHECK(e2m1_value(0x5) == 3.0f);
  CHECK(e2m1_value(0x6) == 4.0f);
  CHECK(e2m1_value(0x7) == 6.0f);
  CHECK(e2m1_value(0x9) == -0.5f);
  CHECK(e2m1_value(0xF) == -6.0f);
  CHECK(e8m0_value(127) == 1.0f);
  CHECK(e8m0_value(128) == 2.0f);
  CHECK(e8m0_value(0) == std::ldexp(1.0f, -127));
  CHECK(e8m0_value(254) == std::ldexp(1.0f, 127));
  CHECK(std::isnan(e8m0_value(255)));

  // A block as a gpt-oss checkpoint stores it: scale byte 128 (2^1); byte j holds element 2j
  // in its low nibble and element 2j + 1 in its high nibble.
  uint8_t ocp[16] = {};
  ocp[0] = 0xF1;  // element 0: 0x1 (0.5), element 1: 0xF (-6)
  ocp[8] = 0x07;  // element 16: 0x7 (6), element 17: 0
  ocp[15] = 0xA0; // element 30: 0, element 31: 0xA (-1)
  ocp[3] = 0x3C;  // element 6: 0xC (-2), element 7: 0x3 (1.5)
  uint8_t block[17];
  mxfp4_block_from_checkpoint(ocp, 128, block);
  // The image layout: byte 1 + j holds element j (low) and element j + 16 (high).
  const uint8_t expected_block[17] = {128, 0x71, 0x0F, 0, 0, 0, 0, 0x0C, 0x03, 0, 0, 0, 0, 0, 0, 0, 0xA0};
  CHECK(std::memcmp(block, expected_block, 17) == 0);
  float values[32];
  dequantize_row(DType::MXFP4, 32, block, 32, values);
  float expected[32] = {};
  expected[0] = 1.0f;    // 0.5 · 2
  expected[1] = -12.0f;  // -6 · 2
  expected[6] = -4.0f;   // -2 · 2
  expected[7] = 3.0f;    // 1.5 · 2
  expected[16] = 12.0f;  // 6 · 2
  expected[31] = -2.0f;  // -1 · 2
  for (int i = 0; i < 32; ++i) {
    INFO("element " << i);
    CHECK(values[i] == expected[i]);
  }
}

TEST_CASE("mxfp4 quantisation: OCP shared exponent, nearest e2m1 with ties to even, saturation at 6", "[dtype][mxfp4]") {
  // max |x| = 7: floor(log2 7) - 2 = 0, scale 2^0 (e8m0 127).
  float x[32] = {};
  x[0] = 7.0f;     // beyond 6: saturates to 6 (code 7)
  x[1] = 5.0f;     // tie 4 | 6: the even code, 4 (code 6)
  x[2] = 0.25f;    // tie 0 | 0.5: 0 (code 0)
  x[3] = 0.75f;    // tie 0.5 | 1: 1 (code 2)
  x[4] = -2.5f;    // tie -2 | -3: -2 (code 0xC)
  x[5] = 1.25f;    // tie 1 | 1.5: 1 (code 2)
  x[6] = 2.9f;     // nearest 3 (code 5)
  x[17] = -0.6f;   // nearest -0.5 (code 0x9)
  const uint8_t expected_codes[32] = {7, 6, 0, 2, 0xC, 2, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                      0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  for (int exponent : {0, -10, 20}) {
    float scaled[32];
    for (int i = 0; i < 32; ++i) scaled[i] = std::ldexp(x[i], exponent);
    uint8_t block[17];
    quantize_row(DType::MXFP4, 32, scaled, 32, block);
    INFO("exponent " << exponent);
    CHECK(block[0] == 127 + exponent);
    for (int i = 0; i < 32; ++i) {
      const int code = i < 16 ? block[1 + i] & 0x0F : block[1 + i - 16] >> 4;
      INFO("element " << i);
      CHECK(code == expected_codes[i]);
    }
  }
  // All zero: e8m0 0 and zero codes.
  float zeros[32] = {};
  uint8_t block[17];
  quantize_row(DType::MXFP4, 32, zeros, 32, block);
  for (uint8_t b : block) CHECK(b == 0);
}

TEST_CASE("first_unstorable finds the first bad value in rows that take several screened blocks", "[dtype]") {
  // Rows of 300: four blocks of 64 go through the branch-free screen, 44 values through the
  // plain search; each bad value at a block's edges, inside one, and in the tail.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    DType dtype;
    float bad;
  };
  for (Case c : {Case{DType::Q8, inf}, Case{DType::Q8, -inf}, Case{DType::Q8, nan}, Case{DType::MXFP4, nan},
                 Case{DType::Q4, 1e6f}, Case{DType::Q4, -inf}, Case{DType::Q4, nan}, Case{DType::Q8F16, -1e7f},
                 Case{DType::Q8F16, nan}, Case{DType::F16, 7e4f}, Case{DType::BF16, -3.4e38f}}) {
    for (size_t at : {0ul, 1ul, 63ul, 64ul, 127ul, 128ul, 200ul, 255ul, 256ul, 299ul}) {
      INFO(dtype_name(c.dtype) << " bad value " << c.bad << " at " << at);
      std::vector<float> x(300, 0.5f);
      CHECK(first_unstorable(c.dtype, x.data(), x.size()) == x.size());
      x[at] = c.bad;
      if (at + 70 < x.size()) x[at + 70] = c.bad;  // a later one does not hide the first
      CHECK(first_unstorable(c.dtype, x.data(), x.size()) == at);
      CHECK(first_unstorable(c.dtype, x.data(), at) == at);  // a row that ends before it
    }
  }
}

TEST_CASE("the version-2 block dtypes refuse what they cannot store", "[dtype]") {
  std::vector<float> x(32, 1.0f);
  CHECK(first_unstorable(DType::MXFP4, x.data(), 32) == 32);
  x[5] = std::numeric_limits<float>::infinity();
  CHECK(first_unstorable(DType::MXFP4, x.data(), 32) == 5);
  CHECK(first_unstorable(DType::Q4, x.data(), 32) == 5);
  x[5] = 1e6f;  // a q4 scale of 1e6 / 8 overflows f16; q8f16's 1e6 / 127 does not
  CHECK(first_unstorable(DType::Q4, x.data(), 32) == 5);
  CHECK(first_unstorable(DType::Q8F16, x.data(), 32) == 32);
  x[5] = 1e7f;
  CHECK(first_unstorable(DType::Q8F16, x.data(), 32) == 5);
}

namespace {

// docs/format.md's q4 and q8f16 rules written the plain way (trunc, branches), to pin the
// vectorised quantisers to them byte for byte.
float reference_round_half_away(float t) {
  float r = std::trunc(t);
  const float fraction = t - r;
  if (fraction >= 0.5f) r += 1.0f;
  if (fraction <= -0.5f) r -= 1.0f;
  return r;
}

std::vector<unsigned char> reference_q4(const std::vector<float> &x, uint32_t g) {
  std::vector<unsigned char> out;
  for (size_t b = 0; b < x.size() / g; ++b) {
    const float *v = x.data() + b * g;
    float extreme = 0.0f;
    for (uint32_t i = 0; i < g; ++i)
      if (std::fabs(v[i]) > std::fabs(extreme)) extreme = v[i];
    const uint16_t h = f32_to_f16(extreme / -8.0f);
    const float scale = f16_to_f32(h);
    out.push_back(static_cast<unsigned char>(h & 0xFF));
    out.push_back(static_cast<unsigned char>(h >> 8));
    for (uint32_t s = 0; s < g / 32; ++s) {
      uint8_t codes[32];
      for (uint32_t i = 0; i < 32; ++i) {
        const float q = scale == 0.0f ? 0.0f : std::clamp(reference_round_half_away(v[s * 32 + i] / scale), -8.0f, 7.0f);
        codes[i] = static_cast<uint8_t>(static_cast<int>(q) + 8);
      }
      for (uint32_t j = 0; j < 16; ++j) out.push_back(static_cast<unsigned char>(codes[j] | (codes[j + 16] << 4)));
    }
  }
  return out;
}

std::vector<unsigned char> reference_q8f16(const std::vector<float> &x) {
  std::vector<unsigned char> out;
  for (size_t b = 0; b < x.size() / 32; ++b) {
    const float *v = x.data() + b * 32;
    float amax = 0.0f;
    for (uint32_t i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(v[i]));
    const uint16_t h = f32_to_f16(amax / 127.0f);
    const float scale = f16_to_f32(h);
    out.push_back(static_cast<unsigned char>(h & 0xFF));
    out.push_back(static_cast<unsigned char>(h >> 8));
    for (uint32_t i = 0; i < 32; ++i) {
      const float q = scale == 0.0f ? 0.0f : std::clamp(reference_round_half_away(v[i] / scale), -127.0f, 127.0f);
      out.push_back(static_cast<unsigned char>(static_cast<int8_t>(q)));
    }
  }
  return out;
}

}  // namespace

TEST_CASE("q4 and q8f16 quantisers write the plain rule's bytes: halves, ties of the extreme, zeros, tiny and huge",
          "[dtype][q4][q8f16]") {
  std::mt19937 rng(7);
  std::vector<std::vector<float>> groups;
  // Exact halves of the step: the scale of a group whose extreme is -8 (q4) is exactly 1, so
  // k + 0.5 lands on a tie; for q8f16 an extreme of 127 gives scale 1.
  std::vector<float> halves_q4(32), halves_q8(32);
  for (int i = 0; i < 32; ++i) {
    halves_q4[i] = i == 0 ? -8.0f : static_cast<float>(i % 15 - 7) + (i % 2 ? 0.5f : -0.5f);
    halves_q8[i] = i == 0 ? 127.0f : static_cast<float>(i * 7 % 250 - 125) + (i % 2 ? 0.5f : -0.5f);
  }
  groups.push_back(halves_q4);
  groups.push_back(halves_q8);
  std::vector<float> tie(32, 0.25f);  // +m and -m both largest: the first decides the sign
  tie[3] = -1.0f;
  tie[9] = 1.0f;
  groups.push_back(tie);
  std::vector<float> zeros(32, 0.0f);
  zeros[0] = -0.0f;  // all zero with a negative zero first: the scale is still 0 / -8
  groups.push_back(zeros);
  std::vector<float> tiny(32), huge(32), mixed(32);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int i = 0; i < 32; ++i) {
    tiny[i] = u(rng) * 4e-7f;   // f16-subnormal scales
    huge[i] = u(rng) * 6e4f;    // near f16's range
    mixed[i] = i == 5 ? 3e-3f : u(rng) * 1e-9f;
  }
  groups.push_back(tiny);
  groups.push_back(huge);
  groups.push_back(mixed);
  for (int r = 0; r < 200; ++r) {
    std::vector<float> g(32);
    for (float &v : g) v = u(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 20) - 10);
    groups.push_back(g);
  }
  for (const std::vector<float> &g : groups) {
    std::vector<unsigned char> q4(row_bytes(DType::Q4, 32, 32)), q8(row_bytes(DType::Q8F16, 32, 32));
    quantize_row(DType::Q4, 32, g.data(), 32, q4.data());
    quantize_row(DType::Q8F16, 32, g.data(), 32, q8.data());
    CHECK(q4 == reference_q4(g, 32));
    CHECK(q8 == reference_q8f16(g));
  }
  // Wider q4 groups over the concatenation.
  std::vector<float> all;
  for (size_t i = 0; i < 128; ++i) all.insert(all.end(), groups[i].begin(), groups[i].end());
  for (uint32_t g : {64u, 128u}) {
    std::vector<unsigned char> q(row_bytes(DType::Q4, g, all.size()));
    quantize_row(DType::Q4, g, all.data(), all.size(), q.data());
    CHECK(q == reference_q4(all, g));
  }
}

namespace {

// The largest |row[c] − the value `bytes` (a row of `dtype`) dequantises to|, in double.
double round_trip_error(DType dtype, uint32_t group_size, const std::vector<unsigned char> &bytes,
                        const std::vector<float> &row) {
  std::vector<float> back(row.size());
  dequantize_row(dtype, group_size, bytes.data(), row.size(), back.data());
  double error = 0.0;
  for (size_t c = 0; c < row.size(); ++c) error = std::max(error, std::fabs(static_cast<double>(row[c]) - back[c]));
  return error;
}

}  // namespace

TEST_CASE("q4, q8f16, mxfp4: the AVX2 row quantisers write the scalar rules' bytes and measure the round trip's error",
          "[dtype][q4][q8f16][mxfp4]") {
  // Rows of every kind of group the scalar rule has a branch or an edge for: exact halves of
  // the step, +m and -m tied for the extreme (either first), all zeros (both signs first),
  // f16-subnormal and zero scales, values near q4's limit, and random magnitudes.
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> row;
  auto group = [&](auto fill) {
    for (int i = 0; i < 32; ++i) row.push_back(fill(i));
  };
  group([](int i) { return i == 0 ? -8.0f : static_cast<float>(i % 15 - 7) + (i % 2 ? 0.5f : -0.5f); });
  group([](int i) { return i == 7 ? 8.0f : static_cast<float>(i % 16 - 8) - 0.5f * static_cast<float>(i % 3 - 1); });
  group([](int i) { return i == 0 ? 127.0f : static_cast<float>(i * 7 % 250 - 125) + (i % 2 ? 0.5f : -0.5f); });
  group([](int i) { return i == 0 ? -127.0f : std::nextafter(static_cast<float>(i * 9 % 250 - 125) + 0.5f, 0.0f); });
  group([](int i) { return i == 3 ? -1.0f : i == 9 ? 1.0f : 0.25f; });
  group([](int i) { return i == 3 ? 1.0f : i == 9 ? -1.0f : -0.25f; });
  group([](int i) { return i == 31 ? -2.0f : 1.0f; });  // the extreme in the last lane
  group([](int i) { return i == 0 ? -0.0f : 0.0f; });
  group([](int) { return 0.0f; });
  group([&](int) { return u(rng) * 1e-7f; });   // scale rounds to 0 in f16: codes 8, error |x|
  group([&](int) { return u(rng) * 4e-7f; });   // f16-subnormal scales
  // A scale of one f16-subnormal step for 1.4 steps' worth: the quotients pass the clamps.
  group([&](int i) { return i == 2 ? -1.4f * 127.0f * 0x1p-24f : u(rng) * 1e-5f; });
  group([&](int i) { return i == 2 ? 1.4f * 8.0f * 0x1p-24f : u(rng) * 1e-7f; });
  group([&](int i) { return i == 12 ? 65504.0f * 8.0f * 0.999f : u(rng) * 6e4f; });
  group([&](int i) { return i == 5 ? 3e-3f : u(rng) * 1e-9f; });
  for (int r = 0; r < 500; ++r)
    group([&](int) { return u(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20); });
  // Quotients on both sides of every half step (x / s = k + 0.5 ± an ulp) at scale 1.
  group([](int i) { return i == 0 ? -8.0f : std::nextafter(static_cast<float>(i % 15 - 7) + 0.5f, 100.0f); });
  group([](int i) { return i == 0 ? -8.0f : std::nextafter(static_cast<float>(i % 15 - 7) + 0.5f, -100.0f); });
  while (row.size() % 128 != 0) group([&](int) { return u(rng); });
  const size_t cols = row.size();
#if defined(COLIBRI_IMAGE_AVX2)
  if (colibri::kernels::best_isa() < colibri::kernels::Isa::Avx2) {
    WARN("skipped: this CPU lacks AVX2, which the AVX2 quantisers need");
    return;
  }
  for (uint32_t g : {32u, 64u, 128u}) {
    INFO("group size " << g);
    std::vector<unsigned char> simd(row_bytes(DType::Q4, g, cols)), scalar(simd.size());
    const double error = detail::quantize_row_q4_avx2(row.data(), cols, g, simd.data());
    for (size_t c = 0; c < cols; c += g) detail::quantize_q4_scalar(row.data() + c, g, scalar.data() + c / g * (2 + g / 2));
    REQUIRE(simd == scalar);
    CHECK(error == round_trip_error(DType::Q4, g, scalar, row));
    CHECK(error > 0.0);
  }
  // mxfp4 on the same rows and on groups only it can store: near f32's range, and subnormal
  // (the shared exponent clamped at -127, the quotients then rounded to f32 subnormals).
  {
    std::vector<float> wide = row;
    for (int i = 0; i < 32; ++i) wide.push_back(u(rng) * 3e38f);
    for (int i = 0; i < 32; ++i) wide.push_back(u(rng) * 1e-40f);
    for (int i = 0; i < 32; ++i) wide.push_back(i == 4 ? 1e-30f : u(rng) * 1e-44f);
    for (int i = 0; i < 32; ++i) wide.push_back(i % 2 ? 0.25f * static_cast<float>(i % 25) : -0.0f);  // ties
    const size_t n = wide.size();
    std::vector<unsigned char> simd(row_bytes(DType::MXFP4, 32, n)), scalar(simd.size());
    const double error = detail::quantize_row_mxfp4_avx2(wide.data(), n, simd.data());
    for (size_t c = 0; c < n; c += 32) detail::quantize_mxfp4_scalar(wide.data() + c, scalar.data() + c / 32 * 17);
    REQUIRE(simd == scalar);
    CHECK(error == round_trip_error(DType::MXFP4, 32, scalar, wide));
  }
  // q8f16 on the same rows (groups of 32).
  std::vector<unsigned char> simd(row_bytes(DType::Q8F16, 32, cols)), scalar(simd.size());
  const double error = detail::quantize_row_q8f16_avx2(row.data(), cols, simd.data());
  for (size_t c = 0; c < cols; c += 32) detail::quantize_q8f16_scalar(row.data() + c, scalar.data() + c / 32 * 34);
  REQUIRE(simd == scalar);
  CHECK(error == round_trip_error(DType::Q8F16, 32, scalar, row));
#else
  (void)cols;
  WARN("skipped: this build has no AVX2 conversions (not x86-64)");
#endif
}

TEST_CASE("quantize_row_measured: the block dtypes' bytes and the largest round-trip error", "[dtype]") {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  const size_t cols = 1024;
  std::vector<float> row(cols), scratch(cols);
  for (float &v : row) v = u(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 8) - 4);
  for (auto [dtype, g] : {std::pair{DType::Q4, 32u}, std::pair{DType::Q4, 128u}, std::pair{DType::Q8F16, 32u},
                          std::pair{DType::MXFP4, 32u}}) {
    INFO(dtype_name(dtype) << " group " << g);
    std::vector<unsigned char> measured(row_bytes(dtype, g, cols)), plain(measured.size());
    const double error = quantize_row_measured(dtype, g, row.data(), cols, measured.data(), scratch.data());
    quantize_row(dtype, g, row.data(), cols, plain.data());
    REQUIRE(measured == plain);
    CHECK(error == round_trip_error(dtype, g, plain, row));
    CHECK(error > 0.0);
  }
}

TEST_CASE("round_trip_extremes: repack's float report over the finite values, as the double formula gives it",
          "[dtype]") {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x;
  // Magnitudes below 2^15 and the specials: what first_unstorable lets through to f16.
  for (int i = 0; i < 4000; ++i) x.push_back(u(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 55) - 40));
  for (float special : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN(), 65519.0f, -65504.0f, 3e-8f, -1e-45f, -0.0f})
    x.insert(x.begin() + static_cast<long>(rng() % x.size()), special);
  for (DType dtype : {DType::F16, DType::BF16, DType::F32}) {
    INFO(dtype_name(dtype));
    std::vector<uint16_t> narrow(x.size() * 2);
    std::vector<float> back(x.size());
    encode_floats(dtype, x.data(), x.size(), narrow.data());
    decode_floats(dtype, narrow.data(), x.size(), back.data());
    double value = 0.0, error = 0.0;
    for (size_t c = 0; c < x.size(); ++c) {
      const double a = std::fabs(static_cast<double>(x[c]));
      if (!std::isfinite(a)) continue;
      value = std::max(value, a);
      error = std::max(error, std::fabs(static_cast<double>(x[c]) - back[c]));
    }
    double got_value = -1.0, got_error = -1.0;
    round_trip_extremes(x.data(), back.data(), x.size(), &got_value, &got_error);
    CHECK(got_value == value);
    CHECK(got_error == error);
    CHECK(value == 65519.0);  // the infinities and the NaN left out
    if (dtype == DType::F32) CHECK(error == 0.0);
    else CHECK(error > 0.0);
  }
}

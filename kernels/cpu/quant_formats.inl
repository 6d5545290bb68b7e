// kernels/cpu/quant_formats.inl — the weight block formats that multiply q8 activations (q8,
// q4, q8f16, mxfp4; kernels.h), described once for every ISA translation unit. Included inside
// the anonymous namespace of each, after tile_args.inl and after defining
//   float f16_scale(uint16_t h)   h as fp32 (exact: every ISA's conversion gives the same bits
//                                 for every non-NaN h)
//
// A format describes one weight row as a sequence of blocks of kAct values, the block length
// of the activations it multiplies (q8: its group size; the others: 32):
//   kKind                   how a block's stored codes read as integers (the SIMD loads)
//   codes(row, b)           address of block b's codes (kAct bytes for Int8, kAct / 2 else)
//   scale(row, b)           block b's weight scale as fp32
//   value(codes, i)         integer weight i of the block (the scalar reference)
// The rule every tile follows (kernels.h, "the lane rule" below): 16 fp32 lanes per output,
// acc_lane = fma(float(Σ of 4 value·q8_value(xq)), scale·dx, acc_lane).

enum class CodeKind { Int8, Int4, E2m1 };
// How a block's scale is stored at scale_at(row, b): fp32, IEEE f16, or an e8m0 exponent byte.
enum class ScaleKind { F32, F16, E8m0 };

// 4-bit code i of a 32-value sub-block: byte i % 16, low nibble for i < 16, high for i >= 16.
inline int nibble(const unsigned char *c, int i) { return i < 16 ? c[i] & 0x0F : c[i - 16] >> 4; }

inline float load_f16_scale(const unsigned char *p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_scale(h);
}

// 2^(e − 128): the MXFP4 scale 2^(e − 127) halved, because the integer codes are twice the
// e2m1 values. e = 0 and 1 give fp32 subnormals (exact); e = 255 is NaN.
inline float e8m0_half_scale(uint8_t e) {
  if (e == kE8m0Nan) return __builtin_nanf("");
  const uint32_t bits = e >= 2 ? static_cast<uint32_t>(e - 1) << 23 : 0x00200000u << e;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The SIMD tiles read 4-bit codes as unsigned bytes: q4 codes as stored (0..15, the value plus
// kQ4CodeOffset), mxfp4 through this table (twice the e2m1 value plus kE2m1Bias, 0..24). The
// bias times the activation's 4-value sums is subtracted from the exact int32 sums (unsigned
// codes need no sign trick on the unsigned side of vpmaddubsw / vpdpbusd).
inline constexpr int kE2m1Bias = 12;
inline constexpr int8_t kE2m1DoubledBiased[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};
template <class WF>
inline constexpr int kCodeBias = WF::kKind == CodeKind::Int4 ? kQ4CodeOffset : WF::kKind == CodeKind::E2m1 ? kE2m1Bias : 0;

// Blocks of kAct values per 64-byte line of a weight row (at least 1): the tiles prefetch once
// per line, not once per block (a q4/32 block is 18 bytes: 3.5 blocks to a line).
template <class WF>
inline constexpr size_t kBlocksPerLine = 64 * WF::kSubsPerBlock / WF::kBlock > 0 ? 64 * WF::kSubsPerBlock / WF::kBlock : 1;

template <uint32_t GS>
struct FormatQ8 {
  static constexpr CodeKind kKind = CodeKind::Int8;
  static constexpr uint32_t kAct = GS;
  static constexpr size_t kBlock = 4 + GS;
  static constexpr size_t kSubsPerBlock = 1;  // kAct-value blocks per stored block
  static constexpr ScaleKind kScale = ScaleKind::F32;
  static const unsigned char *codes(const unsigned char *row, size_t b) { return row + b * kBlock + 4; }
  static const unsigned char *scale_at(const unsigned char *row, size_t b) { return row + b * kBlock; }
  static float scale(const unsigned char *row, size_t b) {
    float s;
    std::memcpy(&s, scale_at(row, b), 4);
    return s;
  }
  static int32_t value(const unsigned char *c, int i) { return q8_value(static_cast<int8_t>(c[i])); }
};

template <uint32_t G>
struct FormatQ4 {
  static constexpr CodeKind kKind = CodeKind::Int4;
  static constexpr uint32_t kAct = kSubBlock;
  static constexpr size_t kSubs = G / kSubBlock;
  static constexpr size_t kSubsPerBlock = kSubs;
  static constexpr size_t kBlock = 2 + G / 2;
  static constexpr ScaleKind kScale = ScaleKind::F16;
  static const unsigned char *codes(const unsigned char *row, size_t b) {
    return row + (b / kSubs) * kBlock + 2 + (b % kSubs) * (kSubBlock / 2);
  }
  static const unsigned char *scale_at(const unsigned char *row, size_t b) { return row + (b / kSubs) * kBlock; }
  static float scale(const unsigned char *row, size_t b) { return load_f16_scale(scale_at(row, b)); }
  static int32_t value(const unsigned char *c, int i) { return nibble(c, i) - kQ4CodeOffset; }
};

struct FormatQ8F16 {
  static constexpr CodeKind kKind = CodeKind::Int8;
  static constexpr uint32_t kAct = kSubBlock;
  static constexpr size_t kBlock = kQ8F16BlockBytes;
  static constexpr size_t kSubsPerBlock = 1;
  static constexpr ScaleKind kScale = ScaleKind::F16;
  static const unsigned char *codes(const unsigned char *row, size_t b) { return row + b * kBlock + 2; }
  static const unsigned char *scale_at(const unsigned char *row, size_t b) { return row + b * kBlock; }
  static float scale(const unsigned char *row, size_t b) { return load_f16_scale(scale_at(row, b)); }
  static int32_t value(const unsigned char *c, int i) { return q8_value(static_cast<int8_t>(c[i])); }
};

struct FormatMxfp4 {
  static constexpr CodeKind kKind = CodeKind::E2m1;
  static constexpr uint32_t kAct = kSubBlock;
  static constexpr size_t kBlock = kMxfp4BlockBytes;
  static constexpr size_t kSubsPerBlock = 1;
  static constexpr ScaleKind kScale = ScaleKind::E8m0;
  static const unsigned char *codes(const unsigned char *row, size_t b) { return row + b * kBlock + 1; }
  static const unsigned char *scale_at(const unsigned char *row, size_t b) { return row + b * kBlock; }
  static float scale(const unsigned char *row, size_t b) { return e8m0_half_scale(*scale_at(row, b)); }
  static int32_t value(const unsigned char *c, int i) { return kE2m1Doubled[nibble(c, i)]; }
};

// ---- the lane rule (kernels.h) ----------------------------------------------------------------
// Every (row, token) pair owns 16 fp32 lane accumulators. The reduction dimension is cut into
// 32-value sub-blocks u; within one, the 8 groups of 4 neighbouring values j = 0..7 (values
// 4j..4j+3) give exact int32 sums isum(u, j) = Σ w_int·q8_value(x_q), and each goes to lane
//   lane(u, j) = 8·(j / 4) + 4·(u mod 2) + (j mod 4)
// as acc = fma(float(isum), s_u, acc), u ascending, with s_u = dw·dx (one fp32 product of the
// scales of the weight block and the activation block that hold sub-block u). The 16 lanes are
// then summed by one fixed tree (reduce_lanes). This is what a 512-bit VNNI dot product gives
// for two sub-blocks side by side ([u even: values 0-15 | u odd: 0-15 | u even: 16-31 | u odd:
// 16-31]); narrower ISAs hold the same 16 lanes in more registers, in any order, and sum them
// with the same tree, so every ISA gives the same bits.
inline constexpr int kLaneCount = 16;
inline constexpr int lane_of(size_t u, int j) { return 8 * (j / 4) + 4 * static_cast<int>(u % 2) + (j % 4); }

// The fixed tree over 16 lanes: t_i = lane i + lane i+8, then ((t0+t1)+(t2+t3)) + ((t4+t5)+(t6+t7)).
inline float reduce_lanes(const float *lanes) {
  float t[8];
  for (int i = 0; i < 8; ++i) t[i] = lanes[i] + lanes[i + 8];
  return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}

// The reference lane rule over activation blocks [b_begin, b_end) of one weight row and one q8
// activation row, continuing the 16 lanes of `lanes`. x_q8 points at activation block
// x_first (the callers that quantise a long row in pieces hand over one piece at a time).
// No tree vectorisation under GCC: it turned this kind of int8 dot loop into vpdpbusd in the
// VNNI build and put the signed codes on the instruction's unsigned side (kernels_tests caught
// it); clang does not.
#if defined(__GNUC__) && !defined(__clang__)
#define COLIBRI_NO_TREE_VECTORIZE __attribute__((optimize("no-tree-vectorize")))
#else
#define COLIBRI_NO_TREE_VECTORIZE
#endif
template <class WF>
COLIBRI_NO_TREE_VECTORIZE void reference_lanes(const unsigned char *row, const unsigned char *x_q8, size_t x_first,
                                               size_t b_begin, size_t b_end, float *lanes) {
  constexpr size_t kXBlock = 4 + WF::kAct;
  constexpr size_t kSubs = WF::kAct / kSubBlock;
  for (size_t b = b_begin; b < b_end; ++b) {
    const unsigned char *xb = x_q8 + (b - x_first) * kXBlock;
    float dx;
    std::memcpy(&dx, xb, 4);
    const float s = WF::scale(row, b) * dx;
    const unsigned char *c = WF::codes(row, b);
    for (size_t h = 0; h < kSubs; ++h) {
      const size_t u = b * kSubs + h;
      for (int j = 0; j < 8; ++j) {
        int32_t isum = 0;
        for (int i = 0; i < 4; ++i) {
          const int v = static_cast<int>(h * kSubBlock) + 4 * j + i;
          isum += WF::value(c, v) * q8_value(static_cast<int8_t>(xb[4 + v]));
        }
        float &lane = lanes[lane_of(u, j)];
        lane = __builtin_fmaf(static_cast<float>(isum), s, lane);
      }
    }
  }
}

// Calls f.template operator()<WF>() with the format of (dtype, group_size); false for a dtype
// that does not take q8 activations (the callers checked the arguments already).
template <class F>
bool with_format(DType dtype, uint32_t group_size, F &&f) {
  switch (dtype) {
    case DType::Q8:
      if (group_size == kQ8GroupSizeSmall) f.template operator()<FormatQ8<32>>();
      else f.template operator()<FormatQ8<64>>();
      return true;
    case DType::Q4:
      if (group_size == 32) f.template operator()<FormatQ4<32>>();
      else if (group_size == 64) f.template operator()<FormatQ4<64>>();
      else f.template operator()<FormatQ4<128>>();
      return true;
    case DType::Q8F16: f.template operator()<FormatQ8F16>(); return true;
    case DType::MXFP4: f.template operator()<FormatMxfp4>(); return true;
    default: return false;
  }
}

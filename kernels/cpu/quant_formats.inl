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
// The block rule of every tile (kernels.h): acc = acc + (scale·dx)·float(Σ value·q8_value(xq)).

enum class CodeKind { Int8, Int4, E2m1 };

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
  static const unsigned char *codes(const unsigned char *row, size_t b) { return row + b * kBlock + 4; }
  static float scale(const unsigned char *row, size_t b) {
    float s;
    std::memcpy(&s, row + b * kBlock, 4);
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
  static const unsigned char *codes(const unsigned char *row, size_t b) {
    return row + (b / kSubs) * kBlock + 2 + (b % kSubs) * (kSubBlock / 2);
  }
  static float scale(const unsigned char *row, size_t b) { return load_f16_scale(row + (b / kSubs) * kBlock); }
  static int32_t value(const unsigned char *c, int i) { return nibble(c, i) - kQ4CodeOffset; }
};

struct FormatQ8F16 {
  static constexpr CodeKind kKind = CodeKind::Int8;
  static constexpr uint32_t kAct = kSubBlock;
  static constexpr size_t kBlock = kQ8F16BlockBytes;
  static constexpr size_t kSubsPerBlock = 1;
  static const unsigned char *codes(const unsigned char *row, size_t b) { return row + b * kBlock + 2; }
  static float scale(const unsigned char *row, size_t b) { return load_f16_scale(row + b * kBlock); }
  static int32_t value(const unsigned char *c, int i) { return q8_value(static_cast<int8_t>(c[i])); }
};

struct FormatMxfp4 {
  static constexpr CodeKind kKind = CodeKind::E2m1;
  static constexpr uint32_t kAct = kSubBlock;
  static constexpr size_t kBlock = kMxfp4BlockBytes;
  static constexpr size_t kSubsPerBlock = 1;
  static const unsigned char *codes(const unsigned char *row, size_t b) { return row + b * kBlock + 1; }
  static float scale(const unsigned char *row, size_t b) { return e8m0_half_scale(row[b * kBlock]); }
  static int32_t value(const unsigned char *c, int i) { return kE2m1Doubled[nibble(c, i)]; }
};

// The reference block rule over blocks [b_begin, b_end) of one weight row and one q8
// activation row (x_q8 points at its block 0), continuing acc.
template <class WF>
float reference_blocks(const unsigned char *row, const unsigned char *x_q8, size_t b_begin, size_t b_end, float acc) {
  constexpr size_t kXBlock = 4 + WF::kAct;
  for (size_t b = b_begin; b < b_end; ++b) {
    const unsigned char *xb = x_q8 + b * kXBlock;
    float dx;
    std::memcpy(&dx, xb, 4);
    const unsigned char *c = WF::codes(row, b);
    int32_t isum = 0;
    for (int i = 0; i < static_cast<int>(WF::kAct); ++i) isum += WF::value(c, i) * q8_value(static_cast<int8_t>(xb[4 + i]));
    acc = acc + (WF::scale(row, b) * dx) * static_cast<float>(isum);
  }
  return acc;
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

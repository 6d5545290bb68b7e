// kernels/cpu/q8_avx2.inl — the 256-bit tile of the q8-activation formats (q8, q4, q8f16,
// mxfp4), and the q8 quantiser (q8_quantize_avx2.inl, included at the end). Included (inside
// an anonymous namespace, after tile_args.inl and quant_formats.inl) by avx2.cpp, whose table uses the tile, and by avx512_body.inl, which takes
// the quantiser and the loaders (its tile is q8_avx512.inl): define COLIBRI_Q8_NO_YMM_TILE
// before including to leave the tile out.
//
// The tile reproduces the scalar lane rule (quant_formats.inl) bit for bit: the 16 lanes of a
// (row, token) pair live in two ymm, e for the even sub-blocks and o for the odd ones. A 32-value
// sub-block in value order gives vpmaddubsw + vpmaddwd sums of values 4q..4q+3 in int32 lane q,
// so lane q of e is canonical lane 8·(q / 4) + q % 4 and lane q of o that plus 4. The integer
// sums are exact (any instruction sequence gives the same integers); then one FMA per lane and
// sub-block, and the canonical tree at the end (fold_lanes, then Simd::reduce8).
// The unsigned side of vpmaddubsw takes a non-negative operand: 4-bit codes as stored (q4 code,
// mxfp4 through kE2m1DoubledBiased), with the code bias times the activation's 4-value sums
// subtracted afterwards; for two int8 operands, |a| with b signed by a (both lie in [-127, 127]:
// neither the negation nor the int16 pair sums can overflow).

inline __m256i ones_epi16() { return _mm256_set1_epi16(1); }

// Σ of 4 neighbouring u·s products per int32 lane (u unsigned, s signed; the int16 pair sums
// must not saturate: every caller keeps |u·s| <= 127·127 or smaller).
inline __m256i dot4_u8s8(__m256i u, __m256i s) { return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), ones_epi16()); }

// 32 stored weights with the format's reading of -128 as -127 (kernels.h q8_value).
inline __m256i load_q8_weights(const unsigned char *p) {
  return _mm256_max_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)), _mm256_set1_epi8(kQ8MinValue));
}

// The 32 values of 16 bytes of 4-bit codes in value order (low nibbles are values 0..15, high
// nibbles 16..31) as unsigned bytes: q4 codes as stored, mxfp4 codes through the biased table.
template <class WF>
inline __m256i widen_codes(__m128i raw) {
  const __m256i nibbles = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
  if constexpr (WF::kKind == CodeKind::E2m1) {
    const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i *>(kE2m1DoubledBiased));
    return _mm256_shuffle_epi8(_mm256_set_m128i(table, table), nibbles);
  } else {
    return nibbles;
  }
}

// Sub-block u (32 values) of a weight row: codes in value order (int8 for q8/q8f16, unsigned
// biased codes for q4/mxfp4) and the scale of the block that holds it.
template <class WF>
struct SubBlock {
  static constexpr size_t kSubs = WF::kAct / kSubBlock;  // sub-blocks per activation block (q8/64: 2)
  static const unsigned char *codes(const unsigned char *row, size_t u) {
    return WF::codes(row, u / kSubs) + (u % kSubs) * kSubBlock;
  }
  static __m256i load(const unsigned char *row, size_t u) {
    if constexpr (WF::kKind == CodeKind::Int8) {
      return load_q8_weights(codes(row, u));
    } else {
      return widen_codes<WF>(_mm_loadu_si128(reinterpret_cast<const __m128i *>(codes(row, u))));
    }
  }
  static float scale(const unsigned char *row, size_t u) { return WF::scale(row, u / kSubs); }
  // The activation's sub-block u: its 32 int8 values and its block's scale.
  static const unsigned char *x_codes(const unsigned char *x, size_t u) {
    return x + (u / kSubs) * (4 + WF::kAct) + 4 + (u % kSubs) * kSubBlock;
  }
  static float x_scale(const unsigned char *x, size_t u) {
    float dx;
    std::memcpy(&dx, x + (u / kSubs) * (4 + WF::kAct), 4);
    return dx;
  }
};

#ifndef COLIBRI_Q8_NO_YMM_TILE
// The 8 canonical pair sums t_i = lane i + lane i+8 of the (e, o) lanes: [e_lo + e_hi, o_lo + o_hi].
inline __m256 fold_lanes(__m256 e, __m256 o) {
  return _mm256_add_ps(_mm256_permute2f128_ps(e, o, 0x20), _mm256_permute2f128_ps(e, o, 0x31));
}

// The tile kernel of the q8-activation formats (interface: see "A tile kernel" in
// matmul_generic.inl). Pair p = r * TT + t holds acc[p][0] (even sub-blocks), acc[p][1] (odd).
template <class WF, Path P>
struct QTile {
  static constexpr size_t kStep = 2 * kSubBlock;  // k-blocks start on even sub-blocks
  static constexpr size_t kBlockK = 2048;
  static constexpr size_t state_floats(int rows, int tokens) { return size_t(rows) * tokens * kLaneCount; }
  static constexpr int decode_rows(int tokens) { return kQ8DecodeRows(tokens); }
  static constexpr int kGemmR = kQ8GemmRows;
  static constexpr int kGemmT = kQ8GemmTokens;
  static constexpr size_t kDecodeChunk = 8;
  static constexpr bool kInt8 = WF::kKind == CodeKind::Int8;
  using Sub = SubBlock<WF>;

  // One sub-block u into the accumulators of parity `par`.
  template <int R, int TT, int par>
  __attribute__((always_inline)) static void sub_block(const TileArgs &a, size_t u, __m256 (&acc)[R * TT][2]) {
    const size_t b = u / Sub::kSubs;
    // One prefetch per row and 64-byte line of weights (kBlocksPerLine blocks); no result
    // depends on it.
    const bool prefetch = u % Sub::kSubs == 0 && b % kBlocksPerLine<WF> == 0;
    if constexpr (TT == 1) {
      // One token: the activation's part (|x|, or the bias correction) once for all R rows.
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(Sub::x_codes(a.x, u)));
      const float dx = Sub::x_scale(a.x, u);
      __m256i x_abs = xv, neg_bias = xv;
      if constexpr (kInt8) {
        x_abs = _mm256_abs_epi8(xv);
      } else {
        neg_bias = _mm256_sub_epi32(_mm256_setzero_si256(), dot4_u8s8(_mm256_set1_epi8(kCodeBias<WF>), xv));
      }
      for (int r = 0; r < R; ++r) {
        const unsigned char *row = a.w + r * a.w_stride;
        if (prefetch) prefetch_weights<Simd, P, R>(WF::codes(row, b), a.w_stride);
        const __m256i w = Sub::load(row, u);
        const __m256i isum = kInt8 ? dot4_u8s8(x_abs, _mm256_sign_epi8(w, xv)) : _mm256_add_epi32(neg_bias, dot4_u8s8(w, xv));
        const __m256 s = _mm256_set1_ps(Sub::scale(row, u) * dx);
        acc[r][par] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), s, acc[r][par]);
      }
    } else {
      // Several tokens: each row's codes (and |w|), loaded once, serve every token.
      __m256i w_raw[R], w_abs[R];
      float dw[R];
      for (int r = 0; r < R; ++r) {
        const unsigned char *row = a.w + r * a.w_stride;
        if (prefetch) prefetch_weights<Simd, P, R>(WF::codes(row, b), a.w_stride);
        w_raw[r] = Sub::load(row, u);
        if constexpr (kInt8) w_abs[r] = _mm256_abs_epi8(w_raw[r]);
        dw[r] = Sub::scale(row, u);
      }
      for (int t = 0; t < TT; ++t) {
        const unsigned char *x = a.x + t * a.x_stride;
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(Sub::x_codes(x, u)));
        const float dx = Sub::x_scale(x, u);
        __m256i neg_bias = xv;
        if constexpr (!kInt8)
          neg_bias = _mm256_sub_epi32(_mm256_setzero_si256(), dot4_u8s8(_mm256_set1_epi8(kCodeBias<WF>), xv));
        for (int r = 0; r < R; ++r) {
          const __m256i isum = kInt8 ? dot4_u8s8(w_abs[r], _mm256_sign_epi8(xv, w_raw[r]))
                                     : _mm256_add_epi32(neg_bias, dot4_u8s8(w_raw[r], xv));
          const __m256 s = _mm256_set1_ps(dw[r] * dx);
          acc[r * TT + t][par] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), s, acc[r * TT + t][par]);
        }
      }
    }
  }

  template <int R, int TT>
  static void span(const TileArgs &a, size_t k_begin, size_t k_end, float *state, bool first, bool last) {
    constexpr int kPairs = R * TT;
    __m256 acc[kPairs][2];
    for (int p = 0; p < kPairs; ++p)
      for (int h = 0; h < 2; ++h)
        acc[p][h] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(state + p * kLaneCount + 8 * h);
    const size_t u_end = k_end / kSubBlock;
    for (size_t u = k_begin / kSubBlock; u < u_end; u += 2) {
      sub_block<R, TT, 0>(a, u, acc);
      if (u + 1 < u_end) sub_block<R, TT, 1>(a, u + 1, acc);
    }
    if (!last) {
      for (int p = 0; p < kPairs; ++p)
        for (int h = 0; h < 2; ++h) _mm256_storeu_ps(state + p * kLaneCount + 8 * h, acc[p][h]);
      return;
    }
    __m256 folded[kPairs];
    for (int p = 0; p < kPairs; ++p) folded[p] = fold_lanes(acc[p][0], acc[p][1]);
    store_tile_sums<Simd, R, TT>(folded, a.y, a.y_stride);
  }

  template <int R, int TT>
  static void run(const TileArgs &a) {
    span<R, TT>(a, 0, a.cols, nullptr, true, true);
  }
};
#endif  // COLIBRI_Q8_NO_YMM_TILE

#include "kernels/cpu/q8_quantize_avx2.inl"

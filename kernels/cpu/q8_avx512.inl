// kernels/cpu/q8_avx512.inl — the 512-bit tile of the q8-activation formats (q8, q4, q8f16,
// mxfp4) for the AVX-512 tables (BW; with COLIBRI_Q8_VNNI defined, vpdpbusd does the int8 dot).
// Included inside the anonymous namespace of avx512_body.inl, after q8_avx2.inl (SubBlock, the
// 4-bit code widening, the quantiser) and before matmul_generic.inl.
//
// The lane rule of quant_formats.inl, bit for bit: one zmm holds the 16 lanes of a (row, token)
// pair, two 32-value sub-blocks u (even) and u + 1 side by side, each int32 lane the exact sum of
// 4 neighbouring products (vpdpbusd, or vpmaddubsw + vpmaddwd), then one FMA per lane.
//   4-bit codes (q4, mxfp4): [u 0-15 | u+1 0-15 | u 16-31 | u+1 16-31], which is the canonical
//     lane order itself (lane(u, j) = 8·(j / 4) + 4·(u mod 2) + j mod 4); the activation is
//     loaded into the same order (one vshufi64x2 per token and pair, shared by every row).
//   int8 codes (q8, q8f16): [u 0-31 | u+1 0-31] as stored, whose 128-bit chunks are canonical
//     chunks 0, 2, 1, 3; the lanes are put in canonical order once, before the final tree.
// The unsigned side of the int8 dot: 4-bit codes as stored (minus the code bias times the
// activation's 4-value sums, one vpdpbusd per token and pair); for q8 weights with one token,
// |x| with the weights signed by x; with several tokens, x + 128 against the signed weights
// minus 128 times the weights' 4-value sums (once per row and pair) under VNNI, and |w| with x
// signed by w without it (x + 128 would saturate vpmaddubsw's int16 pair sums).
// A row whose last sub-block is even runs it as a pair whose odd half reads as zero codes and
// zero scales: its lanes get fma(0, 0, lane), which changes no bit (no lane is ever -0).

inline __m512i dot4_u8s8_512(__m512i acc, __m512i u, __m512i s) {
#ifdef COLIBRI_Q8_VNNI
  return _mm512_dpbusd_epi32(acc, u, s);
#else
  return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
#endif
}

// Register chunk order [0, 2, 1, 3] <-> [0, 1, 2, 3] (the permutation is its own inverse).
constexpr int kSwapMiddleChunks = _MM_SHUFFLE(3, 1, 2, 0);

template <class WF>
struct Pair512 {
  using Sub = SubBlock<WF>;
  static constexpr bool kInt8 = WF::kKind == CodeKind::Int8;
  // Sub-blocks u and u + 1 (u even) of one row: their codes are contiguous (q8/64: one block;
  // q4/64 and q4/128: one block's codes), and they share one weight scale.
  static constexpr bool kOneBlock = Sub::kSubs == 2 || WF::kSubsPerBlock % 2 == 0;

  // The codes of the pair starting at sub-block u (kOdd: u + 1 exists; else it reads as zeros).
  template <bool kOdd>
  static __m512i codes(const unsigned char *row, size_t u) {
    if constexpr (kInt8) {
      __m512i z;
      if constexpr (kOdd && kOneBlock) {
        z = _mm512_loadu_si512(Sub::codes(row, u));
      } else {
        const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(Sub::codes(row, u)));
        if constexpr (kOdd)
          z = _mm512_inserti64x4(_mm512_castsi256_si512(lo),
                                 _mm256_loadu_si256(reinterpret_cast<const __m256i *>(Sub::codes(row, u + 1))), 1);
        else
          z = _mm512_zextsi256_si512(lo);
      }
      return _mm512_max_epi8(z, _mm512_set1_epi8(kQ8MinValue));  // -128 reads as -127 (kernels.h)
    } else {
      __m256i y;
      if constexpr (kOdd && kOneBlock) {
        y = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(Sub::codes(row, u)));
      } else {
        const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i *>(Sub::codes(row, u)));
        if constexpr (kOdd)
          y = _mm256_inserti128_si256(_mm256_castsi128_si256(lo),
                                      _mm_loadu_si128(reinterpret_cast<const __m128i *>(Sub::codes(row, u + 1))), 1);
        else
          y = _mm256_zextsi128_si256(lo);
      }
      // [u low nibbles | u+1 low | u high | u+1 high] = values [u 0-15 | u+1 0-15 | u 16-31 | u+1 16-31].
      __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(y), _mm256_srli_epi16(y, 4), 1);
      z = _mm512_and_si512(z, _mm512_set1_epi8(0x0F));
      if constexpr (WF::kKind == CodeKind::E2m1)
        z = _mm512_shuffle_epi8(
            _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i *>(kE2m1DoubledBiased))), z);
      return z;
    }
  }

  // The activation's values of the same pair, in the codes' order.
  template <bool kOdd>
  static __m512i x_values(const unsigned char *x, size_t u) {
    __m512i z;
    if constexpr (Sub::kSubs == 2) {
      z = _mm512_loadu_si512(Sub::x_codes(x, u));
    } else {
      const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(Sub::x_codes(x, u)));
      if constexpr (kOdd)
        z = _mm512_inserti64x4(_mm512_castsi256_si512(lo),
                               _mm256_loadu_si256(reinterpret_cast<const __m256i *>(Sub::x_codes(x, u + 1))), 1);
      else
        z = _mm512_zextsi256_si512(lo);
    }
    if constexpr (!kInt8) z = _mm512_shuffle_i64x2(z, z, kSwapMiddleChunks);
    return z;
  }

  // Lanes of u take lane 0 of v, lanes of u + 1 lane 1, in the codes' order.
  static __m512 spread_pair(__m128 v) {
    const __m512i index = kInt8 ? _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1)
                                : _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1);
    return _mm512_permutexvar_ps(index, _mm512_castps128_ps512(v));
  }
  static __m512 pair_vector(float a, float b) { return spread_pair(_mm_unpacklo_ps(_mm_set_ss(a), _mm_set_ss(b))); }
  // The weight scales of the pair (zero for an absent u + 1), built in vector registers: f16
  // scales converted together, e8m0 scales decoded as WF::scale does (quant_formats.inl).
  template <bool kOdd>
  static __m512 w_scales(const unsigned char *row, size_t u) {
    if constexpr (kOneBlock && kOdd) return _mm512_set1_ps(Sub::scale(row, u));
    const size_t b0 = u / Sub::kSubs, b1 = kOdd ? (u + 1) / Sub::kSubs : b0;
    if constexpr (WF::kScale == ScaleKind::E8m0) {
      // 2^(e − 128) as e8m0_half_scale (quant_formats.inl): e >= 2 normal, (e − 1) << 23; e = 1
      // and 0 subnormal, 0x00200000 << e; e = 255 NaN.
      const int e0 = *WF::scale_at(row, b0), e1 = kOdd ? *WF::scale_at(row, b1) : 0;
      const __m128i e = _mm_setr_epi32(e0, e1, 0, 0);
      const __m128i normal = _mm_slli_epi32(_mm_sub_epi32(e, _mm_set1_epi32(1)), 23);
      const __m128i subnormal = _mm_sllv_epi32(_mm_set1_epi32(0x00200000), e);
      __m128i bits = _mm_blendv_epi8(subnormal, normal, _mm_cmpgt_epi32(e, _mm_set1_epi32(1)));
      bits = _mm_blendv_epi8(bits, _mm_set1_epi32(0x7FC00000), _mm_cmpeq_epi32(e, _mm_set1_epi32(kE8m0Nan)));
      __m128 v = _mm_castsi128_ps(bits);
      if constexpr (!kOdd) v = _mm_blend_ps(v, _mm_setzero_ps(), 0x2);
      return spread_pair(v);
    } else if constexpr (WF::kScale == ScaleKind::F16) {
      // Both f16 scales converted by one vcvtph2ps (exact, as f16_scale).
      uint16_t h0, h1 = 0;
      std::memcpy(&h0, WF::scale_at(row, b0), 2);
      if constexpr (kOdd) std::memcpy(&h1, WF::scale_at(row, b1), 2);
      return spread_pair(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(h0 | static_cast<uint32_t>(h1) << 16))));
    } else {
      return pair_vector(Sub::scale(row, u), kOdd ? Sub::scale(row, u + 1) : 0.0f);
    }
  }
  // The weight scales of the pair for n <= 4 rows (`stride` bytes apart) in one vector:
  // [row 0 u, row 0 u+1, row 1 u, row 1 u+1, ...], an absent u + 1 and absent rows zero. One
  // conversion serves 4 rows (scale_of_row picks a row's lanes out of it).
  template <bool kOdd, int n>
  static __m256 scale_group(const unsigned char *row, size_t stride, size_t u) {
    const size_t b0 = u / Sub::kSubs, b1 = kOdd ? (u + 1) / Sub::kSubs : b0;
    if constexpr (WF::kScale == ScaleKind::F16) {
      uint64_t halves[2] = {0, 0};
      for (int i = 0; i < n; ++i, row += stride) {
        uint16_t h0, h1 = 0;
        std::memcpy(&h0, WF::scale_at(row, b0), 2);
        if constexpr (kOdd) std::memcpy(&h1, WF::scale_at(row, b1), 2);
        halves[i / 2] |= (static_cast<uint64_t>(h0) | static_cast<uint64_t>(h1) << 16) << (32 * (i % 2));
      }
      return _mm256_cvtph_ps(_mm_set_epi64x(static_cast<long long>(halves[1]), static_cast<long long>(halves[0])));
    } else if constexpr (WF::kScale == ScaleKind::E8m0) {
      // 2^(e − 128) as e8m0_half_scale (quant_formats.inl): e >= 2 normal, (e − 1) << 23; e = 1
      // and 0 subnormal, 0x00200000 << e; e = 255 NaN. Absent scales are cleared afterwards.
      uint64_t bytes = 0, present = 0;
      for (int i = 0; i < n; ++i, row += stride) {
        bytes |= static_cast<uint64_t>(*WF::scale_at(row, b0)) << (16 * i);
        present |= uint64_t{0xFF} << (16 * i);
        if constexpr (kOdd) {
          bytes |= static_cast<uint64_t>(*WF::scale_at(row, b1)) << (16 * i + 8);
          present |= uint64_t{0xFF} << (16 * i + 8);
        }
      }
      const __m256i e = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(bytes)));
      const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
      const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
      __m256i bits = _mm256_blendv_epi8(subnormal, normal, _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1)));
      bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x7FC00000), _mm256_cmpeq_epi32(e, _mm256_set1_epi32(kE8m0Nan)));
      const __m256i keep = _mm256_cvtepi8_epi32(_mm_cvtsi64_si128(static_cast<long long>(present)));
      return _mm256_castsi256_ps(_mm256_and_si256(bits, keep));
    } else {
      float v[8] = {};
      for (int i = 0; i < n; ++i, row += stride) {
        v[2 * i] = Sub::scale(row, u);
        if constexpr (kOdd) v[2 * i + 1] = Sub::scale(row, u + 1);
      }
      return _mm256_loadu_ps(v);
    }
  }
  // Row i's two lanes of a scale_group vector, spread over the pair as pair_vector does.
  static __m512 scale_of_row(__m256 group, int i) {
    const __m512i base = kInt8 ? _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1)
                               : _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1);
    return _mm512_permutexvar_ps(_mm512_add_epi32(base, _mm512_set1_epi32(2 * i)), _mm512_castps256_ps512(group));
  }
  template <bool kOdd>
  static __m512 x_scales(const unsigned char *x, size_t u) {
    const float a = Sub::x_scale(x, u);
    if constexpr (Sub::kSubs == 2) return _mm512_set1_ps(a);
    return pair_vector(a, kOdd ? Sub::x_scale(x, u + 1) : 0.0f);
  }
};

// The tile kernel of the q8-activation formats (interface: see "A tile kernel" in
// matmul_generic.inl): one zmm of 16 lanes per (row, token) pair.
template <class WF, Path P>
struct QTile {
  static constexpr size_t kStep = 2 * kSubBlock;  // k-blocks start on even sub-blocks
  static constexpr size_t kBlockK = 1024;
  static constexpr size_t state_floats(int rows, int tokens) { return size_t(rows) * tokens * kLaneCount; }
  static constexpr int decode_rows(int tokens) { return kQ8DecodeRows(tokens); }
  static constexpr int kGemmR = kQ8GemmRows;
  static constexpr int kGemmT = kQ8GemmTokens;
  static constexpr size_t kDecodeChunk = 8;
  using Pair = Pair512<WF>;
  using Sub = SubBlock<WF>;
  static constexpr bool kInt8 = Pair::kInt8;

  // ---- prepared activations (the prefill driver) ----
  // Per token and pair, 64-byte vectors that the several-token tile reads as memory operands:
  //   4-bit codes: [values in lane order | -bias · 4-value sums (int32) | scales]
  //   int8 codes:  [values (+128 under VNNI) | scales]
  // so that a (row, token) pair costs one dot, one conversion, one multiply and one FMA.
  static constexpr size_t kPreparedPairBytes = kInt8 ? 128 : 192;
  static constexpr size_t kPreparedScales = kInt8 ? 64 : 128;
  static constexpr size_t prepared_stride(size_t k_len) { return (k_len + 2 * kSubBlock - 1) / (2 * kSubBlock) * kPreparedPairBytes; }
  static void prepare(const TileArgs &a, size_t tokens, size_t k_begin, size_t k_end, unsigned char *out) {
    const size_t stride = prepared_stride(k_end - k_begin), u_end = k_end / kSubBlock;
    const __m512i zero = _mm512_setzero_si512();
    for (size_t t = 0; t < tokens; ++t) {
      const unsigned char *x = a.x + t * a.x_stride;
      unsigned char *p = out + t * stride;
      for (size_t u = k_begin / kSubBlock; u < u_end; u += 2, p += kPreparedPairBytes) {
        const bool odd = u + 1 < u_end;
        const __m512i xv = odd ? Pair::template x_values<true>(x, u) : Pair::template x_values<false>(x, u);
        const __m512 dx = odd ? Pair::template x_scales<true>(x, u) : Pair::template x_scales<false>(x, u);
        if constexpr (kInt8) {
#ifdef COLIBRI_Q8_VNNI
          _mm512_store_si512(p, _mm512_xor_si512(xv, _mm512_set1_epi8(static_cast<char>(0x80))));  // x + 128, unsigned
#else
          _mm512_store_si512(p, xv);
#endif
        } else {
          _mm512_store_si512(p, xv);
          _mm512_store_si512(p + 64, _mm512_sub_epi32(zero, dot4_u8s8_512(zero, _mm512_set1_epi8(kCodeBias<WF>), xv)));
        }
        _mm512_store_ps(p + kPreparedScales, dx);
      }
    }
  }

  // The one-token tile's activation side of a pair.
  struct OneToken {
    __m512i xv, x_abs, neg_bias;
    __mmask64 x_negative;
    __m256 dx;  // [dx(u), dx(u+1)] × 4, the layout of scale_group
  };

  // Rows G0 .. G0+3 (those below R) of the one-token tile: their scales in one group, then each
  // row's codes, integer sums and FMA. Recursion over the groups keeps every index a constant,
  // so the accumulators stay in registers.
  template <int R, bool kOdd, int G0>
  __attribute__((always_inline)) static void one_token_rows(const TileArgs &a, size_t u, bool prefetch, const OneToken &t,
                                                            __m512 (&acc)[R]) {
    if constexpr (G0 < R) {
      constexpr int kRows = R - G0 < 4 ? R - G0 : 4;
      const unsigned char *row = a.w + G0 * a.w_stride;
      // fp32 scales (q8) are read one row at a time (a broadcast load, or two scalars): there
      // is no conversion to share.
      constexpr bool kGrouped = WF::kScale != ScaleKind::F32;
      __m256 scales = t.dx;
      if constexpr (kGrouped) scales = _mm256_mul_ps(Pair::template scale_group<kOdd, kRows>(row, a.w_stride, u), t.dx);
      const __m512i zero = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int i = 0; i < kRows; ++i, row += a.w_stride) {
        if (prefetch) prefetch_weights<Simd, P, R>(Sub::codes(row, u), a.w_stride);
        const __m512i w = Pair::template codes<kOdd>(row, u);
        __m512i isum;
        if constexpr (kInt8) isum = dot4_u8s8_512(zero, t.x_abs, _mm512_mask_sub_epi8(w, t.x_negative, zero, w));
        else isum = dot4_u8s8_512(t.neg_bias, w, t.xv);
        const __m512 s = kGrouped ? Pair::scale_of_row(scales, i)
                                  : _mm512_mul_ps(Pair::template w_scales<kOdd>(row, u), Pair::scale_of_row(t.dx, 0));
        acc[G0 + i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), s, acc[G0 + i]);
      }
      one_token_rows<R, kOdd, G0 + 4>(a, u, prefetch, t, acc);
    }
  }

  template <int R, int TT, bool kOdd>
  __attribute__((always_inline)) static void pair(const TileArgs &a, size_t u, bool prefetch, __m512 (&acc)[R * TT]) {
    const __m512i zero = _mm512_setzero_si512();
    if constexpr (TT == 1) {
      // One token: the activation's part (|x| and its signs, or the bias correction) once for
      // all R rows (one_token_rows).
      OneToken t;
      t.xv = Pair::template x_values<kOdd>(a.x, u);
      const float dx0 = Sub::x_scale(a.x, u);
      const float dx1 = !kOdd ? 0.0f : Sub::kSubs == 2 ? dx0 : Sub::x_scale(a.x, u + 1);
      t.dx = _mm256_setr_ps(dx0, dx1, dx0, dx1, dx0, dx1, dx0, dx1);
      if constexpr (kInt8) {
        t.x_abs = _mm512_abs_epi8(t.xv);
        t.x_negative = _mm512_movepi8_mask(t.xv);
      } else {
        t.neg_bias = _mm512_sub_epi32(zero, dot4_u8s8_512(zero, _mm512_set1_epi8(kCodeBias<WF>), t.xv));
      }
      one_token_rows<R, kOdd, 0>(a, u, prefetch, t, acc);
    } else {
      // Several tokens: each row's codes and scales (and its correction), loaded once, serve
      // every token.
      __m512i w[R], w_side[R];
      __m512 dw[R];
      [[maybe_unused]] __mmask64 w_negative[R];
      for (int r = 0; r < R; ++r) {
        const unsigned char *row = a.w + r * a.w_stride;
        if (prefetch) prefetch_weights<Simd, P, R>(Sub::codes(row, u), a.w_stride);
        w[r] = Pair::template codes<kOdd>(row, u);
        dw[r] = Pair::template w_scales<kOdd>(row, u);
        w_negative[r] = 0;
        w_side[r] = w[r];
        if constexpr (kInt8) {
#ifdef COLIBRI_Q8_VNNI
          // -128 · (the weights' 4-value sums): corrects x + 128 back to x.
          w_side[r] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(static_cast<char>(0x80)), w[r]));
#else
          w_side[r] = _mm512_abs_epi8(w[r]);
          w_negative[r] = _mm512_movepi8_mask(w[r]);
#endif
        }
      }
      for (int t = 0; t < TT; ++t) {
        const unsigned char *x = a.x + t * a.x_stride;
        const __m512i xv = Pair::template x_values<kOdd>(x, u);
        const __m512 dx = Pair::template x_scales<kOdd>(x, u);
        __m512i x_side = xv;
        if constexpr (kInt8) {
#ifdef COLIBRI_Q8_VNNI
          x_side = _mm512_xor_si512(xv, _mm512_set1_epi8(static_cast<char>(0x80)));  // x + 128, unsigned
#endif
        } else {
          x_side = _mm512_sub_epi32(zero, dot4_u8s8_512(zero, _mm512_set1_epi8(kCodeBias<WF>), xv));
        }
        for (int r = 0; r < R; ++r) {
          __m512i isum;
          if constexpr (kInt8) {
#ifdef COLIBRI_Q8_VNNI
            isum = _mm512_dpbusd_epi32(w_side[r], x_side, w[r]);
#else
            isum = dot4_u8s8_512(zero, w_side[r], _mm512_mask_sub_epi8(xv, w_negative[r], zero, xv));
#endif
          } else {
            isum = dot4_u8s8_512(x_side, w[r], xv);
          }
          acc[r * TT + t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw[r], dx), acc[r * TT + t]);
        }
      }
    }
  }

  // Several tokens from prepared activations (p: token 0's vectors of this pair).
  template <int R, int TT, bool kOdd>
  __attribute__((always_inline)) static void pair_prepared(const TileArgs &a, size_t u, const unsigned char *p,
                                                           bool prefetch, __m512 (&acc)[R * TT]) {
    const __m512i zero = _mm512_setzero_si512();
    __m512i w[R], w_side[R];
    __m512 dw[R];
    [[maybe_unused]] __mmask64 w_negative[R];
    for (int r = 0; r < R; ++r) {
      const unsigned char *row = a.w + r * a.w_stride;
      if (prefetch) prefetch_weights<Simd, P, R>(Sub::codes(row, u), a.w_stride);
      w[r] = Pair::template codes<kOdd>(row, u);
      dw[r] = Pair::template w_scales<kOdd>(row, u);
      w_negative[r] = 0;
      w_side[r] = w[r];
      if constexpr (kInt8) {
#ifdef COLIBRI_Q8_VNNI
        w_side[r] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(static_cast<char>(0x80)), w[r]));
#else
        w_side[r] = _mm512_abs_epi8(w[r]);
        w_negative[r] = _mm512_movepi8_mask(w[r]);
#endif
      }
    }
    for (int t = 0; t < TT; ++t, p += a.prepared_stride) {
      const __m512i xv = _mm512_load_si512(p);
      for (int r = 0; r < R; ++r) {
        __m512i isum;
        if constexpr (kInt8) {
#ifdef COLIBRI_Q8_VNNI
          isum = _mm512_dpbusd_epi32(w_side[r], xv, w[r]);
#else
          isum = dot4_u8s8_512(zero, w_side[r], _mm512_mask_sub_epi8(xv, w_negative[r], zero, xv));
#endif
        } else {
          isum = dot4_u8s8_512(_mm512_load_si512(p + 64), w[r], xv);
        }
        const __m512 s = _mm512_mul_ps(dw[r], _mm512_load_ps(p + kPreparedScales));
        acc[r * TT + t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), s, acc[r * TT + t]);
      }
    }
  }

  template <int R, int TT>
  static void span(const TileArgs &a, size_t k_begin, size_t k_end, float *state, bool first, bool last) {
    constexpr int kPairs = R * TT;
    __m512 acc[kPairs];
    for (int p = 0; p < kPairs; ++p) acc[p] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(state + p * kLaneCount);
    const size_t u_end = k_end / kSubBlock;
    size_t u = k_begin / kSubBlock;
    // One prefetch per row and 64-byte line of weights: where the pair's last byte is in a new
    // line (measured from the tile's first row; every row has the same layout). No result
    // depends on it.
    auto line_end = [&](size_t pair_start) { return (Sub::codes(a.w, pair_start + 2) - a.w - 1) / 64; };
    size_t line = u == 0 ? 0 : line_end(u - 2);
    if (TT > 1 && a.prepared != nullptr) {
      const unsigned char *p = a.prepared;
      for (; u + 2 <= u_end; u += 2, p += kPreparedPairBytes) {
        const size_t next = line_end(u);
        pair_prepared<R, TT, true>(a, u, p, next != line, acc);
        line = next;
      }
      if (u < u_end) pair_prepared<R, TT, false>(a, u, p, true, acc);
    } else {
      for (; u + 2 <= u_end; u += 2) {
        const size_t next = line_end(u);
        pair<R, TT, true>(a, u, next != line, acc);
        line = next;
      }
      if (u < u_end) pair<R, TT, false>(a, u, true, acc);
    }
    if (!last) {
      for (int p = 0; p < kPairs; ++p) _mm512_storeu_ps(state + p * kLaneCount, acc[p]);
      return;
    }
    if constexpr (kInt8)
      for (int p = 0; p < kPairs; ++p) acc[p] = _mm512_shuffle_f32x4(acc[p], acc[p], kSwapMiddleChunks);
    store_tile_sums<Simd, R, TT>(acc, a.y, a.y_stride);
  }

  template <int R, int TT>
  static void run(const TileArgs &a) {
    span<R, TT>(a, 0, a.cols, nullptr, true, true);
  }
};

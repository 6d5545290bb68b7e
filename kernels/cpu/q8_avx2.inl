// kernels/cpu/q8_avx2.inl — q8 quantisation and the tile of the q8-activation formats (q8,
// q4, q8f16, mxfp4) on 256-bit integer vectors. Included (inside an anonymous namespace, after
// tile_args.inl and quant_formats.inl) by avx2.cpp and avx512.cpp;
// the AVX-512 build gets 32 vector registers for it and, when the CPU has VNNI, the
// one-instruction int8 dot (define COLIBRI_Q8_VNNI before including).
//
// Both reproduce the scalar reference bit for bit:
//   isum  = Σ qw[i]·qx[i] over the block, exact in int32 (any summation order)
//   acc   = acc + (dw·dx) · float(isum)           (one multiply, one multiply, one add)
// with a stored weight of -128 read as -127 (kernels.h q8_value), and the 4-bit codes widened
// to int8 first (load_codes). The int8 products use the
// sign trick: |a| (unsigned) times b·sign(a) (signed) with maddubs; its int16 pair sums
// cannot saturate because both operands lie in [-127, 127]. The one-token tile puts the
// activation on the unsigned side (|x| once per block for all rows), the others the weight.

// Sums of 8 int32 vectors: lane j of the result is the sum of v[j]'s lanes.
inline __m256i reduce8_epi32(const __m256i *v) {
  const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]);
  const __m256i h23 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]);
  const __m256i h67 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i h0123 = _mm256_hadd_epi32(h01, h23);
  const __m256i h4567 = _mm256_hadd_epi32(h45, h67);
  const __m256i lo = _mm256_permute2x128_si256(h0123, h4567, 0x20);
  const __m256i hi = _mm256_permute2x128_si256(h0123, h4567, 0x31);
  return _mm256_add_epi32(lo, hi);
}

// Σ over 32 bytes of a·b as 8 int32 lanes (each lane: 4 neighbouring products), with a_abs
// = |a|: |a| on the unsigned side, b signed by a on the signed side. Either operand may be
// the weight or the activation; both lie in [-127, 127] (load_q8_weights, the quantiser), so
// negating b cannot overflow.
inline __m256i dot32_epi8(__m256i a_abs, __m256i a_raw, __m256i b) {
  const __m256i b_signed = _mm256_sign_epi8(b, a_raw);
#ifdef COLIBRI_Q8_VNNI
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), a_abs, b_signed);
#else
  const __m256i pairs = _mm256_maddubs_epi16(a_abs, b_signed);
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
#endif
}

// 32 stored weights with the format's reading of -128 as -127 (kernels.h q8_value).
inline __m256i load_q8_weights(const unsigned char *p) {
  return _mm256_max_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)), _mm256_set1_epi8(kQ8MinValue));
}

// 32 codes of a block of format WF (quant_formats.inl) as signed int8, each in [-127, 127]:
// q8 / q8f16 clamped to -127 (kernels.h q8_value); q4: the nibbles (16 bytes: low nibbles are
// values 0..15, high nibbles 16..31) minus 8; mxfp4: the nibbles through the doubled e2m1 table.
template <class WF>
inline __m256i load_codes(const unsigned char *p) {
  if constexpr (WF::kKind == CodeKind::Int8) {
    return load_q8_weights(p);
  } else {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
    const __m256i nibbles =
        _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
    if constexpr (WF::kKind == CodeKind::Int4) {
      return _mm256_sub_epi8(nibbles, _mm256_set1_epi8(kQ4CodeOffset));
    } else {
      const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i *>(kE2m1Doubled));
      return _mm256_shuffle_epi8(_mm256_set_m128i(table, table), nibbles);
    }
  }
}

// The tile kernel of the q8-activation formats (interface: see "A tile kernel" in
// matmul_generic.inl). Pairs p = r * TT + t are processed in groups of 8, one fp32 lane per pair.
template <class WF, Path P>
struct QTile {
  static constexpr size_t kStep = WF::kAct;
  static constexpr size_t kBlockK = 2048;
  static constexpr size_t state_floats(int rows, int tokens) { return size_t(rows * tokens + 7) / 8 * 8; }
  static constexpr int decode_rows(int tokens) { return kQ8DecodeRows(tokens); }
  static constexpr int kGemmR = kQ8GemmRows;
  static constexpr int kGemmT = kQ8GemmTokens;

  template <int R, int TT>
  static void span(const TileArgs &a, size_t k_begin, size_t k_end, float *state, bool first, bool last) {
    constexpr int kPairs = R * TT;
    constexpr int kGroups = (kPairs + 7) / 8;
    constexpr int kHalves = WF::kAct / 32;
    constexpr size_t kXBlockBytes = 4 + WF::kAct;

    __m256 acc[kGroups];
    if (first) {
      for (int g = 0; g < kGroups; ++g) acc[g] = _mm256_setzero_ps();
    } else {
      for (int g = 0; g < kGroups; ++g) acc[g] = _mm256_loadu_ps(state + 8 * g);
    }
    const unsigned char *x = a.x + (k_begin / WF::kAct) * kXBlockBytes;
    for (size_t b = k_begin / WF::kAct; b < k_end / WF::kAct; ++b, x += kXBlockBytes) {
      // One prefetch per row and 64-byte line of weights (kBlocksPerLine blocks); no result
      // depends on it.
      const bool prefetch = b % kBlocksPerLine<WF> == 0;
      float dw[R];
      float dx[TT];
      __m256i sums[kGroups * 8];
      if constexpr (TT == 1) {
        // One token: the activation's magnitudes go on the unsigned side, computed once per
        // block for all R rows; each row's weights are loaded once, made signed int8 and signed
        // by the activation (per row and 32 bytes: one load and four operations, where the
        // weight-magnitude form below needs the same load plus abs for every row).
        std::memcpy(&dx[0], x, 4);
        __m256i x_abs[kHalves], x_raw[kHalves];
        for (int h = 0; h < kHalves; ++h) {
          x_raw[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x + 4 + 32 * h));
          x_abs[h] = _mm256_abs_epi8(x_raw[h]);
        }
        for (int r = 0; r < R; ++r) {
          const unsigned char *row = a.w + r * a.w_stride;
          const unsigned char *codes = WF::codes(row, b);
          if (prefetch) prefetch_weights<Simd, P, R>(codes, a.w_stride);
          dw[r] = WF::scale(row, b);
          __m256i s = dot32_epi8(x_abs[0], x_raw[0], load_codes<WF>(codes));
          for (int h = 1; h < kHalves; ++h)
            s = _mm256_add_epi32(s, dot32_epi8(x_abs[h], x_raw[h], load_codes<WF>(codes + 32 * h)));
          sums[r] = s;
        }
      } else {
        // Several tokens: each row's weight magnitudes, computed once, serve every token.
        __m256i w_abs[R][kHalves];
        __m256i w_raw[R][kHalves];
        for (int r = 0; r < R; ++r) {
          const unsigned char *row = a.w + r * a.w_stride;
          const unsigned char *codes = WF::codes(row, b);
          if (prefetch) prefetch_weights<Simd, P, R>(codes, a.w_stride);
          dw[r] = WF::scale(row, b);
          for (int h = 0; h < kHalves; ++h) {
            w_raw[r][h] = load_codes<WF>(codes + 32 * h);
            w_abs[r][h] = _mm256_abs_epi8(w_raw[r][h]);
          }
        }
        for (int t = 0; t < TT; ++t) {
          const unsigned char *row = x + t * a.x_stride;
          std::memcpy(&dx[t], row, 4);
          __m256i xv[kHalves];
          for (int h = 0; h < kHalves; ++h)
            xv[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(row + 4 + 32 * h));
          for (int r = 0; r < R; ++r) {
            __m256i s = dot32_epi8(w_abs[r][0], w_raw[r][0], xv[0]);
            for (int h = 1; h < kHalves; ++h)
              s = _mm256_add_epi32(s, dot32_epi8(w_abs[r][h], w_raw[r][h], xv[h]));
            sums[r * TT + t] = s;
          }
        }
      }
      for (int p = kPairs; p < kGroups * 8; ++p) sums[p] = _mm256_setzero_si256();
      for (int g = 0; g < kGroups; ++g) {
        const __m256i isum = reduce8_epi32(sums + 8 * g);
        alignas(32) float scales[8];
        for (int i = 0; i < 8; ++i) {
          const int p = 8 * g + i;
          scales[i] = p < kPairs ? dw[p / TT] * dx[p % TT] : 0.0f;
        }
        const __m256 d = _mm256_load_ps(scales);
        acc[g] = _mm256_add_ps(acc[g], _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum)));
      }
    }
    if (!last) {
      for (int g = 0; g < kGroups; ++g) _mm256_storeu_ps(state + 8 * g, acc[g]);
      return;
    }
    alignas(32) float out[kGroups * 8];
    for (int g = 0; g < kGroups; ++g) _mm256_store_ps(out + 8 * g, acc[g]);
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < TT; ++t) a.y[t * a.y_stride + r] = out[r * TT + t];
  }

  template <int R, int TT>
  static void run(const TileArgs &a) {
    span<R, TT>(a, 0, a.cols, nullptr, true, true);
  }
};

// 8 int32 in [-127, 127] per vector, 4 vectors -> 32 int8 in order.
inline __m256i pack_epi32_to_epi8(__m256i q0, __m256i q1, __m256i q2, __m256i q3) {
  const __m256i a = _mm256_packs_epi32(q0, q1);
  const __m256i b = _mm256_packs_epi32(q2, q3);
  const __m256i c = _mm256_packs_epi16(a, b);
  return _mm256_permutevar8x32_epi32(c, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// The scalar quantiser's rule, 8 values at a time (see scalar.cpp for the definition).
inline __m256i quantize8(__m256 v, __m256 scale) {
  const __m256 t = _mm256_div_ps(v, scale);
  __m256 r = _mm256_round_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 fraction = _mm256_sub_ps(t, r);
  const __m256 one = _mm256_set1_ps(1.0f);
  r = _mm256_add_ps(r, _mm256_and_ps(_mm256_cmp_ps(fraction, _mm256_set1_ps(0.5f), _CMP_GE_OQ), one));
  r = _mm256_sub_ps(r, _mm256_and_ps(_mm256_cmp_ps(fraction, _mm256_set1_ps(-0.5f), _CMP_LE_OQ), one));
  const __m256 magnitude = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), t);
  r = _mm256_and_ps(r, _mm256_cmp_ps(magnitude, _mm256_set1_ps(127.5f), _CMP_LE_OQ));
  r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
  return _mm256_cvttps_epi32(r);
}

void quantize_row_q8_impl(const float *x, size_t cols, uint32_t group_size, void *out) {
  unsigned char *block = static_cast<unsigned char *>(out);
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  for (size_t c0 = 0; c0 < cols; c0 += group_size, block += block_bytes_q8(group_size)) {
    __m256 amax = _mm256_setzero_ps();
    __m256 non_finite = _mm256_setzero_ps();  // stays ±0 unless a NaN/Inf is seen
    for (uint32_t i = 0; i < group_size; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + c0 + i);
      amax = _mm256_max_ps(_mm256_andnot_ps(sign_bit, v), amax);  // a NaN lane keeps amax
      non_finite = _mm256_add_ps(non_finite, _mm256_mul_ps(v, _mm256_setzero_ps()));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    __m128 n = _mm_add_ps(_mm256_castps256_ps128(non_finite), _mm256_extractf128_ps(non_finite, 1));
    n = _mm_add_ps(n, _mm_movehl_ps(n, n));
    n = _mm_add_ss(n, _mm_shuffle_ps(n, n, 1));
    const float scale = _mm_cvtss_f32(m) / 127.0f + _mm_cvtss_f32(n);
    std::memcpy(block, &scale, 4);
    const __m256 vscale = _mm256_set1_ps(scale);
    for (uint32_t i = 0; i < group_size; i += 32) {
      const float *src = x + c0 + i;
      const __m256i q = pack_epi32_to_epi8(
          quantize8(_mm256_loadu_ps(src), vscale), quantize8(_mm256_loadu_ps(src + 8), vscale),
          quantize8(_mm256_loadu_ps(src + 16), vscale), quantize8(_mm256_loadu_ps(src + 24), vscale));
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(block + 4 + i), q);
    }
  }
}

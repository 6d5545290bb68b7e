// kernels/cpu/matmul_generic.inl — the weight-row matmul drivers and the float tile kernel,
// written once over a `Simd` vocabulary and included by each ISA translation unit.
//
// Include it inside an anonymous namespace after tile_args.inl and after defining:
//   struct Simd        fp32 vector ops: F, kLanes, zero, load_f32[_partial], load_f16[_partial],
//                      load_bf16[_partial], madd (acc + a·b), reduce8 (8 vectors -> 8 sums)
//   kDecodeRows(tt)    rows per decode tile for tt tokens (registers hold rows × tt accumulators)
//   kGemmRows, kGemmTokens   the prefill register tile
//   template <class WF, Path P> struct QTile   the tile kernel of the q8-activation formats
//                      (quant_formats.inl: WF) (see "A tile kernel" below)
//   void quantize_row_q8_impl(const float*, size_t, uint32_t, void*)
//
// Reduction order (the determinism contract of kernels.h): every output element owns one
// vector accumulator; the k loop walks cols in steps of kLanes from 0 upwards, the last
// partial step zero-padded; the lanes are then summed by Simd::reduce8's fixed tree. Tiles
// only choose how many (row, token) pairs run side by side, never the order within a pair,
// so any tile shape, row range, token count or driver gives the same bits.

template <DType WT>
struct WeightLoad;

template <>
struct WeightLoad<DType::F32> {
  using Elem = float;
  static typename Simd::F load(const Elem *p) { return Simd::load_f32(p); }
  static typename Simd::F load_partial(const Elem *p, size_t n) { return Simd::load_f32_partial(p, n); }
};

template <>
struct WeightLoad<DType::F16> {
  using Elem = uint16_t;
  static typename Simd::F load(const Elem *p) { return Simd::load_f16(p); }
  static typename Simd::F load_partial(const Elem *p, size_t n) { return Simd::load_f16_partial(p, n); }
};

template <>
struct WeightLoad<DType::BF16> {
  using Elem = uint16_t;
  static typename Simd::F load(const Elem *p) { return Simd::load_bf16(p); }
  static typename Simd::F load_partial(const Elem *p, size_t n) { return Simd::load_bf16_partial(p, n); }
};

// A tile kernel computes R weight rows × TT tokens. Every tile type provides:
//   kStep                    granularity of k in elements (k-block bounds are multiples of it)
//   kBlockK                  k-block length of the prefill driver, elements
//   state_floats(R, TT)      floats of accumulator state a k-block hands to the next
//   decode_rows(TT), kGemmR, kGemmT   its register tile shapes
//   span<R, TT>(a, k_begin, k_end, state, first, last)
//       continues the tile's accumulators over [k_begin, k_end): starts from zero when
//       `first`, else from `state`; finishes into y when `last`, else saves to `state`.
//       Saving and reloading fp32 accumulators is exact, so splitting k changes no bit.
//   run<R, TT>(a)            span over all of cols.
// and may provide, for the prefill driver:
//   prepared_stride(k_len), prepare(a, tokens, k_begin, k_end, out)
//       builds its side of the activations of `tokens` tokens over one k-block once, into
//       stack scratch that every row tile of the panel then reads (TileArgs::prepared); at
//       most kGemmT tokens and kBlockK columns.



// fp32/f16/bf16 weights, fp32 activations: one vector accumulator per (row, token).
template <DType WT, Path P>
struct FloatTile {
  static constexpr size_t kStep = Simd::kLanes;
  static constexpr size_t kBlockK = 1024;
  static constexpr size_t state_floats(int rows, int tokens) { return size_t(rows) * tokens * Simd::kLanes; }
  static constexpr int decode_rows(int tokens) { return kDecodeRows(tokens); }
  static constexpr size_t kDecodeChunk = kFloatDecodeChunk;
  static constexpr int kGemmR = kGemmRows;
  static constexpr int kGemmT = kGemmTokens;

  template <int R, int TT>
  static void span(const TileArgs &a, size_t k_begin, size_t k_end, float *state, bool first, bool last) {
    using Load = WeightLoad<WT>;
    using Elem = typename Load::Elem;
    using F = typename Simd::F;
    constexpr size_t kL = Simd::kLanes;
    const Elem *w[R];
    for (int r = 0; r < R; ++r) w[r] = reinterpret_cast<const Elem *>(a.w + r * a.w_stride);
    const float *x[TT];
    for (int t = 0; t < TT; ++t) x[t] = reinterpret_cast<const float *>(a.x + t * a.x_stride);

    F acc[R * TT];
    if (first) {
      for (int p = 0; p < R * TT; ++p) acc[p] = Simd::zero();
    } else {
      for (int p = 0; p < R * TT; ++p) acc[p] = Simd::load_f32(state + p * kL);
    }
    // One step: every (row, token) accumulator takes the next kL columns.
    auto step = [&](size_t kk) __attribute__((always_inline)) {
      if constexpr (TT == 1) {
        // One token: widen and use each row's vector at once (R accumulators + the
        // activation + one temporary), instead of holding R widened rows live at the same
        // time, which needs R + R + 1 registers and spills for R = 8 on AVX2.
        F xv = Simd::load_f32(x[0] + kk);
        Simd::pin(xv);
        for (int r = 0; r < R; ++r) {
          F wr = Load::load(w[r] + kk);
          Simd::pin(wr);
          acc[r] = Simd::madd(wr, xv, acc[r]);
        }
        return;
      }
      F wv[R];
      for (int r = 0; r < R; ++r) wv[r] = Load::load(w[r] + kk);
      for (int t = 0; t < TT; ++t) {
        F xv = Simd::load_f32(x[t] + kk);
        Simd::pin(xv);
        for (int r = 0; r < R; ++r) acc[r * TT + t] = Simd::madd(wv[r], xv, acc[r * TT + t]);
      }
    };
    // Steps in groups that cover one 64-byte line of each weight row, with one prefetch per
    // row and line (a prefetch per step would cost up to 4 load-port slots per line). The
    // steps run in the same order as one at a time: no result changes.
    constexpr size_t kLineSteps = 64 / sizeof(Elem) > kL ? 64 / sizeof(Elem) / kL : 1;
    size_t k = k_begin;
    for (; k + kL * kLineSteps <= k_end; k += kL * kLineSteps) {
      // The R prefetches spread over the line's steps (a burst of R could wait for fill buffers).
      for (size_t u = 0; u < kLineSteps; ++u) {
        for (int r = static_cast<int>(u * R / kLineSteps); r < static_cast<int>((u + 1) * R / kLineSteps); ++r)
          prefetch_weights<Simd, P, R>(reinterpret_cast<const unsigned char *>(w[r] + k), a.w_stride);
        step(k + u * kL);
      }
    }
    for (; k + kL <= k_end; k += kL) step(k);
    if (k < k_end) {  // only at the end of cols: zero-padded last step
      const size_t n = k_end - k;
      F wv[R];
      for (int r = 0; r < R; ++r) wv[r] = Load::load_partial(w[r] + k, n);
      for (int t = 0; t < TT; ++t) {
        const F xv = Simd::load_f32_partial(x[t] + k, n);
        for (int r = 0; r < R; ++r) acc[r * TT + t] = Simd::madd(wv[r], xv, acc[r * TT + t]);
      }
    }
    if (last) {
      store_tile_sums<Simd, R, TT>(acc, a.y, a.y_stride);
    } else {
      for (int p = 0; p < R * TT; ++p) Simd::store(state + p * kL, acc[p]);
    }
  }

  template <int R, int TT>
  static void run(const TileArgs &a) {
    span<R, TT>(a, 0, a.cols, nullptr, true, true);
  }
};

// ---- drivers -------------------------------------------------------------------------------

inline TileArgs advance(TileArgs a, size_t rows, size_t tokens) {
  a.w += rows * a.w_stride;
  a.x += tokens * a.x_stride;
  a.y += tokens * a.y_stride + rows;
  return a;
}

// `rows` rows in tiles of R rows × TT tokens; a remainder of fewer than R rows uses the
// largest smaller tile (one call each for R-1, R-2, ... as needed).
template <class Tile, int TT, int R>
void run_rows(TileArgs a, size_t rows) {
  for (; rows >= static_cast<size_t>(R); rows -= R) {
    Tile::template run<R, TT>(a);
    a = advance(a, R, 0);
  }
  if constexpr (R > 1) {
    if (rows != 0) run_rows<Tile, TT, R - 1>(a, rows);
  }
}

template <class Tile, int TT>
void decode_tokens(const TileArgs &a, size_t rows) {
  run_rows<Tile, TT, Tile::decode_rows(TT)>(a, rows);
}

// One sweep over `rows` weight rows with all `tokens` (1..8) accumulators in registers.
template <class Tile>
void decode_chunk(const TileArgs &b, size_t rows, size_t tokens) {
  switch (tokens) {
    case 1: decode_tokens<Tile, 1>(b, rows); break;
    case 2: decode_tokens<Tile, 2>(b, rows); break;
    case 3: decode_tokens<Tile, 3>(b, rows); break;
    case 4: decode_tokens<Tile, 4>(b, rows); break;
    case 5: decode_tokens<Tile, 5>(b, rows); break;
    case 6: decode_tokens<Tile, 6>(b, rows); break;
    case 7: decode_tokens<Tile, 7>(b, rows); break;
    default: decode_tokens<Tile, 8>(b, rows); break;
  }
}

// Rows of a decode panel when the tokens take more than one chunk: the panel stays in L2
// while every chunk sweeps it, so the weights come from DRAM once. A multiple of 24 (every
// decode tile height divides it) where the panel holds that many rows.
// The weight panel both drivers keep in L2 while several token chunks or tiles use it.
inline constexpr size_t kL2PanelBytes = 256 * 1024;
inline size_t decode_panel_rows(size_t w_stride) {
  const size_t rows = kL2PanelBytes / w_stride;
  return rows >= 24 ? rows / 24 * 24 : (rows == 0 ? 1 : rows);
}

// Decode: up to Tile::kDecodeChunk (<= 8) tokens are one sweep over the weight rows with all
// their accumulators in registers (each weight row is read once). More tokens (a
// continuous-batching step gives an expert a few more) run in chunks of kDecodeChunk and the
// rest over panels of rows that stay in L2 between the chunks. (On AVX-512, balanced chunks,
// 12 = 6 + 6, measured slower than 8 + 4: the 8-token tile is the most efficient one there;
// AVX2's float tile is best at 6; kernels_bench --batch.)
template <class Tile>
void decode_driver(TileArgs a, size_t rows, size_t tokens) {
  constexpr size_t C = Tile::kDecodeChunk;
  static_assert(C >= 1 && C <= 8, "decode_chunk holds at most 8 tokens");
  if (tokens <= C) {
    decode_chunk<Tile>(a, rows, tokens);
    return;
  }
  const size_t panel = decode_panel_rows(a.w_stride);
  for (size_t p0 = 0; p0 < rows; p0 += panel) {
    const size_t pr = min_size(panel, rows - p0);
    for (size_t t0 = 0; t0 < tokens; t0 += C) decode_chunk<Tile>(advance(a, p0, t0), pr, min_size(C, tokens - t0));
  }
}

using SpanFn = void (*)(const TileArgs &, size_t, size_t, float *, bool, bool);

// span<r, t> for every r <= R, t <= TT, indexed [r - 1][t - 1].
template <class Tile, int R, int TT>
struct SpanTable {
  SpanFn fn[R][TT];
  constexpr SpanTable() : fn{} { fill(std::make_integer_sequence<int, R * TT>{}); }
  template <int... I>
  constexpr void fill(std::integer_sequence<int, I...>) {
    ((fn[I / TT][I % TT] = &Tile::template span<I / TT + 1, I % TT + 1>), ...);
  }
};

template <class Tile>
constexpr SpanTable<Tile, Tile::kGemmR, Tile::kGemmT> kSpanTable{};

// Prefill, blocked like a BLAS GEMM for the inner-product tile:
//   panel      up to kGemmPanelMaxRows weight rows, at most kL2PanelBytes (stays in L2 and
//              is reused by every token tile);
//   token tile kGemmT tokens; its activations for one k-block (kBlockK) stay in L1 and are
//              reused by every row tile of the panel;
//   k-block    the accumulators of all row tiles of the panel wait in `state` between
//              k-blocks (exact, see span).
inline constexpr size_t kGemmPanelMaxRows = 64;

template <class Tile>
void gemm_driver(TileArgs a, size_t rows, size_t tokens) {
  constexpr int R = Tile::kGemmR, TT = Tile::kGemmT;
  static_assert(Tile::kBlockK % Tile::kStep == 0, "k-blocks must not split a vector step or a q8 block");
  constexpr size_t kMaxTiles = kGemmPanelMaxRows / R;
  constexpr size_t kTileState = Tile::state_floats(R, TT);
  alignas(64) float state[kMaxTiles * kTileState];
  const size_t panel_tiles =
      a.w_stride * R >= kL2PanelBytes ? 1 : min_size(kMaxTiles, kL2PanelBytes / (a.w_stride * R));
  const size_t panel_rows = panel_tiles * R;
  const SpanTable<Tile, R, TT> &table = kSpanTable<Tile>;
  constexpr bool kPrepares = requires(const TileArgs &args, unsigned char *out) { Tile::prepare(args, 1, 0, 1, out); };
  constexpr size_t kPreparedBytes = [] {
    if constexpr (kPrepares) return TT * Tile::prepared_stride(Tile::kBlockK);
    else return size_t{1};
  }();
  alignas(64) unsigned char prepared[kPreparedBytes];
  for (size_t p0 = 0; p0 < rows; p0 += panel_rows) {
    const size_t pr = min_size(panel_rows, rows - p0);
    // The next panel streams into L2 while this one computes: its lines are spread evenly
    // over this panel's tile calls. Without it, the first token tile of every panel waits on
    // DRAM (a prefill with few tokens per expert reads each panel's weights for little work).
    const size_t next_rows = p0 + pr < rows ? min_size(panel_rows, rows - p0 - pr) : 0;
    const char *ahead = reinterpret_cast<const char *>(a.w + (p0 + pr) * a.w_stride);
    const char *const ahead_end = ahead + next_rows * a.w_stride;
    // Token tiles of balanced sizes (32 tokens: 6 6 5 5 5 5, not 6 6 6 6 6 2): a nearly empty
    // last tile would run its FMAs at a fraction of the full tile's rate.
    const size_t token_tiles = (tokens + TT - 1) / TT;
    const size_t calls = token_tiles * ((a.cols + Tile::kBlockK - 1) / Tile::kBlockK) * ((pr + R - 1) / R);
    const size_t lines_per_call = (next_rows * a.w_stride / 64 + calls - 1) / calls;
    for (size_t tile_index = 0, t0 = 0; tile_index < token_tiles; ++tile_index) {
      const size_t tiles_left = token_tiles - tile_index;
      const size_t tc = (tokens - t0 + tiles_left - 1) / tiles_left;
      for (size_t k0 = 0; k0 < a.cols; k0 += Tile::kBlockK) {
        const size_t k1 = min_size(a.cols, k0 + Tile::kBlockK);
        const bool first = k0 == 0, last = k1 == a.cols;
        size_t prepared_stride = 0;
        if constexpr (kPrepares) {
          Tile::prepare(advance(a, 0, t0), tc, k0, k1, prepared);
          prepared_stride = Tile::prepared_stride(k1 - k0);
        }
        for (size_t r = 0, tile = 0; r < pr; r += R, ++tile) {
          const size_t rc = min_size(R, pr - r);
          for (size_t i = 0; i < lines_per_call && ahead < ahead_end; ++i, ahead += 64) Simd::prefetch_l2(ahead);
          TileArgs args = advance(a, p0 + r, t0);
          if constexpr (kPrepares) {
            args.prepared = prepared;
            args.prepared_stride = prepared_stride;
          }
          table.fn[rc - 1][tc - 1](args, k0, k1, state + tile * kTileState, first, last);
        }
      }
      t0 += tc;
    }
  }
}

// ---- entry points --------------------------------------------------------------------------

template <Path P, class Tile>
void run_path(const TileArgs &a, size_t rows, size_t tokens) {
  if constexpr (P == Path::Decode) {
    decode_driver<Tile>(a, rows, tokens);
  } else {
    gemm_driver<Tile>(a, rows, tokens);
  }
}

template <Path P>
void matmul_q8_prequantised(const void *weights, DType dtype, uint32_t group_size, size_t cols, size_t row_begin,
                            size_t row_end, const void *x_q8, size_t token_count, float *y, size_t y_stride) {
  const size_t w_stride = row_bytes(dtype, group_size, cols);
  const uint32_t act = activation_group_size(dtype, group_size);
  TileArgs a{static_cast<const unsigned char *>(weights) + row_begin * w_stride,
             w_stride,
             static_cast<const unsigned char *>(x_q8),
             (cols / act) * block_bytes_q8(act),
             cols,
             y + row_begin,
             y_stride};
  const size_t rows = row_end - row_begin;
  with_format(dtype, group_size, [&]<class WF>() { run_path<P, QTile<WF, P>>(a, rows, token_count); });
}

template <Path P>
void matmul_q8_entry(const void *weights, DType dtype, uint32_t group_size, size_t cols, size_t row_begin,
                     size_t row_end, const void *x_q8, size_t token_count, float *y, size_t y_stride) {
  detail::check_matmul_args(weights, dtype, group_size, cols, row_begin, row_end, x_q8, token_count, y, y_stride);
  detail::check_q8_activation_dtype(dtype);
  if (row_begin == row_end || token_count == 0) return;
  matmul_q8_prequantised<P>(weights, dtype, group_size, cols, row_begin, row_end, x_q8, token_count, y, y_stride);
}

// Rows whose quantised form exceeds the stack buffer (cols > ~58k): quantise each token in
// pieces and continue the 16 lanes of every output of a chunk of rows between pieces (the lane
// rule of quant_formats.inl, the reference every tile reproduces, so the bits equal the fast
// path's). Each row chunk quantises the token again. Correct rather than fast; no current model
// reaches it.
template <class WF>
void q8_rows_beyond_stack(const void *weights, size_t w_stride, size_t cols, size_t row_begin, size_t row_end,
                          const float *x, size_t token_count, float *y, size_t y_stride, unsigned char *buffer,
                          size_t buffer_bytes) {
  constexpr uint32_t kAct = WF::kAct;
  constexpr size_t kRowChunk = 32;
  const size_t piece_blocks = buffer_bytes / block_bytes_q8(kAct);
  const size_t total_blocks = cols / kAct;
  float lanes[kRowChunk][kLaneCount];
  for (size_t t = 0; t < token_count; ++t) {
    for (size_t r0 = row_begin; r0 < row_end; r0 += kRowChunk) {
      const size_t rn = min_size(kRowChunk, row_end - r0);
      for (size_t r = 0; r < rn; ++r)
        for (float &lane : lanes[r]) lane = 0.0f;
      for (size_t b0 = 0; b0 < total_blocks; b0 += piece_blocks) {
        const size_t nb = min_size(piece_blocks, total_blocks - b0);
        quantize_row_q8_impl(x + t * cols + b0 * kAct, nb * kAct, kAct, buffer);
        for (size_t r = 0; r < rn; ++r)
          reference_lanes<WF>(static_cast<const unsigned char *>(weights) + (r0 + r) * w_stride, buffer, b0, b0,
                              b0 + nb, lanes[r]);
      }
      for (size_t r = 0; r < rn; ++r) y[t * y_stride + r0 + r] = reduce_lanes(lanes[r]);
    }
  }
}

// Float activations against weights that take q8 activations: quantise as many tokens as fit
// the stack buffer (64 KiB), run them together, repeat. Results equal the pre-quantised
// entry's (same quantiser).
template <Path P>
void matmul_q8_from_float(const void *weights, DType dtype, uint32_t group_size, size_t cols, size_t row_begin,
                          size_t row_end, const float *x, size_t token_count, float *y, size_t y_stride) {
  alignas(64) unsigned char buffer[detail::kQ8StackBytes];
  const uint32_t act = activation_group_size(dtype, group_size);
  const size_t x_row_bytes = (cols / act) * block_bytes_q8(act);
  if (x_row_bytes > sizeof(buffer)) {
    const size_t w_stride = row_bytes(dtype, group_size, cols);
    with_format(dtype, group_size, [&]<class WF>() {
      q8_rows_beyond_stack<WF>(weights, w_stride, cols, row_begin, row_end, x, token_count, y, y_stride, buffer,
                               sizeof(buffer));
    });
    return;
  }
  const size_t chunk = sizeof(buffer) / x_row_bytes;
  for (size_t t0 = 0; t0 < token_count; t0 += chunk) {
    const size_t n = min_size(chunk, token_count - t0);
    for (size_t t = 0; t < n; ++t) quantize_row_q8_impl(x + (t0 + t) * cols, cols, act, buffer + t * x_row_bytes);
    matmul_q8_prequantised<P>(weights, dtype, group_size, cols, row_begin, row_end, buffer, n, y + t0 * y_stride,
                              y_stride);
  }
}

template <Path P>
void matmul_entry(const void *weights, DType dtype, uint32_t group_size, size_t cols,
                  size_t row_begin, size_t row_end, const float *x, size_t token_count, float *y,
                  size_t y_stride) {
  detail::check_matmul_args(weights, dtype, group_size, cols, row_begin, row_end, x, token_count,
                            y, y_stride);
  if (row_begin == row_end || token_count == 0) return;
  if (takes_q8_activations(dtype)) {
    matmul_q8_from_float<P>(weights, dtype, group_size, cols, row_begin, row_end, x, token_count, y, y_stride);
    return;
  }
  const size_t w_stride = row_bytes(dtype, group_size, cols);
  TileArgs a{static_cast<const unsigned char *>(weights) + row_begin * w_stride,
             w_stride,
             reinterpret_cast<const unsigned char *>(x),
             cols * sizeof(float),
             cols,
             y + row_begin,
             y_stride};
  const size_t rows = row_end - row_begin;
  switch (dtype) {
    case DType::F32: run_path<P, FloatTile<DType::F32, P>>(a, rows, token_count); break;
    case DType::F16: run_path<P, FloatTile<DType::F16, P>>(a, rows, token_count); break;
    case DType::BF16: run_path<P, FloatTile<DType::BF16, P>>(a, rows, token_count); break;
    default: break;  // the q8-activation dtypes returned above
  }
}

void matmul_rows_impl(const void *weights, DType dtype, uint32_t group_size, size_t cols,
                      size_t row_begin, size_t row_end, const float *x, size_t token_count,
                      float *y, size_t y_stride) {
  matmul_entry<Path::Decode>(weights, dtype, group_size, cols, row_begin, row_end, x,
                             token_count, y, y_stride);
}

void gemm_rows_impl(const void *weights, DType dtype, uint32_t group_size, size_t cols,
                    size_t row_begin, size_t row_end, const float *x, size_t token_count,
                    float *y, size_t y_stride) {
  matmul_entry<Path::Gemm>(weights, dtype, group_size, cols, row_begin, row_end, x, token_count,
                           y, y_stride);
}

void matmul_rows_q8_impl(const void *weights, DType dtype, uint32_t group_size, size_t cols, size_t row_begin,
                         size_t row_end, const void *x_q8, size_t token_count, float *y, size_t y_stride) {
  matmul_q8_entry<Path::Decode>(weights, dtype, group_size, cols, row_begin, row_end, x_q8, token_count, y, y_stride);
}

void gemm_rows_q8_impl(const void *weights, DType dtype, uint32_t group_size, size_t cols, size_t row_begin,
                       size_t row_end, const void *x_q8, size_t token_count, float *y, size_t y_stride) {
  matmul_q8_entry<Path::Gemm>(weights, dtype, group_size, cols, row_begin, row_end, x_q8, token_count, y, y_stride);
}

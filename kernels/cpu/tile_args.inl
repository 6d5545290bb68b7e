// kernels/cpu/tile_args.inl — the argument block every tile kernel takes. Included first,
// inside the anonymous namespace of each ISA translation unit (see matmul_generic.inl).

struct TileArgs {
  const unsigned char *w;  // first weight row of the tile
  size_t w_stride;         // bytes between weight rows
  const unsigned char *x;  // first activation row of the tile (fp32, or q8 blocks)
  size_t x_stride;         // bytes between activation rows
  size_t cols;             // reduction length in elements
  float *y;                // &y[token 0 of the tile][row 0 of the tile]
  size_t y_stride;         // floats between tokens in y
  // A tile that prepares its activations (Tile::prepare, on the prefill path) reads them here:
  // token t of the tile at prepared + t · prepared_stride, from the k-block's first column.
  const unsigned char *prepared = nullptr;
  size_t prepared_stride = 0;
};

// Which driver runs a tile: it decides where the tile prefetches its weight rows.
//   Decode  weights stream from DRAM once: every row prefetches the same place in the next
//           tile (R rows × w_stride ahead) into L2, so the tiles of a call form one continuous
//           stream even when rows are short (a 2 KiB row is over before a hardware prefetcher
//           has ramped up on it). Measured in kernels_bench: f16 2816×1024 decode went from
//           81% to 91% of the read probe; an L1 hint that far ahead evicts its own lines.
//           Each row also prefetches kDecodeL1PrefetchBytes ahead of itself into L1, so that
//           its loads hit L1 instead of waiting on L2 (see the constant).
//   Gemm    the row panel is reused from L2: each row prefetches kWeightPrefetchBytes ahead in
//           the row into L1.
enum class Path { Decode, Gemm };

// How far ahead of the current k each weight row is prefetched into L1 on the Gemm path.
inline constexpr size_t kWeightPrefetchBytes = 1024;

// How far ahead of the current k each weight row is prefetched into L1 on the Decode path (the
// line is already in L2 or on its way there: the next-tile prefetch asked for it a tile
// earlier). In-process A/B of two AVX2 kernel tables (40 ms slices alternated, 2 threads,
// weights from DRAM, one-token decode, random quarter stripes), with / without it: f16
// 2816 × 1024 1.08 [1.06..1.10], 1024 × 2816 1.07 [1.05..1.09], reaching 0.965–0.97 of a plain
// read of the same bytes (0.90–0.91 without); q8/32 1.04 [1.02..1.07] and 1.04 [1.01..1.05]
// (the same table built twice reads 1.01 [0.99..1.03] in this harness). 128 to 1024 bytes all gained (1.02–1.08);
// prefetching only every other line into L2, to save instructions, lost 9–20%
// (docs/performance.md, seventh round).
inline constexpr size_t kDecodeL1PrefetchBytes = 512;

// Prefetches what the weight row being read at p will want (see Path); R = rows per tile,
// S = the ISA's Simd vocabulary (prefetch_l1 / prefetch_l2). Those use __builtin_prefetch,
// not _mm_prefetch: GCC 12 silently emitted no instruction at all for _mm_prefetch reached
// through this template (objdump showed 0 prefetches), which cost 20% of decode speed.
template <class S, Path P, int R>
__attribute__((always_inline)) inline void prefetch_weights(const unsigned char *p, size_t w_stride) {
  if constexpr (P == Path::Decode) {
    S::prefetch_l2(reinterpret_cast<const char *>(p) + R * w_stride);
    S::prefetch_l1(reinterpret_cast<const char *>(p) + kDecodeL1PrefetchBytes);
  } else {
    S::prefetch_l1(reinterpret_cast<const char *>(p) + kWeightPrefetchBytes);
  }
}

// Writes the R × TT sums held in acc (pair p = r * TT + t; S = the ISA's Simd vocabulary) to y
// through the fixed tree (S::reduce8).
template <class S, int R, int TT>
__attribute__((always_inline)) inline void store_tile_sums(const typename S::F (&acc)[R * TT], float *y, size_t y_stride) {
  constexpr int kPairs = R * TT;
  constexpr int kGroups = (kPairs + 7) / 8;
  float sums[kGroups * 8];
  for (int g = 0; g < kGroups; ++g) {
    typename S::F group[8];
    for (int i = 0; i < 8; ++i) group[i] = 8 * g + i < kPairs ? acc[8 * g + i] : S::zero();
    S::reduce8(group, sums + 8 * g);
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TT; ++t) y[t * y_stride + r] = sums[r * TT + t];
}

inline size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

// Local copy of kernels.h's q8_block_bytes: an inline function of the public header called
// here could be emitted with this file's ISA flags and picked by the linker for everyone.
inline size_t block_bytes_q8(uint32_t group_size) { return 4u + group_size; }

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
};

// Which driver runs a tile: it decides where the tile prefetches its weight rows.
//   Decode  weights stream from DRAM once: every row prefetches the same place in the next
//           tile (R rows × w_stride ahead) into L2, so the tiles of a call form one continuous
//           stream even when rows are short (a 2 KiB row is over before a hardware prefetcher
//           has ramped up on it). Measured in kernels_bench: f16 2816×1024 decode went from
//           81% to 91% of the read probe; an L1 hint that far ahead evicts its own lines.
//   Gemm    the row panel is reused from L2: each row prefetches kWeightPrefetchBytes ahead in
//           the row into L1.
enum class Path { Decode, Gemm };

// How far ahead of the current k each weight row is prefetched into L1 on the Gemm path.
inline constexpr size_t kWeightPrefetchBytes = 1024;

// Prefetches what the weight row being read at p will want (see Path); R = rows per tile,
// S = the ISA's Simd vocabulary (prefetch_l1 / prefetch_l2). Those use __builtin_prefetch,
// not _mm_prefetch: GCC 12 silently emitted no instruction at all for _mm_prefetch reached
// through this template (objdump showed 0 prefetches), which cost 20% of decode speed.
template <class S, Path P, int R>
__attribute__((always_inline)) inline void prefetch_weights(const unsigned char *p, size_t w_stride) {
  if constexpr (P == Path::Decode) {
    S::prefetch_l2(reinterpret_cast<const char *>(p) + R * w_stride);
  } else {
    S::prefetch_l1(reinterpret_cast<const char *>(p) + kWeightPrefetchBytes);
  }
}

inline size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

// Local copy of kernels.h's q8_block_bytes: an inline function of the public header called
// here could be emitted with this file's ISA flags and picked by the linker for everyone.
inline size_t block_bytes_q8(uint32_t group_size) { return 4u + group_size; }

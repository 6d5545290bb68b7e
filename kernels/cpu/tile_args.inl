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

inline size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

// Local copy of kernels.h's q8_block_bytes: an inline function of the public header called
// here could be emitted with this file's ISA flags and picked by the linker for everyone.
inline size_t block_bytes_q8(uint32_t group_size) { return 4u + group_size; }

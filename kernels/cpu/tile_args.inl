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

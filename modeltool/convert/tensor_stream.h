// modeltool/convert/tensor_stream.h — copies one planned tensor from the mapped checkpoint
// into the image writer, a chunk of rows at a time: decode the source rows to f32, encode
// them to the stored dtype (f32/f16/bf16, or q8 blocks per row), append, then drop the
// source pages. A source already in the stored dtype is appended straight from the map; a
// re-laid-out one (SourceSlice: gpt-oss's fused experts) goes one source matrix at a time, and
// so do MXFP4 experts (Mxfp4Source): copied block for block into an mxfp4 image tensor (no value
// changes), or decoded to f32 and encoded like any source for another stored dtype. Block-scaled
// FP8 sources (Fp8Blocks) are decoded to f32 (e4m3 value × block scale) and encoded likewise.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "modeltool/convert/safetensors.h"
#include "modeltool/convert/tensor_plan.h"
#include "image/dtype_convert.h"
#include "image/writer.h"
#include "util/thread_pool.h"
#include "util/error.h"

namespace colibri::modeltool::convert {

class TensorStreamer {
 public:
  // Rows of a chunk are converted on `pool`'s threads (the same bytes for any thread count).
  explicit TensorStreamer(util::ThreadPool &pool) : pool_(pool) {}

  // Source bytes per chunk; the f32 staging buffer is at most twice this (f16 sources).
  static constexpr uint64_t kChunkSourceBytes = 4u << 20;

  // Appends all of `tensor` to `writer` (whose current tensor it must be). `on_progress`
  // gets the source bytes consumed after each chunk.
  Error write(const SafetensorsCheckpoint &checkpoint, const PlannedTensor &tensor, image::ImageWriter *writer,
              const std::function<void(uint64_t source_bytes)> &on_progress);

 private:
  Error write_sliced(const SafetensorsCheckpoint &checkpoint, const PlannedTensor &tensor, image::ImageWriter *writer,
                     const std::function<void(uint64_t source_bytes)> &on_progress);
  void decode_source_row(const SafetensorsCheckpoint &checkpoint, const PlannedTensor &tensor, size_t k,
                         const unsigned char *bytes, uint64_t row, uint64_t cols, float *out) const;
  Error write_mxfp4(const SafetensorsCheckpoint &checkpoint, const PlannedTensor &tensor, image::ImageWriter *writer,
                    const std::function<void(uint64_t source_bytes)> &on_progress);

  util::ThreadPool &pool_;
  std::vector<float> rows_;               // decoded f32 rows of one chunk
  std::vector<size_t> bad_column_;        // per row of the chunk: first unstorable column, or cols
  std::vector<unsigned char> encoded_;    // the same rows in the stored dtype
  std::vector<unsigned char> spare_;      // write(): the previous chunk's, appended meanwhile
};

}  // namespace colibri::modeltool::convert

// modeltool/convert/tensor_stream.cpp — chunked decode/encode of one tensor.
#include "modeltool/convert/tensor_stream.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "image/dtype_convert.h"
#include "modeltool/cli_support.h"
#include "util/strings.h"

namespace colibri::modeltool::convert {

namespace {

// OCP FP8 E4M3 (the "fn" variant DeepSeek stores): sign, 4 exponent bits (bias 7), 3 mantissa
// bits; exponent 0 is subnormal (m/8 · 2^-6), S.1111.111 is NaN, there is no infinity (max 448).
float e4m3_value(uint8_t code) {
  const int sign = code >> 7, exponent = (code >> 3) & 0xF, mantissa = code & 0x7;
  float magnitude;
  if (exponent == 0xF && mantissa == 0x7) magnitude = std::nanf("");
  else if (exponent == 0) magnitude = std::ldexp(static_cast<float>(mantissa) / 8.0f, -6);
  else magnitude = std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  return sign ? -magnitude : magnitude;
}

struct E4m3Table {
  float value[256];
  E4m3Table() {
    for (int c = 0; c < 256; ++c) value[c] = e4m3_value(static_cast<uint8_t>(c));
  }
};

}  // namespace

// Row `row` of source k of `tensor` (whose bytes start at `bytes`), decoded to f32: a float source
// as stored, an FP8 one (Fp8Blocks) as its e4m3 values times the scale of each value's block.
void TensorStreamer::decode_source_row(const SafetensorsCheckpoint &checkpoint, const PlannedTensor &tensor, size_t k,
                                       const unsigned char *bytes, uint64_t row, uint64_t cols, float *out) const {
  const SafetensorsTensor *scale = k < tensor.fp8_scales.size() ? tensor.fp8_scales[k] : nullptr;
  if (!scale) {
    image::DType decoded = image::DType::F32;
    source_float_dtype(tensor.sources[k]->dtype, &decoded);  // checked by plan_tensors
    image::decode_floats(decoded, bytes, cols, out);
    return;
  }
  static const E4m3Table table;
  image::DType scale_dtype = image::DType::F32;
  source_float_dtype(scale->dtype, &scale_dtype);
  const uint64_t block_cols = tensor.fp8.cols, scale_cols = scale->shape[1];
  const unsigned char *scale_row =
      checkpoint.data(*scale) + image::row_bytes(scale_dtype, 0, scale_cols) * (row / tensor.fp8.rows);
  float scales[64];  // a row's block scales, a chunk at a time
  for (uint64_t b0 = 0; b0 < scale_cols; b0 += 64) {
    const uint64_t nb = std::min<uint64_t>(64, scale_cols - b0);
    image::decode_floats(scale_dtype, scale_row + image::row_bytes(scale_dtype, 0, b0), nb, scales);
    for (uint64_t b = 0; b < nb; ++b) {
      const uint64_t c0 = (b0 + b) * block_cols, c1 = std::min(cols, c0 + block_cols);
      for (uint64_t c = c0; c < c1; ++c) out[c] = table.value[bytes[c]] * scales[b];
    }
  }
}

Error TensorStreamer::write(const SafetensorsCheckpoint &checkpoint, const PlannedTensor &tensor,
                            image::ImageWriter *writer, const std::function<void(uint64_t)> &on_progress) {
  const image::DType stored = tensor.spec.dtype;
  const uint32_t group = tensor.spec.group_size;
  const uint64_t cols = tensor.spec.shape.back();  // rows run along the last dimension (q8 groups too)

  if (tensor.mxfp4.used) return write_mxfp4(checkpoint, tensor, writer, on_progress);
  if (!tensor.slice.identity()) return write_sliced(checkpoint, tensor, writer, on_progress);
  // Converted chunks go to the writer on its own thread while the pool converts the next one:
  // encoded_ and spare_ take turns (the one submitted last is in flight, the other is free).
  image::ChunkAppender appender(writer);
  for (size_t k = 0; k < tensor.sources.size(); ++k) {
    const SafetensorsTensor *source = tensor.sources[k];
    const bool fp8 = k < tensor.fp8_scales.size() && tensor.fp8_scales[k];
    image::DType decoded = image::DType::F32;
    if (!fp8 && !source_float_dtype(source->dtype, &decoded))  // plan_tensors refused these already
      return make_error(ErrorKind::Internal, "unplanned source dtype " + source->dtype);
    const uint64_t source_row_bytes = fp8 ? cols : image::row_bytes(decoded, 0, cols);
    const uint64_t rows = source->byte_size() / source_row_bytes;
    const uint64_t rows_per_chunk = std::max<uint64_t>(1, kChunkSourceBytes / source_row_bytes);
    const unsigned char *base = checkpoint.data(*source);

    for (uint64_t row = 0; row < rows; row += rows_per_chunk) {
      if (interrupted()) return interrupted_error();  // the writer's temporary file goes with it
      const uint64_t n = std::min(rows_per_chunk, rows - row);
      const unsigned char *chunk = base + row * source_row_bytes;
      const uint64_t chunk_bytes = n * source_row_bytes;
      Error error;
      if (!fp8 && decoded == stored) {
        error = appender.wait();  // same dtype: straight from the map, after what is in flight
        if (!error) error = writer->append(chunk, chunk_bytes);
      } else {
        rows_.resize(n * cols);
        const uint64_t out_row_bytes = image::row_bytes(stored, group, cols);
        encoded_.resize(n * out_row_bytes);
        bad_column_.resize(n);
        // Rows are independent: decoded, checked and encoded by one thread each (the same
        // bytes for any thread count); the first bad row is found in row order below.
        pool_.parallel_for(n, [&](size_t r, size_t) {
          float *in = rows_.data() + r * cols;
          unsigned char *out = encoded_.data() + r * out_row_bytes;
          decode_source_row(checkpoint, tensor, k, chunk + r * source_row_bytes, row + r, cols, in);
          bad_column_[r] = image::first_unstorable(stored, in, cols);
          if (bad_column_[r] != cols) return;
          if (image::is_block_dtype(stored)) image::quantize_row(stored, group, in, cols, out);
          else image::encode_floats(stored, in, cols, out);
        });
        for (uint64_t r = 0; r < n; ++r) {
          const size_t bad = bad_column_[r];
          if (bad != cols)
            return make_error(ErrorKind::NonFinite,
                              util::strprintf("checkpoint tensor '%s' holds %g at row %llu, column %zu (image tensor "
                                              "'%s'): %s. Fix the checkpoint, or convert with --dtype %s",
                                              source->name.c_str(), static_cast<double>(rows_[r * cols + bad]),
                                              static_cast<unsigned long long>(row + r), bad, tensor.spec.name.c_str(),
                                              image::unstorable_reason(stored), image::storable_alternatives(stored)));
        }
        error = appender.submit(encoded_.data(), encoded_.size());
        std::swap(encoded_, spare_);  // the data in flight stays where it is
      }
      checkpoint.release(*source, chunk, chunk_bytes);
      if (error) return error;
      on_progress(chunk_bytes);
    }
  }
  return appender.wait();
}

// A re-laid-out source (SourceSlice): one [A, C] matrix of the source at a time is decoded
// whole, its kept columns gathered into the image's rows (transposed or not), then the rows are
// checked and encoded as write() does. Memory: one source matrix in f32 and its slice.
Error TensorStreamer::write_sliced(const SafetensorsCheckpoint &checkpoint, const PlannedTensor &tensor,
                                   image::ImageWriter *writer, const std::function<void(uint64_t)> &on_progress) {
  const image::DType stored = tensor.spec.dtype;
  const uint32_t group = tensor.spec.group_size;
  const SourceSlice &slice = tensor.slice;
  const SafetensorsTensor *source = tensor.sources.front();
  const bool fp8 = !tensor.fp8_scales.empty() && tensor.fp8_scales[0];
  image::DType decoded = image::DType::F32;
  if (tensor.sources.size() != 1 || source->shape.size() < 2 || (!fp8 && !source_float_dtype(source->dtype, &decoded)))
    return make_error(ErrorKind::Internal, "unplanned sliced source for " + tensor.spec.name);
  auto source_row_bytes = [&](uint64_t n) { return fp8 ? n : image::row_bytes(decoded, 0, n); };
  const uint64_t a = slice.row_block ? slice.row_block : source->shape[source->shape.size() - 2], c = source->shape.back();
  const uint64_t kept = c / slice.column_stride;                           // columns taken from each source row
  const uint64_t kept_rows = slice.row_count ? slice.row_count : a, r0 = slice.row_offset;  // rows taken
  const uint64_t out_rows = slice.transpose ? kept : kept_rows, cols = slice.transpose ? kept_rows : kept;
  const uint64_t matrices = source->byte_size() / source_row_bytes(a * c);
  const uint64_t source_matrix_bytes = source_row_bytes(a * c);
  const uint64_t out_row_bytes = image::row_bytes(stored, group, cols);
  const unsigned char *base = checkpoint.data(*source);
  std::vector<float> whole(a * c);
  rows_.resize(out_rows * cols);
  encoded_.resize(out_rows * out_row_bytes);
  bad_column_.resize(out_rows);
  for (uint64_t m = 0; m < matrices; ++m) {
    if (interrupted()) return interrupted_error();
    const unsigned char *matrix = base + m * source_matrix_bytes;
    pool_.parallel_for(a, [&](size_t r, size_t) {
      decode_source_row(checkpoint, tensor, 0, matrix + r * source_row_bytes(c), m * a + r, c, whole.data() + r * c);
    });
    pool_.parallel_for(out_rows, [&](size_t r, size_t) {
      float *row = rows_.data() + r * cols;
      for (uint64_t j = 0; j < cols; ++j)
        row[j] = slice.transpose ? whole[(r0 + j) * c + r * slice.column_stride + slice.column_offset]
                                 : whole[(r0 + r) * c + j * slice.column_stride + slice.column_offset];
      unsigned char *out = encoded_.data() + r * out_row_bytes;
      bad_column_[r] = image::first_unstorable(stored, row, cols);
      if (bad_column_[r] != cols) return;
      if (image::is_block_dtype(stored)) image::quantize_row(stored, group, row, cols, out);
      else image::encode_floats(stored, row, cols, out);
    });
    for (uint64_t r = 0; r < out_rows; ++r)
      if (bad_column_[r] != cols)
        return make_error(ErrorKind::NonFinite,
                          util::strprintf("checkpoint tensor '%s' holds %g in matrix %llu (image tensor '%s', row "
                                          "%llu, column %zu): %s. Fix the checkpoint, or convert with --dtype %s",
                                          source->name.c_str(), static_cast<double>(rows_[r * cols + bad_column_[r]]),
                                          static_cast<unsigned long long>(m), tensor.spec.name.c_str(),
                                          static_cast<unsigned long long>(r), bad_column_[r],
                                          image::unstorable_reason(stored), image::storable_alternatives(stored)));
    Error error = writer->append(encoded_.data(), encoded_.size());
    checkpoint.release(*source, matrix, source_matrix_bytes);
    if (error) return error;
    on_progress(source_matrix_bytes);
  }
  return {};
}

// MXFP4 experts (Mxfp4Source): one expert's blocks and scales at a time. Every kept row is
// decoded to f32 first, so that a scale the values cannot take (e8m0 255 is NaN; 254 makes codes
// of magnitude 2 and more overflow f32) is refused by name as in any other source; an mxfp4 image
// tensor then gets the checkpoint's blocks re-packed (mxfp4_block_from_checkpoint: the same codes
// and scale), any other dtype the decoded values encoded.
Error TensorStreamer::write_mxfp4(const SafetensorsCheckpoint &checkpoint, const PlannedTensor &tensor,
                                  image::ImageWriter *writer, const std::function<void(uint64_t)> &on_progress) {
  const image::DType stored = tensor.spec.dtype;
  const uint32_t group = tensor.spec.group_size;
  const Mxfp4Source &layout = tensor.mxfp4;
  if (tensor.sources.size() != 2 || tensor.sources[0]->shape.size() != 4 || layout.row_stride == 0)
    return make_error(ErrorKind::Internal, "unplanned MXFP4 source for " + tensor.spec.name);
  const SafetensorsTensor *blocks = tensor.sources[0], *scales = tensor.sources[1];
  const uint64_t experts = blocks->shape[0], source_rows = blocks->shape[1], groups = blocks->shape[2];
  const uint64_t group_bytes = image::kMxfp4GroupSize / 2, cols = groups * image::kMxfp4GroupSize;
  const uint64_t out_rows = tensor.spec.shape[1];
  if (tensor.spec.shape.size() != 3 || tensor.spec.shape[0] != experts || tensor.spec.shape[2] != cols ||
      (out_rows - 1) * layout.row_stride + layout.row_offset >= source_rows)
    return make_error(ErrorKind::Internal, "MXFP4 source and image shapes disagree for " + tensor.spec.name);
  const uint64_t blocks_per_expert = source_rows * groups * group_bytes, scales_per_expert = source_rows * groups;
  const uint64_t out_row_bytes = image::row_bytes(stored, group, cols);
  const bool copy_blocks = stored == image::DType::MXFP4 && group == image::kMxfp4GroupSize;
  const unsigned char *blocks_base = checkpoint.data(*blocks), *scales_base = checkpoint.data(*scales);
  rows_.resize(out_rows * cols);
  encoded_.resize(out_rows * out_row_bytes);
  bad_column_.resize(out_rows);
  for (uint64_t e = 0; e < experts; ++e) {
    if (interrupted()) return interrupted_error();
    const unsigned char *expert_blocks = blocks_base + e * blocks_per_expert;
    const unsigned char *expert_scales = scales_base + e * scales_per_expert;
    pool_.parallel_for(out_rows, [&](size_t r, size_t) {
      const uint64_t source_row = r * layout.row_stride + layout.row_offset;
      const unsigned char *row_blocks = expert_blocks + source_row * groups * group_bytes;
      const unsigned char *row_scales = expert_scales + source_row * groups;
      float *row = rows_.data() + r * cols;
      for (uint64_t g = 0; g < groups; ++g) {
        const float scale = image::e8m0_value(row_scales[g]);
        for (uint64_t j = 0; j < group_bytes; ++j) {
          const uint8_t byte = row_blocks[g * group_bytes + j];
          row[g * image::kMxfp4GroupSize + 2 * j] = scale * image::e2m1_value(byte & 0x0F);
          row[g * image::kMxfp4GroupSize + 2 * j + 1] = scale * image::e2m1_value(byte >> 4);
        }
      }
      const size_t non_finite = image::first_non_finite(row, cols);
      bad_column_[r] = non_finite != cols ? non_finite : image::first_unstorable(stored, row, cols);
      if (bad_column_[r] != cols) return;
      unsigned char *out = encoded_.data() + r * out_row_bytes;
      if (copy_blocks)
        for (uint64_t g = 0; g < groups; ++g)
          image::mxfp4_block_from_checkpoint(row_blocks + g * group_bytes, row_scales[g], out + g * image::kMxfp4BlockBytes);
      else if (image::is_block_dtype(stored))
        image::quantize_row(stored, group, row, cols, out);
      else
        image::encode_floats(stored, row, cols, out);
    });
    for (uint64_t r = 0; r < out_rows; ++r) {
      const size_t bad = bad_column_[r];
      if (bad == cols) continue;
      const uint64_t source_row = r * layout.row_stride + layout.row_offset;
      const float value = rows_[r * cols + bad];
      return make_error(ErrorKind::NonFinite,
                        std::isfinite(value)
                            ? util::strprintf("MXFP4 tensor '%s' holds %g at expert %llu, row %llu, column %zu (image "
                                              "tensor '%s'): %s. Convert with --dtype %s",
                                              blocks->name.c_str(), static_cast<double>(value),
                                              static_cast<unsigned long long>(e),
                                              static_cast<unsigned long long>(source_row), bad, tensor.spec.name.c_str(),
                                              image::unstorable_reason(stored), image::storable_alternatives(stored))
                            : util::strprintf("MXFP4 tensor '%s' decodes to %g at expert %llu, row %llu, column %zu "
                                              "(scale byte %u of '%s'; e8m0 255 is NaN, and 254 overflows fp32 for "
                                              "codes of magnitude 2 or more): the checkpoint is damaged; download it "
                                              "again",
                                              blocks->name.c_str(), static_cast<double>(value),
                                              static_cast<unsigned long long>(e),
                                              static_cast<unsigned long long>(source_row), bad,
                                              static_cast<unsigned>(expert_scales[source_row * groups +
                                                                                  bad / image::kMxfp4GroupSize]),
                                              scales->name.c_str()));
    }
    Error error = writer->append(encoded_.data(), encoded_.size());
    checkpoint.release(*blocks, expert_blocks, blocks_per_expert);
    checkpoint.release(*scales, expert_scales, scales_per_expert);
    if (error) return error;
    on_progress(blocks_per_expert + scales_per_expert);
  }
  return {};
}

}  // namespace colibri::modeltool::convert

// tests/convert/convert_test_support.h — small helpers shared by the converter tests:
// a self-removing temporary directory, one-call conversion, and reading image tensors back
// as floats.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "image/dtype_convert.h"
#include "image/reader.h"
#include "modeltool/convert/converter.h"
#include "support/synthetic_image.h"

namespace colibri::testing {

// A fresh directory under /tmp, removed with everything in it when the object dies.
class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string &tag) : path_(temp_dir("convert-" + tag)) {}
  ~ScopedTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScopedTempDir(const ScopedTempDir &) = delete;
  ScopedTempDir &operator=(const ScopedTempDir &) = delete;
  const std::string &path() const { return path_; }
  std::string operator/(const std::string &name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Converts `input` to `output` with default options plus the given dtype.
inline Error convert(const std::string &input, const std::string &output,
                     std::optional<image::DType> dtype = std::nullopt, uint32_t group_size = 32,
                     bool overwrite = false) {
  modeltool::convert::ConvertOptions options;
  options.input = input;
  options.output = output;
  options.dtype = dtype;
  options.group_size = group_size;
  options.overwrite = overwrite;
  modeltool::convert::ConvertReport report;
  return modeltool::convert::convert_checkpoint(options, &report);
}

inline std::unique_ptr<image::Image> open_image(const std::string &path) {
  Error error;
  auto img = image::Image::open(path, image::OpenOptions{}, &error);
  if (!img) throw std::runtime_error("cannot open " + path + ": " + error.message);
  return img;
}

// Every element of an image tensor as f32 (the block dtypes dequantised).
inline std::vector<float> image_values(const image::Image &img, const image::TensorInfo &t) {
  std::vector<float> values(t.element_count());
  const uint64_t cols = t.shape[t.rank - 1], rows = values.size() / cols;
  const uint64_t row = image::row_bytes(t.dtype, t.group_size, cols);
  for (uint64_t r = 0; r < rows; ++r) {
    const unsigned char *src = img.data(t) + r * row;
    if (image::is_block_dtype(t.dtype)) image::dequantize_row(t.dtype, t.group_size, src, cols, values.data() + r * cols);
    else image::decode_floats(t.dtype, src, cols, values.data() + r * cols);
  }
  return values;
}

}  // namespace colibri::testing

// tests/fuzz/fuzz_image_reader.cpp — libFuzzer target for the image reader and the model
// binding. Each input is opened twice: as given, and with its header checksum recomputed (when
// the region sizes allow) so that mutations reach the directory and metadata validation
// instead of stopping at the checksum. Opened images are also verified and bound as a model
// (metadata → ModelConfig, tensors, header fields: what every open and `verify` run).
#include <cstdint>
#include <cstring>
#include <memory>

#include "image/reader.h"
#include "image/writer.h"
#include "model/model.h"

using namespace colibri;

static void open_and_verify(const unsigned char *bytes, size_t size) {
  Error err;
  auto img = image::Image::from_memory(bytes, size, "fuzz", &err);
  if (!img) {
    if (err.message.empty()) __builtin_trap();  // every failure must explain itself
    return;
  }
  (void)img->verify_all(1);
  for (const auto &t : img->tensors()) (void)img->find(t.name);
  auto m = model::Model::from_image(std::move(img), &err);
  if (!m && err.message.empty()) __builtin_trap();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::unique_ptr<unsigned char[]> copy(new unsigned char[size ? size : 1]);
  if (size) std::memcpy(copy.get(), data, size);
  open_and_verify(copy.get(), size);

  if (size >= image::kHeaderSize) {
    image::FileHeader h;
    std::memcpy(&h, copy.get(), sizeof h);
    if (h.directory_offset == image::kHeaderSize && h.directory_size <= size - image::kHeaderSize &&
        h.metadata_offset == image::kHeaderSize + h.directory_size && h.metadata_size <= size - h.metadata_offset) {
      h.header_checksum = image::header_checksum(h, copy.get() + image::kHeaderSize, h.directory_size,
                                                 copy.get() + h.metadata_offset, h.metadata_size);
      std::memcpy(copy.get(), &h, sizeof h);
      open_and_verify(copy.get(), size);
    }
  }
  return 0;
}

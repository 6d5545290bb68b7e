// core/model/load.cpp — Model::load: open the image with the caller's load options (mapping
// advice, populate, mlock, a copy in memory, NUMA placement, warm-up), then bind it.
#include "model/model.h"

namespace colibri::model {

std::unique_ptr<Model> Model::load(const std::string &path, const LoadOptions &options, Error *error) {
  // With a NUMA policy, pages must not be faulted in before the policy is set: open without
  // MAP_POPULATE, apply the policy, then populate by the warm-up pass. A copy in memory gets
  // the policy before it is filled.
  image::OpenOptions open_options = options.image;
  bool numa = options.numa.mode != util::NumaPolicy::Mode::Off;
  bool populate_later = numa && open_options.populate && !options.load_into_memory;
  if (numa || options.load_into_memory) open_options.populate = false;
  if (options.load_into_memory) open_options.lock = false;  // the copy is locked instead
  auto img = image::Image::open(path, open_options, error);
  if (!img) return nullptr;
  std::string report = "off";
  if (options.load_into_memory) {
    auto place = [&](unsigned char *memory, uint64_t bytes) -> Error {
      return numa ? util::numa_apply_to_memory(options.numa, memory, bytes, &report) : Error{};
    };
    if (Error e = img->load_into_memory(place, options.image.lock)) {
      *error = e;
      return nullptr;
    }
  } else {
    if (numa) {
      const auto &h = img->header();
      uint64_t begin = h.weight_data_offset & ~uint64_t{4095}, bytes = img->file_size() - begin;  // page-aligned
      if (Error e = util::numa_apply_to_memory(options.numa, img->bytes() + begin, bytes, &report)) {
        *error = e;
        return nullptr;
      }
    }
    if (options.warm_up || populate_later) {
      // Touch one byte per page of the tensor data; the sum keeps the reads from being elided.
      const unsigned char *base = img->bytes();
      volatile unsigned char sink = 0;
      for (uint64_t off = img->header().weight_data_offset; off < img->file_size(); off += 4096) sink = sink + base[off];
    }
  }
  auto m = from_image(std::move(img), error);
  if (m) m->numa_report_ = report;
  return m;
}

}  // namespace colibri::model

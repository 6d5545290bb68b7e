// core/model/load.cpp — Model::load: open the image with the caller's load options (mapping
// advice, populate, mlock, a copy in memory, NUMA placement, warm-up), bind it, and measure
// where its weight pages are.
#include "model/model.h"

#include "util/strings.h"

namespace colibri::model {

std::unique_ptr<Model> Model::load(const std::string &path, const LoadOptions &options, Error *error) {
  const util::NumaSystem &numa = options.numa_system ? *options.numa_system : util::system_numa();
  // A NUMA policy places the weights in a copy whose policy is set before the copy faults its
  // pages in (whichever thread copies): a file mapping's pages are the page cache, allocated by
  // whoever read the file first and shared with other processes, and no policy moves them. So
  // bind and interleave imply load_into_memory where NUMA is available.
  const bool place = options.numa.mode != util::NumaPolicy::Mode::Off && numa.unavailable_reason().empty();
  const bool copy = options.load_into_memory || place;
  image::OpenOptions open_options = options.image;
  if (copy) {
    open_options.populate = false;  // the copy reads every page anyway
    open_options.lock = false;      // the copy is locked instead
  }
  auto img = image::Image::open(path, open_options, error);
  if (!img) return nullptr;
  util::MemoryPlacement placement;
  if (Error e = util::plan_memory_placement(options.numa, numa, img->file_size(), &placement)) {
    e.message = "'" + path + "': " + e.message;
    *error = e;
    return nullptr;
  }
  if (copy) {
    auto apply = [&](unsigned char *memory, uint64_t bytes) {
      return util::apply_memory_placement(placement, numa, memory, bytes);
    };
    if (Error e = img->load_into_memory(apply, options.image.lock)) {
      *error = e;
      return nullptr;
    }
  } else if (options.warm_up) {
    // Touch one byte per page of the tensor data; the sum keeps the reads from being elided.
    const unsigned char *base = img->bytes();
    volatile unsigned char sink = 0;
    for (uint64_t off = img->header().weight_data_offset; off < img->file_size(); off += 4096) sink = sink + base[off];
  }
  // Where the weights are, measured: the kernel's answer for evenly spaced pages of them.
  const uint64_t begin = img->header().weight_data_offset;
  const util::PagePlacement measured =
      util::measure_page_placement(numa, img->bytes() + begin, img->file_size() - begin);
  std::string report;
  if (placement.mode != util::NumaPolicy::Mode::Off)
    report = util::numa_policy_name(options.numa) + ": weights copied into memory " + placement.description;
  else if (options.numa.mode != util::NumaPolicy::Mode::Off)
    report = placement.description;  // requested, but NUMA is unavailable: nothing placed
  else
    report = copy ? "off (weights loaded into memory by the opening thread)" : "off (weights in the file mapping)";
  report += measured.not_measured.empty() ? "; measured: " + util::describe_page_placement(measured) : "";
  auto m = from_image(std::move(img), error);
  if (m) m->numa_report_ = report;
  return m;
}

}  // namespace colibri::model

// modeltool/verify.cpp — `colibri-model verify FILE [--deep]`: validates the structure
// (as every open does), then every tensor checksum; --deep also scans the values for
// NaN/Inf and names the first offending tensor and element index.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "image/dtype_convert.h"
#include "image/reader.h"
#include "modeltool/cli_support.h"
#include "modeltool/commands.h"
#include "util/strings.h"

namespace colibri::modeltool {

namespace {

// Index of the first non-finite element of `t`, or -1. Q8 checks its scales.
int64_t first_non_finite(const image::Image &img, const image::TensorInfo &t) {
  const unsigned char *p = img.data(t);
  uint64_t n = t.element_count();
  switch (t.dtype) {
    case image::DType::F32:
      for (uint64_t i = 0; i < n; ++i) {
        float v;
        std::memcpy(&v, p + 4 * i, 4);
        if (!std::isfinite(v)) return static_cast<int64_t>(i);
      }
      return -1;
    case image::DType::F16:
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        if ((h & 0x7C00) == 0x7C00) return static_cast<int64_t>(i);
      }
      return -1;
    case image::DType::BF16:
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        if ((b & 0x7F80) == 0x7F80) return static_cast<int64_t>(i);
      }
      return -1;
    case image::DType::Q8: {
      uint64_t blocks = n / t.group_size;
      uint64_t stride = image::q8_block_bytes(t.group_size);
      for (uint64_t b = 0; b < blocks; ++b) {
        float scale;
        std::memcpy(&scale, p + b * stride, 4);
        if (!std::isfinite(scale)) return static_cast<int64_t>(b * t.group_size);
      }
      return -1;
    }
  }
  return -1;
}

}  // namespace

int run_verify(int argc, char **argv) {
  cxxopts::Options options("colibri-model verify", "Check an image's structure and every tensor checksum.");
  options.add_options()("deep", "also scan every value for NaN/Inf")(
      "threads", "checksum threads (0 = all cores)", cxxopts::value<unsigned>()->default_value("0"))(
      "h,help", "show this help")("file", "image file", cxxopts::value<std::string>());
  options.parse_positional({"file"});
  options.positional_help("FILE");
  int code = kExitOk;
  auto args = parse_or_report(options, argc, argv, &code);
  if (!args) return code;
  if (!args->count("file")) {
    std::fprintf(stderr, "colibri-model verify: missing FILE\n\n%s", options.help().c_str());
    return kExitUsage;
  }
  Error error;
  image::OpenOptions open_options;
  open_options.advice = image::MapAdvice::Sequential;
  auto img = image::Image::open((*args)["file"].as<std::string>(), open_options, &error);
  if (!img) return report_error("verify", error);

  double start = monotonic_seconds();
  if (Error e = img->verify_all((*args)["threads"].as<unsigned>())) return report_error("verify", e);
  double elapsed = monotonic_seconds() - start;
  uint64_t bytes = 0;
  for (const auto &t : img->tensors()) bytes += t.size;

  if (args->count("deep")) {
    for (const auto &t : img->tensors()) {
      int64_t bad = first_non_finite(*img, t);
      if (bad >= 0) {
        std::fprintf(stderr,
                     "colibri-model verify: corrupt image: '%s': tensor '%s' %s holds a non-finite value (NaN or "
                     "Inf) at element %lld; the checkpoint it was converted from is damaged or overflowed on "
                     "conversion (try a wider --dtype)\n",
                     img->path().c_str(), t.name.c_str(), t.shape_string().c_str(), static_cast<long long>(bad));
        return kExitCorrupt;
      }
    }
  }
  double rate = elapsed > 0 ? static_cast<double>(bytes) / elapsed / 1e9 : 0.0;
  std::printf("OK %s: %zu tensors, %s, checksums verified in %.3f s (%.2f GB/s)%s\n", img->path().c_str(),
              img->tensors().size(), util::human_bytes(bytes).c_str(), elapsed, rate,
              args->count("deep") ? ", all values finite" : "");
  return kExitOk;
}

}  // namespace colibri::modeltool

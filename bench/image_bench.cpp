// bench/image_bench.cpp — image open time and verify throughput (prints figures; asserts
// nothing). Writes a synthetic image of the requested size (default ≥ 1 GiB, f16), then:
//   open:   median/min/max over 9 opens, for the big image and a tiny one (open must not
//           read tensor bytes, so the two should be within noise of each other);
//   verify: median/min/max GB/s over 3 full checksum passes (page cache warm), 1 and N threads.
// Usage: image_bench [--dir DIR] [--layers N] [--keep]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "image/reader.h"
#include "support/synthetic_image.h"
#include "util/strings.h"

using namespace colibri;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Stats {
  double median, min, max;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

Stats time_open(const std::string &path, int runs) {
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    Error err;
    double start = now_s();
    auto img = image::Image::open(path, {}, &err);
    double elapsed = now_s() - start;
    if (!img) {
      std::fprintf(stderr, "open failed: %s\n", err.message.c_str());
      std::exit(1);
    }
    t.push_back(elapsed * 1e3);
  }
  return stats(t);
}

}  // namespace

int main(int argc, char **argv) {
  std::string dir = "/tmp";
  uint64_t layers = 8;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
    else if (!std::strcmp(argv[i], "--layers") && i + 1 < argc) layers = std::strtoull(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--keep")) keep = true;
    else {
      std::fprintf(stderr, "usage: image_bench [--dir DIR] [--layers N] [--keep]\n");
      return 2;
    }
  }
  testing::SyntheticImageSpec big;
  big.layers = layers;
  big.hidden = 1024;
  big.ffn = 2816;
  big.experts = 8;
  big.top_k = 2;
  big.vocab = 32000;
  big.dtype = image::DType::F16;
  big.alignment = 4096;
  std::string big_path = dir + "/colibri-bench-big.colibri";
  std::string small_path = dir + "/colibri-bench-small.colibri";
  double start = now_s();
  if (Error e = testing::write_synthetic_image(big_path, big)) {
    std::fprintf(stderr, "write failed: %s\n", e.message.c_str());
    return 1;
  }
  double write_s = now_s() - start;
  if (Error e = testing::write_synthetic_image(small_path, {})) return 1;
  Error err;
  auto probe = image::Image::open(big_path, {}, &err);
  uint64_t big_size = probe->file_size();
  uint64_t tensor_bytes = 0;
  for (const auto &t : probe->tensors()) tensor_bytes += t.size;
  probe.reset();
  std::printf("image: %s, %llu layers, hidden 1024, 8 experts × 2816, vocab 32000, f16 (written in %.1f s)\n",
              util::human_bytes(big_size).c_str(), static_cast<unsigned long long>(layers), write_s);

  Stats open_big = time_open(big_path, 9);
  Stats open_small = time_open(small_path, 9);
  std::printf("open   big   (%10s): median %.3f ms  min %.3f  max %.3f\n", util::human_bytes(big_size).c_str(),
              open_big.median, open_big.min, open_big.max);
  std::printf("open   small (%10s): median %.3f ms  min %.3f  max %.3f\n",
              util::human_bytes(testing::read_file(small_path).size()).c_str(), open_small.median, open_small.min,
              open_small.max);

  auto img = image::Image::open(big_path, {}, &err);
  unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned threads : {1u, hw}) {
    std::vector<double> rates;
    for (int i = 0; i < 4; ++i) {
      double t0 = now_s();
      if (Error e = img->verify_all(threads)) {
        std::fprintf(stderr, "verify failed: %s\n", e.message.c_str());
        return 1;
      }
      double elapsed = now_s() - t0;
      if (i > 0) rates.push_back(static_cast<double>(tensor_bytes) / elapsed / 1e9);  // run 0 is the warm-up
    }
    Stats s = stats(rates);
    std::printf("verify %u thread%s: median %.2f GB/s  min %.2f  max %.2f (page cache warm, 3 runs after warm-up)\n",
                threads, threads == 1 ? " " : "s", s.median, s.min, s.max);
  }
  if (!keep) {
    std::remove(big_path.c_str());
    std::remove(small_path.c_str());
  }
  return 0;
}

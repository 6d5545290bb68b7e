// bench/convert_bench.cpp — how fast `colibri-model convert` streams a large checkpoint and
// how much memory it holds while doing so.
//
// Writes a Mixtral-like bf16 checkpoint of at least --gb GiB (config.json, tokenizer files,
// sharded model-*.safetensors + index) into a temporary directory, then converts it --runs
// times (after one warm-up run, so the page cache is equally warm for every measured run),
// each in a forked child so that the child's VmHWM (/proc/self/status) is the converter's
// own peak resident memory. Prints wall time, source MB/s and peak RSS per run, then the
// median, min and max (docs/performance.md protocol), and checks peak RSS against the budget
// "largest single tensor + 256 MB".
//
// usage: convert_bench [--dir DIR] [--gb 1.0 (GiB)] [--runs 3] [--dtype default|f32|f16|bf16|q8] [--keep]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "convert/synthetic_checkpoint.h"
#include "modeltool/convert/converter.h"
#include "util/strings.h"

using namespace colibri;

namespace {

struct RunResult {
  double seconds = 0;
  uint64_t peak_rss_bytes = 0;
  uint64_t source_bytes = 0;
  uint64_t image_bytes = 0;
  char error[512] = {};
};

uint64_t peak_rss_bytes() {
  FILE *f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  uint64_t kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "VmHWM:", 6) == 0) kb = std::strtoull(line + 6, nullptr, 10);
  std::fclose(f);
  return kb * 1024;
}

// One conversion in a child process; its VmHWM is the converter's alone.
RunResult run_in_child(const modeltool::convert::ConvertOptions &options) {
  RunResult result;
  int fds[2];
  if (::pipe(fds) != 0) {
    std::snprintf(result.error, sizeof result.error, "pipe failed");
    return result;
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    RunResult child;
    modeltool::convert::ConvertReport report;
    auto start = std::chrono::steady_clock::now();
    Error e = modeltool::convert::convert_checkpoint(options, &report);
    child.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    child.peak_rss_bytes = peak_rss_bytes();
    child.source_bytes = report.source_bytes;
    child.image_bytes = report.image_bytes;
    if (e) std::snprintf(child.error, sizeof child.error, "%s", e.message.c_str());
    ssize_t written = ::write(fds[1], &child, sizeof child);
    ::_exit(written == static_cast<ssize_t>(sizeof child) ? 0 : 1);
  }
  ::close(fds[1]);
  ssize_t got = ::read(fds[0], &result, sizeof result);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (got != static_cast<ssize_t>(sizeof result)) std::snprintf(result.error, sizeof result.error, "child failed");
  return result;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char **argv) {
  std::string dir;
  double gigabytes = 1.0;
  int runs = 3;
  std::string dtype_name = "default";
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--dir") dir = next();
    else if (a == "--gb") gigabytes = std::atof(next().c_str());
    else if (a == "--runs") runs = std::max(1, std::atoi(next().c_str()));
    else if (a == "--dtype") dtype_name = next();
    else if (a == "--keep") keep = true;
    else {
      std::fprintf(stderr, "usage: convert_bench [--dir DIR] [--gb 1.0] [--runs 3] [--dtype default|f32|f16|bf16|q8] [--keep]\n");
      return 2;
    }
  }
  std::optional<image::DType> dtype;
  if (dtype_name != "default") {
    image::DType d;
    if (!image::dtype_from_name(dtype_name.c_str(), &d)) {
      std::fprintf(stderr, "unknown --dtype %s\n", dtype_name.c_str());
      return 2;
    }
    dtype = d;
  }
  const bool own_dir = dir.empty();
  if (own_dir) {
    char tmpl[] = "/tmp/colibri-convert-bench-XXXXXX";
    if (!::mkdtemp(tmpl)) return 1;
    dir = tmpl;
  }

  // Mixtral-like shape (hidden 1024, 8 experts of ffn 3584, vocab 32000, bf16): ~204 MB a
  // layer; enough layers for the requested size.
  testing::SyntheticCheckpointSpec spec;
  spec.architecture = "MixtralForCausalLM";
  spec.vocab = 32000;
  spec.hidden = 1024;
  spec.heads = 8;
  spec.kv_heads = 2;
  spec.experts = 8;
  spec.top_k = 2;
  spec.expert_ffn = 3584;
  spec.dtype = "BF16";
  uint64_t fixed_bytes = 2 * spec.vocab * spec.hidden * 2;
  uint64_t layer_bytes = (3 * spec.experts * spec.expert_ffn * spec.hidden + 2 * spec.hidden * spec.hidden +
                          2 * 256 * spec.hidden + spec.experts * spec.hidden) * 2;
  uint64_t target = static_cast<uint64_t>(gigabytes * (1ull << 30));  // GiB: "1" is safely over 1 GB
  spec.layers = std::max<uint64_t>(1, (target > fixed_bytes ? target - fixed_bytes + layer_bytes - 1 : 0) / layer_bytes);
  spec.shards = 3;

  const std::string checkpoint = dir + "/checkpoint", output = dir + "/model.colibri";
  auto t0 = std::chrono::steady_clock::now();
  if (Error e = testing::write_synthetic_checkpoint(checkpoint, spec)) {
    std::fprintf(stderr, "generating the checkpoint failed: %s\n", e.message.c_str());
    return 1;
  }
  double generate_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uint64_t largest_tensor = 0, checkpoint_bytes = 0;
  for (const auto &t : testing::synthetic_tensors(spec)) largest_tensor = std::max(largest_tensor, testing::safetensors_tensor_bytes(t));
  for (const auto &f : std::filesystem::directory_iterator(checkpoint)) checkpoint_bytes += f.file_size();
  const uint64_t budget = largest_tensor + (256ull << 20);

  std::printf("checkpoint   %s: Mixtral-like bf16, %llu layers, %zu shards, %s (generated in %.1f s)\n",
              checkpoint.c_str(), static_cast<unsigned long long>(spec.layers), spec.shards,
              util::human_bytes(checkpoint_bytes).c_str(), generate_s);
  std::printf("dtype        %s; largest tensor %s; RSS budget %s; bench process RSS before runs %s\n",
              dtype_name.c_str(), util::human_bytes(largest_tensor).c_str(), util::human_bytes(budget).c_str(),
              util::human_bytes(peak_rss_bytes()).c_str());

  modeltool::convert::ConvertOptions options;
  options.input = checkpoint;
  options.output = output;
  options.dtype = dtype;
  options.overwrite = true;
  std::vector<double> seconds, rates, rss;
  bool within_budget = true;
  for (int r = 0; r <= runs; ++r) {
    RunResult result = run_in_child(options);
    if (result.error[0]) {
      std::fprintf(stderr, "conversion failed: %s\n", result.error);
      return 1;
    }
    double rate = static_cast<double>(result.source_bytes) / 1e6 / result.seconds;
    std::printf("%-12s %6.2f s  %7.0f MB/s  peak RSS %8.1f MB  image %s\n", r == 0 ? "warm-up" : ("run " + std::to_string(r)).c_str(),
                result.seconds, rate, static_cast<double>(result.peak_rss_bytes) / 1e6,
                util::human_bytes(result.image_bytes).c_str());
    within_budget &= result.peak_rss_bytes < budget;
    if (r == 0) continue;
    seconds.push_back(result.seconds);
    rates.push_back(rate);
    rss.push_back(static_cast<double>(result.peak_rss_bytes) / 1e6);
  }
  std::printf("median       %6.2f s  %7.0f MB/s  peak RSS %8.1f MB   (min..max: %.2f..%.2f s, %.0f..%.0f MB/s, "
              "%.1f..%.1f MB)\n",
              median(seconds), median(rates), median(rss), *std::min_element(seconds.begin(), seconds.end()),
              *std::max_element(seconds.begin(), seconds.end()), *std::min_element(rates.begin(), rates.end()),
              *std::max_element(rates.begin(), rates.end()), *std::min_element(rss.begin(), rss.end()),
              *std::max_element(rss.begin(), rss.end()));
  std::printf("peak RSS %s the budget (largest tensor + 256 MB = %.1f MB)\n", within_budget ? "within" : "EXCEEDS",
              static_cast<double>(budget) / 1e6);
  if (!keep) {
    std::filesystem::remove_all(checkpoint);
    std::filesystem::remove(output);
    if (own_dir) std::filesystem::remove(dir);
  }
  return within_budget ? 0 : 1;
}

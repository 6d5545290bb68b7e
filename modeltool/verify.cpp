// modeltool/verify.cpp — `colibri-model verify FILE [--deep]`: every check that opening the
// model runs (structure, model binding, header fields, tokenizer), then every tensor
// checksum; --deep also scans the values for NaN/Inf and requires zero padding. See verify.h.
#include "modeltool/verify.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "image/reader.h"
#include "model/model.h"
#include "modeltool/cli_support.h"
#include "modeltool/commands.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/strings.h"

namespace colibri::modeltool {

namespace {

using util::strprintf;

unsigned long long ull(uint64_t v) { return static_cast<unsigned long long>(v); }

// Index of the first non-finite element of `t`, or -1. The block dtypes check their scales
// (the first element of the block is reported).
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
    case image::DType::Q4:
    case image::DType::Q8F16: {  // an f16 scale first in every block
      const uint64_t blocks = n / t.group_size;
      const uint64_t stride = t.dtype == image::DType::Q4 ? image::q4_block_bytes(t.group_size) : image::kQ8F16BlockBytes;
      for (uint64_t b = 0; b < blocks; ++b) {
        uint16_t h;
        std::memcpy(&h, p + b * stride, 2);
        if ((h & 0x7C00) == 0x7C00) return static_cast<int64_t>(b * t.group_size);
      }
      return -1;
    }
    case image::DType::MXFP4: {  // the e8m0 scale first in every block; 255 is NaN
      const uint64_t blocks = n / image::kMxfp4GroupSize;
      for (uint64_t b = 0; b < blocks; ++b)
        if (p[b * image::kMxfp4BlockBytes] == image::kE8m0Nan) return static_cast<int64_t>(b * image::kMxfp4GroupSize);
      return -1;
    }
  }
  return -1;
}

// A byte outside every region of the format: between the metadata and the first tensor,
// between tensors, or after the last one.
struct Gap {
  uint64_t begin, end;
  std::string after, before;  // what the gap lies between ("metadata", a tensor name, "end of file")
};

std::vector<Gap> padding_gaps(const image::Image &img) {
  std::vector<const image::TensorInfo *> order;
  for (const image::TensorInfo &t : img.tensors()) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const auto *a, const auto *b) { return a->offset < b->offset; });
  std::vector<Gap> gaps;
  uint64_t cursor = img.header().metadata_offset + img.header().metadata_size;
  std::string after = "the metadata";
  for (const image::TensorInfo *t : order) {
    if (t->offset > cursor) gaps.push_back({cursor, t->offset, after, "tensor '" + t->name + "'"});
    cursor = t->offset + t->size;
    after = "tensor '" + t->name + "'";
  }
  if (img.file_size() > cursor) gaps.push_back({cursor, img.file_size(), after, "the end of the file"});
  return gaps;
}

Error check_padding(const image::Image &img, uint64_t *padding_bytes) {
  *padding_bytes = 0;
  for (const Gap &g : padding_gaps(img)) {
    *padding_bytes += g.end - g.begin;
    const unsigned char *p = img.bytes();
    for (uint64_t i = g.begin; i < g.end; ++i) {
      if (p[i] == 0) continue;
      return make_error(ErrorKind::Corrupt,
                        strprintf("'%s': byte %llu is 0x%02X, but it lies in the padding between %s and %s ([%llu, "
                                  "%llu)), which no checksum covers and the format requires to be zero: the file was "
                                  "damaged or written by another tool. Copy the image again (or re-convert it)",
                                  img.path().c_str(), ull(i), p[i], g.after.c_str(), g.before.c_str(), ull(g.begin),
                                  ull(g.end)));
    }
  }
  return {};
}

// Every tensor checksum (Image::verify_tensor), on `threads` workers taking tensors from a
// shared counter, the first failure in directory order reported (as Image::verify_all). The
// calling thread draws the progress of the bytes done while the workers run.
// The CPUs this process may run on (taskset, numactl --cpunodebind, a cpuset), at least 1.
unsigned allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return static_cast<unsigned>(CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

Error verify_checksums(const image::Image &image, const VerifyOptions &options) {
  const auto &tensors = image.tensors();
  unsigned threads = options.threads ? options.threads : allowed_cpus();
  threads = static_cast<unsigned>(std::min<size_t>(threads, std::max<size_t>(1, tensors.size())));
  uint64_t total = 0;
  for (const auto &t : tensors) total += t.size;
  std::atomic<size_t> next{0}, finished{0};
  std::atomic<uint64_t> done_bytes{0};
  std::vector<Error> results(tensors.size());
  auto work = [&] {
    for (size_t i = next.fetch_add(1); i < tensors.size(); i = next.fetch_add(1)) {
      results[i] = image.verify_tensor(tensors[i]);
      done_bytes.fetch_add(tensors[i].size, std::memory_order_relaxed);
    }
    finished.fetch_add(1);
  };
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(work);
  if (options.show_progress) {
    Progress progress("verify", total, options.progress);
    constexpr auto kPoll = std::chrono::milliseconds(20);
    while (finished.load() < threads) {
      progress.update(done_bytes.load(std::memory_order_relaxed), strprintf("%zu tensors", tensors.size()));
      std::this_thread::sleep_for(kPoll);
    }
    progress.update(done_bytes.load(), strprintf("%zu tensors", tensors.size()));
    progress.finish();
  }
  for (auto &th : pool) th.join();
  for (Error &e : results)
    if (e) return e;
  return {};
}

}  // namespace

Error verify_image(const std::string &path, const VerifyOptions &options, VerifyReport *report) {
  *report = VerifyReport{};
  report->path = path;
  Error error;
  image::OpenOptions open_options;
  open_options.advice = image::MapAdvice::Sequential;
  // 1. The reader's validation, as at every open.
  auto img = image::Image::open(path, open_options, &error);
  if (!img) return error;
  // 2. The model binding, as at every open (Model::from_image is what Model::load runs).
  auto model = model::Model::from_image(std::move(img), &error);
  if (!model) return error;
  const image::Image &image = model->image();
  report->family = model->config().family;
  // 3. The tokenizer and the chat template, as colibri_model_open loads them.
  const model::TokenizerInfo &tok = model->tokenizer();
  if (!tok.json.empty()) {
    if (!tokenizer::Tokenizer::from_json(tok.json, &error)) {
      error.message = strprintf("'%s': the tokenizer (metadata tokenizer.json) cannot be loaded, so text prompts are "
                                "refused (token ids still work): %s",
                                path.c_str(), error.message.c_str());
      return error;
    }
  }
  if (!tok.chat_template.empty() && !tokenizer::ChatTemplate::parse(tok.chat_template, &error))
    report->warnings.push_back("the chat template cannot be used (plain completion still works): " + error.message);
  // 4. Every tensor checksum.
  double start = monotonic_seconds();
  if (Error e = verify_checksums(image, options)) return e;
  report->checksum_seconds = monotonic_seconds() - start;
  report->tensor_count = image.tensors().size();
  for (const auto &t : image.tensors()) report->tensor_bytes += t.size;
  if (!options.deep) return {};
  // 5. --deep: every value finite, every padding byte zero.
  for (const auto &t : image.tensors()) {
    int64_t bad = first_non_finite(image, t);
    if (bad >= 0)
      return make_error(ErrorKind::Corrupt,
                        strprintf("'%s': tensor '%s' %s holds a non-finite value (NaN or Inf) at element %lld; the "
                                  "checkpoint it was converted from is damaged or overflowed on conversion (try a "
                                  "wider --dtype)",
                                  path.c_str(), t.name.c_str(), t.shape_string().c_str(), static_cast<long long>(bad)));
  }
  return check_padding(image, &report->padding_bytes);
}

int run_verify(int argc, char **argv) {
  cxxopts::Options options("colibri-model verify",
                           "Check everything opening the image as a model checks (structure, model metadata bound to "
                           "the tensors, header fields, tokenizer), then every tensor checksum.");
  options.add_options()("deep", "also scan every value for NaN/Inf and require the padding between tensors to be zero")(
      "threads", "checksum threads (0 = every CPU this process may use)", cxxopts::value<unsigned>()->default_value("0"))(
      "json", "print the result as one JSON object on standard output (also on failure: ok false, the error)")(
      "h,help", "show this help")("file", "image file", cxxopts::value<std::string>());
  add_progress_flags(options);
  options.parse_positional({"file"});
  options.positional_help("FILE");
  int code = kExitOk;
  auto args = parse_or_report(options, argc, argv, &code);
  if (!args) return code;
  if (!args->count("file")) {
    std::fprintf(stderr, "colibri-model verify: missing FILE\n\n%s", options.help().c_str());
    return kExitUsage;
  }
  VerifyOptions vo;
  vo.deep = args->count("deep") != 0;
  vo.threads = (*args)["threads"].as<unsigned>();
  vo.show_progress = true;
  if (!read_progress_flags(options, *args, &vo.progress, &code)) return code;
  const bool json = args->count("json") != 0;
  const std::string path = (*args)["file"].as<std::string>();
  VerifyReport r;
  Error e = verify_image(path, vo, &r);
  for (const std::string &w : r.warnings) std::fprintf(stderr, "colibri-model verify: warning: %s\n", w.c_str());
  double rate = r.checksum_seconds > 0 ? static_cast<double>(r.tensor_bytes) / r.checksum_seconds / 1e9 : 0.0;
  if (json) {
    nlohmann::json out = {{"file", path}, {"ok", !e}, {"deep", vo.deep}, {"warnings", r.warnings}};
    if (e) {
      out["error"] = {{"kind", error_kind_name(e.kind)}, {"message", e.message}, {"exit_code", exit_code_for(e)}};
    } else {
      out["family"] = r.family;
      out["tensors"] = r.tensor_count;
      out["tensor_bytes"] = r.tensor_bytes;
      out["checksum_seconds"] = r.checksum_seconds;
      out["checksum_gb_per_second"] = rate;
      if (vo.deep) out["padding_bytes"] = r.padding_bytes;
    }
    std::printf("%s\n", out.dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return e ? exit_code_for(e) : kExitOk;
  }
  if (e) return report_error("verify", e);
  std::printf("OK %s: %s model, %zu tensors, %s, checksums verified in %.3f s (%.2f GB/s)%s\n", r.path.c_str(),
              r.family.c_str(), r.tensor_count, util::human_bytes(r.tensor_bytes).c_str(), r.checksum_seconds, rate,
              vo.deep ? strprintf(", all values finite, %s of padding all zero", util::human_bytes(r.padding_bytes).c_str()).c_str()
                      : "");
  return kExitOk;
}

}  // namespace colibri::modeltool

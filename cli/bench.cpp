// cli/bench.cpp — `colibri bench`: prefill (ppN) and decode (tgN) speed in the llama-bench
// table format, measured by the protocol of docs/architecture.md §9: one warm-up run, then the
// median (± sample standard deviation, with min and max) of R runs; the memory read bandwidth
// is probed with the same thread count right before that thread count's tests, and decode is
// reported as a percentage of the roofline bandwidth / bytes read per token (active weight
// bytes from colibri_model_info plus the KV cache at the mean position).
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "machine_probe.h"

#include "commands.h"
#include "common.h"

namespace colibri_cli {

namespace {

struct Summary {
  double median = 0, mean = 0, sd = 0, min = 0, max = 0;
};

Summary summarize(std::vector<double> v) {
  Summary s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(n);
  for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
  s.sd = n > 1 ? std::sqrt(s.sd / static_cast<double>(n - 1)) : 0;
  s.min = v.front();
  s.max = v.back();
  return s;
}

struct TestResult {
  std::string name;  // "pp128", "tg64", "tg64 @ d4096"
  bool decode = false;
  size_t tokens = 0;
  size_t depth = 0;  // cached positions before the test's tokens (-d)
  uint32_t threads = 0;
  std::vector<double> samples;  // tokens/s
  Summary tps;
  double roofline_tps = 0;  // decode only
  colibri_stats stats{};    // counters of the timed runs
};

size_t available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(CPU_COUNT(&set), 1);
  return 1;
}

// Deterministic token ids spread over the vocabulary (the speed does not depend on them).
int32_t bench_token(size_t i, uint64_t vocab) { return static_cast<int32_t>((i * 7919 + 13) % vocab); }

std::string format_count(double v) {
  char b[64];
  if (v >= 1e9) std::snprintf(b, sizeof b, "%.2f B", v / 1e9);
  else if (v >= 1e6) std::snprintf(b, sizeof b, "%.2f M", v / 1e6);
  else std::snprintf(b, sizeof b, "%.2f K", v / 1e3);
  return b;
}

std::string format_bytes(double v) {
  char b[64];
  if (v >= 1024.0 * 1024 * 1024) std::snprintf(b, sizeof b, "%.2f GiB", v / (1024.0 * 1024 * 1024));
  else std::snprintf(b, sizeof b, "%.2f MiB", v / (1024.0 * 1024));
  return b;
}

class Bench {
 public:
  Bench(colibri_model *model, const colibri_model_info &info, uint32_t kv_dtype, const ModelFlags &model_flags)
      : model_(model), info_(info), kv_dtype_(kv_dtype), model_flags_(model_flags) {}

  SessionPtr make_session(uint32_t threads, size_t context, size_t batch) {
    colibri_session_options o;
    check_api(colibri_session_options_init(&o, sizeof o), "session options");
    o.threads = threads;
    o.context_length = static_cast<uint32_t>(context);
    o.max_batch_tokens = static_cast<uint32_t>(batch);
    o.kv_dtype = kv_dtype_;
    apply_session_flags(model_flags_, &o);  // --isa, --device
    colibri_session *raw = nullptr;
    check_api(colibri_session_create(model_, &o, &raw), "session (" + std::to_string(threads) + " threads)");
    return SessionPtr(raw);
  }

  // An empty sequence, then `depth` prompt tokens prefilled (untimed, like llama-bench -d),
  // with the session's counters zeroed after them.
  void start_at_depth(colibri_session *s, size_t depth) {
    check_api(colibri_session_reset(s), "reset");
    if (depth) {
      prompt_.resize(depth);
      for (size_t i = 0; i < depth; ++i) prompt_[i] = bench_token(i + 100003, info_.vocab_size);
      check_api(colibri_session_prefill(s, 0, prompt_.data(), depth), "prefill of the depth");
    }
    check_api(colibri_session_reset_stats(s), "reset stats");
  }

  // tokens/s of one prefill of n tokens after `depth` cached positions.
  double prefill_once(colibri_session *s, size_t n, size_t depth) {
    start_at_depth(s, depth);
    prompt_.resize(n);
    for (size_t i = 0; i < n; ++i) prompt_[i] = bench_token(i, info_.vocab_size);
    uint64_t start = now_ns();
    check_api(colibri_session_prefill(s, 0, prompt_.data(), n), "prefill");
    return static_cast<double>(n) / seconds_since(start);
  }

  // tokens/s of n single-token decode steps after `depth` cached positions.
  double decode_once(colibri_session *s, size_t n, size_t depth) {
    start_at_depth(s, depth);
    uint64_t start = now_ns();
    for (size_t i = 0; i < n; ++i) check_api(colibri_session_decode(s, 0, bench_token(i * 31 + 7, info_.vocab_size)), "decode");
    return static_cast<double>(n) / seconds_since(start);
  }

  TestResult run_test(colibri_session *s, uint32_t threads, bool decode, size_t n, size_t depth, size_t repetitions) {
    TestResult r;
    r.name = (decode ? "tg" : "pp") + std::to_string(n) + (depth ? " @ d" + std::to_string(depth) : "");
    r.decode = decode;
    r.tokens = n;
    r.depth = depth;
    r.threads = threads;
    r.stats.struct_size = sizeof r.stats;
    // The counters of the timed parts only, summed over the runs.
    auto once = [&](bool timed) {
      const double tps = decode ? decode_once(s, n, depth) : prefill_once(s, n, depth);
      if (!timed) return;
      r.samples.push_back(tps);
      colibri_stats run{};
      run.struct_size = sizeof run;
      check_api(colibri_session_get_stats(s, &run), "stats");
      r.stats.stage_count = run.stage_count;
      for (size_t i = 0; i < COLIBRI_STATS_MAX_STAGES; ++i) r.stats.stage_ns[i] += run.stage_ns[i];
      r.stats.weight_bytes_read += run.weight_bytes_read;
      r.stats.tokens += run.tokens;
      r.stats.forward_calls += run.forward_calls;
      r.stats.non_finite_rows += run.non_finite_rows;
      r.stats.expert_activations += run.expert_activations;
    };
    once(false);  // warm-up: page cache, TLB, branch predictors, thread pool wake-up
    for (size_t i = 0; i < repetitions; ++i) once(true);
    r.tps = summarize(r.samples);
    return r;
  }

  // Bytes one decode token at position `position` reads from the KV cache (keys + values).
  // KV cache bytes one decode step reads at `position` (the model's f32 bytes per token, halved
  // for an f16 cache).
  double kv_bytes_at(double position) const {
    const double f16 = kv_dtype_ == COLIBRI_DTYPE_F16 ? 0.5 : 1.0;
    return static_cast<double>(info_.kv_cache_bytes_per_token) * f16 * position;
  }

 private:
  colibri_model *model_;
  const colibri_model_info &info_;
  uint32_t kv_dtype_;
  ModelFlags model_flags_;
  std::vector<int32_t> prompt_;
};

}  // namespace

int bench_command(int argc, char **argv) {
  cxxopts::Options options(
      "colibri bench",
      "Measures prefill (ppN: a prefill of N prompt tokens, in forward passes of at most 512) and decode (tgN: N single-token steps) speed "
      "in tokens/s, from an empty context or after D cached positions (-d; \"tg64 @ d4096\"): one warm-up run, then the median ± "
      "sample standard deviation of R runs. The memory read bandwidth "
      "is probed with the same thread count, and decode is shown as a percentage of the roofline bandwidth / (active "
      "weight bytes + KV bytes) per token.");
  add_model_flags(options, FlagSet::FullWithoutThreads);
  options.add_options("Tests")
      ("p,n-prompt", "prompt lengths for the prefill tests, comma-separated, 0..65536 (0 = none)",
       cxxopts::value<std::string>()->default_value("128,512"), "N,...")
      ("n,n-gen", "token counts for the decode tests, comma-separated, 0..65536 (0 = none)",
       cxxopts::value<std::string>()->default_value("64,128"), "N,...")
      ("d,depth", "context depths, comma-separated, 0..65536: every test runs after that many positions are prefilled "
       "(untimed; as llama-bench -d)", cxxopts::value<std::string>()->default_value("0"), "D,...")
      ("t,threads", "thread counts, comma-separated, 1..1024 (default: the CPUs this process may use)",
       cxxopts::value<std::string>(), "N,...")
      ("r,repetitions", "timed runs per test after the warm-up, 1..1000", cxxopts::value<std::string>()->default_value("3"), "R")
      ("kv-f16", "store the KV cache as f16")
      ("probe-mib", "size of the bandwidth probe's buffer in MiB, 16..65536 (it must dwarf the caches; default: "
       "max(1024, 4 x the last-level cache))", cxxopts::value<std::string>(), "MIB");
  options.add_options("Output")
      ("json", "print one JSON object instead of the table")
      ("profile", "add the per-stage time breakdown (colibri_session_get_stats) of every test");
  bool help = false;
  cxxopts::ParseResult flags = parse_flags(options, argc, argv, &help);
  if (help) return kExitOk;
  ModelFlags model_flags = read_model_flags(flags, FlagSet::FullWithoutThreads);
  std::vector<int64_t> prompt_lengths = parse_integer_list("-p/--n-prompt", flags["n-prompt"].as<std::string>(), 0, 65536);
  std::vector<int64_t> gen_lengths = parse_integer_list("-n/--n-gen", flags["n-gen"].as<std::string>(), 0, 65536);
  const std::vector<int64_t> depths = parse_integer_list("-d/--depth", flags["depth"].as<std::string>(), 0, 65536);
  std::vector<int64_t> thread_counts = flags.count("threads")
                                           ? parse_integer_list("-t/--threads", flags["threads"].as<std::string>(), 1, 1024)
                                           : std::vector<int64_t>{static_cast<int64_t>(available_cpus())};
  const size_t repetitions = static_cast<size_t>(parse_integer("-r/--repetitions", flags["repetitions"].as<std::string>(), 1, 1000));
  const size_t probe_bytes =
      flags.count("probe-mib") ? static_cast<size_t>(parse_integer("--probe-mib", flags["probe-mib"].as<std::string>(), 16, 65536)) << 20
                               : colibri_probe::default_probe_bytes();
  const bool json = flags.count("json") > 0, profile = flags.count("profile") > 0;
  prompt_lengths.erase(std::remove(prompt_lengths.begin(), prompt_lengths.end(), 0), prompt_lengths.end());
  gen_lengths.erase(std::remove(gen_lengths.begin(), gen_lengths.end(), 0), gen_lengths.end());
  if (prompt_lengths.empty() && gen_lengths.empty()) fail_usage("nothing to measure: -p and -n are both 0");
  if (repetitions < 3 && !json)
    std::fprintf(stderr, "colibri bench: note: -r %zu is fewer than 3 runs; the median and deviation mean little\n", repetitions);

  ModelPtr model = open_model(model_flags);
  const std::string path = resolve_model_path(model_flags);
  colibri_model_info info = model_info(model.get());
  // A NUMA policy copies the weights into placed memory (colibri.h, COLIBRI_NUMA_*).
  const bool weights_loaded = model_flags.load_into_memory || std::strstr(info.numa_report, "copied into memory") != nullptr;
  const uint32_t kv_dtype = flags.count("kv-f16") ? COLIBRI_DTYPE_F16 : COLIBRI_DTYPE_F32;
  Bench bench(model.get(), info, kv_dtype, model_flags);
  size_t longest = 1, longest_prompt = 1;
  for (int64_t p : prompt_lengths) longest_prompt = std::max(longest_prompt, static_cast<size_t>(p));
  for (int64_t n : gen_lengths) longest = std::max(longest, static_cast<size_t>(n));
  const size_t deepest = static_cast<size_t>(*std::max_element(depths.begin(), depths.end()));
  longest = std::max(longest, longest_prompt) + deepest;
  // Batches of up to 512 tokens for the prompts and for the prefill of a depth.
  longest_prompt = std::max(longest_prompt, deepest);

  std::vector<TestResult> results;
  std::vector<colibri_probe::ReadProbeResult> bandwidths;
  std::string backend;
  for (int64_t t : thread_counts) {
    const uint32_t threads = static_cast<uint32_t>(t);
    SessionPtr session = bench.make_session(threads, longest, std::min<size_t>(longest_prompt, 512));
    colibri_session_info si{};
    si.struct_size = sizeof si;
    check_api(colibri_session_get_info(session.get(), &si), "session info");
    backend = si.backend;
    colibri_probe::ReadProbeOptions probe;
    probe.threads = threads;
    probe.buffer_bytes = probe_bytes;
    bandwidths.push_back(colibri_probe::measure_read_bandwidth(probe));
    const double bandwidth = bandwidths.back().median_gbs;
    for (int64_t d : depths) {
      const size_t depth = static_cast<size_t>(d);
      for (int64_t p : prompt_lengths)
        results.push_back(bench.run_test(session.get(), threads, false, static_cast<size_t>(p), depth, repetitions));
      for (int64_t n : gen_lengths) {
        TestResult r = bench.run_test(session.get(), threads, true, static_cast<size_t>(n), depth, repetitions);
        // Mean position of the steps is depth + (n - 1) / 2: that many cached tokens are read per step.
        r.roofline_tps = bandwidth * 1e9 / (static_cast<double>(info.active_weight_bytes) +
                                            bench.kv_bytes_at(static_cast<double>(depth) + (static_cast<double>(n) - 1) / 2));
        results.push_back(std::move(r));
      }
    }
  }

  // Read after the tests, which touched every weight page the model reads.
  const MappingPages pages = weights_loaded ? MappingPages{} : mapping_pages(path);
  const double huge_share = pages.resident_bytes ? static_cast<double>(pages.huge_page_bytes) / static_cast<double>(pages.resident_bytes) : 0.0;
  constexpr uint64_t kSmallPageHintBytes = uint64_t{64} << 20;  // below this the TLB cost is noise
  if (pages.found && pages.resident_bytes >= kSmallPageHintBytes && huge_share < 0.5)
    std::fprintf(stderr,
                 "colibri bench: note: %.0f%% of the image's resident pages are 4 KiB pages: the page cache holds '%s' in "
                 "small folios (it was written or copied in small writes, by cp say), and decode streams weights from them "
                 "a few percent slower. When no process has it open, `dd if='%s' iflag=nocache count=0` drops them; the "
                 "next open reads it back in 2 MiB folios (docs/performance.md, \"2 MiB page-cache folios\")\n",
                 100.0 * (1.0 - huge_share), path.c_str(), path.c_str());
  const std::string model_name = std::string(info.family) + " " + colibri_dtype_name(info.weight_dtype);
  auto stage_count = [](const colibri_stats &s) { return std::min<uint32_t>(s.stage_count, COLIBRI_STATS_MAX_STAGES); };
  if (json) {
    nlohmann::json out;
    out["colibri_version"] = COLIBRI_VERSION_STRING;
    out["library_version"] = colibri_version_string();
    out["model"] = {{"path", path},
                    {"family", info.family},
                    {"architecture", info.architecture},
                    {"weight_dtype", colibri_dtype_name(info.weight_dtype)},
                    {"file_size_bytes", info.file_size_bytes},
                    {"parameter_count", info.parameter_count},
                    {"active_parameter_count", info.active_parameter_count},
                    {"active_weight_bytes", info.active_weight_bytes},
                    {"attention", info.attention},
                    {"kv_cache_bytes_per_token", kv_dtype == COLIBRI_DTYPE_F16 ? info.kv_cache_bytes_per_token / 2
                                                                             : info.kv_cache_bytes_per_token},
                    {"layer_count", info.layer_count},
                    {"expert_count", info.expert_count},
                    {"top_k", info.top_k},
                    {"weights", weights_loaded ? "loaded into memory" : "file mapping"},
                    {"placement", info.numa_report}};
    if (pages.found)
      out["model"]["mapping"] = {{"resident_bytes", pages.resident_bytes}, {"huge_page_bytes", pages.huge_page_bytes}};
    out["backend"] = backend;
    out["repetitions"] = repetitions;
    out["kv_dtype"] = colibri_dtype_name(kv_dtype);
    out["bandwidth"] = nlohmann::json::array();
    for (const colibri_probe::ReadProbeResult &b : bandwidths)
      out["bandwidth"].push_back({{"threads", b.threads},
                                  {"read_gb_per_s", b.median_gbs},
                                  {"read_gb_per_s_min", b.min_gbs},
                                  {"read_gb_per_s_max", b.max_gbs},
                                  {"probe_bytes", b.buffer_bytes},
                                  {"probe_loads", b.loads},
                                  {"probe_reader", b.reader},
                                  {"read_gb_per_s_plain", b.plain_median_gbs},
                                  {"read_gb_per_s_prefetch", b.prefetch_median_gbs}});
    out["results"] = nlohmann::json::array();
    for (const TestResult &r : results) {
      nlohmann::json j = {{"test", r.name},
                          {"kind", r.decode ? "decode" : "prefill"},
                          {"tokens", r.tokens},
                          {"depth", r.depth},
                          {"threads", r.threads},
                          {"tokens_per_second",
                           {{"median", r.tps.median}, {"mean", r.tps.mean}, {"sd", r.tps.sd}, {"min", r.tps.min},
                            {"max", r.tps.max}, {"samples", r.samples}}}};
      if (r.decode) {
        j["roofline_tokens_per_second"] = r.roofline_tps;
        j["roofline_percent"] = 100.0 * r.tps.median / r.roofline_tps;
      }
      if (profile) {
        const double tokens = static_cast<double>(std::max<uint64_t>(r.stats.tokens, 1));
        nlohmann::json stages = nlohmann::json::object();
        for (uint32_t i = 0; i < stage_count(r.stats); ++i)
          if (const char *name = colibri_stage_name(i)) stages[name] = static_cast<double>(r.stats.stage_ns[i]) / tokens;
        j["profile"] = {{"stage_ns_per_token", stages},
                        {"weight_bytes_read_per_token", static_cast<double>(r.stats.weight_bytes_read) / tokens},
                        {"expert_activations_per_token", static_cast<double>(r.stats.expert_activations) / tokens},
                        {"tokens", r.stats.tokens},
                        {"forward_calls", r.stats.forward_calls}};
      }
      out["results"].push_back(std::move(j));
    }
    print_json(out);
    return kExitOk;
  }

  std::printf("model: %s (weights %s)\n  %s (%s), %llu layers, %llu experts top-%llu, %s weights; %s parameters, %s "
              "active per token (%.2f MB of weights read per token)\n  KV cache: %llu bytes per token (%s attention, "
              "%s)\n  placement: %s\n",
              path.c_str(), weights_loaded ? "loaded into memory" : "in the file mapping", info.family, info.architecture, static_cast<unsigned long long>(info.layer_count),
              static_cast<unsigned long long>(info.expert_count), static_cast<unsigned long long>(info.top_k),
              colibri_dtype_name(info.weight_dtype), format_count(static_cast<double>(info.parameter_count)).c_str(),
              format_count(static_cast<double>(info.active_parameter_count)).c_str(), static_cast<double>(info.active_weight_bytes) / 1e6,
              static_cast<unsigned long long>(kv_dtype == COLIBRI_DTYPE_F16 ? info.kv_cache_bytes_per_token / 2 : info.kv_cache_bytes_per_token),
              info.attention, kv_dtype == COLIBRI_DTYPE_F16 ? "f16" : "f32", info.numa_report);
  if (pages.found)
    std::printf("  file mapping after the tests: %s resident, %.1f%% of it in 2 MiB pages\n",
                format_bytes(static_cast<double>(pages.resident_bytes)).c_str(), 100.0 * huge_share);
  std::printf("memory read bandwidth (STREAM-like probe, %zu MiB, %s loads, the better of a plain and a prefetching reader, "
              "median of 5 passes each):",
              probe_bytes >> 20, bandwidths.empty() ? "-" : bandwidths.front().loads.c_str());
  for (size_t i = 0; i < bandwidths.size(); ++i)
    std::printf("%s %zu thread%s %.1f GB/s [%.1f..%.1f] (%s)", i ? "," : "", bandwidths[i].threads, bandwidths[i].threads == 1 ? "" : "s",
                bandwidths[i].median_gbs, bandwidths[i].min_gbs, bandwidths[i].max_gbs, bandwidths[i].reader.c_str());
  std::printf("\n\n| model | size | params | backend | threads | test | t/s | min … max | decode roofline |\n"
              "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
  for (const TestResult &r : results) {
    char roof[96] = "";
    if (r.decode) std::snprintf(roof, sizeof roof, "%.1f%% of %.1f t/s", 100.0 * r.tps.median / r.roofline_tps, r.roofline_tps);
    std::printf("| %s | %s | %s | %s | %u | %s | %.2f ± %.2f | %.2f … %.2f | %s |\n", model_name.c_str(),
                format_bytes(static_cast<double>(info.file_size_bytes)).c_str(),
                format_count(static_cast<double>(info.parameter_count)).c_str(), backend.c_str(), r.threads, r.name.c_str(),
                r.tps.median, r.tps.sd, r.tps.min, r.tps.max, roof);
  }
  std::printf("\nt/s: median ± sample standard deviation of %zu runs after one warm-up run. Decode roofline: the read\n"
              "bandwidth above / (active weight bytes + KV cache bytes at the mean position) per token; a model\n"
              "that fits in the CPU caches can exceed 100%%.\n",
              repetitions);
  if (profile) {
    std::printf("\nper-stage time (ms per token, share of the forward pass), timed runs only:\n\n| stage |");
    for (const TestResult &r : results) std::printf(" %s t%u |", r.name.c_str(), r.threads);
    std::printf("\n| --- |");
    for (size_t i = 0; i < results.size(); ++i) std::printf(" ---: |");
    std::printf("\n");
    const uint32_t stages = results.empty() ? 0 : stage_count(results.front().stats);
    for (uint32_t st = 0; st < stages; ++st) {
      const char *name = colibri_stage_name(st);
      if (!name) continue;
      std::printf("| %s |", name);
      for (const TestResult &r : results) {
        uint64_t total = 0;
        for (uint32_t i = 0; i < stage_count(r.stats); ++i) total += r.stats.stage_ns[i];
        const double tokens = static_cast<double>(std::max<uint64_t>(r.stats.tokens, 1));
        std::printf(" %.4f (%.1f%%) |", static_cast<double>(r.stats.stage_ns[st]) / 1e6 / tokens,
                    100.0 * static_cast<double>(r.stats.stage_ns[st]) / static_cast<double>(std::max<uint64_t>(total, 1)));
      }
      std::printf("\n");
    }
    std::printf("| weight MB read per token |");
    for (const TestResult &r : results)
      std::printf(" %.3f |", static_cast<double>(r.stats.weight_bytes_read) / 1e6 / static_cast<double>(std::max<uint64_t>(r.stats.tokens, 1)));
    std::printf("\n| expert activations per token |");
    for (const TestResult &r : results)
      std::printf(" %.2f |", static_cast<double>(r.stats.expert_activations) / static_cast<double>(std::max<uint64_t>(r.stats.tokens, 1)));
    std::printf("\n");
  }
  return kExitOk;
}

}  // namespace colibri_cli

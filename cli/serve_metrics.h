// cli/serve_metrics.h — the counters and histograms of `colibri serve`, rendered as Prometheus
// text (exposition format 0.0.4) at GET /metrics, joined with the engine's own counters
// (colibri_engine_get_stats). Thread-safe: HTTP worker threads record, the scrape renders.
#pragma once

#include <colibri.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace colibri_cli::serve {

// A Prometheus histogram: cumulative buckets at fixed upper bounds (seconds), sum and count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // "# HELP", "# TYPE" and the _bucket/_sum/_count lines of metric `name`.
  void render(std::string &out, const std::string &name, const std::string &help) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), the last one is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// What one finished generation contributes.
struct GenerationRecord {
  uint64_t prompt_tokens = 0;
  uint64_t generated_tokens = 0;
  double time_to_first_token_s = -1;  // < 0: no token was generated
  double time_per_output_token_s = -1;  // < 0: fewer than two tokens
  double duration_s = 0;              // submission to the end
  uint32_t finish_reason = COLIBRI_FINISH_NONE;
};

// Server-side gauges read at scrape time.
struct ServerGauges {
  uint64_t requests_in_flight = 0;
  bool draining = false;
};

class Metrics {
 public:
  Metrics();
  // One HTTP request answered (any route): counted by route and status code.
  void record_http(const std::string &route, int status);
  void record_generation(const GenerationRecord &record);
  std::string render(const colibri_engine_stats &engine, const ServerGauges &gauges) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> http_;
  std::map<std::string, uint64_t> finished_;  // by finish reason
  uint64_t prompt_tokens_ = 0;
  uint64_t generated_tokens_ = 0;
  Histogram ttft_;
  Histogram tpot_;
  Histogram duration_;
  Histogram prompt_length_;
  Histogram generation_length_;
};

// The routes /metrics counts (anything else is counted as "other", so that a scanner probing
// random paths cannot grow the label set without bound).
std::string metrics_route(const std::string &path);

}  // namespace colibri_cli::serve

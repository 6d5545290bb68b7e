// core/runtime/stats.h — per-stage counters of a session: nanoseconds and weight bytes read,
// always collected (a clock read per stage per layer), reported by bench --profile and the
// C API stats call.
#pragma once

#include <chrono>
#include <cstdint>

namespace colibri::runtime {

enum class Stage : uint32_t {
  Embedding = 0,
  Attention,   // norm, q/k/v projections, RoPE, cache, scores, output projection
  Router,      // router logits + softmax
  TopK,
  Dispatch,    // grouping tokens by expert, gathering rows
  Experts,     // gate/up/down GEMMs of routed and shared experts, dense FFNs
  Merge,       // weighted sum of the k expert outputs + residual
  LmHead,      // final norm + output projection
  Count
};

inline constexpr const char *kStageNames[] = {"embedding", "attention", "router", "topk",
                                              "dispatch", "experts", "merge", "lm_head"};
static_assert(sizeof(kStageNames) / sizeof(kStageNames[0]) == static_cast<size_t>(Stage::Count));

struct SessionStats {
  uint64_t stage_ns[static_cast<size_t>(Stage::Count)] = {};
  uint64_t weight_bytes_read = 0;   // weight bytes streamed by the matmuls
  uint64_t tokens = 0;              // batch entries processed
  uint64_t forward_calls = 0;
  uint64_t non_finite_rows = 0;     // rows zeroed by the non-finite guard (policy zero)
  uint64_t expert_activations = 0;  // (token, expert) pairs computed
  uint64_t attention_split = 0;     // layer attentions split over positions and dims (few entries, many threads)
  uint64_t attention_tiles = 0;     // attention tiles of more than one entry (prefill chunks)
};

// Adds the time from construction to destruction to one stage.
class StageTimer {
 public:
  StageTimer(SessionStats &stats, Stage stage) : stats_(stats), stage_(stage), start_(std::chrono::steady_clock::now()) {}
  ~StageTimer() {
    stats_.stage_ns[static_cast<size_t>(stage_)] += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count());
  }

 private:
  SessionStats &stats_;
  Stage stage_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace colibri::runtime

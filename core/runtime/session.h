// core/runtime/session.h — a session: one model's KV cache for up to N sequences, the
// activation arena, the thread pool, and the forward pass over a batch of
// (sequence, position, token) entries (docs/architecture.md §5).
//
// Memory: every buffer is sized at creation from SessionOptions; forward() performs no heap
// allocation (the tests count). Numerics: fp32 accumulation; results are bitwise identical
// for any thread count; routing ties go to the lower expert index.
// Thread safety: a session is used by one thread at a time; the model may be shared.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "model/model.h"
#include "runtime/device.h"
#include "runtime/kv_cache.h"
#include "runtime/stats.h"
#include "util/error.h"
#include "util/numa.h"
#include "util/thread_pool.h"

namespace colibri::runtime {

enum class NonFinitePolicy : uint32_t { Error = 0, Zero = 1 };
enum class KvDtype : uint32_t { F32 = 0, F16 = 1 };

struct SessionOptions {
  uint32_t context_length = 0;       // tokens per sequence; 0 = min(max_position_embeddings, 4096)
  uint32_t max_sequences = 1;        // sequence slots in the KV cache
  uint32_t max_batch_tokens = 512;   // entries per forward() call
  uint32_t max_logit_rows = 0;       // rows of logits per call; 0 = max_sequences
  size_t threads = 0;                // 0 = all CPUs this process may use
  bool pin_threads = false;          // one CPU per thread; the caller's share on the first, per call
  bool force_scalar = false;         // use the scalar kernels (tests, debugging)
  // The most capable kernel level to use: the session gets the best level the CPU supports
  // at or below it (Avx2 on an AVX-512 machine runs the AVX2 kernels: tests, benchmarks
  // against an AVX2 target). force_scalar wins over it.
  kernels::Isa max_isa = kernels::Isa::Avx512;
  NonFinitePolicy non_finite = NonFinitePolicy::Error;
  KvDtype kv_dtype = KvDtype::F32;   // F16 halves the cache; keys/values are rounded on write
  // The KV cache layout (kv_cache.h). 0: contiguous, one block of context_length positions per
  // sequence. Otherwise paged: blocks of kv_block_tokens positions from a pool of kv_blocks
  // (0 = enough for every sequence's whole context), taken with reserve() or attach_prefix().
  // Sliding-window layers keep window + max_batch_tokens − 1 positions per sequence either way.
  uint32_t kv_block_tokens = 0;
  uint32_t kv_blocks = 0;
  // Paged: the KV memory in bytes instead of kv_blocks (the sliding-window layers' pool, then as
  // many blocks as fit). 0 = kv_blocks decides.
  uint64_t kv_budget_bytes = 0;
  util::NumaPolicy numa;             // bind:N runs the pool's threads on node N's CPUs
  // The machine's NUMA facts (tests pass a simulated one); null = util::system_numa().
  const util::NumaSystem *numa_system = nullptr;
  // Where the forward pass runs (device.h). Cuda: the weights are uploaded at creation and the
  // whole pass runs on the device; the KV cache lives there (contiguous only).
  Device device;
  // Cuda only: the module's file (tests name the build's; empty = next to libcolibri), and
  // whether the one-token decode step is captured in a CUDA graph and replayed (tests compare
  // replay with eager launches).
  std::string device_module_path;
  bool device_graphs = true;
};

// One entry of a batch: token `token` at `position` of sequence slot `sequence`. Positions
// of a sequence must continue it (0 for a fresh one, or at most its current length).
struct BatchEntry {
  uint32_t sequence = 0;
  uint32_t position = 0;
  int32_t token = 0;
  uint32_t want_logits = 0;  // non-zero: compute logits for this entry
};

// A caller-provided route for the layer-level API: top-k expert ids and weights per token.
struct Route {
  int32_t expert;
  float weight;
};

// Optional per-expert compute hook (the C API's colibri_expert_fn). When fn is set, the
// routed experts of every MoE layer are computed by calling it once per active expert, on
// the thread that called forward()/moe_layer(), in ascending expert order, with the expert's
// gathered rows rows_in [row_count, hidden]; it writes rows_out [row_count, hidden] (before
// the routing weight). Routing, dispatch, the weighted merge, shared experts and dense layers
// stay built in. A non-zero return abandons the pass with an InvalidArgument error naming
// the layer, the expert and the returned value.
struct ExpertHook {
  int32_t (*fn)(void *user, uint32_t layer, uint32_t expert, const float *rows_in, size_t row_count,
                size_t hidden, float *rows_out) = nullptr;
  void *user = nullptr;
};

class Session {
 public:
  static std::unique_ptr<Session> create(const model::Model &model, const SessionOptions &options, Error *error);
  ~Session();

  // Runs the batch through every layer. Logits of the entries with want_logits are then
  // available, in entry order, through logits(i) for i < logit_rows().
  Error forward(const BatchEntry *entries, size_t count);
  size_t logit_rows() const { return logit_rows_; }
  const float *logits(size_t row) const { return logits_.data() + row * model_.config().vocab_size; }

  // Forgets a sequence (or all), so its slot starts again at position 0 (paged: its blocks go
  // back to the pool; full blocks stay in the prefix cache).
  void reset_sequence(uint32_t sequence);
  void reset_all();
  uint32_t sequence_length(uint32_t sequence) const { return sequence_lengths_[sequence]; }

  // Paged KV cache: blocks for positions [0, tokens) of a sequence, taken from the pool before
  // a forward() that writes them (forward refuses a position no block covers). OutOfMemory
  // when the pool is exhausted. Contiguous: only checks the context length.
  Error reserve(uint32_t sequence, uint32_t tokens) { return kv_->reserve(sequence, tokens); }
  // Paged: an empty sequence takes over the cached blocks of the longest whole-block prefix
  // of tokens[0, count) (at least one token is left to compute); its length becomes the
  // positions covered, which are returned. The KV is bitwise what computing them writes.
  uint32_t attach_prefix(uint32_t sequence, const int32_t *tokens, size_t count);
  // Paged: offers the sequence's full blocks of tokens[0, count) (computed already) to the
  // prefix cache.
  void commit_prefix(uint32_t sequence, const int32_t *tokens, size_t count) { kv_->commit(sequence, tokens, count); }
  const KvCache &kv_cache() const { return *kv_; }
  KvCache &kv_cache() { return *kv_; }

  // Runs layer `layer`'s MoE block (router → top-k → experts → weighted merge, no residual)
  // on caller hidden states [count, hidden] into out [count, hidden]. With routes non-null
  // ([count, top_k]), the router is skipped and those experts/weights are used as given.
  Error moe_layer(uint32_t layer, const float *hidden, size_t count, const Route *routes, float *out);

  // Installs (or, with fn == nullptr, removes) the per-expert compute hook.
  void set_expert_hook(const ExpertHook &hook) { expert_hook_ = hook; }

  const SessionStats &stats() const { return stats_; }
  void reset_stats() { stats_ = SessionStats{}; }
  const SessionOptions &options() const { return options_; }
  const model::Model &model() const { return model_; }
  kernels::Isa isa() const { return kernels_->isa; }
  // The device context of a CUDA session (null on the CPU).
  const DeviceSession *device() const { return device_.get(); }
  size_t thread_count() const { return pool_->thread_count(); }
  // Where the threads run under a NUMA policy ("on node 1's CPUs 4-7": the workers, and the
  // thread that calls forward() or moe_layer() for the call); empty when they run where the
  // process may (no bind policy).
  const std::string &thread_placement() const { return thread_report_; }

 private:
  Session(const model::Model &model, const SessionOptions &options);
  struct Buffers;

  Error check_batch(const BatchEntry *entries, size_t count) const;
  // The whole pass on the device (device_ set): logits into logits_.
  Error forward_on_device(const BatchEntry *entries, size_t count);
  void embed(const BatchEntry *entries, size_t count);
  // RoPE cos | sin of each entry's position into Buffers::rope_trig, for all layers.
  void prepare_rope(const BatchEntry *entries, size_t count);
  Error attention(uint32_t layer, const BatchEntry *entries, size_t count);
  // Multi-head latent attention (config attention "mla"), the absorbed form for every batch.
  Error attention_mla(uint32_t layer, const BatchEntry *entries, size_t count);
  // Scores, softmax and weighted values of every entry's query heads over its cached positions,
  // for both attention forms (attention.cpp, AttentionLayout).
  struct AttentionLayout;
  void attend(const AttentionLayout &l, uint32_t layer, const BatchEntry *entries, size_t count);
  // y[t] = M_h · x[t] for every head h of a per-head stack M (attn_k_b, attn_v_b): x[t] of head h
  // at x + t·x_stride + h·x_head, y[t] of head h at y + t·y_stride + h·y_head. One task per head.
  void per_head_matmul(const model::WeightMatrix &m, const float *x, size_t x_stride, size_t x_head, size_t count,
                       float *y, size_t y_stride, size_t y_head);
  // entries: the batch (names the position of a non-finite row); null for moe_layer().
  Error ffn(uint32_t layer, size_t count, const Route *routes, const float *input, float *output,
            const BatchEntry *entries);
  // A stage of the forward pass that the non-finite guard checks (docs/numerics.md).
  struct GuardStage {
    // "token_embd", "attention output", "MoE input", "MoE output", "dense FFN output", "output_norm", "logits"
    const char *name;
    int64_t layer;          // kNoLayer for the stages after the last layer
    bool zeroable;          // policy Zero may zero a row (hidden states); never the final norm or the logits
  };
  static constexpr int64_t kNoLayer = -1;
  // One pass over rows [count, width]: a row with a NaN or an infinity fails the call with
  // NonFinite naming the stage, the batch row and (with entries) its sequence and position,
  // or, under policy Zero at a zeroable stage, is zeroed and counted. Row t is entry
  // entries[sources ? sources[t] : t].
  Error guard_non_finite(float *rows, size_t count, size_t width, const GuardStage &stage, const BatchEntry *entries,
                         const uint32_t *sources = nullptr);
  void route(const model::LayerWeights &w, const float *input, size_t count);
  Error run_experts(uint32_t layer, const model::LayerWeights &w, const float *input, size_t count, float *output);
  void dense_ffn(const model::WeightMatrix &gate, const model::WeightMatrix &up, const model::WeightMatrix &down,
                 const float *input, size_t count, float *gate_buf, float *up_buf, float *output);
  // y[t, r] = W · x[t] for every row of W (its first matrix), split over the pool (matmuls).
  void matmul(const model::WeightMatrix &w, const float *x, size_t count, float *y, size_t y_stride);
  // One product of matmuls(): y[t, r] = W · x[t] for every row of W (its first matrix).
  struct MatmulJob {
    const model::WeightMatrix *w;
    float *y;
    size_t y_stride;
  };
  // Tasks per thread of one matmuls() call (slack for the pool to even out a slow thread), and
  // the row granularity of their boundaries inside a matrix (a multiple of the one-token
  // tiles' 8 rows for float weights and 16 for AVX-512 q8, so that those tiles stay whole).
  static constexpr size_t kMatmulTasksPerThread = 4;
  static constexpr size_t kMatmulRowAlign = 16;
  // Several matrices on the same input in one parallel call (one barrier instead of one per
  // matrix), their rows cut into tasks of equal bytes across the matrices (row_split.h). Same
  // results as matmul() on each. The matrices must have the same column count (the width of x).
  void matmuls(const MatmulJob *jobs, size_t job_count, const float *x, size_t count);
  Error lm_head(const BatchEntry *entries, size_t rows);

  static constexpr uint32_t kMaxKvBlockTokens = 4096;
  static constexpr uint32_t kMaxKvBlocks = 1u << 24;

  const model::Model &model_;
  SessionOptions options_;
  const kernels::KernelTable *kernels_;
  std::unique_ptr<util::ThreadPool> pool_;
  std::string thread_report_;
  bool bound_ = false;     // bind:N: bound_cpus_ are node N's CPUs the process may use; pinned: thread 0's CPU
  cpu_set_t bound_cpus_{};
  std::unique_ptr<Buffers> buffers_;
  std::unique_ptr<KvCache> kv_;
  std::vector<float> logits_;
  size_t logit_rows_ = 0;
  std::vector<uint32_t> sequence_lengths_;
  SessionStats stats_;
  ExpertHook expert_hook_;
  std::unique_ptr<DeviceSession> device_;
  std::vector<colibri_device_entry> device_entries_;  // [max_batch_tokens]
};

}  // namespace colibri::runtime

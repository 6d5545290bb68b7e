// core/serving/engine.h — the serving engine: one model, one paged KV budget, a scheduler
// thread, many concurrent requests (continuous batching).
//
// Callers submit requests from any thread (prompt token ids, sampling options and seed, stop
// strings, EOS ids, max tokens, an optional deadline) and read each request's text as a pull
// stream (Request::next). The scheduler runs steps: each step is one Session::forward over
// every active sequence — one decode token for each running sequence, plus chunks of the
// prompts being prefilled, up to step_tokens tokens — so every active expert's weights are
// read once per step for all requests (the session's MoE dispatch groups the step's tokens by
// expert). New requests join between steps; finished, cancelled and expired ones leave at
// once. Prefill is chunked, so cancellation and new arrivals wait at most one step.
//
// KV memory: a pool of blocks of block_tokens positions, sized once from kv_budget_bytes
// (kv_cache.h). A request is admitted when its prompt's blocks are available; a running
// sequence that needs a block when none is free preempts the most recently admitted sequence
// (its blocks go back; it is recomputed later from the prefix cache and its tokens so far,
// with the same results). Full blocks stay cached after a request ends (prefix cache, LRU): a
// request whose prompt starts with a cached history (the next chat turn, a shared system
// prompt) prefills only the rest.
//
// Determinism: the forward pass is bitwise independent of batch composition and thread
// count, and each request samples with its own seeded sampler, so a request's tokens with a
// fixed seed do not depend on what else runs with it, on preemption or on prefix hits.
//
// Thread safety: Engine::submit/stats and every Request method are thread-safe. The engine
// must outlive none of its requests: destroying it finishes the unfinished ones (Cancelled);
// the Request objects stay valid (shared_ptr).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/model.h"
#include "runtime/generation.h"
#include "runtime/logprobs.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace colibri::serving {

using Clock = std::chrono::steady_clock;

struct EngineOptions {
  uint32_t max_sequences = 8;      // sequences running at once (decoded together each step)
  uint32_t context_length = 0;     // tokens per sequence (prompt + output); 0 = the session default
  uint32_t step_tokens = 256;      // tokens per step: one per running sequence + prefill chunks
  uint32_t block_tokens = 16;      // positions per KV block
  uint64_t kv_budget_bytes = 0;    // KV memory (a sliding-window model's window pool included); 0 = every running sequence's whole context
  uint32_t queue_capacity = 64;    // requests waiting for a slot beyond those running; then submit is Busy
  bool prefix_cache = true;        // reuse cached KV blocks of earlier requests' prefixes
  // Threads, kernels, KV dtype, non-finite policy, NUMA: as for a session. Its
  // context_length, max_sequences, max_batch_tokens, max_logit_rows and kv_* fields are set
  // by the engine from the fields above.
  runtime::SessionOptions session;
};

struct RequestOptions {
  uint32_t max_tokens = 256;
  runtime::SamplerOptions sampling;
  std::vector<int32_t> eos_token_ids;     // empty: the model's EOS ids
  bool ignore_eos = false;
  std::vector<std::string> stop_strings;  // text that ends the output (excluded from it)
  Clock::time_point deadline = Clock::time_point::max();  // the request ends (Deadline) after it
  // false: tokens only (generated_tokens), no text pieces and no stop strings — for callers
  // that detokenize themselves, and benchmark models whose tokenizer does not cover the vocabulary.
  bool text = true;
  // Record each sampled token's logprob and the top_logprobs most likely tokens of its step
  // (runtime/logprobs.h: the raw distribution, before the sampler). top_logprobs > 0 implies
  // logprobs; at most runtime::kMaxTopLogprobs.
  bool logprobs = false;
  uint32_t top_logprobs = 0;
};

struct RequestResult {
  runtime::FinishReason finish = runtime::FinishReason::None;  // None while running
  Error error;                   // set when finish is Error
  bool context_full = false;     // the error is a full context
  uint64_t prompt_tokens = 0;
  uint64_t generated_tokens = 0;  // sampled tokens, including a final EOS
  uint64_t prefix_hit_tokens = 0; // prompt tokens taken from the prefix cache (first admission)
  uint64_t preemptions = 0;       // times the request gave its blocks back and was recomputed
  uint64_t queue_ns = 0;          // submit → first admission
  uint64_t time_to_first_token_ns = 0;  // submit → first sampled token
  uint64_t decode_ns = 0;         // first sampled token → end
};

// Batch sizes (sequences per step) are counted in buckets 1, 2, 3-4, 5-8, ..., >128.
inline constexpr size_t kBatchHistogramBuckets = 9;

struct EngineStats {
  uint64_t queue_depth = 0;          // requests waiting for admission now
  uint64_t active_sequences = 0;     // admitted and running now
  uint64_t submitted = 0, rejected_busy = 0, finished = 0;
  uint64_t steps = 0;                // forward passes
  uint64_t decode_tokens = 0, prefill_tokens = 0;  // tokens computed, by kind
  uint64_t prefix_hit_tokens = 0;    // prompt tokens taken from the prefix cache
  uint64_t preemptions = 0;
  uint64_t batch_histogram[kBatchHistogramBuckets] = {};  // steps by sequences in the step
  uint64_t max_batch_sequences = 0;
  runtime::KvCacheStats kv;          // blocks in use / cached, evictions
  uint32_t block_tokens = 0;
};

class Engine;

// One submitted request: its output stream, state and result. Shared by the caller and the
// engine; thread-safe.
class Request {
 public:
  enum class Poll { Piece, Done, Pending };
  // Waits until a piece of text is ready (Piece, *piece set: non-empty, complete UTF-8), the
  // request has ended and every piece was read (Done), or `timeout` passed (Pending; a negative
  // timeout waits without limit, zero only looks).
  Poll next(std::string *piece, std::chrono::nanoseconds timeout);
  // Ends the request at the next step (finish reason Cancelled unless it ended before). Any
  // thread, any time, also while it waits in the queue or prefills.
  void cancel() { cancel_.store(true, std::memory_order_relaxed); }
  bool finished() const;
  RequestResult result() const;
  std::vector<int32_t> generated_tokens() const;
  // The logprobs recorded for generated token `index`: *chosen and top (resized to the
  // options' top_logprobs, or the vocabulary if smaller). False when the token is not
  // generated yet; *records false when the request records no logprobs.
  bool logprobs(size_t index, runtime::TokenLogprob *chosen, std::vector<runtime::TokenLogprob> *top,
                bool *records) const;

 private:
  friend class Engine;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> pieces_;
  std::vector<int32_t> generated_;  // a copy for callers (the engine keeps its own)
  bool records_logprobs_ = false;
  size_t top_count_ = 0;                          // alternatives per token
  std::vector<runtime::TokenLogprob> chosen_;     // per generated token (when recorded)
  std::vector<runtime::TokenLogprob> top_;        // top_count_ per generated token
  RequestResult result_;
  bool finished_ = false;
  std::atomic<bool> cancel_{false};
};

class Engine {
 public:
  // Creates the session (threads, KV pool) and starts the scheduler thread. The model and
  // the tokenizer must outlive the engine.
  static std::unique_ptr<Engine> create(const model::Model &model, const tokenizer::Tokenizer &tokenizer,
                                        const EngineOptions &options, Error *error);
  ~Engine();
  Engine(const Engine &) = delete;
  Engine &operator=(const Engine &) = delete;

  // Queues a request. Busy when max_sequences + queue_capacity requests are unfinished already; InvalidArgument for an
  // empty prompt, a token outside the vocabulary, bad sampling options, a prompt that does not
  // fit the context (or the KV pool). Thread-safe.
  Error submit(const std::vector<int32_t> &prompt, const RequestOptions &options, std::shared_ptr<Request> *out);
  EngineStats stats() const;
  const EngineOptions &options() const { return options_; }
  const runtime::Session &session() const { return *session_; }

 private:
  struct Sequence;
  Engine(const model::Model &model, const tokenizer::Tokenizer &tokenizer, const EngineOptions &options);
  void run();
  void step();
  bool admit(Sequence &seq, uint32_t slot);
  void preempt(Sequence &seq);
  void finish(Sequence &seq, runtime::FinishReason reason, Error error = {});
  void on_token(Sequence &seq, int32_t token, const float *logits);
  void publish(Sequence &seq, std::string piece);
  void release_slot(Sequence &seq);
  bool check_ended(Sequence &seq, Clock::time_point now);
  void update_stats(size_t sequences, size_t decode_tokens, size_t prefill_tokens);

  const model::Model &model_;
  const tokenizer::Tokenizer &tokenizer_;
  EngineOptions options_;
  std::unique_ptr<runtime::Session> session_;
  std::vector<int32_t> model_eos_;

  // Shared with submitters (mu_): the queue, the stop flag, the stats snapshot.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  bool stopping_ = false;
  EngineStats stats_;
  size_t unfinished_ = 0;  // accepted by submit, not finished (guarded by mu_)

  // The scheduler's own (no lock).
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order
  std::vector<uint32_t> free_slots_;
  std::vector<runtime::BatchEntry> batch_;
  std::vector<Sequence *> logit_owner_;             // sequence of each logits row of the step
  uint64_t admissions_ = 0;
  std::thread thread_;
};

}  // namespace colibri::serving

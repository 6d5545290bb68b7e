// capi/engine.cpp — colibri_engine_* and colibri_request_*: the C face of the serving engine
// (core/serving/engine.h). An engine handle keeps its model alive; a request handle keeps
// its serving::Request (shared with the scheduler) and the piece last handed out.
#include <chrono>
#include <cstddef>

#include "capi/internal.h"
#include "serving/engine.h"
#include "util/strings.h"

using namespace colibri;

namespace colibri::capi {

struct EngineHandle : HandleBase {
  EngineHandle() : HandleBase(HandleKind::Engine) {}
  std::shared_ptr<ModelState> model;
  std::unique_ptr<serving::Engine> engine;  // released by colibri_engine_free (the shell is quarantined)
  uint64_t default_seed = 0;
};

struct RequestHandle : HandleBase {
  RequestHandle() : HandleBase(HandleKind::Request) {}
  std::shared_ptr<serving::Request> request;  // released by colibri_request_free
  std::string piece;        // the piece last returned by colibri_request_next
  bool error_reported = false;  // a failed request returned its error once
  std::atomic<uintptr_t> reader{0};  // colibri_request_next's busy word (BusyUse)
};

// The noun of the request's busy word in messages.
constexpr const char *kRequestReader = "request's pull stream (colibri_request_next)";

COLIBRI_CAPI_HANDLE_CASTS(colibri_engine, EngineHandle)
COLIBRI_CAPI_HANDLE_CASTS(colibri_request, RequestHandle)

}  // namespace colibri::capi

namespace {

constexpr size_t kEngineOptionsAbi1 = sizeof(colibri_engine_options);
constexpr size_t kEngineStatsAbi1 = sizeof(colibri_engine_stats);
// ABI 1 as first released: the fields up to timeout_ns (logprobs, top_logprobs were appended).
constexpr size_t kRequestOptionsAbi1 = offsetof(colibri_request_options, logprobs);
constexpr size_t kRequestResultAbi1 = sizeof(colibri_request_result);

colibri_engine_options default_engine_options() {
  colibri_engine_options o{};
  o.struct_size = sizeof o;
  const serving::EngineOptions d;
  o.max_sequences = d.max_sequences;
  o.context_length = d.context_length;
  o.step_tokens = d.step_tokens;
  o.block_tokens = d.block_tokens;
  o.queue_capacity = d.queue_capacity;
  o.prefix_cache = d.prefix_cache ? 1 : 0;
  o.kv_budget_bytes = d.kv_budget_bytes;
  o.session = nullptr;
  return o;
}

colibri_request_options default_request_options() {
  colibri_request_options o{};
  o.struct_size = sizeof o;
  o.max_tokens = serving::RequestOptions{}.max_tokens;
  return o;
}

uint32_t finish_code(runtime::FinishReason reason) {
  static_assert(static_cast<uint32_t>(runtime::FinishReason::Cancelled) == COLIBRI_FINISH_CANCELLED &&
                static_cast<uint32_t>(runtime::FinishReason::Deadline) == COLIBRI_FINISH_DEADLINE &&
                static_cast<uint32_t>(runtime::FinishReason::Error) == COLIBRI_FINISH_ERROR);
  return static_cast<uint32_t>(reason);
}


// colibri_request_submit's work after the prompt is known (token ids or rendered chat).
int32_t submit(capi::EngineHandle *e, std::vector<int32_t> prompt, const colibri_request_options *options,
               colibri_request **request_out) {
  colibri_request_options o = default_request_options();
  if (int32_t s = capi::read_options(options, &o, kRequestOptionsAbi1, "colibri_request_options")) return s;
  COLIBRI_REQUIRE_ARG(o.reserved0 == 0, "colibri_request_options.reserved0 must be 0");
  COLIBRI_REQUIRE_ARG(o.logprobs <= 1, "colibri_request_options.logprobs must be 0 or 1");
  COLIBRI_REQUIRE_ARG(o.top_logprobs <= COLIBRI_MAX_TOP_LOGPROBS,
                      util::strprintf("colibri_request_options.top_logprobs %u is out of range (0..%d)", o.top_logprobs,
                                      COLIBRI_MAX_TOP_LOGPROBS));
  static_assert(COLIBRI_MAX_TOP_LOGPROBS == runtime::kMaxTopLogprobs);
  if (int32_t s = capi::check_prompt(prompt.data(), prompt.size(), e->engine->options().context_length,
                                     "create the engine with a larger context_length"))
    return s;
  serving::RequestOptions ro;
  ro.logprobs = o.logprobs != 0;
  ro.top_logprobs = o.top_logprobs;
  const capi::GenerationFields fields{o.max_tokens,      o.ignore_eos,   o.sampler,          o.eos_tokens,
                                      o.eos_token_count, o.stop_strings, o.stop_string_count};
  // Empty stop strings are accepted and ignored (an OpenAI client may send "").
  if (int32_t s = capi::read_generation_fields(fields, "colibri_request_options", e->default_seed, true, &ro)) return s;
  const serving::Clock::time_point now = serving::Clock::now();
  if (o.timeout_ns) {
    const uint64_t room = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(serving::Clock::time_point::max() - now).count());
    ro.deadline = o.timeout_ns >= room ? serving::Clock::time_point::max()
                                       : now + std::chrono::nanoseconds(static_cast<int64_t>(o.timeout_ns));
  }
  auto h = std::make_unique<capi::RequestHandle>();
  if (Error err = e->engine->submit(prompt, ro, &h->request)) return capi::fail(err);
  *request_out = capi::handle(h.release());
  return COLIBRI_OK;
}

}  // namespace

extern "C" {

COLIBRI_API int32_t colibri_engine_options_init(colibri_engine_options *options, size_t struct_size) {
  return capi::options_init(__func__, options, struct_size, default_engine_options, kEngineOptionsAbi1, "colibri_engine_options");
}

COLIBRI_API int32_t colibri_engine_create(colibri_model *model, const colibri_engine_options *options,
                                          colibri_engine **engine_out) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_ARG(engine_out, "engine_out must not be NULL");
    *engine_out = nullptr;
    COLIBRI_REQUIRE_HANDLE(model, "model");
    colibri_engine_options o = default_engine_options();
    if (int32_t s = capi::read_options(options, &o, kEngineOptionsAbi1, "colibri_engine_options")) return s;
    COLIBRI_REQUIRE_ARG(o.prefix_cache <= 1, "colibri_engine_options.prefix_cache must be 0 or 1");
    COLIBRI_REQUIRE_ARG(o.reserved0 == 0, "colibri_engine_options.reserved0 must be 0");
    const std::shared_ptr<capi::ModelState> &state = capi::impl(model)->state;
    const tokenizer::Tokenizer *tok = nullptr;
    if (int32_t s = capi::require_tokenizer(*state, &tok)) return s;
    capi::SessionSettings settings;
    if (int32_t s = capi::session_settings_from_c(state->options, o.session, &settings)) return s;
    serving::EngineOptions eo;
    eo.max_sequences = o.max_sequences;
    eo.context_length = o.context_length;
    eo.step_tokens = o.step_tokens;
    eo.block_tokens = o.block_tokens;
    eo.queue_capacity = o.queue_capacity;
    eo.prefix_cache = o.prefix_cache != 0;
    eo.kv_budget_bytes = o.kv_budget_bytes;
    eo.session = settings.runtime;
    auto h = std::make_unique<capi::EngineHandle>();
    h->model = state;
    h->default_seed = settings.options.seed;
    Error error;
    h->engine = serving::Engine::create(*state->model, *tok, eo, &error);
    if (!h->engine) return capi::fail(error);
    if (capi::log_enabled(COLIBRI_LOG_INFO)) {
      const serving::EngineStats st = h->engine->stats();
      capi::log_message(COLIBRI_LOG_INFO,
                        util::strprintf("engine: %zu threads, %u sequences x context %u, step %u tokens, KV %u blocks "
                                        "of %u tokens, queue %u, prefix cache %s",
                                        h->engine->session().thread_count(), eo.max_sequences,
                                        h->engine->options().context_length, eo.step_tokens, st.kv.block_count,
                                        eo.block_tokens, eo.queue_capacity, eo.prefix_cache ? "on" : "off"));
    }
    *engine_out = capi::handle(h.release());
    return COLIBRI_OK;
  });
}

COLIBRI_API void colibri_engine_free(colibri_engine *engine) {
  capi::guard_void(__func__, [&] {
    if (!engine || !capi::claim_for_free(engine, capi::HandleKind::Engine, "engine")) return;
    capi::EngineHandle *e = capi::impl(engine);
    e->engine.reset();  // stops the scheduler: unfinished requests end CANCELLED
    e->model.reset();
    capi::quarantine(e, [](capi::HandleBase *h) { delete static_cast<capi::EngineHandle *>(h); });
  });
}

COLIBRI_API int32_t colibri_engine_get_stats(const colibri_engine *engine, colibri_engine_stats *stats) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_HANDLE(engine, "engine");
    COLIBRI_REQUIRE_ARG(stats, "stats must not be NULL");
    const serving::EngineStats st = capi::impl(engine)->engine->stats();
    colibri_engine_stats full{};
    full.struct_size = sizeof full;
    full.kv_block_tokens = st.block_tokens;
    full.queue_depth = st.queue_depth;
    full.active_sequences = st.active_sequences;
    full.submitted_count = st.submitted;
    full.rejected_busy_count = st.rejected_busy;
    full.finished_count = st.finished;
    full.step_count = st.steps;
    full.decode_token_count = st.decode_tokens;
    full.prefill_token_count = st.prefill_tokens;
    full.prefix_hit_token_count = st.prefix_hit_tokens;
    full.preemption_count = st.preemptions;
    full.max_batch_sequences = st.max_batch_sequences;
    static_assert(COLIBRI_ENGINE_BATCH_BUCKETS == serving::kBatchHistogramBuckets);
    for (size_t i = 0; i < serving::kBatchHistogramBuckets; ++i) full.batch_histogram[i] = st.batch_histogram[i];
    full.kv_block_count = st.kv.block_count;
    full.kv_blocks_in_use = st.kv.blocks_in_use;
    full.kv_blocks_cached = st.kv.blocks_cached;
    full.kv_eviction_count = st.kv.evictions;
    return capi::write_output(stats, full, kEngineStatsAbi1, "colibri_engine_stats");
  });
}

COLIBRI_API int32_t colibri_request_options_init(colibri_request_options *options, size_t struct_size) {
  return capi::options_init(__func__, options, struct_size, default_request_options, kRequestOptionsAbi1, "colibri_request_options");
}

COLIBRI_API int32_t colibri_request_submit(colibri_engine *engine, const int32_t *prompt, size_t prompt_count,
                                           const colibri_request_options *options, colibri_request **request_out) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_ARG(request_out, "request_out must not be NULL");
    *request_out = nullptr;
    COLIBRI_REQUIRE_HANDLE(engine, "engine");
    COLIBRI_REQUIRE_ARG(prompt || prompt_count == 0, "prompt must not be NULL");
    return submit(capi::impl(engine), std::vector<int32_t>(prompt, prompt + prompt_count), options, request_out);
  });
}

COLIBRI_API int32_t colibri_request_submit_chat(colibri_engine *engine, const colibri_chat_message *messages,
                                                size_t message_count, const colibri_chat_options *chat_options,
                                                const colibri_request_options *options,
                                                colibri_request **request_out) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_ARG(request_out, "request_out must not be NULL");
    *request_out = nullptr;
    COLIBRI_REQUIRE_HANDLE(engine, "engine");
    capi::EngineHandle *e = capi::impl(engine);
    std::string text;
    if (int32_t s = capi::render_chat(*e->model, messages, message_count, chat_options, &text)) return s;
    std::vector<int32_t> prompt;
    if (int32_t s = capi::tokenize_chat(*e->model, text, &prompt)) return s;
    COLIBRI_REQUIRE_ARG(!prompt.empty(), "the chat template rendered these messages as no tokens: nothing to "
                                         "generate from");
    return submit(e, std::move(prompt), options, request_out);
  });
}

COLIBRI_API int32_t colibri_request_next(colibri_request *request, int64_t timeout_ns, const char **piece,
                                         size_t *piece_size) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_HANDLE(request, "request");
    COLIBRI_REQUIRE_ARG(piece && piece_size, "piece and piece_size must not be NULL");
    capi::RequestHandle *r = capi::impl(request);
    capi::BusyUse reading(r->reader, capi::kRequestReader);  // one reader at a time
    if (reading.status()) return reading.status();
    const std::chrono::nanoseconds wait(timeout_ns);
    const serving::Request::Poll poll = r->request->next(&r->piece, wait);
    *piece = r->piece.c_str();
    *piece_size = r->piece.size();
    if (poll == serving::Request::Poll::Piece) return COLIBRI_OK;
    if (poll == serving::Request::Poll::Pending) return COLIBRI_PENDING;
    const serving::RequestResult res = r->request->result();
    if (res.finish == runtime::FinishReason::Error && !r->error_reported) {
      r->error_reported = true;
      return capi::fail(res.context_full ? COLIBRI_ERROR_CONTEXT_FULL : capi::status_from_kind(res.error.kind),
                        res.error.message);
    }
    return COLIBRI_DONE;
  });
}

COLIBRI_API int32_t colibri_request_cancel(colibri_request *request) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_HANDLE(request, "request");
    capi::impl(request)->request->cancel();
    return COLIBRI_OK;
  });
}

COLIBRI_API int32_t colibri_request_get_result(const colibri_request *request, colibri_request_result *result) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_HANDLE(request, "request");
    COLIBRI_REQUIRE_ARG(result, "result must not be NULL");
    const serving::RequestResult r = capi::impl(request)->request->result();
    colibri_request_result full{};
    full.struct_size = sizeof full;
    full.finish_reason = finish_code(r.finish);
    full.prompt_token_count = r.prompt_tokens;
    full.generated_token_count = r.generated_tokens;
    full.prefix_hit_token_count = r.prefix_hit_tokens;
    full.preemption_count = r.preemptions;
    full.queue_ns = r.queue_ns;
    full.time_to_first_token_ns = r.time_to_first_token_ns;
    full.decode_ns = r.decode_ns;
    return capi::write_output(result, full, kRequestResultAbi1, "colibri_request_result");
  });
}

COLIBRI_API int32_t colibri_request_tokens(const colibri_request *request, int32_t *tokens, size_t capacity,
                                           size_t *count) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_HANDLE(request, "request");
    const std::vector<int32_t> ids = capi::impl(request)->request->generated_tokens();
    return capi::copy_tokens(ids.data(), ids.size(), tokens, capacity, count);
  });
}

COLIBRI_API int32_t colibri_request_logprobs(const colibri_request *request, size_t token_index,
                                             colibri_token_logprob *chosen, colibri_token_logprob *top,
                                             size_t capacity, size_t *count) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_HANDLE(request, "request");
    runtime::TokenLogprob picked;
    std::vector<runtime::TokenLogprob> alternatives;
    bool records = false;
    const bool have = capi::impl(request)->request->logprobs(token_index, &picked, &alternatives, &records);
    if (!records)
      return capi::fail(COLIBRI_ERROR_BAD_STATE, "the request records no logprobs: submit it with "
                                                 "colibri_request_options.logprobs = 1 or top_logprobs > 0");
    if (!have)
      return capi::invalid(util::strprintf("token_index %zu is not generated yet (colibri_request_tokens counts "
                                           "the tokens generated so far)",
                                           token_index));
    if (chosen) *chosen = {picked.token, picked.logprob};
    std::vector<colibri_token_logprob> out;
    out.reserve(alternatives.size());
    for (const runtime::TokenLogprob &t : alternatives) out.push_back({t.token, t.logprob});
    return capi::copy_array(out.data(), out.size(), top, capacity, count, "logprobs");
  });
}

COLIBRI_API void colibri_request_free(colibri_request *request) {
  capi::guard_void(__func__, [&] {
    // Not while a colibri_request_next waits on it (its busy word), and only once (its tag).
    if (!request || capi::check(request, "request")) return;  // a misuse is recorded in the last error
    if (!capi::claim_busy_for_free(capi::impl(request)->reader, capi::kRequestReader)) return;
    if (!capi::claim_for_free(request, capi::HandleKind::Request, "request")) return;
    capi::RequestHandle *r = capi::impl(request);
    r->request->cancel();
    r->request.reset();
    std::string().swap(r->piece);
    capi::quarantine(r, [](capi::HandleBase *h) { delete static_cast<capi::RequestHandle *>(h); });
  });
}

}  // extern "C"

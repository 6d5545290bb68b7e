// capi/session.cpp — colibri_session_*: create with options (defaults inherited from the
// model's options), free, info, reset, prefill / decode / batch, logits, the layer-level MoE
// call, the per-expert callback, and the stats.
#include <algorithm>
#include <cstddef>

#include "capi/internal.h"
#include "runtime/stats.h"
#include "util/strings.h"

using namespace colibri;

namespace {

// The first ABI-1 struct ended before max_isa (appended); such callers get AUTO.
constexpr size_t kSessionOptionsAbi1 = offsetof(colibri_session_options, max_isa);
constexpr size_t kSessionInfoAbi1 = sizeof(colibri_session_info);
constexpr size_t kStatsAbi1 = sizeof(colibri_stats);
constexpr uint32_t kMaxDeviceIndex = 1023;

colibri_session_options default_session_options() {
  colibri_session_options o{};
  o.struct_size = sizeof o;
  o.context_length = 0;
  o.max_sequences = 1;
  o.max_batch_tokens = 512;
  o.max_logit_rows = 0;
  o.threads = 0;
  o.pin_threads = COLIBRI_PIN_DEFAULT;
  o.non_finite_policy = COLIBRI_NON_FINITE_DEFAULT;
  o.kv_dtype = COLIBRI_DTYPE_F32;
  o.force_scalar = 0;
  o.seed = 0;
  o.numa_policy = COLIBRI_NUMA_DEFAULT;
  o.numa_node = 0;
  o.max_isa = COLIBRI_ISA_AUTO;
  o.device_kind = COLIBRI_DEVICE_CPU;
  o.device_index = 0;
  return o;
}

const char *backend_name(kernels::Isa isa) {
  switch (isa) {
    case kernels::Isa::Avx512: return "cpu-avx512";
    case kernels::Isa::Avx2: return "cpu-avx2";
    case kernels::Isa::Scalar: return "cpu-scalar";
  }
  return "cpu";
}

// The engine calls this for each active expert; it forwards to the caller's function and
// remembers a failure so that the call's status is COLIBRI_ERROR_CALLBACK.
int32_t expert_trampoline(void *user, uint32_t layer, uint32_t expert, const float *rows_in, size_t row_count,
                          size_t hidden, float *rows_out) {
  auto *s = static_cast<capi::SessionHandle *>(user);
  int32_t rc = s->expert_fn(s->expert_user, layer, expert, rows_in, row_count, hidden, rows_out);
  if (rc != 0) s->expert_status = rc;
  return rc;
}

int32_t check_sequence(const capi::SessionHandle *s, uint32_t sequence) {
  COLIBRI_REQUIRE_ARG(sequence < s->info.max_sequences, "sequence " + std::to_string(sequence) + " does not exist: the session has " +
                                                            std::to_string(s->info.max_sequences) +
                                                            " (create it with a larger max_sequences)");
  return COLIBRI_OK;
}

int32_t context_full(const capi::SessionHandle *s, uint32_t sequence, uint32_t length, size_t more) {
  return capi::fail(COLIBRI_ERROR_CONTEXT_FULL,
                    util::strprintf("sequence %u holds %u tokens; %zu more would exceed the context length %u. Reset "
                                    "the sequence or create the session with a larger context_length",
                                    sequence, length, more, s->info.context_length));
}

// Runs one engine batch, mapping a failure.
int32_t run_forward(capi::SessionHandle *s, const runtime::BatchEntry *entries, size_t count) {
  s->expert_status = 0;
  s->has_logits = false;
  if (Error e = s->session->forward(entries, count)) return capi::fail_session(s, e);
  s->has_logits = true;
  return COLIBRI_OK;
}

// colibri_session_prefill and _decode on a held session.
int32_t prefill(capi::SessionHandle *session, uint32_t sequence, const int32_t *tokens, size_t token_count) {
  if (int32_t s = capi::require_idle(session)) return s;
  if (int32_t s = check_sequence(session, sequence)) return s;
  COLIBRI_REQUIRE_ARG(token_count > 0, "no tokens given: prefill needs at least one token");
  COLIBRI_REQUIRE_ARG(tokens, "tokens must not be NULL");
  uint32_t length = session->session->sequence_length(sequence);
  if (token_count > session->info.context_length - length) return context_full(session, sequence, length, token_count);
  const size_t chunk = session->info.max_batch_tokens;
  for (size_t begin = 0; begin < token_count; begin += chunk) {
    const size_t end = std::min(token_count, begin + chunk);
    session->batch.clear();
    for (size_t i = begin; i < end; ++i)
      session->batch.push_back({sequence, static_cast<uint32_t>(length + i), tokens[i], i + 1 == token_count ? 1u : 0u});
    if (int32_t s = run_forward(session, session->batch.data(), session->batch.size())) return s;
  }
  return COLIBRI_OK;
}

// colibri_session_logits on a held session.
int32_t logits_row(const capi::SessionHandle *session, size_t row, const float **logits, size_t *vocab_size,
                   size_t *row_count) {
  COLIBRI_REQUIRE_ARG(logits, "logits must not be NULL");
  *logits = nullptr;
  if (!session->has_logits)
    return capi::fail(COLIBRI_ERROR_BAD_STATE, "no logits: run colibri_session_prefill, _decode or _batch first (the "
                                               "last run failed, was reset, or asked for no logits)");
  const size_t rows = session->session->logit_rows();
  if (row_count) *row_count = rows;
  if (vocab_size) *vocab_size = session->model->model->config().vocab_size;
  COLIBRI_REQUIRE_ARG(row < rows, "logits row " + std::to_string(row) + " does not exist: the last run produced " +
                                      std::to_string(rows) + " rows");
  *logits = session->session->logits(row);
  return COLIBRI_OK;
}

}  // namespace

namespace colibri::capi {

int32_t session_settings_from_c(const colibri_model_options &mo, const colibri_session_options *options,
                                SessionSettings *out) {
  colibri_session_options &o = out->options;
  o = default_session_options();
  if (int32_t st = capi::read_options(options, &o, kSessionOptionsAbi1, "colibri_session_options")) return st;
  COLIBRI_REQUIRE_ARG(o.pin_threads <= COLIBRI_PIN_ON, "colibri_session_options.pin_threads " +
                                                           std::to_string(o.pin_threads) + " is not a COLIBRI_PIN_* value (0..2)");
  COLIBRI_REQUIRE_ARG(o.non_finite_policy <= COLIBRI_NON_FINITE_ZERO,
                      "colibri_session_options.non_finite_policy " + std::to_string(o.non_finite_policy) +
                          " is not a COLIBRI_NON_FINITE_* value (0..2)");
  COLIBRI_REQUIRE_ARG(o.force_scalar <= 1, "colibri_session_options.force_scalar must be 0 or 1");
  COLIBRI_REQUIRE_ARG(o.reserved0 == 0, "colibri_session_options.reserved0 must be 0");
  COLIBRI_REQUIRE_ARG(o.max_isa <= COLIBRI_ISA_AVX512, "colibri_session_options.max_isa " + std::to_string(o.max_isa) +
                                                           " is not a COLIBRI_ISA_* value (0..3)");
  COLIBRI_REQUIRE_ARG(o.device_kind <= COLIBRI_DEVICE_CUDA, "colibri_session_options.device_kind " +
                                                                std::to_string(o.device_kind) +
                                                                " is not a COLIBRI_DEVICE_* value (0..1)");
  COLIBRI_REQUIRE_ARG(o.device_index <= kMaxDeviceIndex, "colibri_session_options.device_index " +
                                                             std::to_string(o.device_index) + " is out of range (0..1023)");
  COLIBRI_REQUIRE_ARG(o.device_kind != COLIBRI_DEVICE_CPU || o.device_index == 0,
                      "colibri_session_options.device_index " + std::to_string(o.device_index) +
                          " needs device_kind COLIBRI_DEVICE_CUDA (the CPU has no index)");
  COLIBRI_REQUIRE_ARG(o.numa_policy <= COLIBRI_NUMA_INTERLEAVE, "colibri_session_options.numa_policy " +
                                                                    std::to_string(o.numa_policy) +
                                                                    " is not a COLIBRI_NUMA_* value (0..3)");
  if (o.kv_dtype != COLIBRI_DTYPE_F32 && o.kv_dtype != COLIBRI_DTYPE_F16)
    return capi::fail(o.kv_dtype <= COLIBRI_DTYPE_Q8 ? COLIBRI_ERROR_UNSUPPORTED : COLIBRI_ERROR_INVALID_ARGUMENT,
                      std::string("colibri_session_options.kv_dtype ") + colibri_dtype_name(o.kv_dtype) + " (" +
                          std::to_string(o.kv_dtype) + "): KV caches are COLIBRI_DTYPE_F32 or COLIBRI_DTYPE_F16");
  uint32_t &pin = out->pin;
  pin = o.pin_threads != COLIBRI_PIN_DEFAULT ? o.pin_threads
                 : mo.pin_threads != COLIBRI_PIN_DEFAULT ? mo.pin_threads
                                                          : COLIBRI_PIN_OFF;
  uint32_t &non_finite = out->non_finite;
  non_finite = o.non_finite_policy != COLIBRI_NON_FINITE_DEFAULT ? o.non_finite_policy
                        : mo.non_finite_policy != COLIBRI_NON_FINITE_DEFAULT ? mo.non_finite_policy
                                                                             : COLIBRI_NON_FINITE_ERROR;
  uint32_t &numa = out->numa, &numa_node = out->numa_node;
  numa = o.numa_policy;
  numa_node = o.numa_node;
  if (numa == COLIBRI_NUMA_DEFAULT) {
    numa = mo.numa_policy == COLIBRI_NUMA_DEFAULT ? COLIBRI_NUMA_OFF : mo.numa_policy;
    numa_node = mo.numa_node;
  }
  runtime::SessionOptions &so = out->runtime;
  so.context_length = o.context_length;
  so.max_sequences = o.max_sequences;
  so.max_batch_tokens = o.max_batch_tokens;
  so.max_logit_rows = o.max_logit_rows;
  so.threads = o.threads ? o.threads : mo.threads;
  so.pin_threads = pin == COLIBRI_PIN_ON;
  so.force_scalar = o.force_scalar != 0 || o.max_isa == COLIBRI_ISA_SCALAR;
  if (o.max_isa == COLIBRI_ISA_AVX2) so.max_isa = kernels::Isa::Avx2;
  if (o.max_isa == COLIBRI_ISA_AVX512) so.max_isa = kernels::Isa::Avx512;
  so.non_finite = non_finite == COLIBRI_NON_FINITE_ZERO ? runtime::NonFinitePolicy::Zero : runtime::NonFinitePolicy::Error;
  so.kv_dtype = o.kv_dtype == COLIBRI_DTYPE_F16 ? runtime::KvDtype::F16 : runtime::KvDtype::F32;
  so.numa = capi::numa_policy(numa, numa_node);
  so.device.kind = o.device_kind == COLIBRI_DEVICE_CUDA ? runtime::DeviceKind::Cuda : runtime::DeviceKind::Cpu;
  so.device.index = o.device_index;
  return COLIBRI_OK;
}

int32_t require_idle(const SessionHandle *session) {
  if (session->stream)
    return fail(COLIBRI_ERROR_BAD_STATE, "the session has an open stream; close it (colibri_stream_close) before "
                                         "running the session otherwise");
  return COLIBRI_OK;
}

int32_t fail_session(SessionHandle *session, const Error &error) {
  if (session->expert_status != 0)
    return fail(COLIBRI_ERROR_CALLBACK, error.message);
  return fail(error);
}

}  // namespace colibri::capi

extern "C" {

COLIBRI_API int32_t colibri_session_options_init(colibri_session_options *options, size_t struct_size) {
  return capi::options_init(__func__, options, struct_size, default_session_options, kSessionOptionsAbi1, "colibri_session_options");
}

COLIBRI_API int32_t colibri_session_create(colibri_model *model, const colibri_session_options *options,
                                           colibri_session **session_out) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_ARG(session_out, "session_out must not be NULL");
    *session_out = nullptr;
    COLIBRI_REQUIRE_HANDLE(model, "model");
    capi::SessionSettings settings;
    if (int32_t st = capi::session_settings_from_c(capi::impl(model)->state->options, options, &settings)) return st;
    const colibri_session_options &o = settings.options;
    const uint32_t pin = settings.pin, non_finite = settings.non_finite, numa = settings.numa, numa_node = settings.numa_node;
    const runtime::SessionOptions &so = settings.runtime;

    auto handle = std::make_unique<capi::SessionHandle>();
    handle->model = capi::impl(model)->state;
    Error error;
    handle->session = runtime::Session::create(*capi::impl(model)->state->model, so, &error);
    if (!handle->session) return capi::fail(error);
    const runtime::SessionOptions &eff = handle->session->options();
    const model::Model &m = *capi::impl(model)->state->model;
    colibri_session_info &i = handle->info;
    i.struct_size = sizeof i;
    i.context_length = eff.context_length;
    i.max_sequences = eff.max_sequences;
    i.max_batch_tokens = eff.max_batch_tokens;
    i.max_logit_rows = eff.max_logit_rows;
    static_assert(static_cast<uint32_t>(runtime::Stage::Router) == COLIBRI_STAGE_ROUTER &&
                  static_cast<uint32_t>(runtime::Stage::LmHead) == COLIBRI_STAGE_LM_HEAD &&
                  static_cast<uint32_t>(runtime::Stage::Count) == COLIBRI_STAGE_LM_HEAD + 1);
    i.thread_count = static_cast<uint32_t>(handle->session->thread_count());
    i.kv_dtype = o.kv_dtype;
    i.pin_threads = pin;
    i.non_finite_policy = non_finite;
    i.numa_policy = numa;
    i.numa_node = numa == COLIBRI_NUMA_BIND ? numa_node : 0;
    i.backend = handle->session->device() ? "cuda" : backend_name(handle->session->isa());
    // The host cache's own size (sliding-window layers keep a ring); a CUDA session's lives on
    // the device: every layer's whole context.
    const uint64_t kv_element_bytes = o.kv_dtype == COLIBRI_DTYPE_F16 ? 2 : 4;
    i.kv_cache_bytes = handle->session->device()
                           ? 2ull * kv_element_bytes * eff.max_sequences * m.config().layer_count * eff.context_length *
                                 m.kv_dim()
                           : handle->session->kv_cache().storage_bytes();
    i.seed = o.seed;
    handle->batch.reserve(eff.max_batch_tokens);
    handle->scratch_lengths.assign(eff.max_sequences, 0);
    if (capi::log_enabled(COLIBRI_LOG_INFO))
      capi::log_message(COLIBRI_LOG_INFO,
                        util::strprintf("session: %u threads%s, %s kernels, context %u x %u sequences, batch %u, KV "
                                        "cache %.1f MB",
                                        i.thread_count, pin == COLIBRI_PIN_ON ? " (pinned)" : "", i.backend,
                                        i.context_length, i.max_sequences, i.max_batch_tokens,
                                        static_cast<double>(i.kv_cache_bytes) / 1e6));
    *session_out = capi::handle(handle.release());
    return COLIBRI_OK;
  });
}

COLIBRI_API int32_t colibri_session_get_info(const colibri_session *session_handle, colibri_session_info *info) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_HANDLE(session_handle, "session");  // the info is immutable: no busy word needed
    auto *session = capi::impl(session_handle);
    return capi::write_output(info, session->info, kSessionInfoAbi1, "colibri_session_info");
  });
}

COLIBRI_API int32_t colibri_session_reset(colibri_session *session_handle) {
  return capi::guard(__func__, [&]() -> int32_t {
    capi::SessionUse session(session_handle);
    if (session.status()) return session.status();
    if (int32_t s = capi::require_idle(session.get())) return s;
    session->session->reset_all();
    session->has_logits = false;
    return COLIBRI_OK;
  });
}

COLIBRI_API int32_t colibri_session_reset_sequence(colibri_session *session_handle, uint32_t sequence) {
  return capi::guard(__func__, [&]() -> int32_t {
    capi::SessionUse session(session_handle);
    if (session.status()) return session.status();
    if (int32_t s = capi::require_idle(session.get())) return s;
    if (int32_t s = check_sequence(session.get(), sequence)) return s;
    session->session->reset_sequence(sequence);
    session->has_logits = false;
    return COLIBRI_OK;
  });
}

COLIBRI_API int32_t colibri_session_sequence_length(const colibri_session *session_handle, uint32_t sequence, uint32_t *length) {
  return capi::guard(__func__, [&]() -> int32_t {
    capi::SessionUse session(session_handle);
    if (session.status()) return session.status();
    COLIBRI_REQUIRE_ARG(length, "length must not be NULL");
    if (int32_t s = check_sequence(session.get(), sequence)) return s;
    *length = session->session->sequence_length(sequence);
    return COLIBRI_OK;
  });
}

COLIBRI_API int32_t colibri_session_prefill(colibri_session *session_handle, uint32_t sequence, const int32_t *tokens,
                                            size_t token_count) {
  return capi::guard(__func__, [&]() -> int32_t {
    capi::SessionUse session(session_handle);
    if (session.status()) return session.status();
    return prefill(session.get(), sequence, tokens, token_count);
  });
}

COLIBRI_API int32_t colibri_session_decode(colibri_session *session_handle, uint32_t sequence, int32_t token) {
  return capi::guard(__func__, [&]() -> int32_t {
    capi::SessionUse session(session_handle);
    if (session.status()) return session.status();
    return prefill(session.get(), sequence, &token, 1);
  });
}

COLIBRI_API int32_t colibri_session_batch(colibri_session *session_handle, const uint32_t *sequences, const uint32_t *positions,
                                          const int32_t *tokens, const uint32_t *want_logits, size_t count) {
  return capi::guard(__func__, [&]() -> int32_t {
    capi::SessionUse session(session_handle);
    if (session.status()) return session.status();
    if (int32_t s = capi::require_idle(session.get())) return s;
    COLIBRI_REQUIRE_ARG(count > 0, "empty batch: give at least one token");
    COLIBRI_REQUIRE_ARG(tokens, "tokens must not be NULL");
    COLIBRI_REQUIRE_ARG(count <= session->info.max_batch_tokens,
                        "a batch of " + std::to_string(count) + " tokens exceeds the session's max_batch_tokens " +
                            std::to_string(session->info.max_batch_tokens));
    std::vector<uint32_t> &lengths = session->scratch_lengths;
    for (uint32_t q = 0; q < session->info.max_sequences; ++q) lengths[q] = session->session->sequence_length(q);
    session->batch.clear();
    for (size_t i = 0; i < count; ++i) {
      uint32_t sequence = sequences ? sequences[i] : 0;
      if (int32_t s = check_sequence(session.get(), sequence)) return s;
      uint32_t position = positions ? positions[i] : lengths[sequence];
      // A position past the sequence's next one is a gap, which the engine's batch check
      // reports (INVALID_ARGUMENT); only the next position beyond the context is a full context.
      if (position >= session->info.context_length && position <= lengths[sequence]) {
        size_t adding = 0;
        for (size_t j = 0; j < count; ++j) adding += (sequences ? sequences[j] : 0) == sequence;
        return context_full(session.get(), sequence, session->session->sequence_length(sequence), adding);
      }
      lengths[sequence] = std::max(lengths[sequence], position + 1);
      uint32_t want = want_logits ? (want_logits[i] != 0 ? 1u : 0u) : (i + 1 == count ? 1u : 0u);
      session->batch.push_back({sequence, position, tokens[i], want});
    }
    return run_forward(session.get(), session->batch.data(), session->batch.size());
  });
}

COLIBRI_API int32_t colibri_session_logits(const colibri_session *session_handle, size_t row, const float **logits,
                                           size_t *vocab_size, size_t *row_count) {
  return capi::guard(__func__, [&]() -> int32_t {
    if (logits) *logits = nullptr;
    capi::SessionUse session(session_handle);
    if (session.status()) return session.status();
    return logits_row(session.get(), row, logits, vocab_size, row_count);
  });
}

COLIBRI_API int32_t colibri_session_copy_logits(const colibri_session *session_handle, size_t row, float *buffer, size_t capacity) {
  return capi::guard(__func__, [&]() -> int32_t {
    capi::SessionUse session(session_handle);
    if (session.status()) return session.status();
    const float *logits = nullptr;
    size_t vocab = 0;
    if (int32_t s = logits_row(session.get(), row, &logits, &vocab, nullptr)) return s;
    COLIBRI_REQUIRE_ARG(buffer, "buffer must not be NULL");
    if (capacity < vocab)
      return capi::fail(COLIBRI_ERROR_BUFFER_TOO_SMALL, "a logits row has " + std::to_string(vocab) +
                                                            " floats, the buffer holds " + std::to_string(capacity));
    std::memcpy(buffer, logits, vocab * sizeof(float));
    return COLIBRI_OK;
  });
}

COLIBRI_API int32_t colibri_session_moe_layer(colibri_session *session_handle, uint32_t layer, const float *hidden,
                                              size_t row_count, const int32_t *route_experts,
                                              const float *route_weights, float *out) {
  return capi::guard(__func__, [&]() -> int32_t {
    capi::SessionUse session(session_handle);
    if (session.status()) return session.status();
    if (int32_t s = capi::require_idle(session.get())) return s;
    COLIBRI_REQUIRE_ARG(hidden && out, "hidden and out must not be NULL");
    COLIBRI_REQUIRE_ARG((route_experts == nullptr) == (route_weights == nullptr),
                        "give both route_experts and route_weights, or neither (to use the model's router)");
    COLIBRI_REQUIRE_ARG(row_count > 0 && row_count <= session->info.max_batch_tokens,
                        std::to_string(row_count) + " rows: give 1.." + std::to_string(session->info.max_batch_tokens) +
                            " (the session's max_batch_tokens)");
    const runtime::Route *routes = nullptr;
    if (route_experts) {
      const size_t k = session->model->model->config().top_k;
      session->routes.resize(row_count * k);
      for (size_t i = 0; i < row_count * k; ++i) session->routes[i] = {route_experts[i], route_weights[i]};
      routes = session->routes.data();
    }
    session->expert_status = 0;
    if (Error e = session->session->moe_layer(layer, hidden, row_count, routes, out)) return capi::fail_session(session.get(), e);
    return COLIBRI_OK;
  });
}

COLIBRI_API int32_t colibri_session_set_expert_fn(colibri_session *session_handle, colibri_expert_fn fn, void *user) {
  return capi::guard(__func__, [&]() -> int32_t {
    capi::SessionUse session(session_handle);
    if (session.status()) return session.status();
    session->expert_fn = fn;
    session->expert_user = user;
    runtime::ExpertHook hook;
    if (fn) {
      hook.fn = &expert_trampoline;
      hook.user = session.get();
    }
    session->session->set_expert_hook(hook);
    return COLIBRI_OK;
  });
}

COLIBRI_API int32_t colibri_session_get_stats(const colibri_session *session_handle, colibri_stats *stats) {
  return capi::guard(__func__, [&]() -> int32_t {
    capi::SessionUse session(session_handle);
    if (session.status()) return session.status();
    const runtime::SessionStats &st = session->session->stats();
    colibri_stats out{};
    out.struct_size = sizeof out;
    constexpr size_t stages = static_cast<size_t>(runtime::Stage::Count);
    static_assert(stages <= COLIBRI_STATS_MAX_STAGES);
    out.stage_count = stages;
    for (size_t i = 0; i < stages; ++i) out.stage_ns[i] = st.stage_ns[i];
    out.weight_bytes_read = st.weight_bytes_read;
    out.tokens = st.tokens;
    out.forward_calls = st.forward_calls;
    out.non_finite_rows = st.non_finite_rows;
    out.expert_activations = st.expert_activations;
    return capi::write_output(stats, out, kStatsAbi1, "colibri_stats");
  });
}

COLIBRI_API int32_t colibri_session_reset_stats(colibri_session *session_handle) {
  return capi::guard(__func__, [&]() -> int32_t {
    capi::SessionUse session(session_handle);
    if (session.status()) return session.status();
    session->session->reset_stats();
    return COLIBRI_OK;
  });
}

}  // extern "C"

// colibri_session_free lives in generate.cpp: it must detach an open stream.

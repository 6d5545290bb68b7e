// capi/generate.cpp — text generation over runtime::Generation: the pull form
// (colibri_stream_*), the callback form (colibri_generate, built on the stream) and
// colibri_session_free, which must detach a stream still open on the session.
#include <chrono>
#include <optional>

#include "capi/internal.h"
#include "runtime/generation.h"
#include "tokenizer/tokenizer.h"

using namespace colibri;

namespace colibri::capi {

struct StreamHandle : HandleBase {
  StreamHandle() : HandleBase(HandleKind::Stream) {}
  SessionHandle *session = nullptr;  // null once the session was freed (detached)
  std::unique_ptr<runtime::Generation> generation;
  uint32_t sequence = 0;
  std::string piece;
  bool done = false;       // generation ended (or failed): next returns COLIBRI_DONE
  bool pending_done = false;  // the last piece came with the end: DONE on the next call
  bool cancelled = false;
  uint64_t prefill_ns = 0;
  uint64_t decode_ns = 0;
};

COLIBRI_CAPI_HANDLE_CASTS(colibri_stream, StreamHandle)

}  // namespace colibri::capi

namespace colibri::capi {

int32_t check_prompt(const int32_t *prompt, size_t prompt_count, uint32_t context_length, const char *fix) {
  COLIBRI_REQUIRE_ARG(prompt_count > 0, "the prompt is empty: give at least one token");
  COLIBRI_REQUIRE_ARG(prompt, "prompt must not be NULL");
  if (prompt_count >= context_length)
    return fail(COLIBRI_ERROR_CONTEXT_FULL, "the prompt has " + std::to_string(prompt_count) +
                                                " tokens but the context holds " + std::to_string(context_length) +
                                                " (one more is needed to generate); shorten the prompt or " + fix);
  return COLIBRI_OK;
}

int32_t read_generation_fields(const GenerationFields &in, const char *struct_name, uint64_t default_seed,
                               bool empty_stop_ok, runtime::SamplerOptions *sampling,
                               std::vector<int32_t> *eos_token_ids, std::vector<std::string> *stop_strings) {
  const std::string name = struct_name;
  COLIBRI_REQUIRE_ARG(in.ignore_eos <= 1, name + ".ignore_eos must be 0 or 1");
  COLIBRI_REQUIRE_ARG(in.eos_tokens || in.eos_token_count == 0,
                      name + ".eos_tokens is NULL but eos_token_count is not 0");
  COLIBRI_REQUIRE_ARG(in.stop_strings || in.stop_string_count == 0,
                      name + ".stop_strings is NULL but stop_string_count is not 0");
  if (int32_t s = sampler_options_from_c(in.sampler, default_seed, sampling)) return s;
  eos_token_ids->assign(in.eos_tokens, in.eos_tokens + in.eos_token_count);
  stop_strings->clear();
  for (size_t i = 0; i < in.stop_string_count; ++i) {
    COLIBRI_REQUIRE_ARG(in.stop_strings[i], name + ".stop_strings[" + std::to_string(i) + "] is NULL");
    COLIBRI_REQUIRE_ARG(empty_stop_ok || in.stop_strings[i][0],
                        name + ".stop_strings[" + std::to_string(i) + "] is empty");
    stop_strings->emplace_back(in.stop_strings[i]);
  }
  return COLIBRI_OK;
}

}  // namespace colibri::capi

using capi::SessionHandle;
using capi::StreamHandle;

namespace {

constexpr size_t kGenerateOptionsAbi1 = sizeof(colibri_generate_options);
constexpr size_t kGenerateResultAbi1 = sizeof(colibri_generate_result);

colibri_generate_options default_generate_options() {
  colibri_generate_options o{};
  o.struct_size = sizeof o;
  o.max_tokens = 256;
  o.sequence = 0;
  o.ignore_eos = 0;
  o.sampler = nullptr;
  o.eos_tokens = nullptr;
  o.eos_token_count = 0;
  o.stop_strings = nullptr;
  o.stop_string_count = 0;
  return o;
}

uint64_t elapsed_ns(std::chrono::steady_clock::time_point since) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - since).count());
}

// Maps a failed generation step: the expert callback, a full context, or the engine's error.
int32_t fail_generation(SessionHandle *s, uint32_t sequence, const Error &error) {
  s->has_logits = false;
  if (s->expert_status == 0 && s->session->sequence_length(sequence) >= s->info.context_length)
    return capi::fail(COLIBRI_ERROR_CONTEXT_FULL, error.message);
  return capi::fail_session(s, error);
}

int32_t open_stream(SessionHandle *session, const int32_t *prompt, size_t prompt_count,
                    const colibri_generate_options *options, StreamHandle **stream_out) {
  COLIBRI_REQUIRE_ARG(stream_out, "stream_out must not be NULL");
  *stream_out = nullptr;
  if (int32_t s = capi::require_idle(session)) return s;
  colibri_generate_options o = default_generate_options();
  if (int32_t s = capi::read_options(options, &o, kGenerateOptionsAbi1, "colibri_generate_options")) return s;
  COLIBRI_REQUIRE_ARG(o.sequence < session->info.max_sequences,
                      "colibri_generate_options.sequence " + std::to_string(o.sequence) + " does not exist: the session has " +
                          std::to_string(session->info.max_sequences));
  if (int32_t s = capi::check_prompt(prompt, prompt_count, session->info.context_length, "use a larger context_length"))
    return s;
  const tokenizer::Tokenizer *tok = nullptr;
  if (int32_t s = capi::require_tokenizer(*session->model, &tok)) return s;

  runtime::GenerateOptions go;
  const capi::GenerationFields fields{o.max_tokens,    o.ignore_eos,   o.sampler,          o.eos_tokens,
                                      o.eos_token_count, o.stop_strings, o.stop_string_count};
  if (int32_t s = capi::read_generation_fields(fields, "colibri_generate_options", session->info.seed, false, &go))
    return s;
  go.sequence = o.sequence;

  auto stream = std::make_unique<StreamHandle>();
  stream->sequence = o.sequence;
  std::vector<int32_t> tokens(prompt, prompt + prompt_count);
  session->expert_status = 0;
  session->has_logits = false;
  auto start = std::chrono::steady_clock::now();
  Error error;
  stream->generation = runtime::Generation::start(*session->session, *tok, tokens, go, &error);
  if (!stream->generation) return fail_generation(session, o.sequence, error);
  stream->prefill_ns = elapsed_ns(start);
  session->has_logits = true;
  stream->session = session;
  session->stream = stream.get();
  *stream_out = stream.release();
  return COLIBRI_OK;
}

// The next piece of a checked stream whose session (if attached) the caller holds.
int32_t next_piece(StreamHandle *stream, const char **piece, size_t *piece_size) {
  COLIBRI_REQUIRE_ARG(piece, "piece must not be NULL");
  stream->piece.clear();
  *piece = stream->piece.c_str();
  if (piece_size) *piece_size = 0;
  if (!stream->session)
    return capi::fail(COLIBRI_ERROR_BAD_STATE, "the stream's session was freed; close the stream");
  if (stream->done || stream->pending_done) {
    stream->done = true;
    return COLIBRI_DONE;
  }
  SessionHandle *session = stream->session;
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    bool done = false;
    session->expert_status = 0;
    Error e = stream->generation->next(&stream->piece, &done);
    if (e) {
      stream->done = true;
      stream->decode_ns += elapsed_ns(start);
      stream->piece.clear();
      return fail_generation(session, stream->sequence, e);
    }
    if (!stream->piece.empty() || done) {
      stream->decode_ns += elapsed_ns(start);
      *piece = stream->piece.c_str();
      if (piece_size) *piece_size = stream->piece.size();
      if (stream->piece.empty()) {
        stream->done = true;
        return COLIBRI_DONE;
      }
      stream->pending_done = done;
      return COLIBRI_OK;
    }
  }
}

colibri_generate_result stream_result(const StreamHandle &stream) {
  colibri_generate_result r{};
  r.struct_size = sizeof r;
  if (stream.generation) {
    const runtime::Generation &g = *stream.generation;
    r.finish_reason = stream.cancelled ? COLIBRI_FINISH_CANCELLED : static_cast<uint32_t>(g.finish_reason());
    r.prompt_token_count = g.prompt_tokens();
    r.generated_token_count = g.generated_tokens().size();
  }
  r.prefill_ns = stream.prefill_ns;
  r.decode_ns = stream.decode_ns;
  return r;
}

// Detaches the stream from its session and releases what it owns (the shell stays).
void release_stream(StreamHandle *stream) {
  if (stream->session) stream->session->stream = nullptr;
  stream->session = nullptr;
  stream->generation.reset();
  std::string().swap(stream->piece);
}

// colibri_generate's own stream, which never reaches the caller: deleted at once.
void close_stream(StreamHandle *stream) {
  if (!stream) return;
  release_stream(stream);
  delete stream;
}

// Holds the stream's session for the call when the stream has one (a detached stream has
// only its own state). COLIBRI_OK when the call may go on.
int32_t hold_stream_session(const StreamHandle *stream, std::optional<capi::SessionUse> *use) {
  if (!stream->session) return COLIBRI_OK;
  use->emplace(stream->session);
  return (*use)->status();
}

static_assert(static_cast<uint32_t>(runtime::FinishReason::Length) == COLIBRI_FINISH_LENGTH &&
              static_cast<uint32_t>(runtime::FinishReason::EndOfSequence) == COLIBRI_FINISH_EOS &&
              static_cast<uint32_t>(runtime::FinishReason::StopString) == COLIBRI_FINISH_STOP &&
              static_cast<uint32_t>(runtime::FinishReason::Cancelled) == COLIBRI_FINISH_CANCELLED);

}  // namespace

extern "C" {

COLIBRI_API int32_t colibri_generate_options_init(colibri_generate_options *options, size_t struct_size) {
  return capi::options_init(__func__, options, struct_size, default_generate_options, kGenerateOptionsAbi1,
                            "colibri_generate_options");
}

COLIBRI_API int32_t colibri_stream_open(colibri_session *session_handle, const int32_t *prompt, size_t prompt_count,
                                        const colibri_generate_options *options, colibri_stream **stream_out) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_ARG(stream_out, "stream_out must not be NULL");
    *stream_out = nullptr;
    capi::SessionUse session(session_handle);
    if (session.status()) return session.status();
    StreamHandle *stream = nullptr;
    int32_t status = open_stream(session.get(), prompt, prompt_count, options, &stream);
    *stream_out = capi::handle(stream);
    return status;
  });
}

COLIBRI_API int32_t colibri_stream_next(colibri_stream *stream_handle, const char **piece, size_t *piece_size) {
  return capi::guard(__func__, [&]() -> int32_t {
    if (piece) *piece = "";  // an empty piece on every failure
    if (piece_size) *piece_size = 0;
    COLIBRI_REQUIRE_HANDLE(stream_handle, "stream");
    StreamHandle *stream = capi::impl(stream_handle);
    std::optional<capi::SessionUse> use;
    if (int32_t s = hold_stream_session(stream, &use)) return s;
    return next_piece(stream, piece, piece_size);
  });
}

COLIBRI_API int32_t colibri_stream_get_result(const colibri_stream *stream_handle, colibri_generate_result *result) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_HANDLE(stream_handle, "stream");
    auto *stream = capi::impl(stream_handle);
    std::optional<capi::SessionUse> use;
    if (int32_t s = hold_stream_session(stream, &use)) return s;
    return capi::write_output(result, stream_result(*stream), kGenerateResultAbi1, "colibri_generate_result");
  });
}

COLIBRI_API int32_t colibri_stream_tokens(const colibri_stream *stream_handle, int32_t *tokens, size_t capacity, size_t *count) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_HANDLE(stream_handle, "stream");
    auto *stream = capi::impl(stream_handle);
    std::optional<capi::SessionUse> use;
    if (int32_t s = hold_stream_session(stream, &use)) return s;
    if (!stream->generation) return capi::copy_tokens(nullptr, 0, tokens, capacity, count);
    const std::vector<int32_t> &ids = stream->generation->generated_tokens();
    return capi::copy_tokens(ids.data(), ids.size(), tokens, capacity, count);
  });
}

COLIBRI_API void colibri_stream_close(colibri_stream *stream_handle) {
  capi::guard_void(__func__, [&] {
    if (!stream_handle || capi::check(stream_handle, "stream")) return;  // a misuse is recorded in the last error
    StreamHandle *stream = capi::impl(stream_handle);
    std::optional<capi::SessionUse> use;  // not while a call on its session runs
    if (hold_stream_session(stream, &use)) return;
    if (!capi::claim_for_free(stream_handle, capi::HandleKind::Stream, "stream")) return;
    release_stream(stream);
    capi::quarantine(stream, [](capi::HandleBase *h) { delete static_cast<StreamHandle *>(h); });
  });
}

COLIBRI_API int32_t colibri_generate(colibri_session *session_handle, const int32_t *prompt, size_t prompt_count,
                                     const colibri_generate_options *options, colibri_piece_fn on_piece, void *user,
                                     colibri_generate_result *result) {
  return capi::guard(__func__, [&]() -> int32_t {
    capi::SessionUse held(session_handle);
    if (held.status()) return held.status();
    SessionHandle *session = held.get();
    if (result) COLIBRI_REQUIRE_ARG(result->struct_size >= kGenerateResultAbi1,
                                    "colibri_generate_result.struct_size must be set to sizeof(colibri_generate_result)");
    StreamHandle *raw = nullptr;
    if (int32_t s = open_stream(session, prompt, prompt_count, options, &raw)) return s;
    std::unique_ptr<StreamHandle, void (*)(StreamHandle *)> stream(raw, &close_stream);
    int32_t status = COLIBRI_OK;
    for (;;) {
      const char *piece = nullptr;
      size_t size = 0;
      status = next_piece(stream.get(), &piece, &size);
      if (status != COLIBRI_OK) break;
      if (on_piece && on_piece(user, piece, size) != 0) {
        stream->cancelled = true;
        stream->generation->cancel();
        break;
      }
    }
    if (result) capi::write_output(result, stream_result(*stream), kGenerateResultAbi1, "colibri_generate_result");
    return status == COLIBRI_DONE ? COLIBRI_OK : status;
  });
}

COLIBRI_API void colibri_session_free(colibri_session *session_handle) {
  capi::guard_void(__func__, [&] {
    // A misuse (freed twice, in use, garbage) is recorded in the last error and frees nothing.
    if (!session_handle || capi::check(session_handle, "session")) return;
    auto *session = capi::impl(session_handle);
    if (!capi::claim_session_for_free(session)) return;
    if (session->stream) {
      // Detach: the stream object stays valid (its calls report BAD_STATE) until closed.
      session->stream->generation.reset();
      session->stream->session = nullptr;
      session->stream->done = true;
      session->stream = nullptr;
    }
    // Release everything it owns now; the shell (tag dead, busy word claimed) is quarantined.
    session->session.reset();
    session->model.reset();
    std::vector<runtime::BatchEntry>().swap(session->batch);
    std::vector<runtime::Route>().swap(session->routes);
    std::vector<uint32_t>().swap(session->scratch_lengths);
    capi::quarantine(session, [](capi::HandleBase *h) { delete static_cast<SessionHandle *>(h); });
  });
}

}  // extern "C"

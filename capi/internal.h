// capi/internal.h — what the extern "C" shim files share: the handle structs behind the
// opaque types of colibri.h, the thread-local last error, the catch-all guard every exported
// body runs in, the error-kind → status mapping, logging, and the options-struct rules
// (struct_size: read what the caller has, default the rest, refuse unknown non-zero tails).
// Nothing here is exported: the library is built with -fvisibility=hidden and a version
// script (capi/colibri.map) that exports colibri_* only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "colibri.h"
#include "model/model.h"
#include "runtime/session.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/numa.h"

namespace colibri::capi {

// ---- errors -------------------------------------------------------------------------------

int32_t status_from_kind(ErrorKind kind);
// Clears the calling thread's last error (every guarded call starts with it).
void clear_error() noexcept;
// Stores (status, message) as the thread's last error, logs it at DEBUG, returns status.
int32_t fail(int32_t status, const std::string &message) noexcept;
int32_t fail(const Error &error) noexcept;
// Records a failure inside the current function for the DEBUG log ("colibri_x: message").
void set_current_function(const char *name) noexcept;

// Runs fn (returning int32_t) with the thread's error cleared first; any exception becomes a
// status: bad_alloc → OUT_OF_MEMORY, anything else → INTERNAL with what() kept.
template <class Fn>
int32_t guard(const char *function, Fn &&fn) noexcept {
  set_current_function(function);
  clear_error();
  try {
    return fn();
  } catch (const std::bad_alloc &) {
    return fail(COLIBRI_ERROR_OUT_OF_MEMORY, std::string(function) + ": out of memory");
  } catch (const std::exception &e) {
    return fail(COLIBRI_ERROR_INTERNAL, std::string(function) + ": internal error: " + e.what());
  } catch (...) {
    return fail(COLIBRI_ERROR_INTERNAL, std::string(function) + ": internal error: unknown exception");
  }
}

// The same for the void destructors: exceptions are swallowed (and logged).
template <class Fn>
void guard_void(const char *function, Fn &&fn) noexcept {
  try {
    fn();
  } catch (...) {
    fail(COLIBRI_ERROR_INTERNAL, std::string(function) + ": internal error while freeing");
  }
}

inline int32_t invalid(const std::string &message) { return fail(COLIBRI_ERROR_INVALID_ARGUMENT, message); }
#define COLIBRI_REQUIRE_ARG(cond, message) \
  do {                                     \
    if (!(cond)) return ::colibri::capi::invalid(message); \
  } while (0)

// ---- logging --------------------------------------------------------------------------------

bool log_enabled(int32_t level) noexcept;
void log_message(int32_t level, const std::string &message) noexcept;

// ---- options and output structs ---------------------------------------------------------------

// Copies the caller's options struct (`in` may be null: defaults) over `*out`, which holds the
// defaults already. `abi1_size` is the struct's size in ABI generation 1 (the smallest a
// caller can have). Bytes the caller has beyond what this library knows must be zero.
int32_t read_options(const void *in, void *out, size_t library_size, size_t abi1_size, const char *struct_name);

template <class T>
int32_t read_options(const T *in, T *out, size_t abi1_size, const char *struct_name) {
  return read_options(static_cast<const void *>(in), static_cast<void *>(out), sizeof(T), abi1_size, struct_name);
}

// Initialises a caller struct of struct_size bytes: zeroes it, sets struct_size and copies
// the defaults of the fields that fit.
int32_t init_options(void *out, size_t struct_size, const void *defaults, size_t library_size, size_t abi1_size,
                     const char *struct_name);

// Writes `full` (a complete struct of this library's size) into a caller output struct whose
// struct_size the caller set: the fields that fit, zeros beyond what the library knows.
int32_t write_output(void *out, const void *full, size_t library_size, size_t abi1_size, const char *struct_name);

template <class T>
int32_t write_output(T *out, const T &full, size_t abi1_size, const char *struct_name) {
  return write_output(static_cast<void *>(out), static_cast<const void *>(&full), sizeof(T), abi1_size, struct_name);
}

// Copies `size` bytes of text plus a NUL into a caller buffer under the buffer rules of
// colibri.h (NULL/0 = size query). *size_out may be null.
int32_t copy_text(const std::string &text, char *buffer, size_t capacity, size_t *size_out);
// The same for an array of token ids.
int32_t copy_tokens(const int32_t *tokens, size_t count, int32_t *buffer, size_t capacity, size_t *count_out);

// COLIBRI_NUMA_* (+ node) as the engine's policy; DEFAULT and OFF are Off.
inline util::NumaPolicy numa_policy(uint32_t policy, uint32_t node) {
  util::NumaPolicy p;
  p.mode = policy == COLIBRI_NUMA_BIND         ? util::NumaPolicy::Mode::Bind
           : policy == COLIBRI_NUMA_INTERLEAVE ? util::NumaPolicy::Mode::Interleave
                                               : util::NumaPolicy::Mode::Off;
  p.node = static_cast<int>(node);
  return p;
}

// ---- handles ------------------------------------------------------------------------------------

// Everything one opened image owns. Shared by the user's model handle and every session on
// it, so that closing the model while sessions live is safe.
struct ModelState {
  std::string path;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;  // null when it could not be loaded
  Error tokenizer_error;                            // why, when null
  std::unique_ptr<tokenizer::ChatTemplate> chat_template;  // null when absent or unparsable
  Error chat_template_error;                               // why, when null
  colibri_model_options options{};                  // as opened (session defaults)
  uint64_t parameter_count = 0;
  uint64_t active_parameter_count = 0;
  uint64_t active_weight_bytes = 0;
  uint32_t weight_dtype = 0;
  uint32_t weight_group_size = 0;

};

// Loads the tokenizer and parses the chat template into state (sets tokenizer or
// tokenizer_error, chat_template or chat_template_error). Defined in tokenizer.cpp.
void load_tokenizer(ModelState &state);

// The Tokenizer or an UNSUPPORTED failure with the stored reason.
int32_t require_tokenizer(const ModelState &state, const tokenizer::Tokenizer **out);

}  // namespace colibri::capi

namespace colibri::capi {

// The handles behind the opaque types of colibri.h. The C types (struct colibri_model, ...)
// are never defined: handles are converted with impl() / handle(), so the library's debug
// information describes them as opaque, and abidw/abidiff see only the C ABI (capi/abi).
struct ModelHandle {
  std::shared_ptr<ModelState> state;
};

struct StreamHandle;  // generate.cpp
struct SamplerHandle; // sampler.cpp

struct SessionHandle {
  std::shared_ptr<ModelState> model;
  std::unique_ptr<runtime::Session> session;
  colibri_session_info info{};         // effective options
  StreamHandle *stream = nullptr;      // the open stream, if any (it borrows the session)
  bool has_logits = false;             // a forward pass with logits completed
  colibri_expert_fn expert_fn = nullptr;
  void *expert_user = nullptr;
  int32_t expert_status = 0;           // the last non-zero return of expert_fn in this call
  std::vector<runtime::BatchEntry> batch;  // scratch for prefill / batch
  std::vector<runtime::Route> routes;      // scratch for moe_layer
  std::vector<uint32_t> scratch_lengths;   // scratch for batch positions
};

#define COLIBRI_CAPI_HANDLE(c_type, impl_type)                                                          \
  inline impl_type *impl(c_type *h) { return reinterpret_cast<impl_type *>(h); }                       \
  inline const impl_type *impl(const c_type *h) { return reinterpret_cast<const impl_type *>(h); }     \
  inline c_type *handle(impl_type *p) { return reinterpret_cast<c_type *>(p); }
COLIBRI_CAPI_HANDLE(colibri_model, ModelHandle)
COLIBRI_CAPI_HANDLE(colibri_session, SessionHandle)
COLIBRI_CAPI_HANDLE(colibri_stream, StreamHandle)
COLIBRI_CAPI_HANDLE(colibri_sampler, SamplerHandle)
#undef COLIBRI_CAPI_HANDLE

}  // namespace colibri::capi

namespace colibri::capi {
// A caller's colibri_session_options read, validated and resolved against the model's
// options (session.cpp; also used by the serving engine, engine.cpp).
struct SessionSettings {
  colibri_session_options options{};  // as read (defaults filled in)
  uint32_t pin = 0, non_finite = 0, numa = 0, numa_node = 0;  // resolved COLIBRI_* values
  runtime::SessionOptions runtime;
};
int32_t session_settings_from_c(const colibri_model_options &model_options, const colibri_session_options *options,
                                SessionSettings *out);

// Shared by session.cpp and generate.cpp.
// BAD_STATE when a stream holds the session.
int32_t require_idle(const SessionHandle *session);
// Maps a failed engine call on the session to a status (CALLBACK when the expert function
// failed during it, CONTEXT_FULL for a full context).
int32_t fail_session(SessionHandle *session, const Error &error);
}  // namespace colibri::capi

namespace colibri::runtime {
struct SamplerOptions;
}  // namespace colibri::runtime

namespace colibri::capi {
// Reads a caller's sampler options (NULL: defaults) into the engine's, resolving
// COLIBRI_SEED_FROM_SESSION to session_seed, and validates them. Defined in sampler.cpp.
int32_t sampler_options_from_c(const colibri_sampler_options *in, uint64_t session_seed, runtime::SamplerOptions *out);
}  // namespace colibri::capi

// capi/internal.h — what the extern "C" shim files share: the handle structs behind the
// opaque types of colibri.h, the thread-local last error, the catch-all guard every exported
// body runs in, the error-kind → status mapping, logging, and the options-struct rules
// (struct_size: read what the caller has, default the rest, refuse unknown non-zero tails).
// Nothing here is exported: the library is built with -fvisibility=hidden and a version
// script (capi/colibri.map) that exports colibri_* only.
#pragma once

#include <atomic>
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
// A call that returns a status >= 0 clears the last error again at its end, so that a failure
// of a nested call (one a callback made) does not outlive an outer call that succeeded.
template <class Fn>
int32_t guard(const char *function, Fn &&fn) noexcept {
  set_current_function(function);
  clear_error();
  int32_t status;
  try {
    status = fn();
  } catch (const std::bad_alloc &) {
    status = fail(COLIBRI_ERROR_OUT_OF_MEMORY, std::string(function) + ": out of memory");
  } catch (const std::exception &e) {
    status = fail(COLIBRI_ERROR_INTERNAL, std::string(function) + ": internal error: " + e.what());
  } catch (...) {
    status = fail(COLIBRI_ERROR_INTERNAL, std::string(function) + ": internal error: unknown exception");
  }
  if (status >= 0) clear_error();
  return status;
}

// The same for the void destructors: exceptions are swallowed (and logged).
// A destructor leaves the last error as it was, unless it refuses a misuse (recorded then).
template <class Fn>
void guard_void(const char *function, Fn &&fn) noexcept {
  set_current_function(function);
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

// The body of every colibri_*_options_init: init_options with the defaults `make_defaults`
// returns, under the guard of `function` (its __func__).
template <class T>
int32_t options_init(const char *function, T *options, size_t struct_size, T (*make_defaults)(), size_t abi1_size,
                     const char *struct_name) noexcept {
  return guard(function, [&] {
    const T defaults = make_defaults();
    return init_options(options, struct_size, &defaults, sizeof defaults, abi1_size, struct_name);
  });
}

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
// The buffer rules for an array of `count` elements (`what` names them in the message):
// *count_out (may be null) = count; NULL/0 is a size query; a short buffer BUFFER_TOO_SMALL.
int32_t check_array_buffer(size_t count, const void *buffer, size_t capacity, size_t *count_out, const char *what);
template <class T>
int32_t copy_array(const T *items, size_t count, T *buffer, size_t capacity, size_t *count_out, const char *what) {
  if (int32_t s = check_array_buffer(count, buffer, capacity, count_out, what)) return s;
  if (buffer && count) std::memcpy(buffer, items, count * sizeof(T));
  return COLIBRI_OK;
}
// The same for an array of token ids.
inline int32_t copy_tokens(const int32_t *tokens, size_t count, int32_t *buffer, size_t capacity, size_t *count_out) {
  return copy_array(tokens, count, buffer, capacity, count_out, "tokens");
}

// COLIBRI_NUMA_* (+ node) as the engine's policy; DEFAULT and OFF are Off.
inline util::NumaPolicy numa_policy(uint32_t policy, uint32_t node) {
  util::NumaPolicy p;
  p.mode = policy == COLIBRI_NUMA_BIND         ? util::NumaPolicy::Mode::Bind
           : policy == COLIBRI_NUMA_INTERLEAVE ? util::NumaPolicy::Mode::Interleave
                                               : util::NumaPolicy::Mode::Off;
  p.node = static_cast<int>(node);
  return p;
}

// ---- handle checks (misuse of the C API; colibri.h, "Misuse") --------------------------------

// Every handle struct derives from HandleBase: its first word is a tag that says what the
// handle is and whether it is live. The entry points check it before anything else; the
// free functions poison it (atomically: of two frees only one proceeds), release what the
// handle owns, and hand its small shell to the quarantine (handles.cpp), which keeps the last
// kQuarantinedHandles freed shells allocated, so that a double free or a call on a freed
// handle reads a dead tag in memory that is still the library's (BAD_STATE), never freed
// memory. Older freed handles, and pointers that were never handles, are read as they are:
// a wrong tag is BAD_STATE, an unmapped address still faults.
enum class HandleKind : uint32_t { Model = 1, Session = 2, Stream = 3, Sampler = 4, Engine = 5, Request = 6 };

constexpr uint64_t kLiveTagBase = 0x434F4C4942000000ull;  // "COLIB" + kind
constexpr uint64_t kDeadTagBase = 0xDEADC0DE00000000ull;  // + kind
constexpr uint64_t live_tag(HandleKind kind) { return kLiveTagBase | static_cast<uint64_t>(kind); }
constexpr uint64_t dead_tag(HandleKind kind) { return kDeadTagBase | static_cast<uint64_t>(kind); }
// Freed handles whose shells stay allocated (a ring: the oldest is released for real).
constexpr size_t kQuarantinedHandles = 1024;
// No handle lives below this address (Linux maps nothing under vm.mmap_min_addr, 64 KiB by
// default): a small integer passed as a handle is refused without being read.
constexpr uintptr_t kMinHandleAddress = 65536;

struct HandleBase {
  explicit HandleBase(HandleKind kind) : tag(live_tag(kind)) {}
  std::atomic<uint64_t> tag;
};

// COLIBRI_OK when `h` is a live handle of `kind`; else the failure recorded: INVALID_ARGUMENT
// for NULL ("NAME must not be NULL"), BAD_STATE for a freed handle, a handle of another type,
// or a pointer that is not a handle.
int32_t check_handle(const void *h, HandleKind kind, const char *name) noexcept;

// The free functions' first step: claims the handle for freeing (live → dead, atomically).
// False (with the misuse recorded in the last error, as a destructor cannot return it) when it
// is NULL-free-able garbage, already freed or of another type.
bool claim_for_free(void *h, HandleKind kind, const char *name) noexcept;

// Keeps a freed (claimed, emptied) handle's shell allocated for a while; `destroy` deletes it.
void quarantine(HandleBase *handle, void (*destroy)(HandleBase *)) noexcept;

// A busy word for handles used by one thread at a time that have no callbacks (a sampler):
// the calling thread's token while a call holds it, 0 when idle, kBusyWordFreeing once its
// free function claimed it. The session has its own (SessionUse: its messages know callbacks).
constexpr uintptr_t kBusyWordFreeing = 1;
class BusyUse {
 public:
  // Holds `word` for one call on the handle called `noun` ("sampler"); status() is BAD_STATE
  // (recorded) when another call holds it or it is being freed.
  BusyUse(std::atomic<uintptr_t> &word, const char *noun) noexcept;
  ~BusyUse();
  BusyUse(const BusyUse &) = delete;
  BusyUse &operator=(const BusyUse &) = delete;
  int32_t status() const { return status_; }

 private:
  std::atomic<uintptr_t> *word_ = nullptr;
  int32_t status_ = COLIBRI_OK;
};
// A free function's claim of a busy word (idle → freeing, for good). False, with BAD_STATE
// recorded ("nothing was freed"), while a call holds it.
bool claim_busy_for_free(std::atomic<uintptr_t> &word, const char *noun) noexcept;

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

// colibri_chat_render's work (tokenizer.cpp): checks the messages and options, renders them
// with the model's template (or options->template_text) into *out.
int32_t render_chat(const ModelState &state, const colibri_chat_message *messages, size_t message_count,
                    const colibri_chat_options *options, std::string *out);
// Tokenizes rendered chat text as colibri_chat_render's comment says: no ADD_SPECIAL (the
// template writes its BOS text), PARSE_SPECIAL (its special-token text becomes those tokens).
int32_t tokenize_chat(const ModelState &state, const std::string &text, std::vector<int32_t> *ids);

}  // namespace colibri::capi

namespace colibri::capi {

// The handles behind the opaque types of colibri.h. The C types (struct colibri_model, ...)
// are never defined: handles are converted with impl() / handle(), so the library's debug
// information describes them as opaque, and abidw/abidiff see only the C ABI (capi/abi).
struct ModelHandle : HandleBase {
  ModelHandle() : HandleBase(HandleKind::Model) {}
  std::shared_ptr<ModelState> state;
};

struct StreamHandle;  // generate.cpp
struct SamplerHandle; // sampler.cpp

struct SessionHandle : HandleBase {
  SessionHandle() : HandleBase(HandleKind::Session) {}
  // The thread whose call holds the session (SessionUse); 0 when idle; kSessionFreeing once
  // colibri_session_free has claimed it.
  mutable std::atomic<uintptr_t> user{0};
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

// The C pointer is the address of the HandleBase (check_handle reads its tag there). impl()
// assumes a checked handle: check() or SessionUse first. The casts need the complete type:
// StreamHandle's are instantiated in generate.cpp, SamplerHandle's in sampler.cpp.
#define COLIBRI_CAPI_HANDLE_CASTS(c_type, impl_type)                                                  \
  inline impl_type *impl(c_type *h) { return static_cast<impl_type *>(reinterpret_cast<HandleBase *>(h)); } \
  inline const impl_type *impl(const c_type *h) {                                                       \
    return static_cast<const impl_type *>(reinterpret_cast<const HandleBase *>(h));                     \
  }                                                                                                     \
  inline c_type *handle(impl_type *p) { return reinterpret_cast<c_type *>(static_cast<HandleBase *>(p)); }
COLIBRI_CAPI_HANDLE_CASTS(colibri_model, ModelHandle)
COLIBRI_CAPI_HANDLE_CASTS(colibri_session, SessionHandle)

inline int32_t check(const colibri_model *h, const char *name) noexcept { return check_handle(h, HandleKind::Model, name); }
inline int32_t check(const colibri_session *h, const char *name) noexcept {
  return check_handle(h, HandleKind::Session, name);
}
inline int32_t check(const colibri_stream *h, const char *name) noexcept { return check_handle(h, HandleKind::Stream, name); }
inline int32_t check(const colibri_sampler *h, const char *name) noexcept {
  return check_handle(h, HandleKind::Sampler, name);
}
inline int32_t check(const colibri_engine *h, const char *name) noexcept { return check_handle(h, HandleKind::Engine, name); }
inline int32_t check(const colibri_request *h, const char *name) noexcept {
  return check_handle(h, HandleKind::Request, name);
}

// Returns from the calling function unless `h` is a live handle of its type (NULL:
// INVALID_ARGUMENT naming `name`; freed, foreign or garbage: BAD_STATE).
#define COLIBRI_REQUIRE_HANDLE(h, name)                               \
  do {                                                                \
    if (int32_t status_ = ::colibri::capi::check(h, name)) return status_; \
  } while (0)

// Holds a session for one call (its busy word), after checking the handle. While held, a
// call on the session from another thread gets BAD_STATE "in use by another thread", and a
// call from inside one of its callbacks (colibri_piece_fn, colibri_expert_fn) on this thread
// gets BAD_STATE saying so. status() is COLIBRI_OK when held (the failure is recorded
// otherwise); the destructor releases it.
class SessionUse {
 public:
  explicit SessionUse(const colibri_session *handle) noexcept;
  explicit SessionUse(SessionHandle *session) noexcept;  // an already checked session (a stream's)
  ~SessionUse();
  SessionUse(const SessionUse &) = delete;
  SessionUse &operator=(const SessionUse &) = delete;
  int32_t status() const { return status_; }
  SessionHandle *get() const { return session_; }
  SessionHandle *operator->() const { return session_; }

 private:
  void acquire(SessionHandle *session) noexcept;
  SessionHandle *session_ = nullptr;
  int32_t status_ = COLIBRI_OK;
};

// colibri_session_free's claim: takes the busy word for good (idle → freeing) and poisons the
// tag. False, with the reason recorded, when a call holds the session (another thread's, or
// the one whose callback is freeing it) or another free got there first.
bool claim_session_for_free(SessionHandle *session) noexcept;

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

namespace colibri::capi {
// The prompt checks of every generation (colibri_generate, colibri_stream_open,
// colibri_request_submit, _submit_chat): not empty, not NULL, and shorter than the context
// (one more position is needed to generate: CONTEXT_FULL, the message ending with `fix`).
int32_t check_prompt(const int32_t *prompt, size_t prompt_count, uint32_t context_length, const char *fix);

// What colibri_generate_options and colibri_request_options share, as the caller set it.
struct GenerationFields {
  uint32_t max_tokens = 0;
  uint32_t ignore_eos = 0;
  const colibri_sampler_options *sampler = nullptr;
  const int32_t *eos_tokens = nullptr;
  size_t eos_token_count = 0;
  const char *const *stop_strings = nullptr;
  size_t stop_string_count = 0;
};
// The same, checked (messages name `struct_name`'s fields) and converted. Empty stop strings
// are refused unless empty_stop_ok (the serving engine ignores them).
// `Out` is runtime::GenerateOptions or serving::RequestOptions (the fields have one name).
int32_t read_generation_fields(const GenerationFields &in, const char *struct_name, uint64_t default_seed,
                               bool empty_stop_ok, runtime::SamplerOptions *sampling,
                               std::vector<int32_t> *eos_token_ids, std::vector<std::string> *stop_strings);
template <class Out>
int32_t read_generation_fields(const GenerationFields &in, const char *struct_name, uint64_t default_seed,
                               bool empty_stop_ok, Out *out) {
  out->max_tokens = in.max_tokens;
  out->ignore_eos = in.ignore_eos != 0;
  return read_generation_fields(in, struct_name, default_seed, empty_stop_ok, &out->sampling, &out->eos_token_ids,
                                &out->stop_strings);
}
}  // namespace colibri::capi

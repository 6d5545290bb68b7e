// capi/handles.cpp — the checks behind every handle argument (internal.h, "handle checks"):
// the tag test, the claim that a free function makes, the quarantine of freed handle shells,
// and the per-session busy word (SessionUse).
#include <array>
#include <cstdio>
#include <mutex>

#include "capi/internal.h"

namespace colibri::capi {

namespace {

const char *kind_name(uint64_t tag) {
  switch (tag & 0xFFu) {
    case static_cast<uint64_t>(HandleKind::Model): return "colibri_model";
    case static_cast<uint64_t>(HandleKind::Session): return "colibri_session";
    case static_cast<uint64_t>(HandleKind::Stream): return "colibri_stream";
    case static_cast<uint64_t>(HandleKind::Sampler): return "colibri_sampler";
    case static_cast<uint64_t>(HandleKind::Engine): return "colibri_engine";
    case static_cast<uint64_t>(HandleKind::Request): return "colibri_request";
  }
  return "unknown";
}

const char *kind_name(HandleKind kind) { return kind_name(static_cast<uint64_t>(kind)); }

const char *freed_verb(HandleKind kind) {
  return kind == HandleKind::Model ? "closed" : kind == HandleKind::Stream ? "closed" : "freed";
}

// The function that frees a handle of `kind`.
const char *free_function(HandleKind kind) {
  switch (kind) {
    case HandleKind::Model: return "colibri_model_close";
    case HandleKind::Session: return "colibri_session_free";
    case HandleKind::Stream: return "colibri_stream_close";
    case HandleKind::Sampler: return "colibri_sampler_free";
    case HandleKind::Engine: return "colibri_engine_free";
    case HandleKind::Request: return "colibri_request_free";
  }
  return "its free function";
}

// Why `h` is not a live handle of `kind`: the message for BAD_STATE. Reads the tag only when
// the pointer can be a handle at all (aligned, above the lowest mapped address).
std::string misuse(const void *h, HandleKind kind, const char *name, uint64_t *tag_out) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(h);
  char pointer[32];
  std::snprintf(pointer, sizeof pointer, "%p", h);
  const std::string what = std::string(name) + " (" + pointer + ")";
  if (address < kMinHandleAddress || address % alignof(HandleBase) != 0)
    return what + " is not a " + kind_name(kind) + " handle: no handle lies at that address";
  const uint64_t tag = reinterpret_cast<const HandleBase *>(h)->tag.load(std::memory_order_acquire);
  if (tag_out) *tag_out = tag;
  if (tag == live_tag(kind)) return {};
  if (tag == dead_tag(kind))
    return what + " was already " + freed_verb(kind) + ": a " + kind_name(kind) +
           " handle must not be used or " + freed_verb(kind) + " again after " + free_function(kind);
  if ((tag & ~uint64_t{0xFF}) == kLiveTagBase || (tag & ~uint64_t{0xFF}) == kDeadTagBase)
    return what + " is a " + kind_name(tag) + " handle" + ((tag & ~uint64_t{0xFF}) == kDeadTagBase ? " (freed)" : "") +
           ", not a " + kind_name(kind);
  return what + " is not a live " + std::string(kind_name(kind)) +
         " handle (never one, or freed long ago: its memory holds something else)";
}

// The freed shells, oldest first out. Never destroyed (a free during process exit stays
// safe); frees are rare, so one mutex.
struct Quarantine {
  std::mutex mutex;
  struct Entry {
    HandleBase *handle = nullptr;
    void (*destroy)(HandleBase *) = nullptr;
  };
  std::array<Entry, kQuarantinedHandles> ring{};
  size_t next = 0;
};

Quarantine &the_quarantine() {
  static Quarantine *q = new Quarantine;  // the library's one process-wide structure besides the log callback
  return *q;
}

thread_local char t_thread_token;  // its address identifies the calling thread
uintptr_t this_thread() { return reinterpret_cast<uintptr_t>(&t_thread_token); }
constexpr uintptr_t kSessionFreeing = 1;  // SessionHandle::user of a session being (or already) freed

}  // namespace

int32_t check_handle(const void *h, HandleKind kind, const char *name) noexcept {
  if (!h) return invalid(std::string(name) + " must not be NULL");
  try {
    std::string why = misuse(h, kind, name, nullptr);
    return why.empty() ? COLIBRI_OK : fail(COLIBRI_ERROR_BAD_STATE, why);
  } catch (...) {
    return fail(COLIBRI_ERROR_OUT_OF_MEMORY, "out of memory");
  }
}

bool claim_for_free(void *h, HandleKind kind, const char *name) noexcept {
  try {
    uint64_t tag = 0;
    std::string why = misuse(h, kind, name, &tag);
    if (why.empty()) {
      uint64_t expected = live_tag(kind);
      if (reinterpret_cast<HandleBase *>(h)->tag.compare_exchange_strong(expected, dead_tag(kind),
                                                                         std::memory_order_acq_rel))
        return true;
      why = misuse(h, kind, name, nullptr);  // another thread's free won
    }
    fail(COLIBRI_ERROR_BAD_STATE, why + "; nothing was freed");
  } catch (...) {
    fail(COLIBRI_ERROR_OUT_OF_MEMORY, "out of memory");
  }
  return false;
}

void quarantine(HandleBase *handle, void (*destroy)(HandleBase *)) noexcept {
  Quarantine &q = the_quarantine();
  Quarantine::Entry evicted;
  {
    std::lock_guard<std::mutex> lock(q.mutex);
    evicted = q.ring[q.next];
    q.ring[q.next] = {handle, destroy};
    q.next = (q.next + 1) % q.ring.size();
  }
  if (evicted.handle) evicted.destroy(evicted.handle);
}

// ---- busy words -----------------------------------------------------------------------------

BusyUse::BusyUse(std::atomic<uintptr_t> &word, const char *noun) noexcept {
  uintptr_t expected = 0;
  if (word.compare_exchange_strong(expected, this_thread(), std::memory_order_acquire)) {
    word_ = &word;
    return;
  }
  try {
    const std::string n = noun;
    status_ = fail(COLIBRI_ERROR_BAD_STATE,
                   expected == kBusyWordFreeing ? "the " + n + " is being freed by another thread"
                   : expected == this_thread()  ? "the " + n + " is in use by this thread's own call"
                                                : "the " + n + " is in use by another thread: a " + n +
                                                     " serves one thread at a time (give each thread its own, or "
                                                     "serialise the calls)");
  } catch (...) {
    status_ = fail(COLIBRI_ERROR_BAD_STATE, "the handle is in use by another call");
  }
}

BusyUse::~BusyUse() {
  if (word_) word_->store(0, std::memory_order_release);
}

bool claim_busy_for_free(std::atomic<uintptr_t> &word, const char *noun) noexcept {
  uintptr_t expected = 0;
  if (word.compare_exchange_strong(expected, kBusyWordFreeing, std::memory_order_acquire)) return true;
  try {
    fail(COLIBRI_ERROR_BAD_STATE, std::string("the ") + noun +
                                      (expected == kBusyWordFreeing ? " is already being freed by another thread"
                                                                    : " is in use by another thread") +
                                      "; nothing was freed: free it after that call returns");
  } catch (...) {
    fail(COLIBRI_ERROR_BAD_STATE, "the handle is in use by another call; nothing was freed");
  }
  return false;
}

// ---- the session's busy word -------------------------------------------------------------

SessionUse::SessionUse(const colibri_session *handle) noexcept {
  if ((status_ = check_handle(handle, HandleKind::Session, "session"))) return;
  acquire(const_cast<SessionHandle *>(impl(handle)));
}

SessionUse::SessionUse(SessionHandle *session) noexcept { acquire(session); }

void SessionUse::acquire(SessionHandle *session) noexcept {
  uintptr_t expected = 0;
  if (session->user.compare_exchange_strong(expected, this_thread(), std::memory_order_acquire)) {
    session_ = session;
    return;
  }
  if (expected == this_thread())
    status_ = fail(COLIBRI_ERROR_BAD_STATE,
                   "the session is in use by this thread's own call: a callback (colibri_piece_fn or "
                   "colibri_expert_fn) called back into the session it runs in, which it must not do; return "
                   "from the callback first (a non-zero return from colibri_piece_fn cancels)");
  else if (expected == kSessionFreeing)
    status_ = fail(COLIBRI_ERROR_BAD_STATE, "the session is being freed (colibri_session_free) by another thread");
  else
    status_ = fail(COLIBRI_ERROR_BAD_STATE,
                   "the session is in use by another thread: a session serves one thread at a time (give each "
                   "thread its own session, or serialise the calls)");
}

SessionUse::~SessionUse() {
  if (session_) session_->user.store(0, std::memory_order_release);
}

bool claim_session_for_free(SessionHandle *session) noexcept {
  uintptr_t expected = 0;
  if (session->user.compare_exchange_strong(expected, kSessionFreeing, std::memory_order_acquire)) {
    session->tag.store(dead_tag(HandleKind::Session), std::memory_order_release);
    return true;
  }
  fail(COLIBRI_ERROR_BAD_STATE,
       expected == this_thread()
           ? "colibri_session_free was called from inside a callback of the same session (colibri_piece_fn or "
             "colibri_expert_fn); nothing was freed: free the session after the call that runs the callback returns"
           : expected == kSessionFreeing ? "the session is already being freed by another thread; nothing was freed"
                                  : "the session is in use by another thread; nothing was freed: free it after that "
                                    "call returns");
  return false;
}

}  // namespace colibri::capi

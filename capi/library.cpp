// capi/library.cpp — library-level calls: versions, status names, the thread-local last
// error, the process-wide log callback, dtype and stage names, and the helpers for options
// structs and caller buffers that the other shim files use.
#include <atomic>
#include <mutex>

#include "capi/internal.h"
#include "colibri_version.h"
#include "image/format.h"
#include "runtime/stats.h"

static_assert(COLIBRI_VERSION_MAJOR == COLIBRI_PROJECT_VERSION_MAJOR &&
                  COLIBRI_VERSION_MINOR == COLIBRI_PROJECT_VERSION_MINOR &&
                  COLIBRI_VERSION_PATCH == COLIBRI_PROJECT_VERSION_PATCH,
              "capi/colibri.h's COLIBRI_VERSION_* must equal project(VERSION) in CMakeLists.txt");
static_assert(sizeof(colibri::runtime::kStageNames) / sizeof(colibri::runtime::kStageNames[0]) <= COLIBRI_STATS_MAX_STAGES);

namespace colibri::capi {

namespace {

struct LastError {
  int32_t status = COLIBRI_OK;
  std::string message;
  const char *function = "";
};

// Global-dynamic TLS (the library is built -fPIC with -ftls-model=global-dynamic), so a late
// dlopen never needs static TLS space.
thread_local LastError t_last_error;

struct LogState {
  std::mutex mutex;
  colibri_log_fn fn = nullptr;
  void *user = nullptr;
  std::atomic<int32_t> min_level{COLIBRI_LOG_OFF};
};

LogState &log_state() {
  static LogState state;
  return state;
}

}  // namespace

int32_t status_from_kind(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::None: return COLIBRI_OK;
    case ErrorKind::Io: return COLIBRI_ERROR_IO;
    case ErrorKind::NotAnImage: return COLIBRI_ERROR_NOT_AN_IMAGE;
    case ErrorKind::Corrupt: return COLIBRI_ERROR_CORRUPT;
    case ErrorKind::Unsupported: return COLIBRI_ERROR_UNSUPPORTED;
    case ErrorKind::InvalidArgument: return COLIBRI_ERROR_INVALID_ARGUMENT;
    case ErrorKind::NonFinite: return COLIBRI_ERROR_NON_FINITE;
    case ErrorKind::OutOfMemory: return COLIBRI_ERROR_OUT_OF_MEMORY;
    case ErrorKind::Internal:
    case ErrorKind::Cancelled: return COLIBRI_ERROR_INTERNAL;  // no library call can be cancelled this way
    case ErrorKind::Busy: return COLIBRI_ERROR_BUSY;
  }
  return COLIBRI_ERROR_INTERNAL;
}

void set_current_function(const char *name) noexcept { t_last_error.function = name; }

void clear_error() noexcept {
  t_last_error.status = COLIBRI_OK;
  t_last_error.message.clear();  // keeps the capacity: no allocation
}

int32_t fail(int32_t status, const std::string &message) noexcept {
  t_last_error.status = status;
  try {
    t_last_error.message = message;
  } catch (...) {
    t_last_error.message.clear();
  }
  if (log_enabled(COLIBRI_LOG_DEBUG)) {
    try {
      log_message(COLIBRI_LOG_DEBUG, std::string(t_last_error.function) + " failed (" + colibri_status_string(status) +
                                         "): " + message);
    } catch (...) {
    }
  }
  return status;
}

int32_t fail(const Error &error) noexcept {
  return fail(error.ok() ? COLIBRI_ERROR_INTERNAL : status_from_kind(error.kind), error.message);
}

bool log_enabled(int32_t level) noexcept { return level >= log_state().min_level.load(std::memory_order_relaxed); }

void log_message(int32_t level, const std::string &message) noexcept {
  LogState &state = log_state();
  colibri_log_fn fn;
  void *user;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    if (level < state.min_level.load(std::memory_order_relaxed)) return;
    fn = state.fn;
    user = state.user;
  }
  if (fn) fn(user, level, message.c_str());
}

namespace {

// How far a caller's struct may outgrow this library's: a newer header appends fields, a few
// at a time, so a struct_size beyond this is not a newer version but an uninitialised or
// corrupted size, and reading or zeroing that many bytes would run off the caller's struct.
constexpr size_t kMaxStructGrowth = 4096;

bool implausibly_large(size_t size, size_t library_size) { return size > library_size + kMaxStructGrowth; }

std::string too_large(size_t size, size_t library_size, const char *struct_name, const std::string &fix) {
  return std::string(struct_name) + ".struct_size is " + std::to_string(size) + ", larger than any version of " +
         struct_name + " could be (this library's is " + std::to_string(library_size) +
         " bytes): is it uninitialised? " + fix;
}

}  // namespace

int32_t read_options(const void *in, void *out, size_t library_size, size_t abi1_size, const char *struct_name) {
  if (!in) return COLIBRI_OK;  // defaults
  uint32_t size;
  std::memcpy(&size, in, sizeof size);
  const std::string fix = std::string("initialise it with ") + struct_name + "_init(&options, sizeof options)";
  if (size < abi1_size)
    return invalid(std::string(struct_name) + ".struct_size is " + std::to_string(size) + ", smaller than any version of " +
                   struct_name + " (" + std::to_string(abi1_size) + " bytes); " + fix);
  if (implausibly_large(size, library_size)) return invalid(too_large(size, library_size, struct_name, fix));
  const auto *bytes = static_cast<const unsigned char *>(in);
  for (size_t i = library_size; i < size; ++i)
    if (bytes[i] != 0)
      return fail(COLIBRI_ERROR_UNSUPPORTED,
                  std::string(struct_name) + ": the field at byte offset " + std::to_string(i) +
                      " is not known to libcolibri " + COLIBRI_PROJECT_VERSION_STRING + " (which knows " +
                      std::to_string(library_size) + " bytes); use a newer library or leave that field zero");
  std::memcpy(out, in, std::min<size_t>(size, library_size));
  return COLIBRI_OK;
}

int32_t init_options(void *out, size_t struct_size, const void *defaults, size_t library_size, size_t abi1_size,
                     const char *struct_name) {
  COLIBRI_REQUIRE_ARG(out, std::string(struct_name) + "_init: options must not be NULL");
  if (struct_size < abi1_size || implausibly_large(struct_size, library_size))
    return invalid(std::string(struct_name) + "_init: struct_size " + std::to_string(struct_size) +
                   " is not the size of any version of " + struct_name + "; pass sizeof(" + struct_name + ")");
  std::memset(out, 0, struct_size);
  std::memcpy(out, defaults, std::min(struct_size, library_size));
  uint32_t size32 = static_cast<uint32_t>(struct_size);
  std::memcpy(out, &size32, sizeof size32);
  return COLIBRI_OK;
}

int32_t write_output(void *out, const void *full, size_t library_size, size_t abi1_size, const char *struct_name) {
  COLIBRI_REQUIRE_ARG(out, std::string(struct_name) + " output pointer must not be NULL");
  uint32_t size;
  std::memcpy(&size, out, sizeof size);
  if (size < abi1_size)
    return invalid(std::string(struct_name) + ".struct_size is " + std::to_string(size) + "; set it to sizeof(" +
                   struct_name + ") before the call");
  if (implausibly_large(size, library_size))
    return invalid(too_large(size, library_size, struct_name, std::string("set it to sizeof(") + struct_name + ") before the call"));
  auto *bytes = static_cast<unsigned char *>(out);
  std::memcpy(bytes + sizeof size, static_cast<const unsigned char *>(full) + sizeof size,
              std::min<size_t>(size, library_size) - sizeof size);
  if (size > library_size) std::memset(bytes + library_size, 0, size - library_size);
  return COLIBRI_OK;
}

int32_t copy_text(const std::string &text, char *buffer, size_t capacity, size_t *size_out) {
  if (size_out) *size_out = text.size();
  if (!buffer && capacity == 0) return COLIBRI_OK;
  COLIBRI_REQUIRE_ARG(buffer, "the text buffer is NULL but its capacity is not 0");
  if (capacity < text.size() + 1)
    return fail(COLIBRI_ERROR_BUFFER_TOO_SMALL, "the text needs " + std::to_string(text.size() + 1) +
                                                    " bytes with its NUL, the buffer holds " + std::to_string(capacity));
  std::memcpy(buffer, text.data(), text.size());
  buffer[text.size()] = '\0';
  return COLIBRI_OK;
}

int32_t check_array_buffer(size_t count, const void *buffer, size_t capacity, size_t *count_out, const char *what) {
  if (count_out) *count_out = count;
  if (!buffer && capacity == 0) return COLIBRI_OK;
  COLIBRI_REQUIRE_ARG(buffer, std::string("the ") + what + " buffer is NULL but its capacity is not 0");
  if (capacity < count)
    return fail(COLIBRI_ERROR_BUFFER_TOO_SMALL, "the result has " + std::to_string(count) + " " + what +
                                                    ", the buffer holds " + std::to_string(capacity));
  return COLIBRI_OK;
}

}  // namespace colibri::capi

using namespace colibri;

extern "C" {

COLIBRI_API uint32_t colibri_abi_version(void) { return COLIBRI_ABI_VERSION; }

COLIBRI_API const char *colibri_version_string(void) { return COLIBRI_PROJECT_VERSION_STRING; }

COLIBRI_API const char *colibri_status_string(int32_t status) {
  switch (status) {
    case COLIBRI_OK: return "ok";
    case COLIBRI_DONE: return "done";
    case COLIBRI_PENDING: return "pending";
    case COLIBRI_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case COLIBRI_ERROR_IO: return "input/output error";
    case COLIBRI_ERROR_NOT_AN_IMAGE: return "not a colibri image";
    case COLIBRI_ERROR_CORRUPT: return "corrupt image";
    case COLIBRI_ERROR_UNSUPPORTED: return "unsupported";
    case COLIBRI_ERROR_NON_FINITE: return "non-finite value";
    case COLIBRI_ERROR_OUT_OF_MEMORY: return "out of memory";
    case COLIBRI_ERROR_BUFFER_TOO_SMALL: return "buffer too small";
    case COLIBRI_ERROR_CONTEXT_FULL: return "context full";
    case COLIBRI_ERROR_BAD_STATE: return "bad state";
    case COLIBRI_ERROR_CALLBACK: return "callback failed";
    case COLIBRI_ERROR_INTERNAL: return "internal error";
    case COLIBRI_ERROR_BUSY: return "busy";
    default: return "unknown status";
  }
}

COLIBRI_API int32_t colibri_last_error(char *buffer, size_t buffer_size, size_t *message_size) {
  const capi::LastError &e = capi::t_last_error;
  if (message_size) *message_size = e.message.size();
  if (buffer && buffer_size > 0) {
    size_t n = std::min(e.message.size(), buffer_size - 1);
    // Do not cut a UTF-8 sequence: back up over continuation bytes when truncating.
    if (n < e.message.size())
      while (n > 0 && (static_cast<unsigned char>(e.message[n]) & 0xC0) == 0x80) --n;
    std::memcpy(buffer, e.message.data(), n);
    buffer[n] = '\0';
  }
  return e.status;
}

COLIBRI_API int32_t colibri_set_log_callback(colibri_log_fn fn, void *user, int32_t min_level) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_ARG(min_level >= COLIBRI_LOG_DEBUG && min_level <= COLIBRI_LOG_OFF,
                        "min_level " + std::to_string(min_level) + " is not a COLIBRI_LOG_* level (0..4)");
    capi::LogState &state = capi::log_state();
    std::lock_guard<std::mutex> lock(state.mutex);
    state.fn = fn;
    state.user = user;
    state.min_level.store(fn ? min_level : COLIBRI_LOG_OFF, std::memory_order_relaxed);
    return COLIBRI_OK;
  });
}

// The C constants are the image format's values (core/image/format.h is the one source).
static_assert(COLIBRI_DTYPE_F32 == static_cast<uint32_t>(image::DType::F32));
static_assert(COLIBRI_DTYPE_F16 == static_cast<uint32_t>(image::DType::F16));
static_assert(COLIBRI_DTYPE_BF16 == static_cast<uint32_t>(image::DType::BF16));
static_assert(COLIBRI_DTYPE_Q8 == static_cast<uint32_t>(image::DType::Q8));
static_assert(COLIBRI_DTYPE_Q4 == static_cast<uint32_t>(image::DType::Q4));
static_assert(COLIBRI_DTYPE_Q8F16 == static_cast<uint32_t>(image::DType::Q8F16));
static_assert(COLIBRI_DTYPE_MXFP4 == static_cast<uint32_t>(image::DType::MXFP4));
static_assert(image::kDTypeCount == 7, "a new image dtype needs its COLIBRI_DTYPE_ constant");

COLIBRI_API const char *colibri_dtype_name(uint32_t dtype) {
  switch (dtype) {
    case COLIBRI_DTYPE_F32: return "f32";
    case COLIBRI_DTYPE_F16: return "f16";
    case COLIBRI_DTYPE_BF16: return "bf16";
    case COLIBRI_DTYPE_Q8: return "q8";
    case COLIBRI_DTYPE_Q4: return "q4";
    case COLIBRI_DTYPE_Q8F16: return "q8f16";
    case COLIBRI_DTYPE_MXFP4: return "mxfp4";
    default: return "unknown";
  }
}

COLIBRI_API const char *colibri_stage_name(uint32_t stage) {
  constexpr size_t count = sizeof(runtime::kStageNames) / sizeof(runtime::kStageNames[0]);
  return stage < count ? runtime::kStageNames[stage] : nullptr;
}

}  // extern "C"

// core/util/error.h — the error value every fallible core function returns.
//
// Core code does not throw across module boundaries: functions return an Error (empty when
// fine) whose kind maps to C API status codes and tool exit codes, and whose message names
// the cause, the object (file, tensor, byte offset) and the fix.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

namespace colibri {

enum class ErrorKind {
  None = 0,
  Io,           // the OS refused: missing file, permission, disk full, mmap failure
  NotAnImage,   // the file is something else (text, GGUF, safetensors, zip, zstd, empty)
  Corrupt,      // it is an image, but its structure or checksums are wrong
  Unsupported,  // valid but needs a feature this build lacks (newer version, dtype, family)
  InvalidArgument,
  NonFinite,    // NaN/Inf reached a guarded stage (policy "error")
  OutOfMemory,  // memory, or another resource the OS counts out: a thread it refused to start
  Internal,
  Cancelled,    // the user interrupted a long operation (Ctrl-C in colibri-model); never from the C API
  Busy,         // a bounded queue is full (the serving engine's admission): try again later
};

const char *error_kind_name(ErrorKind kind);

struct Error {
  ErrorKind kind = ErrorKind::None;
  std::string message;

  Error() = default;
  Error(ErrorKind k, std::string m) : kind(k), message(std::move(m)) {}

  bool ok() const { return kind == ErrorKind::None; }
  explicit operator bool() const { return !ok(); }  // true when there IS an error
};

inline Error make_error(ErrorKind kind, std::string message) { return Error(kind, std::move(message)); }

// The OS refused to start a thread (std::system_error from std::thread, errno EAGAIN: a
// process or user thread limit). Kind OutOfMemory (resources, not a bug), naming the limits
// with their values, the thread (`started` of `wanted` were running) and what it was for.
Error thread_start_error(int error_number, size_t started, size_t wanted, const std::string &purpose);

}  // namespace colibri

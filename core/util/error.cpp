// core/util/error.cpp — names of error kinds.
#include "util/error.h"

namespace colibri {

const char *error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::None: return "ok";
    case ErrorKind::Io: return "I/O error";
    case ErrorKind::NotAnImage: return "not a Colibri image";
    case ErrorKind::Corrupt: return "corrupt image";
    case ErrorKind::Unsupported: return "unsupported";
    case ErrorKind::InvalidArgument: return "invalid argument";
    case ErrorKind::NonFinite: return "non-finite value";
    case ErrorKind::OutOfMemory: return "out of memory";
    case ErrorKind::Internal: return "internal error";
    case ErrorKind::Cancelled: return "interrupted";
    case ErrorKind::Busy: return "busy";
  }
  return "unknown error";
}

}  // namespace colibri

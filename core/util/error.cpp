// core/util/error.cpp — names of error kinds.
#include "util/error.h"

#include <sys/resource.h>

#include <cstdio>

#include "util/strings.h"

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
    case ErrorKind::OutOfMemory: return "out of memory or threads";
    case ErrorKind::Internal: return "internal error";
    case ErrorKind::Cancelled: return "interrupted";
    case ErrorKind::Busy: return "busy";
  }
  return "unknown error";
}

Error thread_start_error(int error_number, size_t started, size_t wanted, const std::string &purpose) {
  struct rlimit limit{};
  std::string processes = "unknown";
  if (::getrlimit(RLIMIT_NPROC, &limit) == 0)
    processes = limit.rlim_cur == RLIM_INFINITY ? "unlimited" : std::to_string(limit.rlim_cur);
  long threads_max = -1;
  if (FILE *f = std::fopen("/proc/sys/kernel/threads-max", "re")) {
    if (std::fscanf(f, "%ld", &threads_max) != 1) threads_max = -1;
    std::fclose(f);
  }
  return make_error(ErrorKind::OutOfMemory,
                    util::strprintf("resource exhaustion: the operating system refused to start thread %zu of %zu "
                                    "for %s: %s. A limit on threads is reached: the user's process limit (ulimit -u, "
                                    "here %s), the system's (kernel.threads-max, here %s) or a container's (cgroup "
                                    "pids.max); or memory for thread stacks ran out. Use fewer threads or raise the "
                                    "limit",
                                    started + 1, wanted, purpose.c_str(), util::errno_text(error_number).c_str(),
                                    processes.c_str(), threads_max < 0 ? "unknown" : std::to_string(threads_max).c_str()));
}

}  // namespace colibri

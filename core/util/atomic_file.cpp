// core/util/atomic_file.cpp — temp file + fsync + rename.
#include "util/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <libgen.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <vector>

#include "util/strings.h"

namespace colibri::util {

AtomicFile::~AtomicFile() {
  if (!committed_) abort();
}

static std::string directory_of(const std::string &path) {
  std::vector<char> buf(path.begin(), path.end());
  buf.push_back('\0');
  return std::string(dirname(buf.data()));
}

// mkstemp's XXXXXX: six characters of [A-Za-z0-9].
constexpr size_t kTempSuffixLength = 6;
constexpr int kTempAttempts = 16;

static std::string base_name_of(const std::string &path) {
  std::vector<char> buf(path.begin(), path.end());
  buf.push_back('\0');
  return std::string(basename(buf.data()));
}

// What a failed write means, for the limits and conditions a user can change.
static std::string write_failure_hint(int error_number, const std::string &target) {
  if (error_number == EFBIG) {
    struct rlimit limit{};
    std::string value = "unknown";
    if (::getrlimit(RLIMIT_FSIZE, &limit) == 0)
      value = limit.rlim_cur == RLIM_INFINITY ? "unlimited" : human_bytes(static_cast<uint64_t>(limit.rlim_cur));
    return strprintf(": the file-size limit (ulimit -f, RLIMIT_FSIZE) is %s; raise it (ulimit -f unlimited), or the "
                     "file system does not take files this large. The temporary file was removed",
                     value.c_str());
  }
  if (error_number == ENOSPC || error_number == EDQUOT)
    return strprintf(": the file system of '%s' is full (or the disk quota is reached); free space (df %s) or write "
                     "elsewhere. The temporary file was removed",
                     target.c_str(), directory_of(target).c_str());
  return "";
}

static bool is_temp_name_of(const std::string &name, const std::string &base) {
  const std::string prefix = base + ".tmp.";
  if (name.size() != prefix.size() + kTempSuffixLength || name.compare(0, prefix.size(), prefix) != 0) return false;
  for (size_t i = prefix.size(); i < name.size(); ++i)
    if (!std::isalnum(static_cast<unsigned char>(name[i]))) return false;
  return true;
}

std::vector<std::string> remove_stale_temporaries(const std::string &target) {
  std::vector<std::string> removed;
  const std::string dir = directory_of(target), base = base_name_of(target);
  DIR *d = ::opendir(dir.c_str());
  if (!d) return removed;  // the writer's own open will report an unusable directory
  const int dir_fd = ::dirfd(d);
  while (const struct dirent *entry = ::readdir(d)) {
    const std::string name = entry->d_name;
    if (!is_temp_name_of(name, base)) continue;
    const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat by_fd, by_name;
    // Locked: its writer is gone (the kernel released its lock) or never took one. The name
    // must still be this file when it is removed (not one a new writer just created).
    if (::fstat(fd, &by_fd) == 0 && S_ISREG(by_fd.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0 &&
        ::fstatat(dir_fd, name.c_str(), &by_name, AT_SYMLINK_NOFOLLOW) == 0 && by_name.st_dev == by_fd.st_dev &&
        by_name.st_ino == by_fd.st_ino && ::unlinkat(dir_fd, name.c_str(), 0) == 0)
      removed.push_back(dir + "/" + name);
    ::close(fd);  // releases the lock
  }
  ::closedir(d);
  return removed;
}

Error AtomicFile::open(const std::string &path, bool overwrite) {
  path_ = path;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      return make_error(ErrorKind::InvalidArgument, strprintf("output '%s' is a directory; give a file path", path.c_str()));
    // The rename would replace a device, FIFO or socket node with a file, --force or not.
    if (!S_ISREG(st.st_mode))
      return make_error(ErrorKind::InvalidArgument,
                        strprintf("output '%s' is not a regular file (a device, FIFO or socket); give a file path",
                                  path.c_str()));
    if (!overwrite)
      return make_error(ErrorKind::InvalidArgument,
                        strprintf("output '%s' already exists; pass --force to overwrite it", path.c_str()));
  }
  removed_stale_ = remove_stale_temporaries(path);
  // Create and lock. Between mkstemp and flock another writer's cleanup may lock the new file
  // and remove it: then the lock is refused, or the path no longer names the file, and a new
  // name is tried.
  for (int attempt = 0; attempt < kTempAttempts && fd_ < 0; ++attempt) {
    std::string name = path + ".tmp.XXXXXX";
    std::vector<char> tmpl(name.begin(), name.end());
    tmpl.push_back('\0');
    const int fd = ::mkstemp(tmpl.data());
    if (fd < 0) {
      int e = errno;
      return make_error(ErrorKind::Io, strprintf("cannot create a temporary file in '%s': %s", directory_of(path).c_str(),
                                                 errno_text(e).c_str()));
    }
    // A file system without flock (ENOLCK, EOPNOTSUPP) is written unlocked: its cleanup,
    // which needs the lock, removes nothing there.
    const int lock_error = ::flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : errno;
    struct stat by_fd, by_path;
    if (lock_error != EWOULDBLOCK && ::fstat(fd, &by_fd) == 0 && ::stat(tmpl.data(), &by_path) == 0 &&
        by_fd.st_dev == by_path.st_dev && by_fd.st_ino == by_path.st_ino) {
      fd_ = fd;
      temp_path_ = tmpl.data();
    } else {
      ::close(fd);
    }
  }
  if (fd_ < 0)
    return make_error(ErrorKind::Io, strprintf("cannot create a temporary file in '%s': %d attempts were removed by "
                                               "other writers' cleanup as they were created",
                                               directory_of(path).c_str(), kTempAttempts));
  ::fchmod(fd_, 0644);
  position_ = 0;
  staged_bytes_ = 0;
  return {};
}

Error AtomicFile::write_at(const char *p, size_t bytes, uint64_t offset) {
  while (bytes > 0) {
    ssize_t n = ::pwrite(fd_, p, bytes, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      return make_error(ErrorKind::Io, strprintf("writing '%s' failed at byte %llu: %s%s", temp_path_.c_str(),
                                                 static_cast<unsigned long long>(offset), errno_text(e).c_str(),
                                                 write_failure_hint(e, path_).c_str()));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return {};
}

Error AtomicFile::flush_staged() {
  if (staged_bytes_ == 0) return {};
  const size_t n = staged_bytes_;
  staged_bytes_ = 0;  // a failed span is not handed on twice
  return write_at(staged_.data(), n, position_ - n);
}

Error AtomicFile::pwrite(const void *data, size_t bytes, uint64_t offset) {
  if (fd_ < 0) return make_error(ErrorKind::Internal, "AtomicFile::pwrite without an open file");
  if (Error e = flush_staged()) return e;
  return write_at(static_cast<const char *>(data), bytes, offset);
}

Error AtomicFile::write(const void *data, size_t bytes) {
  if (fd_ < 0) return make_error(ErrorKind::Internal, "AtomicFile::write without an open file");
  const char *p = static_cast<const char *>(data);
  while (bytes > 0) {
    // Whole spans at a span boundary, with nothing staged, go to the file as they are.
    if (staged_bytes_ == 0 && position_ % kWriteSpan == 0 && bytes >= kWriteSpan) {
      const size_t whole = bytes / kWriteSpan * kWriteSpan;
      if (Error e = write_at(p, whole, position_)) return e;
      p += whole;
      bytes -= whole;
      position_ += whole;
      continue;
    }
    if (staged_.empty()) staged_.resize(kWriteSpan);
    const size_t room = kWriteSpan - static_cast<size_t>(position_ % kWriteSpan);  // to the next boundary
    const size_t n = std::min(room, bytes);
    std::memcpy(staged_.data() + staged_bytes_, p, n);
    staged_bytes_ += n;
    position_ += n;
    p += n;
    bytes -= n;
    if (position_ % kWriteSpan == 0)
      if (Error e = flush_staged()) return e;
  }
  return {};
}

Error AtomicFile::write_zeros(uint64_t bytes) {
  static const char zeros[4096] = {};
  while (bytes > 0) {
    size_t n = bytes < sizeof zeros ? static_cast<size_t>(bytes) : sizeof zeros;
    if (Error e = write(zeros, n)) return e;
    bytes -= n;
  }
  return {};
}

Error AtomicFile::commit() {
  if (fd_ < 0) return make_error(ErrorKind::Internal, "AtomicFile::commit without an open file");
  if (Error e = flush_staged()) return e;
  if (::fsync(fd_) != 0) {
    int e = errno;
    return make_error(ErrorKind::Io, strprintf("fsync '%s' failed: %s", temp_path_.c_str(), errno_text(e).c_str()));
  }
  // Renamed while still open and locked: closed first, another writer's cleanup could take
  // the complete file for a stale one.
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    int e = errno;
    return make_error(ErrorKind::Io, strprintf("renaming '%s' to '%s' failed: %s", temp_path_.c_str(), path_.c_str(),
                                               errno_text(e).c_str()));
  }
  committed_ = true;
  ::close(fd_);
  fd_ = -1;
  int dir_fd = ::open(directory_of(path_).c_str(), O_RDONLY | O_DIRECTORY);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return {};
}

void AtomicFile::abort() {
  staged_bytes_ = 0;
  if (!temp_path_.empty() && !committed_) {
    ::unlink(temp_path_.c_str());  // before the lock is released by the close
    temp_path_.clear();
  }
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

bool same_file(const std::string &a, const std::string &b) {
  struct stat sa, sb;
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

}  // namespace colibri::util

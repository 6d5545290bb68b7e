// core/util/atomic_file.cpp — temp file + fsync + rename.
#include "util/atomic_file.h"

#include <fcntl.h>
#include <libgen.h>
#include <sys/stat.h>
#include <unistd.h>

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
  temp_path_ = path + ".tmp.XXXXXX";
  std::vector<char> tmpl(temp_path_.begin(), temp_path_.end());
  tmpl.push_back('\0');
  fd_ = ::mkstemp(tmpl.data());
  if (fd_ < 0) {
    int e = errno;
    temp_path_.clear();
    return make_error(ErrorKind::Io, strprintf("cannot create a temporary file in '%s': %s", directory_of(path).c_str(),
                                               errno_text(e).c_str()));
  }
  temp_path_ = tmpl.data();
  ::fchmod(fd_, 0644);
  position_ = 0;
  return {};
}

Error AtomicFile::pwrite(const void *data, size_t bytes, uint64_t offset) {
  const char *p = static_cast<const char *>(data);
  while (bytes > 0) {
    ssize_t n = ::pwrite(fd_, p, bytes, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      return make_error(ErrorKind::Io, strprintf("writing '%s' failed at byte %llu: %s", temp_path_.c_str(),
                                                 static_cast<unsigned long long>(offset), errno_text(e).c_str()));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return {};
}

Error AtomicFile::write(const void *data, size_t bytes) {
  if (Error e = pwrite(data, bytes, position_)) return e;
  position_ += bytes;
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
  if (::fsync(fd_) != 0) {
    int e = errno;
    return make_error(ErrorKind::Io, strprintf("fsync '%s' failed: %s", temp_path_.c_str(), errno_text(e).c_str()));
  }
  ::close(fd_);
  fd_ = -1;
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    int e = errno;
    return make_error(ErrorKind::Io, strprintf("renaming '%s' to '%s' failed: %s", temp_path_.c_str(), path_.c_str(),
                                               errno_text(e).c_str()));
  }
  committed_ = true;
  int dir_fd = ::open(directory_of(path_).c_str(), O_RDONLY | O_DIRECTORY);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return {};
}

void AtomicFile::abort() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!temp_path_.empty() && !committed_) {
    ::unlink(temp_path_.c_str());
    temp_path_.clear();
  }
}

bool same_file(const std::string &a, const std::string &b) {
  struct stat sa, sb;
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

}  // namespace colibri::util

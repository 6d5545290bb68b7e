// cli/npy.cpp — the .npy writer (see npy.h).
#include "npy.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "common.h"

namespace colibri_cli {

std::string npy_header(const std::vector<size_t> &shape) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) dict += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? ", " : "");
  if (shape.size() == 1) dict.pop_back();  // "(n,)"
  dict += "), }";
  // magic (6) + version (2) + header length (2) + dict + spaces + '\n', padded to 64 bytes
  // as NumPy does (version 1.0 only requires 16).
  size_t total = 10 + dict.size() + 1;
  total = (total + 63) / 64 * 64;
  dict.append(total - 10 - dict.size() - 1, ' ');
  dict += '\n';
  std::string header("\x93NUMPY\x01\x00", 8);
  uint16_t length = static_cast<uint16_t>(dict.size());
  header += static_cast<char>(length & 0xff);
  header += static_cast<char>(length >> 8);
  return header + dict;
}

namespace {

bool write_all(int fd, const void *data, size_t size) {
  const char *p = static_cast<const char *>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

void write_npy_atomically(const std::string &path, const std::vector<size_t> &shape, const float *data) {
  static_assert(sizeof(float) == 4, "float32 expected");
  const uint16_t probe = 1;
  if (*reinterpret_cast<const uint8_t *>(&probe) != 1) fail_runtime("writing .npy needs a little-endian host");
  size_t count = 1;
  for (size_t d : shape) count *= d;
  std::string header = npy_header(shape);
  std::string temp = path + ".tmp-" + std::to_string(::getpid());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    size_t slash = path.rfind('/');
    std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    fail_io("-o " + path + ": cannot create a file in " + dir + ": " + std::strerror(errno) +
                 " (the directory must exist and be writable)");
  }
  bool ok = write_all(fd, header.data(), header.size()) && write_all(fd, data, count * sizeof(float)) && ::fsync(fd) == 0;
  int saved = errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    saved = errno;
  }
  if (ok && ::rename(temp.c_str(), path.c_str()) != 0) {
    ok = false;
    saved = errno;
  }
  if (!ok) {
    ::unlink(temp.c_str());
    fail_io("-o " + path + ": " + std::strerror(saved));
  }
}

}  // namespace colibri_cli

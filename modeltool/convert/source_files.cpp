// modeltool/convert/source_files.cpp — small-file reading and source hashing.
#include "modeltool/convert/source_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "modeltool/cli_support.h"
#include "util/json.h"
#include "util/strings.h"

namespace colibri::modeltool::convert {

using util::strprintf;

bool path_exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

namespace {

Error io_error(const char *what, const std::string &path, int e) {
  return make_error(ErrorKind::Io, strprintf("cannot %s '%s': %s", what, path.c_str(), util::errno_text(e).c_str()));
}

// Streams `fd` through `consume(bytes, n)` with pread, so the file's pages never count
// towards this process's resident memory.
template <typename Consume>
Error stream_file(int fd, const std::string &path, uint64_t *total, Consume consume) {
  constexpr size_t kBufferBytes = 4u << 20;
  std::unique_ptr<char[]> buffer(new char[kBufferBytes]);
  uint64_t offset = 0;
  for (;;) {
    ssize_t n = ::pread(fd, buffer.get(), kBufferBytes, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("read", path, errno);
    }
    if (n == 0) break;
    if (interrupted()) return interrupted_error();  // Ctrl-C while hashing a large shard
    consume(buffer.get(), static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
  }
  *total = offset;
  return {};
}

Error open_regular(const std::string &path, int *fd) {
  // O_NONBLOCK: a FIFO is refused below instead of blocking the open until a writer comes.
  *fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (*fd < 0) return io_error("open", path, errno);
  struct stat st;
  if (::fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(*fd);
    return make_error(ErrorKind::Io, strprintf("'%s' is not a regular file", path.c_str()));
  }
  return {};
}

}  // namespace

Error read_whole_file(const std::string &path, std::string *text) {
  int fd;
  if (Error e = open_regular(path, &fd)) return e;
  text->clear();
  uint64_t total = 0;
  Error e = stream_file(fd, path, &total, [&](const char *p, size_t n) { text->append(p, n); });
  ::close(fd);
  return e;
}

Error SourceFiles::read_text(const std::string &name, std::string *text, bool *present) {
  *present = path_exists(path(name));
  if (!*present) return {};
  if (Error e = read_whole_file(path(name), text)) return e;
  records_[name] = Record{text->size(), XXH3_64bits(text->data(), text->size())};
  return {};
}

Error SourceFiles::read_json(const std::string &name, nlohmann::json *value, bool *present) {
  std::string text;
  if (Error e = read_text(name, &text, present)) return e;
  if (!*present) return {};
  return util::parse_json(text, strprintf("'%s'", path(name).c_str()), value);
}

Error SourceFiles::record(const std::string &name, const std::function<void(uint64_t)> &on_bytes) {
  int fd;
  if (Error e = open_regular(path(name), &fd)) return e;
  XXH3_state_t *state = XXH3_createState();
  XXH3_64bits_reset(state);
  uint64_t total = 0;
  Error e = stream_file(fd, path(name), &total, [&](const char *p, size_t n) {
    XXH3_64bits_update(state, p, n);
    if (on_bytes) on_bytes(n);
  });
  ::close(fd);
  if (!e) records_[name] = Record{total, XXH3_64bits_digest(state)};
  XXH3_freeState(state);
  return e;
}

nlohmann::json SourceFiles::provenance() const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto &[name, record] : records_)  // std::map: sorted by name
    list.push_back({{"file", name}, {"bytes", record.bytes}, {"xxh3", util::hex64(record.xxh3)}});
  return list;
}

std::vector<std::string> SourceFiles::paths() const {
  std::vector<std::string> out;
  for (const auto &entry : records_) out.push_back(path(entry.first));
  return out;
}

}  // namespace colibri::modeltool::convert

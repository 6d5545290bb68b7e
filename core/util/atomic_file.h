// core/util/atomic_file.h — write a file so that readers see either the old file or the
// complete new one, never a partial write: data goes to a temporary file in the target's
// directory, is fsync-ed, then renamed over the target (and the directory fsync-ed).
// If the object is destroyed before commit(), the temporary file is removed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "util/error.h"

namespace colibri::util {

class AtomicFile {
 public:
  AtomicFile() = default;
  ~AtomicFile();
  AtomicFile(const AtomicFile &) = delete;
  AtomicFile &operator=(const AtomicFile &) = delete;

  // Opens a temporary file beside `path`. Refuses an existing target unless `overwrite`.
  Error open(const std::string &path, bool overwrite);

  Error write(const void *data, size_t bytes);                 // appends at the write cursor
  Error pwrite(const void *data, size_t bytes, uint64_t offset);  // positioned, cursor unchanged
  Error write_zeros(uint64_t bytes);
  uint64_t position() const { return position_; }

  // fsync, rename over the target, fsync the directory.
  Error commit();
  // Removes the temporary file (also done by the destructor when not committed).
  void abort();

  const std::string &path() const { return path_; }
  const std::string &temp_path() const { return temp_path_; }

 private:
  int fd_ = -1;
  bool committed_ = false;
  uint64_t position_ = 0;
  std::string path_;
  std::string temp_path_;
};

// Same file? (device + inode) — used to refuse OUT == IN even through links.
bool same_file(const std::string &a, const std::string &b);

}  // namespace colibri::util

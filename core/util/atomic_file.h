// core/util/atomic_file.h — write a file so that readers see either the old file or the
// complete new one, never a partial write: data goes to a temporary file in the target's
// directory, is fsync-ed, then renamed over the target (and the directory fsync-ed).
// If the object is destroyed before commit(), the temporary file is removed.
//
// Stale temporary files. A writer killed outright (SIGKILL, a power cut) cannot remove its
// temporary file. Each writer holds an exclusive flock on its temporary file for as long as
// it writes (the kernel drops the lock when the writer dies), and open() for a target first
// removes every TARGET.tmp.XXXXXX beside it that it can lock: their writers are gone. A
// temporary file whose writer still runs stays locked and is left alone. On a file system
// without flock nothing is removed (and writers write unlocked). A temporary file left by a
// build older than this one, which took no lock, counts as stale.
//
// Page-cache folios. write() stages its bytes and hands them to the kernel in spans that start
// and end on 2 MiB boundaries of the file (kWriteSpan). A file system with large folios (ext4
// and XFS on Linux 6.x) then caches the new file in 2 MiB folios, which a later mmap maps with
// 2 MiB pages: the decode path streams the weights and misses the TLB every 4 KiB otherwise
// (docs/performance.md, "2 MiB page-cache folios"). Writes of 128 KiB, as cp and cat make,
// leave the file cached in small folios. A staged byte reaches the file at the next span
// boundary, at pwrite() or at commit(); a failed write is reported by the call that hands it on.
//
// SIGXFSZ. A write beyond the file-size limit (ulimit -f, RLIMIT_FSIZE) raises SIGXFSZ, whose
// default action kills the process (exit status 153) before write() can return EFBIG, and no
// destructor runs to remove the temporary file. This library does not change the process's
// signal dispositions behind its caller's back: a program that wants the limit reported as an
// error, as colibri-model and colibri do, ignores SIGXFSZ at startup (signal(SIGXFSZ,
// SIG_IGN)); write() then fails with EFBIG and this class returns an Io error naming the
// limit, and the temporary file is removed as for any failed write.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "util/error.h"

namespace colibri::util {

class AtomicFile {
 public:
  AtomicFile() = default;
  ~AtomicFile();
  AtomicFile(const AtomicFile &) = delete;
  AtomicFile &operator=(const AtomicFile &) = delete;

  // Opens a temporary file beside `path`, locked (see the top of this file), after removing
  // the stale temporary files of `path`. Refuses an existing target unless `overwrite`.
  Error open(const std::string &path, bool overwrite);
  // The stale temporary files open() removed (paths), for a note to the user.
  const std::vector<std::string> &removed_stale() const { return removed_stale_; }

  // The span write() hands on at a time: a multiple of the 2 MiB folio, at 2 MiB-aligned offsets.
  static constexpr size_t kWriteSpan = size_t{8} << 20;

  Error write(const void *data, size_t bytes);                 // appends at the write cursor (staged)
  Error pwrite(const void *data, size_t bytes, uint64_t offset);  // positioned, cursor unchanged; hands on
                                                                  // the staged bytes first
  Error write_zeros(uint64_t bytes);
  // Hands the staged bytes on, so that the temporary file holds everything written (for a
  // reader of temp_path() before commit).
  Error flush() { return flush_staged(); }
  uint64_t position() const { return position_; }  // staged bytes included

  // fsync, rename over the target, fsync the directory.
  Error commit();
  // Removes the temporary file (also done by the destructor when not committed).
  void abort();

  const std::string &path() const { return path_; }
  const std::string &temp_path() const { return temp_path_; }

 private:
  Error write_at(const char *p, size_t bytes, uint64_t offset);  // the pwrite loop, unstaged
  Error flush_staged();

  int fd_ = -1;
  bool committed_ = false;
  std::vector<char> staged_;  // kWriteSpan bytes once the first write() comes
  size_t staged_bytes_ = 0;   // the bytes before position_ not yet handed on
  uint64_t position_ = 0;
  std::string path_;
  std::string temp_path_;
  std::vector<std::string> removed_stale_;
};

// Removes the temporary files TARGET.tmp.XXXXXX beside `target` whose writers are gone (an
// flock on them can be had); returns their paths. open() calls it.
std::vector<std::string> remove_stale_temporaries(const std::string &target);

// Same file? (device + inode) — used to refuse OUT == IN even through links.
bool same_file(const std::string &a, const std::string &b);

}  // namespace colibri::util

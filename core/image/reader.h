// core/image/reader.h — opens a model image: mmap read-only, validate, expose views.
//
// Every offset, size and count in the header and directory is checked against the file
// size and against each other before anything is dereferenced, so a hostile or damaged
// file yields an Error naming the cause — never a crash. Opening reads only the header,
// directory and metadata; tensor bytes are touched only by verify or by the engine.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "image/format.h"
#include "util/error.h"

namespace colibri::image {

enum class MapAdvice : uint32_t { Normal = 0, Sequential, WillNeed, Random, HugePage };

struct OpenOptions {
  bool populate = false;          // MAP_POPULATE: fault every page in at open
  MapAdvice advice = MapAdvice::HugePage;  // 2 MiB page-cache folios where the file system has them
  bool lock = false;              // mlock the mapping (needs RLIMIT_MEMLOCK)
  bool verify_checksums = false;  // check every tensor checksum at open (reads all bytes)
};

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  uint32_t group_size = 0;
  uint32_t rank = 0;
  uint64_t shape[kMaxTensorRank] = {};
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t checksum = 0;

  uint64_t element_count() const;
  std::string shape_string() const;  // "[8, 2816, 1024]"
};

class Image {
 public:
  ~Image();
  Image(const Image &) = delete;
  Image &operator=(const Image &) = delete;

  // Opens and validates `path`. On failure returns nullptr and fills *error.
  static std::unique_ptr<Image> open(const std::string &path, const OpenOptions &options, Error *error);

  // Validates an image held in memory (not copied: `bytes` must outlive the Image).
  // The fuzzer and the tests use this; `open` maps the file and calls it.
  static std::unique_ptr<Image> from_memory(const unsigned char *bytes, uint64_t size, const std::string &label,
                                            Error *error);

  const FileHeader &header() const { return header_; }
  uint64_t file_size() const { return size_; }
  const std::string &path() const { return label_; }
  const std::vector<TensorInfo> &tensors() const { return tensors_; }
  const TensorInfo *find(std::string_view name) const;
  const unsigned char *data(const TensorInfo &tensor) const { return base_ + tensor.offset; }
  // The whole file's bytes (the mapping), file_size() long.
  const unsigned char *bytes() const { return base_; }
  std::string_view metadata_json() const {
    return {reinterpret_cast<const char *>(base_ + header_.metadata_offset), header_.metadata_size};
  }
  // The metadata, parsed at open (validation requires a JSON object).
  const nlohmann::json &metadata() const { return metadata_; }

  // Replaces the file mapping by a private copy in anonymous memory, advised for transparent
  // huge pages (2 MiB pages: fewer TLB misses when decode streams the weights; the page-cache
  // mapping of a file mostly gets 4 KiB pages). `before_fill`, if set, runs on the new,
  // untouched memory first (a NUMA policy must be set before the pages are faulted in). The
  // copy is made read-only; with `lock` it is mlocked (and the file mapping's lock, if any,
  // released). Costs one read of the file and its size in anonymous memory, which, unlike
  // page cache, is not shared with other processes that open the same image.
  // Only for an image from open(); IO error (naming the fix) if memory cannot be had.
  Error load_into_memory(const std::function<Error(unsigned char *memory, uint64_t bytes)> &before_fill, bool lock);
  // True after load_into_memory.
  bool loaded_into_memory() const { return loaded_; }

  // The file under a mapping can change while it is open: `truncate`, or `cp other model`
  // (which truncates, then writes), and the next read of a page beyond the new end kills the
  // process with SIGBUS. Returns an Io error ("the image was truncated or replaced while in
  // use: size A → B; reopen it") when the open file's size, inode or modification time
  // differ from those at open (fstat of the descriptor the image keeps open); OK for an image
  // loaded into memory or held in memory, whose bytes are no longer the file's. Replacing the
  // file by a rename leaves the open file (the old inode) as it was: OK. One fstat: the engine
  // calls it before every forward pass and MoE-layer call, before touching the weights. A
  // change during a call is not caught (the programs turn that SIGBUS into a message).
  Error check_unchanged() const;

  // Recomputes one tensor's checksum; Corrupt error naming the tensor on mismatch.
  Error verify_tensor(const TensorInfo &tensor) const;
  // All tensors, split over `threads` threads (0 = hardware concurrency); over fewer when
  // the OS refuses a thread (a thread limit), never failing for that.
  Error verify_all(unsigned threads) const;

 private:
  Image() = default;
  Error validate();

  const unsigned char *base_ = nullptr;
  uint64_t size_ = 0;
  uint64_t mapping_size_ = 0;  // bytes mapped at base_ (size_ rounded up for a loaded copy)
  bool mapped_ = false;
  bool locked_ = false;
  bool loaded_ = false;
  // The file, kept open for check_unchanged, and what it was at open.
  int fd_ = -1;
  uint64_t opened_device_ = 0, opened_inode_ = 0;
  int64_t opened_mtime_seconds_ = 0, opened_mtime_nanoseconds_ = 0;
  std::string label_;
  FileHeader header_{};
  std::vector<TensorInfo> tensors_;
  nlohmann::json metadata_;
  std::unordered_map<std::string_view, size_t> by_name_;
};

// Explains why `bytes` (the first bytes of a file of `file_size` bytes) is not a Colibri
// image: empty, a pseudo-file (file_size 0 but `available` bytes read), zeros, text (UTF-8 or
// UTF-16), GGUF, safetensors, zip, zstd, byte-swapped magic, or unknown.
// Returns an error of kind NotAnImage; `path` is quoted in the message and its fix.
Error diagnose_foreign_file(const unsigned char *bytes, uint64_t available, uint64_t file_size, const std::string &path);

}  // namespace colibri::image

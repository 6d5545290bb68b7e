// core/image/writer.h — streams a model image to disk.
//
// The caller declares every tensor (name, dtype, shape) and the metadata up front, then
// appends each tensor's bytes in declaration order, in as many chunks as it likes: the
// writer never holds a tensor in memory. Checksums are computed while streaming. The file
// is written to a temporary path and renamed into place by finish() after fsync, so a
// crash or error never leaves a partial image under the output name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "image/format.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace colibri::image {

struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  uint32_t group_size = 0;  // the block dtypes (Q8, Q4, Q8F16, MXFP4); 0 for the float dtypes
  std::vector<uint64_t> shape;  // outermost first
};

// The original Colibri header fields plus the layer count; the writer fills the offsets.
struct ModelHeaderFields {
  uint64_t expert_count = 0;
  uint64_t expert_size_bytes = 0;
  uint64_t hidden_size = 0;
  uint64_t ffn_hidden_size = 0;
  uint64_t top_k = 0;
  uint64_t layer_count = 0;
  std::string gate_tensor_name;  // tensor whose offset becomes gate_weight_offset ("" = none)
  // The lowest format version whose model semantics the image's metadata uses (format.h);
  // the header's version is the larger of this and what its dtypes need.
  uint32_t min_version = 1;
};

struct WriterOptions {
  uint64_t alignment = kDefaultAlignment;  // power of two in [kMinAlignment, kMaxAlignment]
  bool overwrite = false;                  // replace an existing output file
};

class ImageWriter {
 public:
  ImageWriter() = default;
  ImageWriter(const ImageWriter &) = delete;
  ImageWriter &operator=(const ImageWriter &) = delete;

  Error begin(const std::string &path, const WriterOptions &options, const ModelHeaderFields &fields,
              std::vector<TensorSpec> tensors, const std::string &metadata_json);

  // Appends bytes to the current tensor; moves on to the next one when it is complete.
  Error append(const void *data, size_t bytes);

  // Index of the tensor the next append() goes to (== tensor count when all are written).
  size_t current_tensor() const { return current_; }
  const std::vector<TensorSpec> &tensors() const { return specs_; }

  // Writes the directory and header, fsyncs, renames into place.
  Error finish();

  // The stale temporary files of the output that begin() removed (util/atomic_file.h).
  const std::vector<std::string> &removed_stale() const { return file_.removed_stale(); }

 private:
  struct Hasher;
  util::AtomicFile file_;
  std::vector<TensorSpec> specs_;
  std::vector<TensorEntry> entries_;
  std::vector<char> string_table_;
  std::string metadata_;
  FileHeader header_{};
  size_t current_ = 0;
  uint64_t current_written_ = 0;
  std::shared_ptr<Hasher> hasher_;
  bool failed_ = false;
};

// Appends chunks to an ImageWriter on a thread of its own, so that the caller can convert the
// next chunk meanwhile (repack: the writer's copy into the page cache and its hashing were
// serial, 1.8 s of a 3.3 s q8 repack of a 1.28 GB f16 image was pwrite; with it, 2.4–2.9 s
// against 3.2–4.1 s onto ext4). One append in flight at a time, in submission order: the file
// and its hash are those of appending serially. Nothing else may call the writer while an
// append is in flight. convert uses it too (its page-cache copy was 42% of a q8 convert into
// /dev/shm; docs/performance.md, "The tools' q8 quantiser in AVX2").
class ChunkAppender {
 public:
  explicit ChunkAppender(ImageWriter *writer) : writer_(writer) {}
  ~ChunkAppender() { (void)wait(); }
  ChunkAppender(const ChunkAppender &) = delete;
  ChunkAppender &operator=(const ChunkAppender &) = delete;

  // Waits for the previous append; if it failed, returns its error and appends nothing more.
  // Otherwise starts appending data[0, bytes), which must stay untouched until the next
  // submit() or wait().
  Error submit(const void *data, size_t bytes);
  // Waits for the append in flight, if any, and returns its error.
  Error wait();

 private:
  ImageWriter *writer_;
  std::thread worker_;
  Error error_;
};

// Checksum helpers (XXH3-64) shared by the writer, reader and tools.
uint64_t checksum_bytes(const void *data, size_t bytes);
uint64_t header_checksum(const FileHeader &header, const unsigned char *directory, uint64_t directory_size,
                         const unsigned char *metadata, uint64_t metadata_size);

}  // namespace colibri::image

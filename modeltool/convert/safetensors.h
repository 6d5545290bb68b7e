// modeltool/convert/safetensors.h — reads Hugging Face safetensors checkpoints, one file or
// sharded (model.safetensors.index.json), without copying tensor bytes.
//
// Format (https://github.com/huggingface/safetensors): 8-byte little-endian header length N,
// N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
// then the data section; offsets are relative to the data section. Every shard is mmap-ed
// read-only and its header validated before any tensor byte is touched: dtype known, shape
// and byte size consistent, offsets inside the file, no two tensors overlapping. A damaged
// or hostile file yields an Error naming the file and tensor, never a crash.
//
// Memory: the converter reads each tensor once, front to back, and calls release() on the
// ranges it is done with (MADV_DONTNEED), so resident memory stays near one chunk per shard
// instead of growing with the checkpoint.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "util/error.h"

namespace colibri::modeltool::convert {

// Bits per element of a safetensors dtype string ("BF16" -> 16, "F4" -> 4); 0 if unknown.
uint32_t safetensors_dtype_bits(const std::string &dtype);

struct SafetensorsTensor {
  std::string name;
  std::string dtype;            // as written in the header: "F32", "BF16", "F8_E4M3", ...
  std::vector<uint64_t> shape;  // outermost first; empty for a scalar
  uint64_t data_begin = 0;      // offset in the data section
  uint64_t data_end = 0;        // one past the last byte
  size_t shard = 0;             // index into SafetensorsCheckpoint::shards()

  uint64_t byte_size() const { return data_end - data_begin; }
  uint64_t element_count() const;
};

// "[8, 2816, 1024]"
std::string shape_string(const std::vector<uint64_t> &shape);

// Parses and validates one safetensors file held in memory (`file_size` bytes at `bytes`).
// `label` names the file in messages. Tensors come back in data-offset order.
Error parse_safetensors(const unsigned char *bytes, uint64_t file_size, const std::string &label,
                        std::vector<SafetensorsTensor> *tensors, uint64_t *data_section_offset);

// One mmap-ed shard.
class SafetensorsShard {
 public:
  ~SafetensorsShard();
  SafetensorsShard(const SafetensorsShard &) = delete;
  SafetensorsShard &operator=(const SafetensorsShard &) = delete;

  // Maps `path` and validates its header; `name` is how messages refer to it.
  static Error open(const std::string &path, const std::string &name, std::unique_ptr<SafetensorsShard> *out);

  const std::string &name() const { return name_; }
  const std::string &path() const { return path_; }
  uint64_t file_size() const { return size_; }
  const std::vector<SafetensorsTensor> &tensors() const { return tensors_; }

  // Bytes of a tensor of this shard ([data_begin, data_end) of the data section).
  const unsigned char *data(const SafetensorsTensor &tensor) const { return base_ + data_offset_ + tensor.data_begin; }
  // Drops the pages of [pointer, pointer + bytes) from this process's memory (they stay in
  // the page cache). Only whole pages inside the range are dropped.
  void release(const unsigned char *pointer, uint64_t bytes) const;

 private:
  SafetensorsShard() = default;
  std::string path_;
  std::string name_;
  unsigned char *base_ = nullptr;
  uint64_t size_ = 0;
  uint64_t data_offset_ = 0;
  std::vector<SafetensorsTensor> tensors_;
};

// All tensors of a checkpoint directory, by name.
class SafetensorsCheckpoint {
 public:
  // Opens DIR/model.safetensors.index.json (every shard in its weight_map) if present,
  // else DIR/model.safetensors. A shard listed but absent, a truncated shard, a tensor the
  // index places in a shard that does not hold it, or a name held by two shards: Error.
  static Error open(const std::string &directory, SafetensorsCheckpoint *out);

  const std::vector<std::unique_ptr<SafetensorsShard>> &shards() const { return shards_; }
  // Every tensor of every shard, sorted by name.
  const std::vector<SafetensorsTensor> &tensors() const { return tensors_; }
  const SafetensorsTensor *find(const std::string &name) const;
  // The index file name if the checkpoint is sharded, else "".
  const std::string &index_file() const { return index_file_; }

  const unsigned char *data(const SafetensorsTensor &tensor) const { return shards_[tensor.shard]->data(tensor); }
  void release(const SafetensorsTensor &tensor, const unsigned char *pointer, uint64_t bytes) const {
    shards_[tensor.shard]->release(pointer, bytes);
  }

 private:
  Error add_shard(const std::string &directory, const std::string &file);
  void build_lookup();

  std::vector<std::unique_ptr<SafetensorsShard>> shards_;
  std::vector<SafetensorsTensor> tensors_;
  std::unordered_map<std::string, size_t> by_name_;
  std::string index_file_;
};

}  // namespace colibri::modeltool::convert

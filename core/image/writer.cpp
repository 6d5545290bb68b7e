// core/image/writer.cpp — streaming, atomic image writer.
#include "image/writer.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "util/strings.h"

namespace colibri::image {

using util::strprintf;

struct ImageWriter::Hasher {
  XXH3_state_t *state = XXH3_createState();
  ~Hasher() { XXH3_freeState(state); }
};

uint64_t checksum_bytes(const void *data, size_t bytes) { return XXH3_64bits(data, bytes); }

uint64_t header_checksum(const FileHeader &header, const unsigned char *directory, uint64_t directory_size,
                         const unsigned char *metadata, uint64_t metadata_size) {
  FileHeader copy = header;
  copy.header_checksum = 0;
  XXH3_state_t *state = XXH3_createState();
  XXH3_64bits_reset(state);
  XXH3_64bits_update(state, &copy, sizeof copy);
  XXH3_64bits_update(state, directory, directory_size);
  XXH3_64bits_update(state, metadata, metadata_size);
  uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return h;
}

static uint64_t align_up(uint64_t value, uint64_t alignment) { return (value + alignment - 1) & ~(alignment - 1); }

Error ImageWriter::begin(const std::string &path, const WriterOptions &options, const ModelHeaderFields &fields,
                         std::vector<TensorSpec> tensors, const std::string &metadata_json) {
  uint64_t align = options.alignment;
  if (align < kMinAlignment || align > kMaxAlignment || (align & (align - 1)) != 0)
    return make_error(ErrorKind::InvalidArgument,
                      strprintf("alignment %llu is invalid: use a power of two from %llu to %llu",
                                static_cast<unsigned long long>(align), static_cast<unsigned long long>(kMinAlignment),
                                static_cast<unsigned long long>(kMaxAlignment)));
  if (tensors.size() > kMaxTensorCount)
    return make_error(ErrorKind::InvalidArgument, strprintf("too many tensors (%zu, max %llu)", tensors.size(),
                                                            static_cast<unsigned long long>(kMaxTensorCount)));
  if (metadata_json.size() > kMaxMetadataSize)
    return make_error(ErrorKind::InvalidArgument, "metadata larger than the format's limit");

  specs_ = std::move(tensors);
  metadata_ = metadata_json;
  entries_.assign(specs_.size(), TensorEntry{});
  string_table_.clear();
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < specs_.size(); ++i) {
    const TensorSpec &s = specs_[i];
    TensorEntry &e = entries_[i];
    if (s.name.empty() || s.name.size() > kMaxNameLength)
      return make_error(ErrorKind::InvalidArgument, strprintf("tensor %zu: name must be 1..%llu bytes", i,
                                                              static_cast<unsigned long long>(kMaxNameLength)));
    if (!seen.insert(s.name).second)
      return make_error(ErrorKind::InvalidArgument, strprintf("tensor name '%s' appears twice", s.name.c_str()));
    if (s.shape.empty() || s.shape.size() > kMaxTensorRank)
      return make_error(ErrorKind::InvalidArgument, strprintf("tensor '%s': rank %zu not in 1..%u", s.name.c_str(),
                                                              s.shape.size(), kMaxTensorRank));
    e.name_offset = string_table_.size();
    e.name_length = static_cast<uint32_t>(s.name.size());
    string_table_.insert(string_table_.end(), s.name.begin(), s.name.end());
    e.dtype = static_cast<uint32_t>(s.dtype);
    e.rank = static_cast<uint32_t>(s.shape.size());
    e.group_size = s.group_size;
    for (size_t d = 0; d < s.shape.size(); ++d) e.shape[d] = s.shape[d];
    if (!tensor_data_bytes(s.dtype, s.group_size, e.rank, e.shape, &e.data_size))
      return make_error(ErrorKind::InvalidArgument,
                        strprintf("tensor '%s': shape/dtype/group size do not describe a valid %s tensor "
                                  "(zero dimension, overflow, or last dimension not a multiple of the group size)",
                                  s.name.c_str(), dtype_name(s.dtype)));
  }

  header_ = FileHeader{};
  std::memcpy(header_.magic, kMagic, sizeof kMagic);
  // The lowest version that holds every dtype of the image and its model (format.h): images
  // of older families without the version-2 dtypes stay version 1, which older builds open.
  if (fields.min_version < 1 || fields.min_version > kFormatVersion)
    return make_error(ErrorKind::InvalidArgument,
                      strprintf("image writer: the model needs format version %u, which this build does not write "
                                "(1..%u)",
                                fields.min_version, kFormatVersion));
  header_.version = fields.min_version;
  for (const TensorSpec &s : specs_) header_.version = std::max(header_.version, min_version_for(s.dtype));
  header_.header_size = static_cast<uint32_t>(kHeaderSize);
  header_.expert_count = fields.expert_count;
  header_.expert_size_bytes = fields.expert_size_bytes;
  header_.hidden_size = fields.hidden_size;
  header_.ffn_hidden_size = fields.ffn_hidden_size;
  header_.top_k = fields.top_k;
  header_.layer_count = fields.layer_count;
  header_.tensor_count = specs_.size();
  header_.directory_offset = kHeaderSize;
  header_.directory_size = specs_.size() * kTensorEntrySize + string_table_.size();
  header_.metadata_offset = header_.directory_offset + header_.directory_size;
  header_.metadata_size = metadata_.size();
  header_.data_alignment = align;

  uint64_t cursor = align_up(header_.metadata_offset + header_.metadata_size, align);
  header_.weight_data_offset = cursor;
  for (size_t i = 0; i < entries_.size(); ++i) {
    entries_[i].data_offset = cursor;
    cursor = align_up(cursor + entries_[i].data_size, align);
    if (!fields.gate_tensor_name.empty() && specs_[i].name == fields.gate_tensor_name)
      header_.gate_weight_offset = entries_[i].data_offset;
  }
  header_.file_size = entries_.empty() ? header_.weight_data_offset
                                       : entries_.back().data_offset + entries_.back().data_size;
  if (!fields.gate_tensor_name.empty() && header_.gate_weight_offset == 0)
    return make_error(ErrorKind::InvalidArgument,
                      strprintf("gate tensor '%s' is not among the tensors", fields.gate_tensor_name.c_str()));

  if (Error e = file_.open(path, options.overwrite)) return e;
  // Placeholder header and directory (rewritten by finish), then the metadata and padding.
  std::vector<unsigned char> zeros(kHeaderSize + header_.directory_size, 0);
  if (Error e = file_.write(zeros.data(), zeros.size())) return e;
  if (Error e = file_.write(metadata_.data(), metadata_.size())) return e;
  if (Error e = file_.write_zeros(header_.weight_data_offset - file_.position())) return e;

  hasher_ = std::make_shared<Hasher>();
  XXH3_64bits_reset(hasher_->state);
  current_ = 0;
  current_written_ = 0;
  // Skip zero-size tensors (impossible: shapes have no zero dims) — nothing to do.
  return {};
}

Error ImageWriter::append(const void *data, size_t bytes) {
  if (failed_) return make_error(ErrorKind::Internal, "image writer used after an error");
  const unsigned char *p = static_cast<const unsigned char *>(data);
  while (bytes > 0) {
    if (current_ >= entries_.size()) {
      failed_ = true;
      return make_error(ErrorKind::InvalidArgument, "more tensor bytes appended than the declared tensors hold");
    }
    TensorEntry &e = entries_[current_];
    uint64_t room = e.data_size - current_written_;
    size_t n = bytes < room ? bytes : static_cast<size_t>(room);
    if (file_.position() != e.data_offset + current_written_) {
      failed_ = true;
      return make_error(ErrorKind::Internal, "image writer cursor out of place");
    }
    if (Error err = file_.write(p, n)) {
      failed_ = true;
      return err;
    }
    XXH3_64bits_update(hasher_->state, p, n);
    p += n;
    bytes -= n;
    current_written_ += n;
    if (current_written_ == e.data_size) {
      e.checksum = XXH3_64bits_digest(hasher_->state);
      XXH3_64bits_reset(hasher_->state);
      ++current_;
      current_written_ = 0;
      uint64_t next = current_ < entries_.size() ? entries_[current_].data_offset : header_.file_size;
      if (Error err = file_.write_zeros(next - file_.position())) {
        failed_ = true;
        return err;
      }
    }
  }
  return {};
}

Error ImageWriter::finish() {
  if (failed_) return make_error(ErrorKind::Internal, "image writer used after an error");
  if (current_ != entries_.size())
    return make_error(ErrorKind::InvalidArgument,
                      strprintf("image incomplete: tensor '%s' (%zu of %zu) has not been fully written",
                                specs_[current_].name.c_str(), current_ + 1, entries_.size()));
  std::vector<unsigned char> directory(header_.directory_size);
  if (!entries_.empty()) std::memcpy(directory.data(), entries_.data(), entries_.size() * kTensorEntrySize);
  if (!string_table_.empty())
    std::memcpy(directory.data() + entries_.size() * kTensorEntrySize, string_table_.data(), string_table_.size());
  header_.header_checksum = header_checksum(header_, directory.data(), directory.size(),
                                            reinterpret_cast<const unsigned char *>(metadata_.data()), metadata_.size());
  if (Error e = file_.pwrite(&header_, sizeof header_, 0)) return e;
  if (Error e = file_.pwrite(directory.data(), directory.size(), kHeaderSize)) return e;
  return file_.commit();
}

Error ChunkAppender::submit(const void *data, size_t bytes) {
  if (Error e = wait()) return e;
  worker_ = std::thread([this, data, bytes] { error_ = writer_->append(data, bytes); });
  return {};
}

Error ChunkAppender::wait() {
  if (worker_.joinable()) worker_.join();
  Error e = error_;
  error_ = {};
  return e;
}

}  // namespace colibri::image

// modeltool/convert/safetensors.cpp — safetensors header validation, shard mapping and the
// sharded-checkpoint index.
#include "modeltool/convert/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "modeltool/convert/source_files.h"
#include "util/json.h"
#include "util/strings.h"

namespace colibri::modeltool::convert {

using util::strprintf;

namespace {

// The safetensors library refuses headers above 100 MB; so do we (a larger length means
// the file is not a safetensors file at all).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

unsigned long long ull(uint64_t v) { return static_cast<unsigned long long>(v); }

Error corrupt(std::string message) { return make_error(ErrorKind::Corrupt, std::move(message)); }

bool json_to_u64(const nlohmann::json &value, uint64_t *out) {
  if (value.is_number_unsigned()) {
    *out = value.get<uint64_t>();
    return true;
  }
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(value.get<int64_t>());
    return true;
  }
  return false;
}

// Reads one header entry into *tensor (dtype, shape, offsets) and checks it in isolation.
Error parse_entry(const std::string &label, const std::string &name, const nlohmann::json &entry,
                  uint64_t data_size, SafetensorsTensor *tensor) {
  auto bad = [&](const std::string &why) {
    return corrupt(strprintf("tensor '%s' in '%s': %s", name.c_str(), label.c_str(), why.c_str()));
  };
  if (!entry.is_object()) return bad("header entry is not an object");
  auto dtype = entry.find("dtype");
  auto shape = entry.find("shape");
  auto offsets = entry.find("data_offsets");
  if (dtype == entry.end() || !dtype->is_string()) return bad("'dtype' is missing or not a string");
  if (shape == entry.end() || !shape->is_array()) return bad("'shape' is missing or not an array");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2)
    return bad("'data_offsets' is missing or not a [begin, end] pair");

  tensor->name = name;
  tensor->dtype = dtype->get<std::string>();
  uint32_t bits = safetensors_dtype_bits(tensor->dtype);
  if (bits == 0) return bad(strprintf("unknown dtype '%s'", tensor->dtype.c_str()));

  tensor->shape.clear();
  uint64_t elements = 1;
  bool overflow = false;
  for (const auto &dim : *shape) {
    uint64_t d = 0;
    if (!json_to_u64(dim, &d)) return bad("shape holds a value that is not a non-negative integer");
    tensor->shape.push_back(d);
    if (d != 0 && elements > UINT64_MAX / d) overflow = true;
    elements *= d;
  }
  if (overflow || elements > UINT64_MAX / bits) return bad("shape " + shape_string(tensor->shape) + " overflows");
  uint64_t bit_count = elements * bits;
  if (bit_count % 8 != 0) return bad("shape " + shape_string(tensor->shape) + " does not fill whole bytes");

  if (!json_to_u64((*offsets)[0], &tensor->data_begin) || !json_to_u64((*offsets)[1], &tensor->data_end))
    return bad("'data_offsets' must hold two non-negative integers");
  if (tensor->data_begin > tensor->data_end)
    return bad(strprintf("data_offsets [%llu, %llu] end before they begin", ull(tensor->data_begin),
                         ull(tensor->data_end)));
  if (tensor->byte_size() != bit_count / 8)
    return bad(strprintf("data_offsets [%llu, %llu] hold %llu bytes, but %s %s needs %llu bytes",
                         ull(tensor->data_begin), ull(tensor->data_end), ull(tensor->byte_size()),
                         tensor->dtype.c_str(), shape_string(tensor->shape).c_str(), ull(bit_count / 8)));
  if (tensor->data_end > data_size)
    return corrupt(strprintf("'%s' is truncated: tensor '%s' needs bytes up to %llu of the data section, but only "
                             "%llu are present; download or copy the file again",
                             label.c_str(), name.c_str(), ull(tensor->data_end), ull(data_size)));
  return {};
}

}  // namespace

uint32_t safetensors_dtype_bits(const std::string &dtype) {
  // https://github.com/huggingface/safetensors (Dtype enum).
  static const std::map<std::string, uint32_t> kBits = {
      {"BOOL", 8},     {"U8", 8},       {"I8", 8},       {"F8_E5M2", 8},  {"F8_E4M3", 8}, {"F8_E8M0", 8},
      {"I16", 16},     {"U16", 16},     {"F16", 16},     {"BF16", 16},    {"I32", 32},    {"U32", 32},
      {"F32", 32},     {"F64", 64},     {"I64", 64},     {"U64", 64},     {"C64", 64},    {"F4", 4},
      {"F6_E2M3", 6},  {"F6_E3M2", 6},
  };
  auto it = kBits.find(dtype);
  return it == kBits.end() ? 0 : it->second;
}

uint64_t SafetensorsTensor::element_count() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;  // validated not to overflow when parsed
  return n;
}

std::string shape_string(const std::vector<uint64_t> &shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

Error parse_safetensors(const unsigned char *bytes, uint64_t file_size, const std::string &label,
                        std::vector<SafetensorsTensor> *tensors, uint64_t *data_section_offset) {
  tensors->clear();
  if (file_size == 0) return corrupt(strprintf("'%s' is empty (0 bytes); download or copy it again", label.c_str()));
  if (file_size < 8)
    return corrupt(strprintf("'%s' is truncated: %llu bytes, too short for the 8-byte safetensors header length",
                             label.c_str(), ull(file_size)));
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | bytes[i];
  if (header_bytes > kMaxHeaderBytes || header_bytes < 2 || (file_size > 8 && bytes[8] != '{'))
    return corrupt(strprintf("'%s' is not a safetensors file: it starts with %s (header length %llu); expected an "
                             "8-byte length followed by a JSON object",
                             label.c_str(), util::quote_printable(bytes, std::min<uint64_t>(file_size, 16), 16).c_str(),
                             ull(header_bytes)));
  if (header_bytes > file_size - 8)
    return corrupt(strprintf("'%s' is truncated: its JSON header is %llu bytes but only %llu bytes follow the length "
                             "(file is %llu bytes); download or copy the file again",
                             label.c_str(), ull(header_bytes), ull(file_size - 8), ull(file_size)));

  const char *text = reinterpret_cast<const char *>(bytes + 8);
  nlohmann::json header;
  if (Error e = util::parse_json(std::string_view(text, header_bytes), "the safetensors header", &header))
    return corrupt(strprintf("'%s': %s", label.c_str(), e.message.c_str()));
  if (!header.is_object())
    return corrupt(strprintf("'%s': the safetensors header is not a valid JSON object", label.c_str()));

  uint64_t data_size = file_size - 8 - header_bytes;
  for (const auto &[name, entry] : header.items()) {
    if (name == "__metadata__") continue;  // free-form string map; not needed
    SafetensorsTensor tensor;
    if (Error e = parse_entry(label, name, entry, data_size, &tensor)) return e;
    tensors->push_back(std::move(tensor));
  }

  // No two tensors may share bytes (empty tensors occupy none).
  std::sort(tensors->begin(), tensors->end(), [](const SafetensorsTensor &a, const SafetensorsTensor &b) {
    return a.data_begin != b.data_begin ? a.data_begin < b.data_begin : a.data_end < b.data_end;
  });
  const SafetensorsTensor *previous = nullptr;
  for (const SafetensorsTensor &t : *tensors) {
    if (t.byte_size() == 0) continue;
    if (previous && t.data_begin < previous->data_end)
      return corrupt(strprintf("'%s': tensors '%s' (bytes %llu..%llu) and '%s' (bytes %llu..%llu) overlap",
                               label.c_str(), previous->name.c_str(), ull(previous->data_begin),
                               ull(previous->data_end), t.name.c_str(), ull(t.data_begin), ull(t.data_end)));
    previous = &t;
  }
  *data_section_offset = 8 + header_bytes;
  return {};
}

// ---- SafetensorsShard ---------------------------------------------------------------

SafetensorsShard::~SafetensorsShard() {
  if (base_) ::munmap(base_, size_);
}

Error SafetensorsShard::open(const std::string &path, const std::string &name, std::unique_ptr<SafetensorsShard> *out) {
  // O_NONBLOCK: a FIFO is refused below instead of blocking the open until a writer comes.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int e = errno;
    return make_error(ErrorKind::Io, strprintf("cannot open '%s': %s", path.c_str(), util::errno_text(e).c_str()));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(ErrorKind::Io, strprintf("'%s' is not a regular file", path.c_str()));
  }
  std::unique_ptr<SafetensorsShard> shard(new SafetensorsShard());
  shard->path_ = path;
  shard->name_ = name;
  shard->size_ = static_cast<uint64_t>(st.st_size);
  if (shard->size_ > 0) {
    void *map = ::mmap(nullptr, shard->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return make_error(ErrorKind::Io, strprintf("cannot map '%s': %s", path.c_str(), util::errno_text(e).c_str()));
    }
    shard->base_ = static_cast<unsigned char *>(map);
    ::madvise(shard->base_, shard->size_, MADV_SEQUENTIAL);
  }
  ::close(fd);
  if (Error e = parse_safetensors(shard->base_, shard->size_, name, &shard->tensors_, &shard->data_offset_)) return e;
  *out = std::move(shard);
  return {};
}

void SafetensorsShard::release(const unsigned char *pointer, uint64_t bytes) const {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (!base_ || bytes == 0) return;
  uint64_t begin = static_cast<uint64_t>(pointer - base_);
  uint64_t end = std::min(size_, begin + bytes);
  // Round outwards: a neighbouring tensor that shares a page simply faults it in again.
  begin &= ~(page - 1);
  end = std::min(size_, (end + page - 1) & ~(page - 1));
  if (end > begin) ::madvise(base_ + begin, end - begin, MADV_DONTNEED);
}

// ---- SafetensorsCheckpoint ------------------------------------------------------------

namespace {

constexpr const char *kIndexFile = "model.safetensors.index.json";
constexpr const char *kSingleFile = "model.safetensors";

// Explains what the directory holds instead of a safetensors checkpoint.
Error no_checkpoint_error(const std::string &directory) {
  std::vector<std::string> safetensors, pytorch;
  std::error_code ec;
  for (const auto &entry : std::filesystem::directory_iterator(directory, ec)) {
    std::string name = entry.path().filename().string();
    if (name.size() > 12 && name.ends_with(".safetensors")) safetensors.push_back(name);
    if (name.ends_with(".bin") || name.ends_with(".pt") || name.ends_with(".pth")) pytorch.push_back(name);
  }
  std::sort(safetensors.begin(), safetensors.end());
  if (!safetensors.empty())
    return make_error(ErrorKind::Io,
                      strprintf("'%s' has no %s or %s, but holds '%s': the converter reads Hugging Face checkpoints "
                                "(one model.safetensors, or shards listed by model.safetensors.index.json)",
                                directory.c_str(), kSingleFile, kIndexFile, safetensors.front().c_str()));
  if (!pytorch.empty())
    return make_error(ErrorKind::Unsupported,
                      strprintf("'%s' holds a PyTorch checkpoint ('%s'), which is not supported: re-save it as "
                                "safetensors (transformers: model.save_pretrained(dir, safe_serialization=True))",
                                directory.c_str(), pytorch.front().c_str()));
  return make_error(ErrorKind::Io, strprintf("'%s' has no %s or %s", directory.c_str(), kSingleFile, kIndexFile));
}

}  // namespace

Error SafetensorsCheckpoint::add_shard(const std::string &directory, const std::string &file) {
  std::unique_ptr<SafetensorsShard> shard;
  if (Error e = SafetensorsShard::open(directory + "/" + file, file, &shard)) return e;
  size_t index = shards_.size();
  for (const SafetensorsTensor &t : shard->tensors()) {
    tensors_.push_back(t);
    tensors_.back().shard = index;
  }
  shards_.push_back(std::move(shard));
  return {};
}

void SafetensorsCheckpoint::build_lookup() {
  std::sort(tensors_.begin(), tensors_.end(),
            [](const SafetensorsTensor &a, const SafetensorsTensor &b) { return a.name < b.name; });
  by_name_.clear();
  for (size_t i = 0; i < tensors_.size(); ++i) by_name_.emplace(tensors_[i].name, i);
}

const SafetensorsTensor *SafetensorsCheckpoint::find(const std::string &name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

Error SafetensorsCheckpoint::open(const std::string &directory, SafetensorsCheckpoint *out) {
  SafetensorsCheckpoint checkpoint;
  std::string index_path = directory + "/" + kIndexFile;
  std::map<std::string, std::string> weight_map;  // tensor -> shard file

  if (path_exists(index_path)) {
    std::string text;
    if (Error e = read_whole_file(index_path, &text)) return e;
    nlohmann::json index;
    if (Error e = util::parse_json(text, strprintf("'%s'", kIndexFile), &index)) return corrupt(e.message);
    if (!index.is_object()) return corrupt(strprintf("'%s' is not a valid JSON object", kIndexFile));
    auto map = index.find("weight_map");
    if (map == index.end() || !map->is_object())
      return corrupt(strprintf("'%s' has no \"weight_map\" object", kIndexFile));
    for (const auto &[tensor, file] : map->items()) {
      if (!file.is_string())
        return corrupt(strprintf("'%s': the shard of tensor '%s' is not a string", kIndexFile, tensor.c_str()));
      std::string name = file.get<std::string>();
      if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
        return corrupt(strprintf("'%s': tensor '%s' is placed in '%s', which is not a file name in the checkpoint "
                                 "directory",
                                 kIndexFile, tensor.c_str(), name.c_str()));
      weight_map.emplace(tensor, name);
    }
    if (weight_map.empty()) return corrupt(strprintf("'%s' lists no tensors", kIndexFile));
    checkpoint.index_file_ = kIndexFile;

    std::set<std::string> files;
    for (const auto &entry : weight_map) files.insert(entry.second);
    for (const std::string &file : files) {
      if (!path_exists(directory + "/" + file))
        return make_error(ErrorKind::Io, strprintf("shard '%s' is listed in %s but is missing from '%s'; download it "
                                                   "again",
                                                   file.c_str(), kIndexFile, directory.c_str()));
      if (Error e = checkpoint.add_shard(directory, file)) return e;
    }
  } else if (path_exists(directory + "/" + kSingleFile)) {
    if (Error e = checkpoint.add_shard(directory, kSingleFile)) return e;
  } else {
    return no_checkpoint_error(directory);
  }

  checkpoint.build_lookup();
  for (size_t i = 1; i < checkpoint.tensors_.size(); ++i) {
    const SafetensorsTensor &a = checkpoint.tensors_[i - 1], &b = checkpoint.tensors_[i];
    if (a.name == b.name)
      return corrupt(strprintf("tensor '%s' appears in both '%s' and '%s'", a.name.c_str(),
                               checkpoint.shards_[a.shard]->name().c_str(), checkpoint.shards_[b.shard]->name().c_str()));
  }
  for (const auto &[tensor, file] : weight_map) {
    const SafetensorsTensor *found = checkpoint.find(tensor);
    if (!found || checkpoint.shards_[found->shard]->name() != file)
      return corrupt(strprintf("%s places tensor '%s' in '%s', but '%s' does not contain it", kIndexFile,
                               tensor.c_str(), file.c_str(), file.c_str()));
  }
  *out = std::move(checkpoint);
  return {};
}

}  // namespace colibri::modeltool::convert

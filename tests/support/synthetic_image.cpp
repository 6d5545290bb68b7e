// tests/support/synthetic_image.cpp — deterministic synthetic images for tests and benches.
#include "support/synthetic_image.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>

#include <nlohmann/json.hpp>

#include "image/dtype_convert.h"
#include "model/tensor_names.h"

namespace colibri::testing {

namespace names = model::names;

Error write_synthetic_image(const std::string &path, const SyntheticImageSpec &spec, bool overwrite) {
  std::vector<image::TensorSpec> tensors;
  auto add = [&](std::string name, std::vector<uint64_t> shape, bool matrix) {
    names::StoragePolicy policy;
    policy.requested = spec.dtype;
    const names::StorageChoice choice =
        matrix ? names::storage_choice(policy, name, static_cast<uint32_t>(shape.size()), shape.back())
               : names::StorageChoice{};
    tensors.push_back({std::move(name), choice.dtype, choice.group_size, std::move(shape)});
  };
  add(names::kTokenEmbedding, {spec.vocab, spec.hidden}, true);
  for (uint64_t l = 0; l < spec.layers; ++l) {
    add(names::layer_tensor(l, names::kAttnNorm), {spec.hidden}, false);
    add(names::layer_tensor(l, names::kFfnNorm), {spec.hidden}, false);
    add(names::layer_tensor(l, names::kRouter), {spec.experts, spec.hidden}, true);
    add(names::layer_tensor(l, names::kExpertsGate), {spec.experts, spec.ffn, spec.hidden}, true);
    add(names::layer_tensor(l, names::kExpertsUp), {spec.experts, spec.ffn, spec.hidden}, true);
    add(names::layer_tensor(l, names::kExpertsDown), {spec.experts, spec.hidden, spec.ffn}, true);
  }
  add(names::kOutputNorm, {spec.hidden}, false);
  add(names::kOutput, {spec.vocab, spec.hidden}, true);

  nlohmann::json meta = {{"colibri_format", 1},
                         {"synthetic", {{"seed", spec.seed}, {"layers", spec.layers}}},
                         {"provenance", {{"converter", "tests/support/synthetic_image"}}}};
  image::ModelHeaderFields fields;
  fields.expert_count = spec.experts;
  fields.hidden_size = spec.hidden;
  fields.ffn_hidden_size = spec.ffn;
  fields.top_k = spec.top_k;
  fields.layer_count = spec.layers;
  fields.gate_tensor_name = names::layer_tensor(0, names::kRouter);
  fields.expert_size_bytes = names::expert_size_bytes(tensors, spec.experts);

  image::WriterOptions options;
  options.alignment = spec.alignment;
  options.overwrite = overwrite;
  image::ImageWriter writer;
  if (Error e = writer.begin(path, options, fields, tensors, meta.dump())) return e;
  std::mt19937 rng(spec.seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<float> row;
  std::vector<unsigned char> encoded;
  for (const auto &t : tensors) {
    uint64_t cols = t.shape.back();
    uint64_t rows = 1;
    for (size_t d = 0; d + 1 < t.shape.size(); ++d) rows *= t.shape[d];
    row.resize(cols);
    encoded.resize(image::row_bytes(t.dtype, t.group_size, cols));
    for (uint64_t r = 0; r < rows; ++r) {
      for (auto &v : row) v = t.shape.size() == 1 ? 1.0f + 0.1f * normal(rng) : normal(rng);
      if (image::is_block_dtype(t.dtype)) image::quantize_row(t.dtype, t.group_size, row.data(), cols, encoded.data());
      else image::encode_floats(t.dtype, row.data(), cols, encoded.data());
      if (Error e = writer.append(encoded.data(), encoded.size())) return e;
    }
  }
  return writer.finish();
}

std::vector<unsigned char> read_file(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_file(const std::string &path, const std::vector<unsigned char> &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

bool refresh_header_checksum(std::vector<unsigned char> &bytes) {
  if (bytes.size() < image::kHeaderSize) return false;
  image::FileHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  uint64_t size = bytes.size();
  if (h.directory_offset != image::kHeaderSize || h.directory_size > size - image::kHeaderSize) return false;
  uint64_t dir_end = image::kHeaderSize + h.directory_size;
  if (h.metadata_offset != dir_end || h.metadata_size > size - dir_end) return false;
  h.header_checksum = image::header_checksum(h, bytes.data() + image::kHeaderSize, h.directory_size,
                                             bytes.data() + h.metadata_offset, h.metadata_size);
  std::memcpy(bytes.data(), &h, sizeof h);
  return true;
}

image::TensorEntry *entry_at(std::vector<unsigned char> &bytes, size_t i) {
  return reinterpret_cast<image::TensorEntry *>(bytes.data() + image::kHeaderSize + i * image::kTensorEntrySize);
}

namespace {

// The directories this process made, removed with their contents when it exits. A forked
// child that exits normally runs the same destructor, so only the process that made them
// removes them.
class TempDirRegistry {
 public:
  ~TempDirRegistry() {
    if (::getpid() != owner_) return;
    for (const std::string &dir : dirs_) {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  }
  void add(std::string dir) {
    std::lock_guard<std::mutex> lock(mutex_);
    dirs_.push_back(std::move(dir));
  }

 private:
  const pid_t owner_ = ::getpid();
  std::mutex mutex_;
  std::vector<std::string> dirs_;
};

TempDirRegistry &temp_dir_registry() {
  static TempDirRegistry registry;
  return registry;
}

std::string make_temp_dir(const std::string &parent, const std::string &tag) {
  TempDirRegistry &registry = temp_dir_registry();  // constructed first, so destroyed last
  std::string tmpl = parent + "/colibri-test-" + tag + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  char *dir = mkdtemp(buf.data());
  if (!dir) return std::string();
  registry.add(dir);
  return std::string(dir);
}

}  // namespace

std::string temp_dir(const std::string &tag) {
  std::string dir = make_temp_dir("/tmp", tag);
  return dir.empty() ? std::string("/tmp") : dir;
}

std::string memory_temp_dir(const std::string &tag) {
  std::string dir = ::access("/dev/shm", W_OK) == 0 ? make_temp_dir("/dev/shm", tag) : std::string();
  return dir.empty() ? temp_dir(tag) : dir;
}

}  // namespace colibri::testing

// tests/convert/safetensors_writer.cpp — streaming safetensors writer and re-sharding.
#include "convert/safetensors_writer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "modeltool/convert/safetensors.h"
#include "util/strings.h"

namespace colibri::testing {

namespace fs = std::filesystem;

uint64_t safetensors_tensor_bytes(const SafetensorsEntry &entry) {
  uint64_t n = 1;
  for (uint64_t d : entry.shape) n *= d;
  uint32_t bits = modeltool::convert::safetensors_dtype_bits(entry.dtype);
  return n * (bits ? bits : 8) / 8;
}

Error write_safetensors(const std::string &path, const std::vector<SafetensorsEntry> &tensors, const TensorFiller &fill,
                        const nlohmann::json &metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const SafetensorsEntry &t : tensors) {
    uint64_t bytes = safetensors_tensor_bytes(t);
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // as the safetensors library does: data starts 8-aligned

  std::unique_ptr<FILE, int (*)(FILE *)> file(std::fopen(path.c_str(), "wb"), std::fclose);
  if (!file) return make_error(ErrorKind::Io, "cannot create " + path);
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * i));
  bool ok = std::fwrite(length, 1, 8, file.get()) == 8 && std::fwrite(text.data(), 1, text.size(), file.get()) == text.size();
  std::vector<unsigned char> chunk(1u << 20);
  for (size_t i = 0; i < tensors.size() && ok; ++i) {
    uint64_t bytes = safetensors_tensor_bytes(tensors[i]);
    for (uint64_t done = 0; done < bytes && ok; done += chunk.size()) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), bytes - done));
      fill(i, done, chunk.data(), n);
      ok = std::fwrite(chunk.data(), 1, n, file.get()) == n;
    }
  }
  if (!ok || std::fflush(file.get()) != 0) return make_error(ErrorKind::Io, "writing " + path + " failed");
  return {};
}

Error shard_checkpoint(const std::string &source_dir, const std::string &target_dir, size_t shard_count) {
  using modeltool::convert::SafetensorsShard;
  std::unique_ptr<SafetensorsShard> source;
  if (Error e = SafetensorsShard::open(source_dir + "/model.safetensors", "model.safetensors", &source)) return e;
  fs::create_directories(target_dir);
  for (const auto &entry : fs::directory_iterator(source_dir))
    if (entry.path().extension() == ".json" || entry.path().extension() == ".jinja")
      fs::copy_file(entry.path(), target_dir + "/" + entry.path().filename().string(),
                    fs::copy_options::overwrite_existing);

  // Tensors in name order, cut into shard_count runs of about equal count.
  std::vector<const modeltool::convert::SafetensorsTensor *> order;
  for (const auto &t : source->tensors()) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto *a, auto *b) { return a->name < b->name; });
  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t total_size = 0;
  for (size_t s = 0; s < shard_count; ++s) {
    size_t begin = order.size() * s / shard_count, end = order.size() * (s + 1) / shard_count;
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shard_count);
    std::vector<SafetensorsEntry> entries;
    std::vector<const unsigned char *> data;
    for (size_t i = begin; i < end; ++i) {
      entries.push_back({order[i]->name, order[i]->dtype, order[i]->shape});
      data.push_back(source->data(*order[i]));
      weight_map[order[i]->name] = name;
      total_size += order[i]->byte_size();
    }
    auto fill = [&](size_t index, uint64_t offset, unsigned char *out, size_t bytes) {
      std::memcpy(out, data[index] + offset, bytes);
    };
    if (Error e = write_safetensors(target_dir + "/" + name, entries, fill)) return e;
  }
  nlohmann::json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  write_text(target_dir + "/model.safetensors.index.json", index.dump(2));
  return {};
}

std::string read_text(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void write_text(const std::string &path, const std::string &text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

}  // namespace colibri::testing

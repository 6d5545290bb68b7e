// tests/convert/safetensors_writer.h — writes safetensors files for the converter's tests
// and benchmark: tensors laid out contiguously in the given order, data streamed through a
// caller-supplied filler (so multi-GiB checkpoints never sit in memory), and a helper that
// re-shards a checkpoint directory the way transformers' save_pretrained does.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace colibri::testing {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;            // written as-is: "F32", "BF16", "F8_E4M3", ...
  std::vector<uint64_t> shape;
};

// Bytes of a tensor of a byte-sized safetensors dtype (F32 4, F16/BF16 2, F8_* / I8 / U8 1, ...).
uint64_t safetensors_tensor_bytes(const SafetensorsEntry &entry);

// Fills out[0, bytes) with bytes [offset, offset + bytes) of tensor `index`.
using TensorFiller = std::function<void(size_t index, uint64_t offset, unsigned char *out, size_t bytes)>;

// Writes one safetensors file. `metadata` (a string map) becomes "__metadata__" when not null.
Error write_safetensors(const std::string &path, const std::vector<SafetensorsEntry> &tensors, const TensorFiller &fill,
                        const nlohmann::json &metadata = nullptr);

// Copies the checkpoint in `source_dir` (model.safetensors + the JSON files) to `target_dir`
// with its tensors split over `shard_count` files model-0000i-of-0000n.safetensors and a
// model.safetensors.index.json weight map, tensor bytes unchanged.
Error shard_checkpoint(const std::string &source_dir, const std::string &target_dir, size_t shard_count);

// Whole-file helpers.
std::string read_text(const std::string &path);
void write_text(const std::string &path, const std::string &text);

}  // namespace colibri::testing

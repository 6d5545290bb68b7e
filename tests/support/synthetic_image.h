// tests/support/synthetic_image.h — builds small, valid, deterministic images through the
// public writer API, and helpers to damage them in controlled ways. Used by the unit tests,
// the fuzz seed generator and the benchmarks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "image/format.h"
#include "image/writer.h"
#include "util/error.h"

namespace colibri::testing {

struct SyntheticImageSpec {
  uint64_t layers = 2;
  uint64_t hidden = 64;
  uint64_t ffn = 32;
  uint64_t experts = 4;
  uint64_t top_k = 2;
  uint64_t vocab = 128;
  image::DType dtype = image::DType::F32;  // of matrix weights
  uint64_t alignment = image::kMinAlignment;
  uint32_t seed = 1;
};

// Writes a MoE-shaped image (embedding, per-layer norms, router, stacked experts, output)
// with seeded random values to `path`. Tensor bytes are generated row by row (streaming),
// so this also builds multi-GiB images for benchmarks without holding them in memory.
Error write_synthetic_image(const std::string &path, const SyntheticImageSpec &spec, bool overwrite = true);

// Reads a whole file into memory.
std::vector<unsigned char> read_file(const std::string &path);
void write_file(const std::string &path, const std::vector<unsigned char> &bytes);

// Recomputes the header checksum of an image held in memory (after a deliberate edit), when
// its region sizes allow; returns false otherwise.
bool refresh_header_checksum(std::vector<unsigned char> &bytes);

// Directory entry i of an in-memory image (a pointer into `bytes`).
image::TensorEntry *entry_at(std::vector<unsigned char> &bytes, size_t i);

// A fresh, empty temporary directory, removed with its contents when the process that made it
// exits normally (a test that fails its assertions still exits normally).
std::string temp_dir(const std::string &tag);
// The same in memory (/dev/shm) where the machine has it, else temp_dir: for tests that write
// hundreds of small images through the writer, whose fsync would otherwise dominate.
std::string memory_temp_dir(const std::string &tag);

}  // namespace colibri::testing

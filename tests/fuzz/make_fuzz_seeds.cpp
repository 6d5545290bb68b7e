// tests/fuzz/make_fuzz_seeds.cpp — writes the seed corpus for fuzz_image_reader into a
// directory: small valid images (f32, f16, q8; alignments 64 and 4096), complete small models
// (so that mutations reach the model binding), and broken ones (truncated, bad magic, bad
// version, misaligned entry).
#include <cstdio>
#include <cstring>
#include <string>

#include "support/synthetic_image.h"
#include "support/synthetic_model.h"

using namespace colibri;

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_fuzz_seeds OUT_DIR\n");
    return 2;
  }
  std::string dir = argv[1];
  int n = 0;
  for (image::DType dtype : {image::DType::F32, image::DType::F16, image::DType::Q8}) {
    testing::SyntheticImageSpec spec;
    spec.layers = 1;
    spec.hidden = 32;
    spec.ffn = 32;
    spec.experts = 2;
    spec.top_k = 1;
    spec.vocab = 8;
    spec.dtype = dtype;
    std::string path = dir + "/valid_" + image::dtype_name(dtype) + ".colibri";
    if (Error e = testing::write_synthetic_image(path, spec)) {
      std::fprintf(stderr, "make_fuzz_seeds: %s\n", e.message.c_str());
      return 1;
    }
    ++n;
    auto bytes = testing::read_file(path);
    auto cut = bytes;
    cut.resize(bytes.size() / 2);
    testing::write_file(dir + "/truncated_" + image::dtype_name(dtype) + ".bin", cut);
    auto magic = bytes;
    magic[0] = 'X';
    testing::write_file(dir + "/badmagic_" + image::dtype_name(dtype) + ".bin", magic);
    auto version = bytes;
    version[8] = 9;
    testing::refresh_header_checksum(version);
    testing::write_file(dir + "/version_" + image::dtype_name(dtype) + ".bin", version);
    auto misaligned = bytes;
    testing::entry_at(misaligned, 1)->data_offset += 4;
    testing::refresh_header_checksum(misaligned);
    testing::write_file(dir + "/misaligned_" + image::dtype_name(dtype) + ".bin", misaligned);
    n += 4;
  }
  // Models under the fuzzer's 64 KiB input limit: 1 layer, hidden 32, 2 experts.
  model::ModelConfig c = testing::tiny_model_config();
  c.vocab_size = 16;
  c.hidden_size = 32;
  c.layer_count = 1;
  c.head_count = 2;
  c.kv_head_count = 1;
  c.expert_count = 2;
  c.top_k = 1;
  c.layer_is_moe = {1};
  for (image::DType dtype : {image::DType::F16, image::DType::Q8}) {
    std::string path = dir + "/model_" + image::dtype_name(dtype) + ".colibri";
    if (Error e = testing::write_synthetic_model(path, c, dtype)) {
      std::fprintf(stderr, "make_fuzz_seeds: %s\n", e.message.c_str());
      return 1;
    }
    ++n;
  }
  std::printf("wrote %d seeds to %s\n", n, dir.c_str());
  return 0;
}

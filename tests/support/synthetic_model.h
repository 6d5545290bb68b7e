// tests/support/synthetic_model.h — complete, runnable model images (every tensor a
// ModelConfig implies, the "model" and "tokenizer" metadata, header fields from
// model::header_fields), built in pieces so that tests can break any one piece: a header
// field, a metadata field, a tensor's presence, shape or dtype.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "image/format.h"
#include "image/writer.h"
#include "model/config.h"
#include "util/error.h"

namespace colibri::testing {

// A tiny Mixtral-style model: 2 MoE layers, hidden 64, 4 heads of 16 (2 KV heads), 4 experts
// of FFN 32 (top 2), vocabulary 40.
model::ModelConfig tiny_model_config();

// A tokenizer.json for a vocabulary of `vocab` ids (a BPE over single letters and pairs) and
// a one-line chat template.
std::string tiny_tokenizer_json(uint64_t vocab);

// The parts an image is written from. Edit them, then write_model_parts.
struct ModelImageParts {
  nlohmann::json metadata;                 // {"colibri_format", "model", "tokenizer", "provenance"}
  std::string metadata_text;               // non-empty: written instead of metadata.dump() (for JSON
                                           // that nlohmann cannot print, e.g. nested a million deep)
  std::vector<image::TensorSpec> tensors;  // in file order
  image::ModelHeaderFields header;
  uint64_t alignment = image::kMinAlignment;
  // Tensors whose every value is written as NaN (a float dtype: q8 cannot hold one), for the
  // non-finite guard's tests.
  std::vector<std::string> nan_tensors;
};

// The consistent parts of a model with `config`: matrices in `dtype` (the storage policy of
// names::storage_choice: vectors and routers stay f32; q4/mxfp4 experts with q8f16 for the
// other matrices), q8 and q4 with `group_size`.
ModelImageParts model_parts(const model::ModelConfig &config, image::DType dtype = image::DType::F32,
                            uint32_t group_size = image::kQ8DefaultGroupSize);

// Writes the parts with seeded random values (matrices ~N(0, 0.5²)·scale, vectors ~1).
Error write_model_parts(const std::string &path, const ModelImageParts &parts, uint32_t seed = 1);

// metadata.dump() with `raw_member` ("\"key\": VALUE", any text) added as the last member.
std::string metadata_with_raw_member(const nlohmann::json &metadata, const std::string &raw_member);

// model_parts + write_model_parts.
Error write_synthetic_model(const std::string &path, const model::ModelConfig &config = tiny_model_config(),
                            image::DType dtype = image::DType::F32, uint32_t seed = 1);

}  // namespace colibri::testing

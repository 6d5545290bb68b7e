// core/model/header_fields.h — the fixed header's model fields (the original Colibri
// container's expert count, expert size, hidden size, FFN size, top-k and gate offset, plus
// the layer count) as a function of the model metadata and the tensor directory: the one
// definition the converter and repack write and every open checks, so that the header can
// never say something the metadata does not (docs/format.md, "Header").
#pragma once

#include <cstdint>
#include <vector>

#include "image/reader.h"
#include "image/writer.h"
#include "model/config.h"
#include "util/error.h"

namespace colibri::model {

// The lowest format version whose semantics the model uses (format.h): 3 for the families
// glm4_moe, minimax_m2, gpt_oss and deepseek_v3, 1 for the others.
uint32_t min_format_version(const ModelConfig &config);

// What the header must hold for a model with `config` stored as `tensors`: min_version
// (min_format_version); hidden size and
// layer count from the config; expert count, expert FFN size, top-k and the gate tensor (the
// router) from the first MoE layer, 0 / none for a model without one; expert_size_bytes from
// the stored experts of that layer (names::expert_size_bytes).
image::ModelHeaderFields header_fields(const ModelConfig &config, const std::vector<image::TensorSpec> &tensors);

// The directory of an opened image as writer specs (name, dtype, group size, shape).
std::vector<image::TensorSpec> tensor_specs(const image::Image &image);

// Compares the header's model fields with header_fields(config, directory): a Corrupt error
// naming the first field that differs, both values and the fix; a version lower than the
// model needs is one too. weight_data_offset is checked
// by the reader (it must be the first tensor's offset).
Error check_header_fields(const image::Image &image, const ModelConfig &config);

}  // namespace colibri::model

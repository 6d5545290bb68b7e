// core/model/header_fields.cpp — the header's model fields from the metadata, and the check
// that an image's header agrees with them.
#include "model/header_fields.h"

#include "model/tensor_names.h"
#include "util/strings.h"

namespace colibri::model {

using util::strprintf;

uint32_t min_format_version(const ModelConfig &config) {
  const std::string &f = config.family;
  if (f == kFamilyGlm4Moe || f == kFamilyMinimaxM2 || f == kFamilyGptOss || f == kFamilyDeepseekV3)
    return image::kFirstVersionWithV3Families;
  return 1;
}

image::ModelHeaderFields header_fields(const ModelConfig &config, const std::vector<image::TensorSpec> &tensors) {
  image::ModelHeaderFields fields;
  fields.min_version = min_format_version(config);
  fields.hidden_size = config.hidden_size;
  fields.layer_count = config.layer_count;
  for (uint64_t layer = 0; layer < config.layer_count && layer < config.layer_is_moe.size(); ++layer) {
    if (!config.layer_is_moe[layer]) continue;
    fields.expert_count = config.expert_count;
    fields.ffn_hidden_size = config.expert_ffn_size;
    fields.top_k = config.top_k;
    fields.gate_tensor_name = names::layer_tensor(layer, names::kRouter);
    fields.expert_size_bytes = names::expert_size_bytes(tensors, config.expert_count);
    break;
  }
  return fields;
}

std::vector<image::TensorSpec> tensor_specs(const image::Image &image) {
  std::vector<image::TensorSpec> specs;
  specs.reserve(image.tensors().size());
  for (const image::TensorInfo &t : image.tensors())
    specs.push_back({t.name, t.dtype, t.group_size, std::vector<uint64_t>(t.shape, t.shape + t.rank)});
  return specs;
}

Error check_header_fields(const image::Image &image, const ModelConfig &config) {
  const image::ModelHeaderFields want = header_fields(config, tensor_specs(image));
  uint64_t gate_offset = 0;
  if (!want.gate_tensor_name.empty()) {
    const image::TensorInfo *gate = image.find(want.gate_tensor_name);
    if (gate) gate_offset = gate->offset;
  }
  const image::FileHeader &h = image.header();
  if (h.version < want.min_version)
    return make_error(ErrorKind::Corrupt,
                      strprintf("'%s': model family '%s' needs image format version %u, but the image says version %u: "
                                "a faulty writer or a hand edit (a build older than version %u would misread it). "
                                "Re-convert the checkpoint, or rewrite the header with colibri-model repack IN OUT",
                                image.path().c_str(), config.family.c_str(), want.min_version, h.version,
                                want.min_version));
  struct Field {
    const char *name;
    uint64_t stored, implied;
    const char *source;
  };
  const Field fields[] = {
      {"expert_count", h.expert_count, want.expert_count, "the model metadata's expert_count (first MoE layer)"},
      {"expert_size_bytes", h.expert_size_bytes, want.expert_size_bytes,
       "the first MoE layer's stored expert tensors divided by expert_count"},
      {"hidden_size", h.hidden_size, want.hidden_size, "the model metadata's hidden_size"},
      {"ffn_hidden_size", h.ffn_hidden_size, want.ffn_hidden_size, "the model metadata's expert_ffn_size (first MoE layer)"},
      {"top_k", h.top_k, want.top_k, "the model metadata's top_k (first MoE layer)"},
      {"gate_weight_offset", h.gate_weight_offset, gate_offset,
       want.gate_tensor_name.empty() ? "a model without MoE layers (no router)"
                                     : "the offset of the first MoE layer's router tensor"},
      {"layer_count", h.layer_count, want.layer_count, "the model metadata's layer_count"},
  };
  for (const Field &f : fields) {
    if (f.stored == f.implied) continue;
    return make_error(ErrorKind::Corrupt,
                      strprintf("'%s': header field %s is %llu, but %s gives %llu: the fixed header disagrees with the "
                                "metadata and tensor directory it was written with (a faulty writer or a hand edit). "
                                "Re-convert the checkpoint, or rewrite the header from the metadata with colibri-model "
                                "repack IN OUT",
                                image.path().c_str(), f.name, static_cast<unsigned long long>(f.stored), f.source,
                                static_cast<unsigned long long>(f.implied)));
  }
  return {};
}

}  // namespace colibri::model

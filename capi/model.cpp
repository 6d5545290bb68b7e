// capi/model.cpp — colibri_model_*: open an image with options, close (reference-counted:
// sessions keep the model alive), the info struct, EOS ids, metadata and the tensor listing.
#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstddef>

#include "capi/internal.h"
#include "util/strings.h"

using namespace colibri;
using capi::ModelState;

namespace {

// ABI-1 sizes: the smallest struct a caller can pass (struct_size checks).
// colibri_model_options grew load_into_memory after its first layout.
constexpr size_t kModelOptionsAbi1 = offsetof(colibri_model_options, load_into_memory);
// colibri_model_info grew rotary_dim and the sigmoid-routing fields after numa_report.
constexpr size_t kModelInfoAbi1 = offsetof(colibri_model_info, rotary_dim);
constexpr size_t kTensorInfoAbi1 = sizeof(colibri_tensor_info);

colibri_model_options default_model_options() {
  colibri_model_options o{};
  o.struct_size = sizeof o;
  o.populate = 0;
  o.advice = COLIBRI_ADVICE_HUGEPAGE;
  o.lock_memory = 0;
  o.verify_checksums = 0;
  o.threads = 0;
  o.pin_threads = COLIBRI_PIN_DEFAULT;
  o.non_finite_policy = COLIBRI_NON_FINITE_DEFAULT;
  o.numa_policy = COLIBRI_NUMA_DEFAULT;
  o.numa_node = 0;
  o.warm_up = 0;
  o.load_into_memory = 0;
  return o;
}

int32_t check_model_options(const colibri_model_options &o) {
  auto flag = [](uint32_t v, const char *name) -> int32_t {
    if (v > 1) return capi::invalid(std::string("colibri_model_options.") + name + " is " + std::to_string(v) + "; use 0 or 1");
    return COLIBRI_OK;
  };
  if (int32_t s = flag(o.populate, "populate")) return s;
  if (int32_t s = flag(o.lock_memory, "lock_memory")) return s;
  if (int32_t s = flag(o.verify_checksums, "verify_checksums")) return s;
  COLIBRI_REQUIRE_ARG(o.advice <= COLIBRI_ADVICE_HUGEPAGE,
                      "colibri_model_options.advice " + std::to_string(o.advice) + " is not a COLIBRI_ADVICE_* value (0..4)");
  COLIBRI_REQUIRE_ARG(o.threads <= 1024, "colibri_model_options.threads " + std::to_string(o.threads) + " is out of range (0..1024)");
  COLIBRI_REQUIRE_ARG(o.pin_threads <= COLIBRI_PIN_ON,
                      "colibri_model_options.pin_threads " + std::to_string(o.pin_threads) + " is not a COLIBRI_PIN_* value (0..2)");
  COLIBRI_REQUIRE_ARG(o.non_finite_policy <= COLIBRI_NON_FINITE_ZERO,
                      "colibri_model_options.non_finite_policy " + std::to_string(o.non_finite_policy) +
                          " is not a COLIBRI_NON_FINITE_* value (0..2)");
  COLIBRI_REQUIRE_ARG(o.numa_policy <= COLIBRI_NUMA_INTERLEAVE,
                      "colibri_model_options.numa_policy " + std::to_string(o.numa_policy) + " is not a COLIBRI_NUMA_* value (0..3)");
  COLIBRI_REQUIRE_ARG(o.numa_node <= 4095, "colibri_model_options.numa_node " + std::to_string(o.numa_node) + " is out of range");
  if (int32_t s = flag(o.warm_up, "warm_up")) return s;
  if (int32_t s = flag(o.load_into_memory, "load_into_memory")) return s;
  return COLIBRI_OK;
}

// Parameter and byte counts: all tensors; "active" keeps top_k of the expert_count experts of
// each MoE layer and, for the bytes a decode token reads, one row of an untied embedding.
void count_parameters(ModelState &s) {
  const model::Model &m = *s.model;
  const model::ModelConfig &c = m.config();
  uint64_t params = 0, bytes = 0;
  for (const image::TensorInfo &t : m.image().tensors()) {
    params += t.element_count();
    bytes += t.size;
  }
  uint64_t active_params = params, active_bytes = bytes;
  bool have_dtype = false;
  for (const model::LayerWeights &w : m.layers()) {
    if (!w.is_moe) continue;
    for (const model::WeightMatrix *x : {&w.experts_gate, &w.experts_up, &w.experts_down}) {
      if (!x->present()) continue;
      uint64_t unused = x->count > c.top_k ? x->count - c.top_k : 0;
      active_params -= unused * x->rows * x->cols;
      active_bytes -= unused * x->matrix_bytes;
      if (!have_dtype) {
        s.weight_dtype = static_cast<uint32_t>(x->dtype);
        s.weight_group_size = x->group_size;
        have_dtype = true;
      }
    }
  }
  const model::WeightMatrix &embd = m.token_embedding();
  if (!c.tie_word_embeddings && embd.present()) active_bytes -= embd.matrix_bytes - embd.row_bytes;
  if (!have_dtype && embd.present()) {
    s.weight_dtype = static_cast<uint32_t>(embd.dtype);
    s.weight_group_size = embd.group_size;
  }
  s.parameter_count = params;
  s.active_parameter_count = active_params;
  s.active_weight_bytes = active_bytes;
}

int32_t to_token_id(int64_t id) { return id >= 0 && id <= INT32_MAX ? static_cast<int32_t>(id) : -1; }

}  // namespace

extern "C" {

COLIBRI_API int32_t colibri_model_options_init(colibri_model_options *options, size_t struct_size) {
  return capi::options_init(__func__, options, struct_size, default_model_options, kModelOptionsAbi1, "colibri_model_options");
}

COLIBRI_API int32_t colibri_model_open(const char *path, const colibri_model_options *options, colibri_model **model_out) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_ARG(model_out, "model_out must not be NULL");
    *model_out = nullptr;
    COLIBRI_REQUIRE_ARG(path, "path must not be NULL");
    COLIBRI_REQUIRE_ARG(*path, "path is empty; give the path of a .colibri image");
    colibri_model_options o = default_model_options();
    if (int32_t s = capi::read_options(options, &o, kModelOptionsAbi1, "colibri_model_options")) return s;
    if (int32_t s = check_model_options(o)) return s;

    auto start = std::chrono::steady_clock::now();
    model::LoadOptions lo;
    lo.image.populate = o.populate != 0;
    lo.image.advice = static_cast<image::MapAdvice>(o.advice);
    lo.image.lock = o.lock_memory != 0;
    lo.image.verify_checksums = false;  // below, with the caller's thread count
    lo.numa = capi::numa_policy(o.numa_policy, o.numa_node);
    lo.warm_up = o.warm_up != 0;
    lo.load_into_memory = o.load_into_memory != 0;
    Error error;
    auto state = std::make_shared<ModelState>();
    state->path = path;
    state->options = o;
    state->model = model::Model::load(path, lo, &error);
    if (!state->model) return capi::fail(error);
    if (o.verify_checksums) {
      if (Error e = state->model->image().verify_all(o.threads)) return capi::fail(e);
    }
    count_parameters(*state);
    capi::load_tokenizer(*state);
    if (capi::log_enabled(COLIBRI_LOG_INFO)) {
      const model::ModelConfig &c = state->model->config();
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      capi::log_message(COLIBRI_LOG_INFO,
                        util::strprintf("opened %s: %s, %llu layers, %llu experts (top %llu), %s weights, %.1f MB, in %.1f ms",
                                        path, c.family.c_str(), static_cast<unsigned long long>(c.layer_count),
                                        static_cast<unsigned long long>(c.expert_count),
                                        static_cast<unsigned long long>(c.top_k), colibri_dtype_name(state->weight_dtype),
                                        static_cast<double>(state->model->image().file_size()) / 1e6, ms));
    }
    if (!state->tokenizer && capi::log_enabled(COLIBRI_LOG_WARNING))
      capi::log_message(COLIBRI_LOG_WARNING, std::string("tokenizer of ") + path +
                                                 " is not usable: " + state->tokenizer_error.message);
    auto *handle = new capi::ModelHandle;
    handle->state = std::move(state);
    *model_out = capi::handle(handle);
    return COLIBRI_OK;
  });
}

COLIBRI_API void colibri_model_close(colibri_model *model) {
  capi::guard_void(__func__, [&] {
    if (!model || !capi::claim_for_free(model, capi::HandleKind::Model, "model")) return;
    capi::impl(model)->state.reset();  // the image stays mapped while sessions hold it
    capi::quarantine(capi::impl(model), [](capi::HandleBase *h) { delete static_cast<capi::ModelHandle *>(h); });
  });
}

COLIBRI_API int32_t colibri_model_get_info(const colibri_model *model, colibri_model_info *info) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_HANDLE(model, "model");
    const ModelState &s = *capi::impl(model)->state;
    const model::Model &m = *s.model;
    const model::ModelConfig &c = m.config();
    const model::TokenizerInfo &t = m.tokenizer();
    colibri_model_info i{};
    i.struct_size = sizeof i;
    i.format_version = m.image().header().version;
    i.path = s.path.c_str();
    i.family = c.family.c_str();
    i.architecture = c.hf_architecture.c_str();
    i.file_size_bytes = m.image().file_size();
    i.parameter_count = s.parameter_count;
    i.active_parameter_count = s.active_parameter_count;
    i.active_weight_bytes = s.active_weight_bytes;
    i.vocab_size = c.vocab_size;
    i.hidden_size = c.hidden_size;
    i.layer_count = c.layer_count;
    for (const model::LayerWeights &w : m.layers()) i.moe_layer_count += w.is_moe ? 1 : 0;
    i.head_count = c.head_count;
    i.kv_head_count = c.kv_head_count;
    i.head_dim = c.head_dim;
    i.max_position_embeddings = c.max_position_embeddings;
    i.rms_norm_eps = c.rms_norm_eps;
    i.rope_theta = c.rope_theta;
    i.clip_qkv = c.clip_qkv;
    i.tie_word_embeddings = c.tie_word_embeddings ? 1 : 0;
    i.attention_bias = c.attention_bias ? 1 : 0;
    i.qk_norm = c.qk_norm.c_str();
    i.expert_count = c.expert_count;
    i.expert_ffn_size = c.expert_ffn_size;
    i.top_k = c.top_k;
    i.router_score = c.router_score.c_str();
    i.norm_topk_prob = c.norm_topk_prob ? 1 : 0;
    i.shared_expert_gate = c.shared_expert_gate ? 1 : 0;
    i.shared_expert_ffn_size = c.shared_expert_ffn_size;
    i.dense_ffn_size = c.dense_ffn_size;
    i.weight_dtype = s.weight_dtype;
    i.weight_group_size = s.weight_group_size;
    i.tensor_count = m.image().tensors().size();
    i.bos_token_id = to_token_id(t.bos_token_id);
    i.eos_token_id = t.eos_token_ids.empty() ? -1 : to_token_id(t.eos_token_ids[0]);
    i.pad_token_id = to_token_id(t.pad_token_id);
    i.eos_token_count = static_cast<uint32_t>(t.eos_token_ids.size());
    i.add_bos_token = t.add_bos_token ? 1 : 0;
    i.add_eos_token = t.add_eos_token ? 1 : 0;
    i.has_tokenizer = s.tokenizer ? 1 : 0;
    i.has_chat_template = t.chat_template.empty() ? 0 : 1;
    i.numa_report = m.numa_report().c_str();
    i.rotary_dim = c.rotary_dim;
    i.router_select_bias = c.router_select_bias ? 1 : 0;
    i.expert_group_top = static_cast<uint32_t>(c.expert_group_top);
    i.expert_group_count = c.expert_group_count;
    i.routed_scaling_factor = c.routed_scaling_factor;
    i.topk_norm_epsilon = c.topk_norm_epsilon;
    i.rope_scaling = c.rope_scaling.c_str();
    i.rope_factor = c.rope_factor;
    i.rope_attention_factor = c.rope_attention_factor;
    i.sliding_layer_count = static_cast<uint64_t>(std::count(c.layer_is_sliding.begin(), c.layer_is_sliding.end(), 1));
    i.sliding_window = i.sliding_layer_count > 0 ? c.sliding_window : 0;
    i.attention_sinks = c.attention_sinks ? 1 : 0;
    i.attention_output_bias = c.attention_output_bias ? 1 : 0;
    i.router_bias = c.router_bias ? 1 : 0;
    i.expert_bias = c.expert_bias ? 1 : 0;
    i.expert_activation = c.expert_activation.c_str();
    i.swiglu_limit = c.swiglu_limit;
    i.swiglu_alpha = c.swiglu_alpha;
    i.attention = c.attention.c_str();
    i.q_lora_rank = c.q_lora_rank;
    i.kv_lora_rank = c.kv_lora_rank;
    i.qk_nope_head_dim = c.qk_nope_head_dim;
    i.v_head_dim = c.v_head_dim;
    i.attention_scale = c.mla() ? c.attention_scale : 1.0 / std::sqrt(static_cast<double>(c.head_dim));
    i.kv_cache_bytes_per_token = c.layer_count * c.kv_values_per_position() * sizeof(float);
    i.mtp_layer_count = c.mtp_layer_count;
    i.rope_interleave = c.rope_interleave ? 1 : 0;
    return capi::write_output(info, i, kModelInfoAbi1, "colibri_model_info");
  });
}

COLIBRI_API int32_t colibri_model_eos_tokens(const colibri_model *model, int32_t *ids, size_t capacity, size_t *count) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_HANDLE(model, "model");
    std::vector<int32_t> eos;
    for (int64_t id : capi::impl(model)->state->model->tokenizer().eos_token_ids) eos.push_back(to_token_id(id));
    return capi::copy_tokens(eos.data(), eos.size(), ids, capacity, count);
  });
}

COLIBRI_API int32_t colibri_model_metadata(const colibri_model *model, const char **json, size_t *json_size) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_HANDLE(model, "model");
    COLIBRI_REQUIRE_ARG(json && json_size, "json and json_size must not be NULL");
    std::string_view text = capi::impl(model)->state->model->image().metadata_json();
    *json = text.data();
    *json_size = text.size();
    return COLIBRI_OK;
  });
}

COLIBRI_API int32_t colibri_model_tensor_count(const colibri_model *model, size_t *count) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_HANDLE(model, "model");
    COLIBRI_REQUIRE_ARG(count, "count must not be NULL");
    *count = capi::impl(model)->state->model->image().tensors().size();
    return COLIBRI_OK;
  });
}

COLIBRI_API int32_t colibri_model_tensor_info(const colibri_model *model, size_t index, colibri_tensor_info *info) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_HANDLE(model, "model");
    const auto &tensors = capi::impl(model)->state->model->image().tensors();
    COLIBRI_REQUIRE_ARG(index < tensors.size(), "tensor index " + std::to_string(index) + " is out of range (the image has " +
                                                    std::to_string(tensors.size()) + " tensors)");
    const image::TensorInfo &t = tensors[index];
    colibri_tensor_info out{};
    out.struct_size = sizeof out;
    out.dtype = static_cast<uint32_t>(t.dtype);
    out.name = t.name.c_str();
    out.rank = t.rank;
    out.group_size = t.group_size;
    static_assert(COLIBRI_MAX_TENSOR_RANK == image::kMaxTensorRank);
    for (uint32_t d = 0; d < t.rank && d < COLIBRI_MAX_TENSOR_RANK; ++d) out.shape[d] = t.shape[d];
    out.offset_bytes = t.offset;
    out.size_bytes = t.size;
    out.checksum = t.checksum;
    return capi::write_output(info, out, kTensorInfoAbi1, "colibri_tensor_info");
  });
}

COLIBRI_API int32_t colibri_model_find_tensor(const colibri_model *model, const char *name, size_t *index) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_HANDLE(model, "model");
    COLIBRI_REQUIRE_ARG(name && index, "name and index must not be NULL");
    const image::Image &img = capi::impl(model)->state->model->image();
    const image::TensorInfo *t = img.find(name);
    COLIBRI_REQUIRE_ARG(t, std::string("the image has no tensor called '") + name + "'");
    *index = static_cast<size_t>(t - img.tensors().data());
    return COLIBRI_OK;
  });
}

}  // extern "C"

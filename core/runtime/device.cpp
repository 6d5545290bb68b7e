// core/runtime/device.cpp — loading the CUDA backend module and driving one device context
// (device.h). The model's weights are described to the module by their host addresses in the
// image mapping; the module uploads them once.
#include "runtime/device.h"

#include <dlfcn.h>

#include <string>
#include <vector>

#include "util/strings.h"

namespace colibri::runtime {

using util::strprintf;

namespace {

constexpr size_t kMessageBytes = 1024;
constexpr const char *kNoDevice = "no CUDA device: ";

std::string directory_of_this_object() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void *>(&directory_of_this_object), &info) == 0 || !info.dli_fname) return {};
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

Error from_device_status(int32_t status, const char *message) {
  switch (status) {
    case COLIBRI_DEVICE_ERROR_NO_DEVICE: return make_error(ErrorKind::Unsupported, std::string(kNoDevice) + message);
    case COLIBRI_DEVICE_ERROR_UNSUPPORTED: return make_error(ErrorKind::Unsupported, message);
    case COLIBRI_DEVICE_ERROR_OUT_OF_MEMORY: return make_error(ErrorKind::OutOfMemory, message);
    case COLIBRI_DEVICE_ERROR_INVALID: return make_error(ErrorKind::InvalidArgument, message);
    case COLIBRI_DEVICE_ERROR_NON_FINITE: return make_error(ErrorKind::NonFinite, message);
    default: return make_error(ErrorKind::Internal, std::string("CUDA backend: ") + message);
  }
}

colibri_device_matrix describe(const model::WeightMatrix &w) {
  colibri_device_matrix m{};
  if (!w.present()) return m;
  m.data = w.data;
  m.dtype = static_cast<uint32_t>(w.dtype);
  m.group_size = w.group_size;
  m.rows = w.rows;
  m.cols = w.cols;
  m.count = w.count;
  m.row_bytes = w.row_bytes;
  m.matrix_bytes = w.matrix_bytes;
  return m;
}

colibri_device_vector describe(const model::WeightVector &v) { return {v.data, v.present() ? v.size : 0}; }

}  // namespace

const char *cuda_module_name() { return "libcolibri_cuda.so"; }

bool cuda_module_built() { return COLIBRI_CUDA_MODULE_BUILT != 0; }

Error load_cuda_module(const std::string &module_path, const colibri_device_api **api) {
  *api = nullptr;
  std::vector<std::string> candidates;
  if (!module_path.empty()) {
    candidates.push_back(module_path);
  } else {
    const std::string dir = directory_of_this_object();
    if (!dir.empty()) candidates.push_back(dir + "/" + cuda_module_name());
    candidates.push_back(cuda_module_name());  // the loader's search path (rpath, ld.so.cache)
  }
  std::string tried;
  for (const std::string &path : candidates) {
    // RTLD_LOCAL: the module's symbols (a static CUDA runtime) stay its own.
    void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char *why = dlerror();
      tried += strprintf("%s%s (%s)", tried.empty() ? "" : "; ", path.c_str(), why ? why : "not loadable");
      continue;
    }
    auto get = reinterpret_cast<colibri_device_api_get_fn>(dlsym(handle, COLIBRI_DEVICE_API_SYMBOL));
    const colibri_device_api *table = get ? get(COLIBRI_DEVICE_API_VERSION) : nullptr;
    if (!table || table->struct_size < sizeof(colibri_device_api) || table->version != COLIBRI_DEVICE_API_VERSION)
      return make_error(ErrorKind::Unsupported,
                        strprintf("%sthe CUDA backend module %s does not implement device interface version %u (it "
                                  "comes from another build of Colibri: install the module of this build next to "
                                  "libcolibri)",
                                  kNoDevice, path.c_str(), COLIBRI_DEVICE_API_VERSION));
    *api = table;
    return {};
  }
  if (!cuda_module_built())
    return make_error(ErrorKind::Unsupported,
                      strprintf("%sthis libcolibri was built without the CUDA backend (COLIBRI_CUDA=OFF, or no CUDA "
                                "compiler at build time), so there is no %s (looked for: %s)",
                                kNoDevice, cuda_module_name(), tried.c_str()));
  return make_error(ErrorKind::Unsupported,
                    strprintf("%sthe CUDA backend module %s is not installed next to libcolibri or cannot be loaded "
                              "(looked for: %s)",
                              kNoDevice, cuda_module_name(), tried.c_str()));
}

std::unique_ptr<DeviceSession> DeviceSession::create(const model::Model &model, const DeviceSessionOptions &options,
                                                     const float *inv_freq, Error *error) {
  std::unique_ptr<DeviceSession> s(new DeviceSession());
  if (Error e = load_cuda_module(options.module_path, &s->api_)) {
    *error = e;
    return nullptr;
  }
  const model::ModelConfig &c = model.config();
  // Model features the device interface does not describe yet: refused here, by name, before
  // the module sees a model it would run differently.
  const char *missing = c.mla()                          ? "multi-head latent attention"
                        : c.rotary_dim != c.head_dim      ? "partial rotary embeddings"
                        : c.router_score != "softmax"     ? "sigmoid routing"
                        : c.rope_scaling != "none"        ? "yarn-scaled rotary embeddings"
                        : c.attention_sinks               ? "attention sinks"
                        : !c.layer_is_sliding.empty()     ? "sliding-window attention"
                        : c.attention_output_bias         ? "o_proj biases"
                        : c.router_bias || c.expert_bias  ? "router and expert biases"
                        : c.expert_activation != "silu"   ? "the clamped SwiGLU activation"
                                                          : nullptr;
  if (missing) {
    *error = make_error(ErrorKind::Unsupported,
                        strprintf("the CUDA backend does not implement %s yet (family %s); run this model on the CPU",
                                  missing, c.family.c_str()));
    return nullptr;
  }
  std::vector<colibri_device_layer> layers(c.layer_count);
  for (size_t l = 0; l < c.layer_count; ++l) {
    const model::LayerWeights &w = model.layers()[l];
    colibri_device_layer &d = layers[l];
    d.attn_norm = describe(w.attn_norm);
    d.ffn_norm = describe(w.ffn_norm);
    d.attn_q = describe(w.attn_q);
    d.attn_k = describe(w.attn_k);
    d.attn_v = describe(w.attn_v);
    d.attn_output = describe(w.attn_output);
    d.attn_q_bias = describe(w.attn_q_bias);
    d.attn_k_bias = describe(w.attn_k_bias);
    d.attn_v_bias = describe(w.attn_v_bias);
    d.attn_q_norm = describe(w.attn_q_norm);
    d.attn_k_norm = describe(w.attn_k_norm);
    d.is_moe = w.is_moe ? 1 : 0;
    d.router = describe(w.router);
    d.experts_gate = describe(w.experts_gate);
    d.experts_up = describe(w.experts_up);
    d.experts_down = describe(w.experts_down);
    d.shared_gate = describe(w.shared_gate);
    d.shared_up = describe(w.shared_up);
    d.shared_down = describe(w.shared_down);
    d.shared_expert_gate = describe(w.shared_expert_gate);
    d.dense_gate = describe(w.dense_gate);
    d.dense_up = describe(w.dense_up);
    d.dense_down = describe(w.dense_down);
  }
  colibri_device_model m{};
  m.struct_size = sizeof m;
  m.qk_norm = c.qk_norm == "per_head" ? COLIBRI_DEVICE_QK_NORM_PER_HEAD
              : c.qk_norm == "full"   ? COLIBRI_DEVICE_QK_NORM_FULL
                                      : COLIBRI_DEVICE_QK_NORM_NONE;
  m.vocab_size = c.vocab_size;
  m.hidden_size = c.hidden_size;
  m.layer_count = c.layer_count;
  m.head_count = c.head_count;
  m.kv_head_count = c.kv_head_count;
  m.head_dim = c.head_dim;
  m.expert_count = c.expert_count;
  m.expert_ffn_size = c.expert_ffn_size;
  m.top_k = c.top_k;
  m.rms_norm_eps = static_cast<float>(c.rms_norm_eps);
  m.clip_qkv = static_cast<float>(c.clip_qkv);
  m.norm_topk_prob = c.norm_topk_prob ? 1 : 0;
  m.router_softmax = c.router_score == "softmax" ? 1 : 0;
  m.rope_inv_freq = inv_freq;
  m.token_embedding = describe(model.token_embedding());
  m.output_norm = describe(model.output_norm());
  m.output = describe(model.output());
  m.layers = layers.data();

  colibri_device_session d{};
  d.struct_size = sizeof d;
  d.device_index = options.device.index;
  d.context_length = options.context_length;
  d.max_sequences = options.max_sequences;
  d.max_logit_rows = options.max_logit_rows;
  d.kv_f16 = options.kv_f16 ? 1 : 0;
  d.use_graphs = options.graphs ? 1 : 0;
  d.max_batch_tokens = options.max_batch_tokens;

  char message[kMessageBytes] = {};
  if (int32_t st = s->api_->context_create(&m, &d, &s->context_, message, sizeof message)) {
    *error = from_device_status(st, message);
    return nullptr;
  }
  s->name_ = strprintf("cuda:%u", options.device.index);
  return s;
}

DeviceSession::~DeviceSession() {
  if (api_ && context_) api_->context_free(context_);
}

Error DeviceSession::forward(const colibri_device_entry *entries, size_t count, float *logits, size_t *logit_rows,
                             uint64_t *stage_ns) {
  char message[kMessageBytes] = {};
  if (int32_t st = api_->forward(context_, entries, count, logits, logit_rows, stage_ns, message, sizeof message))
    return from_device_status(st, message);
  return {};
}

colibri_device_context_info DeviceSession::info() const {
  colibri_device_context_info i{};
  api_->context_info(context_, &i);
  return i;
}

}  // namespace colibri::runtime

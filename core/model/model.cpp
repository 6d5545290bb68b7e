// core/model/model.cpp — binds image tensors to the forward pass's weight views.
// Every tensor the config implies must exist with exactly the expected shape; tensors the
// config does not explain are refused too (a sign of a converter/engine mismatch), and the
// fixed header's model fields must agree with the config (header_fields.h). This is every
// check opening a model makes beyond the image reader's, so `colibri-model verify` runs it
// too: it is compiled into colibri_image, which the model tool links (loading with placement
// options, load.cpp, lives in colibri_core).
#include "model/model.h"

#include <set>

#include "model/header_fields.h"
#include "model/tensor_names.h"
#include "util/strings.h"

namespace colibri::model {

using util::strprintf;

static_assert(static_cast<uint32_t>(kernels::DType::Q8) == static_cast<uint32_t>(image::DType::Q8));
static_assert(static_cast<uint32_t>(kernels::DType::BF16) == static_cast<uint32_t>(image::DType::BF16));
static_assert(static_cast<uint32_t>(kernels::DType::F16) == static_cast<uint32_t>(image::DType::F16));
static_assert(static_cast<uint32_t>(kernels::DType::Q4) == static_cast<uint32_t>(image::DType::Q4));
static_assert(static_cast<uint32_t>(kernels::DType::Q8F16) == static_cast<uint32_t>(image::DType::Q8F16));
static_assert(static_cast<uint32_t>(kernels::DType::MXFP4) == static_cast<uint32_t>(image::DType::MXFP4));

namespace {

struct Binder {
  const image::Image &img;
  std::set<std::string> used;
  Error error;

  std::string shape_text(const std::vector<uint64_t> &shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
  }

  const image::TensorInfo *find(const std::string &name, const std::vector<uint64_t> &shape, bool required) {
    if (error) return nullptr;
    const image::TensorInfo *t = img.find(name);
    if (!t) {
      if (required)
        error = make_error(ErrorKind::Corrupt, strprintf("'%s': tensor '%s' %s is missing; the image does not match "
                                                         "its model metadata (re-convert it)",
                                                         img.path().c_str(), name.c_str(), shape_text(shape).c_str()));
      return nullptr;
    }
    bool same = t->rank == shape.size();
    for (size_t i = 0; same && i < shape.size(); ++i) same = t->shape[i] == shape[i];
    if (!same) {
      error = make_error(ErrorKind::Corrupt, strprintf("'%s': tensor '%s' has shape %s, the model metadata implies %s",
                                                       img.path().c_str(), name.c_str(), t->shape_string().c_str(),
                                                       shape_text(shape).c_str()));
      return nullptr;
    }
    used.insert(name);
    return t;
  }

  WeightMatrix matrix(const std::string &name, uint64_t count, uint64_t rows, uint64_t cols, bool required = true) {
    std::vector<uint64_t> shape = count > 1 || name.find("_exps") != std::string::npos
                                      ? std::vector<uint64_t>{count, rows, cols}
                                      : std::vector<uint64_t>{rows, cols};
    WeightMatrix m;
    const image::TensorInfo *t = find(name, shape, required);
    if (!t) return m;
    m.dtype = static_cast<kernels::DType>(static_cast<uint32_t>(t->dtype));
    m.group_size = t->group_size;
    if (!kernels::weights_supported(m.dtype, m.group_size, cols)) {
      error = make_error(ErrorKind::Unsupported, strprintf("'%s': tensor '%s' (%s, %llu columns) is not supported by "
                                                           "the CPU kernels",
                                                           img.path().c_str(), name.c_str(), image::dtype_name(t->dtype),
                                                           static_cast<unsigned long long>(cols)));
      return m;
    }
    m.data = img.data(*t);
    m.rows = rows;
    m.cols = cols;
    m.count = count;
    m.row_bytes = kernels::row_bytes(m.dtype, m.group_size, cols);
    m.matrix_bytes = m.row_bytes * rows;
    return m;
  }

  WeightMatrix f32_matrix(const std::string &name, uint64_t rows, uint64_t cols, bool required = true) {
    WeightMatrix m = matrix(name, 1, rows, cols, required);
    if (m.present() && m.dtype != kernels::DType::F32 && !error)
      error = make_error(ErrorKind::Corrupt, strprintf("'%s': tensor '%s' must be f32", img.path().c_str(), name.c_str()));
    return m;
  }

  // An f32 vector [size], or with count > 0 the f32 rows [count, size] read as one vector.
  WeightVector vector(const std::string &name, uint64_t size, bool required = true, uint64_t count = 0) {
    WeightVector v;
    const image::TensorInfo *t =
        find(name, count ? std::vector<uint64_t>{count, size} : std::vector<uint64_t>{size}, required);
    if (!t) return v;
    if (t->dtype != image::DType::F32) {
      error = make_error(ErrorKind::Corrupt, strprintf("'%s': vector tensor '%s' must be f32, found %s",
                                                       img.path().c_str(), name.c_str(), image::dtype_name(t->dtype)));
      return v;
    }
    v.data = reinterpret_cast<const float *>(img.data(*t));
    v.size = count ? count * size : size;
    return v;
  }
};

int64_t optional_id(const nlohmann::json &j, const char *key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : -1;
}

std::string optional_string(const nlohmann::json &j, const char *key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A flag that may be absent (false); present, it must be true or false (nlohmann's value()
// would throw on any other type, out of the open).
Error optional_flag(const nlohmann::json &j, const char *key, const std::string &path, bool *out) {
  *out = false;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_boolean())
    return make_error(ErrorKind::Corrupt,
                      strprintf("'%s': tokenizer metadata '%s' is %s, not true or false; the metadata is damaged: "
                                "convert the checkpoint again",
                                path.c_str(), key, it->type_name()));
  *out = it->get<bool>();
  return {};
}

}  // namespace

std::unique_ptr<Model> Model::from_image(std::unique_ptr<image::Image> img, Error *error) {
  std::unique_ptr<Model> m(new Model());
  m->image_ = std::move(img);
  if (Error e = m->bind()) {
    *error = e;
    return nullptr;
  }
  return m;
}

Error Model::bind() {
  const nlohmann::json &meta = image_->metadata();
  auto model_it = meta.find("model");
  if (model_it == meta.end())
    return make_error(ErrorKind::Corrupt, strprintf("'%s' has no model metadata: it is an image of tensors, not of a "
                                                    "model (convert the checkpoint with colibri-model convert)",
                                                    image_->path().c_str()));
  if (Error e = ModelConfig::from_json(*model_it, &config_)) {
    e.message = "'" + image_->path() + "': " + e.message;
    return e;
  }
  auto tok = meta.find("tokenizer");
  if (tok != meta.end() && tok->is_object()) {
    tokenizer_.json = optional_string(*tok, "json");
    tokenizer_.chat_template = optional_string(*tok, "chat_template");
    tokenizer_.bos_token_id = optional_id(*tok, "bos_token_id");
    tokenizer_.pad_token_id = optional_id(*tok, "pad_token_id");
    tokenizer_.bos_token = optional_string(*tok, "bos_token");
    tokenizer_.eos_token = optional_string(*tok, "eos_token");
    auto eos = tok->find("eos_token_ids");
    if (eos != tok->end() && eos->is_array())
      for (const auto &id : *eos)
        if (id.is_number_integer()) tokenizer_.eos_token_ids.push_back(id.get<int64_t>());
    if (Error e = optional_flag(*tok, "add_bos_token", image_->path(), &tokenizer_.add_bos_token)) return e;
    if (Error e = optional_flag(*tok, "add_eos_token", image_->path(), &tokenizer_.add_eos_token)) return e;
  }

  const ModelConfig &c = config_;
  Binder b{*image_, {}, {}};
  namespace n = names;
  const uint64_t H = c.hidden_size, Q = q_dim(), KV = kv_dim(), E = c.expert_count;
  token_embd_ = b.matrix(n::kTokenEmbedding, 1, c.vocab_size, H);
  output_norm_ = b.vector(n::kOutputNorm, H);
  output_ = c.tie_word_embeddings ? token_embd_ : b.matrix(n::kOutput, 1, c.vocab_size, H);
  layers_.assign(c.layer_count, LayerWeights{});
  for (uint64_t l = 0; l < c.layer_count && !b.error; ++l) {
    LayerWeights &w = layers_[l];
    auto name = [&](const char *role) { return n::layer_tensor(l, role); };
    w.attn_norm = b.vector(name(n::kAttnNorm), H);
    w.ffn_norm = b.vector(name(n::kFfnNorm), H);
    if (c.mla()) {
      if (c.q_lora_rank) {
        w.attn_q_a = b.matrix(name(n::kAttnQA), 1, c.q_lora_rank, H);
        w.attn_q_a_norm = b.vector(name(n::kAttnQANorm), c.q_lora_rank);
        w.attn_q_b = b.matrix(name(n::kAttnQB), 1, Q, c.q_lora_rank);
      } else {
        w.attn_q = b.matrix(name(n::kAttnQ), 1, Q, H);
      }
      w.attn_kv_a_mqa = b.matrix(name(n::kAttnKvAMqa), 1, KV, H);
      w.attn_kv_a_norm = b.vector(name(n::kAttnKvANorm), c.kv_lora_rank);
      w.attn_k_b = b.matrix(name(n::kAttnKB), c.head_count, c.kv_lora_rank, c.qk_nope_head_dim);
      w.attn_v_b = b.matrix(name(n::kAttnVB), c.head_count, c.v_head_dim, c.kv_lora_rank);
    } else {
      w.attn_q = b.matrix(name(n::kAttnQ), 1, Q, H);
      w.attn_k = b.matrix(name(n::kAttnK), 1, KV, H);
      w.attn_v = b.matrix(name(n::kAttnV), 1, KV, H);
    }
    w.attn_output = b.matrix(name(n::kAttnOutput), 1, H, attn_out_dim());
    if (c.attention_bias) {
      w.attn_q_bias = b.vector(name(n::kAttnQBias), Q);
      w.attn_k_bias = b.vector(name(n::kAttnKBias), KV);
      w.attn_v_bias = b.vector(name(n::kAttnVBias), KV);
    }
    if (c.attention_output_bias) w.attn_output_bias = b.vector(name(n::kAttnOutputBias), H);
    if (c.attention_sinks) w.attn_sinks = b.vector(name(n::kAttnSinks), c.head_count);
    w.sliding = !c.layer_is_sliding.empty() && c.layer_is_sliding[l] != 0;
    if (c.qk_norm == "per_head") {
      w.attn_q_norm = b.vector(name(n::kAttnQNorm), c.head_dim);
      w.attn_k_norm = b.vector(name(n::kAttnKNorm), c.head_dim);
    } else if (c.qk_norm == "full") {
      w.attn_q_norm = b.vector(name(n::kAttnQNorm), Q);
      w.attn_k_norm = b.vector(name(n::kAttnKNorm), KV);
    }
    w.is_moe = c.layer_is_moe[l] != 0;
    if (w.is_moe) {
      w.router = b.f32_matrix(name(n::kRouter), E, H);
      if (c.router_select_bias) w.router_select_bias = b.vector(name(n::kRouterSelectBias), E);
      w.experts_gate = b.matrix(name(n::kExpertsGate), E, c.expert_ffn_size, H);
      w.experts_up = b.matrix(name(n::kExpertsUp), E, c.expert_ffn_size, H);
      w.experts_down = b.matrix(name(n::kExpertsDown), E, H, c.expert_ffn_size);
      if (c.router_bias) w.router_bias = b.vector(name(n::kRouterBias), E);
      if (c.expert_bias) {
        w.experts_gate_bias = b.vector(name(n::kExpertsGateBias), c.expert_ffn_size, true, E);
        w.experts_up_bias = b.vector(name(n::kExpertsUpBias), c.expert_ffn_size, true, E);
        w.experts_down_bias = b.vector(name(n::kExpertsDownBias), H, true, E);
      }
      if (c.shared_expert_ffn_size) {
        w.shared_gate = b.matrix(name(n::kSharedGate), 1, c.shared_expert_ffn_size, H);
        w.shared_up = b.matrix(name(n::kSharedUp), 1, c.shared_expert_ffn_size, H);
        w.shared_down = b.matrix(name(n::kSharedDown), 1, H, c.shared_expert_ffn_size);
        if (c.shared_expert_gate) w.shared_expert_gate = b.f32_matrix(name(n::kSharedExpertGate), 1, H);
      }
    } else {
      w.dense_gate = b.matrix(name(n::kDenseGate), 1, c.dense_ffn_size, H);
      w.dense_up = b.matrix(name(n::kDenseUp), 1, c.dense_ffn_size, H);
      w.dense_down = b.matrix(name(n::kDenseDown), 1, H, c.dense_ffn_size);
    }
  }
  if (b.error) return b.error;
  for (const auto &t : image_->tensors()) {
    uint64_t mtp_layer = 0;
    std::string suffix;
    // A multi-token-prediction layer's tensors are kept for a speculative decoder, never bound.
    if (names::parse_mtp_tensor(t.name, &mtp_layer, &suffix) && mtp_layer < c.mtp_layer_count) continue;
    if (!b.used.count(t.name))
      return make_error(ErrorKind::Corrupt, strprintf("'%s': tensor '%s' is not used by a %s model with this "
                                                      "configuration; the image and its metadata disagree",
                                                      image_->path().c_str(), t.name.c_str(), c.family.c_str()));
  }
  return check_header_fields(*image_, c);
}

}  // namespace colibri::model

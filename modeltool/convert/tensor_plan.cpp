// modeltool/convert/tensor_plan.cpp — the Hugging Face -> image tensor mapping and the
// checkpoint checks that go with it.
#include "modeltool/convert/tensor_plan.h"

#include <algorithm>
#include <set>
#include <unordered_set>

#include "image/dtype_convert.h"
#include "model/tensor_names.h"
#include "util/strings.h"

namespace colibri::modeltool::convert {

namespace names = model::names;
using util::strprintf;

namespace {

// One image tensor and the checkpoint tensors it is made of, before lookup.
struct Wanted {
  std::string image_name;
  std::vector<uint64_t> image_shape;
  std::vector<std::string> source_names;  // one, or one per expert
  std::vector<uint64_t> source_shape;     // shape of each source (MXFP4: of the blocks)
  SourceSlice slice;                      // non-identity: one source, re-laid out
  Mxfp4Source mxfp4;                      // used: source_names = {blocks, scales}
  std::vector<uint64_t> scales_shape;     // MXFP4: shape of the scales
};

// Collects the wanted tensors of one model, in image order.
class MappingBuilder {
 public:
  void single(std::string image_name, std::string source, std::vector<uint64_t> shape) {
    wanted_.push_back({std::move(image_name), shape, {std::move(source)}, shape, SourceSlice{}, {}, {}});
  }
  void stacked(std::string image_name, std::vector<std::string> sources, std::vector<uint64_t> per_source_shape) {
    std::vector<uint64_t> shape = per_source_shape;
    shape.insert(shape.begin(), sources.size());
    wanted_.push_back(
        {std::move(image_name), std::move(shape), std::move(sources), std::move(per_source_shape), SourceSlice{}, {}, {}});
  }
  // One source re-laid out (SourceSlice) into an image tensor of image_shape.
  void sliced(std::string image_name, std::string source, std::vector<uint64_t> source_shape,
              std::vector<uint64_t> image_shape, SourceSlice slice) {
    wanted_.push_back(
        {std::move(image_name), std::move(image_shape), {std::move(source)}, std::move(source_shape), slice, {}, {}});
  }
  // OpenAI's MXFP4 experts `<base>_blocks` / `<base>_scales` into an image tensor [E, out, in]
  // (Mxfp4Source): the blocks [E, R, in/32, 16], every row_stride-th row from row_offset kept.
  void mxfp4(std::string image_name, const std::string &base, uint64_t source_rows, std::vector<uint64_t> image_shape,
             uint32_t row_stride, uint32_t row_offset) {
    const uint64_t experts = image_shape[0], groups = image_shape[2] / image::kMxfp4GroupSize;
    Wanted w{std::move(image_name), std::move(image_shape), {base + "_blocks", base + "_scales"},
             {experts, source_rows, groups, image::kMxfp4GroupSize / 2}, SourceSlice{},
             Mxfp4Source{true, row_stride, row_offset}, {experts, source_rows, groups}};
    wanted_.push_back(std::move(w));
  }
  std::vector<Wanted> take() { return std::move(wanted_); }

 private:
  std::vector<Wanted> wanted_;
};

// The tensors `config` implies, with the names `family`'s checkpoints use (transformers
// modeling_<family>.py module paths + ".weight" / ".bias").
std::vector<Wanted> wanted_tensors(const FamilyInfo &family, const model::ModelConfig &c,
                                   const SafetensorsCheckpoint &checkpoint) {
  const uint64_t hidden = c.hidden_size, q_dim = c.head_count * c.query_head_dim(), kv_dim = c.kv_head_count * c.head_dim;
  MappingBuilder m;
  m.single(names::kTokenEmbedding, "model.embed_tokens.weight", {c.vocab_size, hidden});
  for (uint64_t i = 0; i < c.layer_count; ++i) {
    const std::string hf = "model.layers." + std::to_string(i) + ".";
    auto blk = [i](const char *role) { return names::layer_tensor(i, role); };

    m.single(blk(names::kAttnNorm), hf + "input_layernorm.weight", {hidden});
    if (c.mla()) {
      // DeepSeek's MLA (transformers DeepseekV3Attention): q_proj, or q_a_proj → q_a_layernorm →
      // q_b_proj; kv_a_proj_with_mqa and kv_a_layernorm as stored; kv_b_proj [heads·(nope + v),
      // kv_lora] cut per head into its key rows, transposed (attn_k_b [heads, kv_lora, nope]: the
      // absorbed query is then a plain row-major matmul), and its value rows (attn_v_b [heads, v,
      // kv_lora]).
      const uint64_t H = c.head_count, nope = c.qk_nope_head_dim, v = c.v_head_dim, r = c.kv_lora_rank;
      const std::string a = hf + "self_attn.";
      if (c.q_lora_rank) {
        m.single(blk(names::kAttnQA), a + "q_a_proj.weight", {c.q_lora_rank, hidden});
        m.single(blk(names::kAttnQANorm), a + "q_a_layernorm.weight", {c.q_lora_rank});
        m.single(blk(names::kAttnQB), a + "q_b_proj.weight", {q_dim, c.q_lora_rank});
      } else {
        m.single(blk(names::kAttnQ), a + "q_proj.weight", {q_dim, hidden});
      }
      m.single(blk(names::kAttnKvAMqa), a + "kv_a_proj_with_mqa.weight", {r + c.head_dim, hidden});
      m.single(blk(names::kAttnKvANorm), a + "kv_a_layernorm.weight", {r});
      SourceSlice keys{.transpose = true, .row_block = nope + v, .row_offset = 0, .row_count = nope};
      SourceSlice values{.transpose = false, .row_block = nope + v, .row_offset = nope, .row_count = v};
      m.sliced(blk(names::kAttnKB), a + "kv_b_proj.weight", {H * (nope + v), r}, {H, r, nope}, keys);
      m.sliced(blk(names::kAttnVB), a + "kv_b_proj.weight", {H * (nope + v), r}, {H, v, r}, values);
      m.single(blk(names::kAttnOutput), a + "o_proj.weight", {hidden, H * v});
    } else {
      m.single(blk(names::kAttnQ), hf + "self_attn.q_proj.weight", {q_dim, hidden});
      m.single(blk(names::kAttnK), hf + "self_attn.k_proj.weight", {kv_dim, hidden});
      m.single(blk(names::kAttnV), hf + "self_attn.v_proj.weight", {kv_dim, hidden});
      m.single(blk(names::kAttnOutput), hf + "self_attn.o_proj.weight", {hidden, q_dim});
    }
    if (c.attention_bias) {
      m.single(blk(names::kAttnQBias), hf + "self_attn.q_proj.bias", {q_dim});
      m.single(blk(names::kAttnKBias), hf + "self_attn.k_proj.bias", {kv_dim});
      m.single(blk(names::kAttnVBias), hf + "self_attn.v_proj.bias", {kv_dim});
    }
    if (c.attention_output_bias) m.single(blk(names::kAttnOutputBias), hf + "self_attn.o_proj.bias", {hidden});
    if (c.attention_sinks) m.single(blk(names::kAttnSinks), hf + "self_attn.sinks", {c.head_count});
    if (c.qk_norm != "none") {
      bool per_head = c.qk_norm == "per_head";  // Qwen3: [head_dim] shared by heads; OLMoE: whole projection
      m.single(blk(names::kAttnQNorm), hf + "self_attn.q_norm.weight", {per_head ? c.head_dim : q_dim});
      m.single(blk(names::kAttnKNorm), hf + "self_attn.k_norm.weight", {per_head ? c.head_dim : kv_dim});
    }
    m.single(blk(names::kFfnNorm), hf + "post_attention_layernorm.weight", {hidden});

    if (c.layer_is_moe[i] && family.fused_experts) {
      // gpt-oss (transformers GptOssExperts): mlp.router with a bias; the experts' gate and up
      // projections fused and interleaved (gate = columns 0, 2, 4, ..., up = 1, 3, 5, ...) in
      // gate_up_proj [E, hidden, 2·ffn], applied as x · W, and down_proj [E, ffn, hidden]: the
      // image's [out, in] matrices are their transposed column slices.
      const std::string moe = hf + family.moe_block + ".";
      const uint64_t E = c.expert_count, ffn = c.expert_ffn_size;
      m.single(blk(names::kRouter), moe + "router.weight", {E, hidden});
      m.single(blk(names::kRouterBias), moe + "router.bias", {E});
      const std::string experts = moe + "experts.";
      // OpenAI's checkpoints ship the experts in MXFP4 (quantization_config quant_method "mxfp4"):
      // gate_up_proj_blocks / _scales and down_proj_blocks / _scales, rows = output features.
      if (checkpoint.find(experts + "gate_up_proj_blocks") || checkpoint.find(experts + "down_proj_blocks")) {
        m.mxfp4(blk(names::kExpertsGate), experts + "gate_up_proj", 2 * ffn, {E, ffn, hidden}, 2, 0);
        m.mxfp4(blk(names::kExpertsUp), experts + "gate_up_proj", 2 * ffn, {E, ffn, hidden}, 2, 1);
        m.mxfp4(blk(names::kExpertsDown), experts + "down_proj", hidden, {E, hidden, ffn}, 1, 0);
      } else {
        m.sliced(blk(names::kExpertsGate), experts + "gate_up_proj", {E, hidden, 2 * ffn}, {E, ffn, hidden}, {true, 2, 0});
        m.sliced(blk(names::kExpertsUp), experts + "gate_up_proj", {E, hidden, 2 * ffn}, {E, ffn, hidden}, {true, 2, 1});
        m.sliced(blk(names::kExpertsDown), experts + "down_proj", {E, ffn, hidden}, {E, hidden, ffn}, {true, 1, 0});
      }
      m.sliced(blk(names::kExpertsGateBias), experts + "gate_up_proj_bias", {E, 2 * ffn}, {E, ffn}, {false, 2, 0});
      m.sliced(blk(names::kExpertsUpBias), experts + "gate_up_proj_bias", {E, 2 * ffn}, {E, ffn}, {false, 2, 1});
      m.single(blk(names::kExpertsDownBias), experts + "down_proj_bias", {E, hidden});
    } else if (c.layer_is_moe[i]) {
      const std::string moe = hf + family.moe_block + ".";
      const uint64_t ffn = c.expert_ffn_size;
      m.single(blk(names::kRouter), moe + "gate.weight", {c.expert_count, hidden});
      if (c.router_select_bias) m.single(blk(names::kRouterSelectBias), moe + family.router_bias_name, {c.expert_count});
      const char *roles[3] = {names::kExpertsGate, names::kExpertsUp, names::kExpertsDown};
      for (int p = 0; p < 3; ++p) {
        std::vector<std::string> sources;
        for (uint64_t e = 0; e < c.expert_count; ++e)
          sources.push_back(moe + "experts." + std::to_string(e) + "." + family.expert_projection[p] + ".weight");
        bool down = p == 2;
        m.stacked(blk(roles[p]), std::move(sources), down ? std::vector<uint64_t>{hidden, ffn} : std::vector<uint64_t>{ffn, hidden});
      }
      if (c.shared_expert_ffn_size > 0) {
        const uint64_t shared = c.shared_expert_ffn_size;
        const std::string block = moe + family.shared_block + ".";
        m.single(blk(names::kSharedGate), block + "gate_proj.weight", {shared, hidden});
        m.single(blk(names::kSharedUp), block + "up_proj.weight", {shared, hidden});
        m.single(blk(names::kSharedDown), block + "down_proj.weight", {hidden, shared});
        if (c.shared_expert_gate) m.single(blk(names::kSharedExpertGate), moe + "shared_expert_gate.weight", {1, hidden});
      }
    } else {
      const uint64_t ffn = c.dense_ffn_size;
      m.single(blk(names::kDenseGate), hf + "mlp.gate_proj.weight", {ffn, hidden});
      m.single(blk(names::kDenseUp), hf + "mlp.up_proj.weight", {ffn, hidden});
      m.single(blk(names::kDenseDown), hf + "mlp.down_proj.weight", {hidden, ffn});
    }
  }
  m.single(names::kOutputNorm, "model.norm.weight", {hidden});
  if (!c.tie_word_embeddings) m.single(names::kOutput, "lm_head.weight", {c.vocab_size, hidden});
  return m.take();
}

// Tensors a checkpoint may hold that the image deliberately does not need.
bool ignorable(const std::string &name, const model::ModelConfig &c) {
  if (name.ends_with(".rotary_emb.inv_freq")) return true;  // recomputed from rope_theta (old checkpoints)
  if (c.tie_word_embeddings && name == "lm_head.weight") return true;  // transformers ties it to embed_tokens
  return false;
}

// A tensor of a multi-token-prediction layer (model.layers.<L + j>.<suffix>, j < mtp_layer_count):
// its image name, mtp.<j>.<suffix> (model::names::kMtpPrefix); empty for any other tensor.
std::string mtp_image_name(const std::string &name, const model::ModelConfig &c) {
  const std::string prefix = "model.layers.";
  if (c.mtp_layer_count == 0 || !name.starts_with(prefix)) return {};
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return {};
  const std::string digits = name.substr(prefix.size(), dot - prefix.size());
  if (digits.empty() || digits.size() >= 6 || digits.find_first_not_of("0123456789") != std::string::npos) return {};
  const uint64_t layer = std::stoull(digits);
  if (layer < c.layer_count || layer - c.layer_count >= c.mtp_layer_count) return {};
  return names::mtp_tensor(layer - c.layer_count, name.substr(dot + 1));
}

// "'a', 'b', 'c' and 4 more" (items come quoted)
std::string name_list(const std::vector<std::string> &items) {
  constexpr size_t kShown = 5;
  std::string out;
  for (size_t i = 0; i < items.size() && i < kShown; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > kShown) out += strprintf(" and %zu more", items.size() - kShown);
  return out;
}

}  // namespace

uint64_t PlannedTensor::source_bytes() const {
  uint64_t total = 0;
  for (const SafetensorsTensor *s : sources) total += s->byte_size();
  return total;
}

bool source_float_dtype(const std::string &dtype, image::DType *out) {
  if (dtype == "F32") *out = image::DType::F32;
  else if (dtype == "F16") *out = image::DType::F16;
  else if (dtype == "BF16") *out = image::DType::BF16;
  else return false;
  return true;
}

Error plan_tensors(const FamilyInfo &family, const model::ModelConfig &config, const SafetensorsCheckpoint &checkpoint,
                   const Fp8Blocks &fp8, TensorPlan *plan) {
  *plan = TensorPlan{};
  // A lower bound on the checkpoint tensors config.json needs (4 attention projections per
  // layer, 3 per expert of each MoE layer), before one name is built: within ModelLimits a
  // config can still describe hundreds of millions of tensors, and listing their names would
  // take tens of GB.
  uint64_t needed = 4 * config.layer_count;
  // (gpt-oss fuses a layer's experts into 4 tensors and a router with a bias.)
  for (uint8_t moe : config.layer_is_moe) needed += !moe ? 3 : family.fused_experts ? 6 : 3 * config.expert_count;
  if (needed > checkpoint.tensors().size())
    return make_error(ErrorKind::Corrupt,
                      strprintf("config.json (%s) describes a model of at least %llu tensors (%llu layers, %llu "
                                "experts) but the checkpoint holds %zu; check that config.json belongs to this "
                                "checkpoint and that no shard is missing",
                                family.architecture, static_cast<unsigned long long>(needed),
                                static_cast<unsigned long long>(config.layer_count),
                                static_cast<unsigned long long>(config.expert_count), checkpoint.tensors().size()));
  std::vector<Wanted> wanted = wanted_tensors(family, config, checkpoint);
  // Multi-token-prediction layers (GLM-4.5's and DeepSeek-V3's num_nextn_predict_layers) go into
  // the image as they are, under mtp.<j>.<checkpoint suffix>, after every other tensor and sorted
  // by name (the same image for any sharding): a speculative decoder can read them; the forward
  // pass never runs them. An FP8 weight's scale tensor comes along with its weight.
  std::vector<const SafetensorsTensor *> mtp;
  for (const SafetensorsTensor &t : checkpoint.tensors()) {
    if (mtp_image_name(t.name, config).empty()) continue;
    if (t.name.ends_with("_scale_inv")) {
      const SafetensorsTensor *weight = checkpoint.find(t.name.substr(0, t.name.size() - 10));
      if (weight && weight->dtype == "F8_E4M3") continue;
    }
    mtp.push_back(&t);
  }
  std::sort(mtp.begin(), mtp.end(), [](const SafetensorsTensor *a, const SafetensorsTensor *b) { return a->name < b->name; });
  for (const SafetensorsTensor *t : mtp)
    wanted.push_back({mtp_image_name(t->name, config), t->shape, {t->name}, t->shape, SourceSlice{}, {}, {}});

  std::vector<std::string> missing;
  for (const Wanted &w : wanted)
    for (const std::string &source : w.source_names)
      if (!checkpoint.find(source))
        missing.push_back("'" + source + "'");
  if (!missing.empty())
    return make_error(ErrorKind::Corrupt,
                      strprintf("the checkpoint is missing tensor%s %s, which config.json (%s) needs; check that "
                                "config.json belongs to this checkpoint and that no shard is incomplete",
                                missing.size() > 1 ? "s" : "", name_list(missing).c_str(), family.architecture));

  std::unordered_set<std::string> used;
  std::set<std::string> dtypes;
  for (const Wanted &w : wanted) {
    PlannedTensor planned;
    planned.spec.name = w.image_name;
    planned.spec.shape = w.image_shape;
    planned.slice = w.slice;
    planned.mxfp4 = w.mxfp4;
    if (w.mxfp4.used && w.image_shape.back() % image::kMxfp4GroupSize != 0)
      return make_error(ErrorKind::Corrupt,
                        strprintf("'%s' holds MXFP4 experts, but config.json gives them rows of %llu values, not a "
                                  "multiple of the MXFP4 group of %u; check that config.json belongs to this checkpoint",
                                  w.source_names.front().c_str(), static_cast<unsigned long long>(w.image_shape.back()),
                                  image::kMxfp4GroupSize));
    for (size_t k = 0; k < w.source_names.size(); ++k) {
      const std::string &source = w.source_names[k];
      const SafetensorsTensor *t = checkpoint.find(source);
      const std::string &shard = checkpoint.shards()[t->shard]->name();
      const std::vector<uint64_t> &expected = w.mxfp4.used && k == 1 ? w.scales_shape : w.source_shape;
      if (t->shape != expected)
        return make_error(ErrorKind::Corrupt,
                          strprintf("tensor '%s' in '%s' has shape %s, expected %s (for %s, from config.json); check "
                                    "that config.json belongs to this checkpoint",
                                    source.c_str(), shard.c_str(), shape_string(t->shape).c_str(),
                                    shape_string(expected).c_str(), w.image_name.c_str()));
      if (w.mxfp4.used) {  // blocks and scales are raw bytes
        if (t->dtype != "U8")
          return make_error(ErrorKind::Corrupt,
                            strprintf("tensor '%s' in '%s' has dtype %s; MXFP4 %s are U8 (as OpenAI's gpt-oss "
                                      "checkpoints store them)",
                                      source.c_str(), shard.c_str(), t->dtype.c_str(), k == 0 ? "blocks" : "scales"));
        dtypes.insert(image::dtype_name(image::DType::MXFP4));
        used.insert(source);
        planned.sources.push_back(t);
        continue;
      }
      if (t->dtype == "F8_E4M3") {
        // Block-scaled FP8: the weight and its `_scale_inv` [ceil(rows / R), ceil(cols / C)].
        if (!fp8.used)
          return make_error(ErrorKind::Unsupported,
                            strprintf("tensor '%s' in '%s' is F8_E4M3, but config.json has no quantization_config "
                                      "fp8 with a weight_block_size; only block-scaled FP8 (DeepSeek's format) is "
                                      "supported",
                                      source.c_str(), shard.c_str()));
        const std::string scale_name = source + "_scale_inv";
        const SafetensorsTensor *scale = checkpoint.find(scale_name);
        image::DType scale_dtype;
        if (t->shape.size() != 2 || !scale || !source_float_dtype(scale->dtype, &scale_dtype) ||
            scale->shape != std::vector<uint64_t>{(t->shape[0] + fp8.rows - 1) / fp8.rows,
                                                  (t->shape[1] + fp8.cols - 1) / fp8.cols})
          return make_error(ErrorKind::Corrupt,
                            strprintf("FP8 tensor '%s' in '%s' %s needs '%s', a float tensor of [%llu, %llu] block "
                                      "scales (weight_block_size [%llu, %llu]); %s",
                                      source.c_str(), shard.c_str(), shape_string(t->shape).c_str(), scale_name.c_str(),
                                      static_cast<unsigned long long>(t->shape.size() == 2 ? (t->shape[0] + fp8.rows - 1) / fp8.rows : 0),
                                      static_cast<unsigned long long>(t->shape.size() == 2 ? (t->shape[1] + fp8.cols - 1) / fp8.cols : 0),
                                      static_cast<unsigned long long>(fp8.rows), static_cast<unsigned long long>(fp8.cols),
                                      scale ? ("it is " + scale->dtype + " " + shape_string(scale->shape)).c_str()
                                            : "it is missing"));
        planned.fp8_scales.resize(w.source_names.size(), nullptr);
        planned.fp8_scales[k] = scale;
        planned.fp8 = fp8;
        dtypes.insert("fp8_e4m3");
        used.insert(source);
        used.insert(scale_name);
        planned.sources.push_back(t);
        continue;
      }
      image::DType decoded;
      if (!source_float_dtype(t->dtype, &decoded))
        return make_error(ErrorKind::Unsupported,
                          strprintf("tensor '%s' in '%s' has dtype %s, which is not supported yet (supported source "
                                    "dtypes: F32, F16, BF16, and F8_E4M3 with block scales); convert from the original "
                                    "floating-point checkpoint",
                                    source.c_str(), shard.c_str(), t->dtype.c_str()));
      dtypes.insert(image::dtype_name(decoded));  // "f32", "f16", "bf16", as docs/format.md shows them
      used.insert(source);
      planned.sources.push_back(t);
    }
    plan->tensors.push_back(std::move(planned));
  }

  std::vector<std::string> extra;
  for (const SafetensorsTensor &t : checkpoint.tensors()) {
    if (used.count(t.name)) continue;
    if (ignorable(t.name, config)) plan->ignored.push_back(t.name);
    else extra.push_back("'" + t.name + "' " + shape_string(t.shape) + " " + t.dtype);
  }
  if (!extra.empty())
    return make_error(ErrorKind::Corrupt,
                      strprintf("the checkpoint has unexpected tensor%s %s, which config.json (%s) does not use; "
                                "check that config.json belongs to this checkpoint",
                                extra.size() > 1 ? "s" : "", name_list(extra).c_str(), family.architecture));
  plan->source_dtypes.assign(dtypes.begin(), dtypes.end());
  return {};
}

bool TensorPlan::mxfp4_experts() const {
  return std::any_of(tensors.begin(), tensors.end(), [](const PlannedTensor &t) { return t.mxfp4.used; });
}

image::DType default_dtype(const TensorPlan &plan) {
  std::vector<image::DType> floats;
  for (const std::string &name : plan.source_dtypes) {
    image::DType dtype;
    if (image::dtype_from_name(name.c_str(), &dtype) && !image::is_block_dtype(dtype)) floats.push_back(dtype);
  }
  return floats.size() == 1 ? floats.front() : image::DType::F16;
}

void assign_dtypes(TensorPlan *plan, const names::StoragePolicy &policy) {
  for (PlannedTensor &t : plan->tensors) {
    const std::vector<uint64_t> &shape = t.spec.shape;
    const names::StorageChoice choice =
        names::storage_choice(policy, t.spec.name, static_cast<uint32_t>(shape.size()), shape.back());
    t.spec.dtype = choice.dtype;
    t.spec.group_size = choice.group_size;
  }
}

}  // namespace colibri::modeltool::convert

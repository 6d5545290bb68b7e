// core/model/tensor_names.h — the canonical tensor names inside an image, shared by the
// converter (which writes them), the engine (which binds them) and the tools.
//
// Names follow "blk.<layer>.<role>" for per-layer tensors. Shapes are outermost first;
// a linear weight is [out_features, in_features] (each output row contiguous), exactly as
// Hugging Face stores nn.Linear.weight, so no transpose is needed. Experts of one layer
// are stacked expert-major into one tensor [expert_count, out, in].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "image/format.h"
#include "image/writer.h"

namespace colibri::model::names {

inline constexpr const char *kTokenEmbedding = "token_embd";    // [vocab, hidden]
inline constexpr const char *kOutputNorm = "output_norm";       // [hidden]
inline constexpr const char *kOutput = "output";                // [vocab, hidden]; absent when tied

// Per-layer roles (use layer_tensor(layer, role)).
inline constexpr const char *kAttnNorm = "attn_norm";            // [hidden]
inline constexpr const char *kAttnQ = "attn_q";                  // [heads*head_dim, hidden]
inline constexpr const char *kAttnK = "attn_k";                  // [kv_heads*head_dim, hidden]
inline constexpr const char *kAttnV = "attn_v";                  // [kv_heads*head_dim, hidden]
inline constexpr const char *kAttnOutput = "attn_output";        // [hidden, heads*head_dim]
inline constexpr const char *kAttnQBias = "attn_q_bias";         // [heads*head_dim] (Qwen2-MoE)
inline constexpr const char *kAttnKBias = "attn_k_bias";         // [kv_heads*head_dim]
inline constexpr const char *kAttnVBias = "attn_v_bias";         // [kv_heads*head_dim]
inline constexpr const char *kAttnOutputBias = "attn_output_bias";  // [hidden] (gpt-oss)
inline constexpr const char *kAttnSinks = "attn_sinks";          // [heads] f32 (gpt-oss)
inline constexpr const char *kAttnQNorm = "attn_q_norm";         // [head_dim] per-head, or [heads*head_dim] full
inline constexpr const char *kAttnKNorm = "attn_k_norm";         // [head_dim] per-head, or [kv_heads*head_dim] full
// Multi-head latent attention (ModelConfig::attention "mla"; nope = qk_nope_head_dim, rope = head_dim):
inline constexpr const char *kAttnQA = "attn_q_a";               // [q_lora_rank, hidden] (q_lora_rank > 0)
inline constexpr const char *kAttnQANorm = "attn_q_a_norm";      // [q_lora_rank]
inline constexpr const char *kAttnQB = "attn_q_b";               // [heads*(nope+rope), q_lora_rank]; else attn_q [heads*(nope+rope), hidden]
inline constexpr const char *kAttnKvAMqa = "attn_kv_a_mqa";      // [kv_lora_rank + rope, hidden]: latent rows, then the rope key
inline constexpr const char *kAttnKvANorm = "attn_kv_a_norm";    // [kv_lora_rank]
inline constexpr const char *kAttnKB = "attn_k_b";               // [heads, kv_lora_rank, nope]: per head kv_b_proj's key rows, transposed
inline constexpr const char *kAttnVB = "attn_v_b";               // [heads, v_head_dim, kv_lora_rank]: per head kv_b_proj's value rows
inline constexpr const char *kFfnNorm = "ffn_norm";              // [hidden] (post-attention norm)
inline constexpr const char *kRouter = "ffn_gate_inp";           // [experts, hidden], always f32
inline constexpr const char *kRouterSelectBias = "ffn_exp_probs_b";  // [experts] f32: sigmoid routers' e_score_correction_bias
inline constexpr const char *kRouterBias = "ffn_gate_inp_bias";  // [experts] f32 (gpt-oss)
inline constexpr const char *kExpertsGate = "ffn_gate_exps";     // [experts, ffn, hidden]
inline constexpr const char *kExpertsUp = "ffn_up_exps";         // [experts, ffn, hidden]
inline constexpr const char *kExpertsDown = "ffn_down_exps";     // [experts, hidden, ffn]
inline constexpr const char *kExpertsGateBias = "ffn_gate_exps_bias";  // [experts, ffn] f32 (gpt-oss)
inline constexpr const char *kExpertsUpBias = "ffn_up_exps_bias";      // [experts, ffn] f32
inline constexpr const char *kExpertsDownBias = "ffn_down_exps_bias";  // [experts, hidden] f32
inline constexpr const char *kSharedGate = "ffn_gate_shexp";     // [shared_ffn, hidden]
inline constexpr const char *kSharedUp = "ffn_up_shexp";         // [shared_ffn, hidden]
inline constexpr const char *kSharedDown = "ffn_down_shexp";     // [hidden, shared_ffn]
inline constexpr const char *kSharedExpertGate = "ffn_gate_inp_shexp";  // [1, hidden], always f32
inline constexpr const char *kDenseGate = "ffn_gate";            // [ffn, hidden]  (dense layers)
inline constexpr const char *kDenseUp = "ffn_up";                // [ffn, hidden]
inline constexpr const char *kDenseDown = "ffn_down";            // [hidden, ffn]

inline std::string layer_tensor(uint64_t layer, const char *role) {
  return "blk." + std::to_string(layer) + "." + role;
}

// Multi-token-prediction layers (ModelConfig::mtp_layer_count) are kept as the checkpoint has
// them: "mtp.<j>.<suffix>", suffix the Hugging Face name after "model.layers.<L + j>." (e.g.
// mtp.0.eh_proj.weight, mtp.0.mlp.experts.3.gate_proj.weight). The forward pass never binds them.
inline constexpr const char *kMtpPrefix = "mtp.";
inline std::string mtp_tensor(uint64_t j, const std::string &suffix) {
  return kMtpPrefix + std::to_string(j) + "." + suffix;
}
// Parses "mtp.<j>.<suffix>"; false for any other name.
bool parse_mtp_tensor(const std::string &name, uint64_t *j, std::string *suffix);

// Parses "blk.<n>.<role>"; false for global tensors.
bool parse_layer_tensor(const std::string &name, uint64_t *layer, std::string *role);

// Tensor classes: what the converter's `--tensor-dtype CLASS=DTYPE` names and `inspect`
// groups by. Vectors are every rank-1 tensor (norms, biases, sinks) and every *_bias tensor (the
// experts' biases are rank 2); routers are ffn_gate_inp and
// ffn_gate_inp_shexp.
enum class TensorClass : uint32_t { Embeddings, Output, Attention, Experts, SharedExpert, DenseFfn, Router, Vectors };
inline constexpr size_t kTensorClassCount = 8;
// "embeddings", "output", "attention", "experts", "shared_expert", "dense_ffn", "router", "vectors"
const char *tensor_class_name(TensorClass c);
bool tensor_class_from_name(const std::string &name, TensorClass *out);
TensorClass tensor_class(const std::string &name, uint32_t rank);

// How a converter or repack chooses each tensor's dtype. `requested` is --dtype, group_size
// --group-size (used by q8 and q4), overrides the --tensor-dtype choices per class.
struct StoragePolicy {
  image::DType requested = image::DType::F16;
  uint32_t group_size = image::kQ8DefaultGroupSize;
  bool has_override[kTensorClassCount] = {};
  image::DType override_dtype[kTensorClassCount] = {};
};
struct StorageChoice {
  image::DType dtype = image::DType::F32;
  uint32_t group_size = 0;  // 0 for the float dtypes
};
// The dtype a class gets before the row-length fallback: its override, else vectors and
// routers f32; with --dtype q4 or mxfp4 only the experts take it and every other matrix class
// q8f16 (kFourBitCompanion); otherwise every matrix class takes `requested`.
inline constexpr image::DType kFourBitCompanion = image::DType::Q8F16;
image::DType class_dtype(const StoragePolicy &policy, TensorClass c);
// The stored dtype and group size of one tensor. A block dtype needs the last dimension to be
// a multiple of its group: otherwise q4 falls back to q8f16 (when the row is a multiple of
// 32), and every block dtype finally to f16.
StorageChoice storage_choice(const StoragePolicy &policy, const std::string &name, uint32_t rank, uint64_t last_dim);
// Empty when the policy is usable; else why not: an override of vectors or routers to a type
// other than f32 (the engine reads them as f32), or a chosen q8/q4 that does not take
// group_size (q8: 32 or 64; q4: 32, 64 or 128).
std::string policy_error(const StoragePolicy &policy);

// Storage policy: which dtype a tensor gets when an image is written with `requested`
// (storage_choice with no overrides).
// Vectors (rank 1: norms, biases) and the routers stay f32 (routing runs in fp32 and the
// router is tiny); Q8 also needs the last dimension to be a multiple of the group size,
// otherwise the tensor stays in `fallback` (the best float type for the request).
image::DType storage_dtype(const std::string &name, uint32_t rank, uint64_t last_dim, image::DType requested,
                           uint32_t group_size);

// The header field expert_size_bytes: bytes of one expert's gate + up + down in the first
// layer that has expert tensors (their stacked sizes / expert_count); 0 without experts.
// The one definition the converter, repack and the test images share.
uint64_t expert_size_bytes(const std::vector<image::TensorSpec> &tensors, uint64_t expert_count);

}  // namespace colibri::model::names

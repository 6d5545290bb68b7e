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
inline constexpr const char *kAttnQNorm = "attn_q_norm";         // [head_dim] per-head, or [heads*head_dim] full
inline constexpr const char *kAttnKNorm = "attn_k_norm";         // [head_dim] per-head, or [kv_heads*head_dim] full
inline constexpr const char *kFfnNorm = "ffn_norm";              // [hidden] (post-attention norm)
inline constexpr const char *kRouter = "ffn_gate_inp";           // [experts, hidden], always f32
inline constexpr const char *kExpertsGate = "ffn_gate_exps";     // [experts, ffn, hidden]
inline constexpr const char *kExpertsUp = "ffn_up_exps";         // [experts, ffn, hidden]
inline constexpr const char *kExpertsDown = "ffn_down_exps";     // [experts, hidden, ffn]
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

// Parses "blk.<n>.<role>"; false for global tensors.
bool parse_layer_tensor(const std::string &name, uint64_t *layer, std::string *role);

// Storage policy: which dtype a tensor gets when an image is written with `requested`.
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

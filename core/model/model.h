// core/model/model.h — a loaded model: the mapped image, its ModelConfig, and typed views of
// every weight the forward pass reads, bound by name and shape-checked once at load.
// Weights are never copied: every WeightMatrix points into the image mapping.
// Thread safety: a Model is immutable after load and may be shared by any number of sessions.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "image/reader.h"
#include "kernels/cpu/kernels.h"
#include "model/config.h"
#include "util/error.h"
#include "util/numa.h"

namespace colibri::model {

// A [rows, cols] row-major weight matrix in the image (or `count` of them stacked, for the
// experts of a layer: matrix e starts at data + e * matrix_bytes).
struct WeightMatrix {
  const unsigned char *data = nullptr;
  kernels::DType dtype = kernels::DType::F32;
  uint32_t group_size = 0;
  uint64_t rows = 0, cols = 0;
  uint64_t count = 1;          // stacked matrices (experts)
  uint64_t row_bytes = 0;
  uint64_t matrix_bytes = 0;   // rows * row_bytes

  bool present() const { return data != nullptr; }
  const unsigned char *matrix(uint64_t index) const { return data + index * matrix_bytes; }
};

// An f32 vector (norm weight, bias).
struct WeightVector {
  const float *data = nullptr;
  uint64_t size = 0;
  bool present() const { return data != nullptr; }
};

struct LayerWeights {
  WeightVector attn_norm, ffn_norm;
  WeightMatrix attn_q, attn_k, attn_v, attn_output;  // [q_dim, hidden], [kv_dim, hidden] ×2, [hidden, q_dim]
  WeightVector attn_q_bias, attn_k_bias, attn_v_bias;
  WeightVector attn_q_norm, attn_k_norm;              // [head_dim] (per head) or [q_dim]/[kv_dim] (full)
  WeightVector attn_output_bias;                       // [hidden] (gpt-oss)
  WeightVector attn_sinks;                             // [heads] (gpt-oss)
  // Multi-head latent attention (config attention "mla"; tensor_names.h has the shapes):
  // attn_q (q_lora_rank 0) or attn_q_a → attn_q_a_norm → attn_q_b; attn_kv_a_mqa (latent + rope
  // key), attn_kv_a_norm; attn_k_b and attn_v_b stacked per head.
  WeightMatrix attn_q_a, attn_q_b, attn_kv_a_mqa, attn_k_b, attn_v_b;
  WeightVector attn_q_a_norm, attn_kv_a_norm;
  bool sliding = false;                                // attends to the last sliding_window positions only
  bool is_moe = false;
  WeightMatrix router;                                 // [E, hidden] f32
  WeightVector router_select_bias;                     // [E] (sigmoid routers with router_select_bias)
  WeightMatrix experts_gate, experts_up, experts_down; // E × [ffn, hidden], E × [ffn, hidden], E × [hidden, ffn]
  WeightVector router_bias;                            // [E] (gpt-oss)
  // gpt-oss expert biases, expert-major: [E, ffn], [E, ffn], [E, hidden] (expert e at e × rows).
  WeightVector experts_gate_bias, experts_up_bias, experts_down_bias;
  WeightMatrix shared_gate, shared_up, shared_down;    // [sffn, hidden] ×2, [hidden, sffn]
  WeightMatrix shared_expert_gate;                     // [1, hidden] f32
  WeightMatrix dense_gate, dense_up, dense_down;       // dense FFN layers
};

struct TokenizerInfo {
  std::string json;           // tokenizer.json text
  std::string chat_template;  // empty when absent
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;
  int64_t pad_token_id = -1;
  std::string bos_token, eos_token;
  bool add_bos_token = false, add_eos_token = false;
};

struct LoadOptions {
  image::OpenOptions image;      // populate / advice / mlock / verify-on-open
  // Placement of the weights. bind:N and interleave copy them into memory placed by the policy
  // (as load_into_memory does): the pages of a file mapping are the page cache, which a policy
  // cannot place (util/numa.h). Where NUMA is unavailable the policy places nothing.
  util::NumaPolicy numa;
  // The machine's NUMA facts (tests pass a simulated one); null = util::system_numa().
  const util::NumaSystem *numa_system = nullptr;
  bool warm_up = false;          // read every weight page once at load (page cache + TLB warm)
  // Copy the image into anonymous memory with transparent huge pages instead of serving the
  // weights from the file mapping (llama.cpp's --no-mmap): decode streams them with fewer TLB
  // misses, at the cost of one read of the file and its size in private memory. populate,
  // advice and warm_up then do nothing; mlock and the NUMA policy apply to the copy.
  bool load_into_memory = false;
};

class Model {
 public:
  static std::unique_ptr<Model> load(const std::string &path, const LoadOptions &options, Error *error);
  // Binds an already opened image (takes ownership).
  static std::unique_ptr<Model> from_image(std::unique_ptr<image::Image> image, Error *error);

  const ModelConfig &config() const { return config_; }
  const TokenizerInfo &tokenizer() const { return tokenizer_; }
  const image::Image &image() const { return *image_; }
  const WeightMatrix &token_embedding() const { return token_embd_; }  // [vocab, hidden]
  const WeightVector &output_norm() const { return output_norm_; }
  const WeightMatrix &output() const { return output_; }  // [vocab, hidden] (token_embd when tied)
  const std::vector<LayerWeights> &layers() const { return layers_; }
  // Where the weights are, measured at load by asking the kernel for the node of 1024 sampled
  // pages: "off (the file mapping); measured: node 0: 100% of 1024 sampled pages",
  // "interleave: weights copied into memory interleaved over nodes 0-1; measured: node 0:
  // 50%, node 1: 50% of 1024 sampled pages", or why nothing was placed or measured.
  const std::string &numa_report() const { return numa_report_; }

  // Query values of a token (every head), and the values one cache row holds per position and
  // layer: keys of kv_head_count × head_dim (values the same again), or (MLA) the latent and the
  // rope key, kv_lora_rank + head_dim (no separate values: they are the latent).
  uint64_t q_dim() const { return config_.head_count * config_.query_head_dim(); }
  uint64_t kv_dim() const {
    return config_.mla() ? config_.kv_lora_rank + config_.head_dim : config_.kv_head_count * config_.head_dim;
  }
  // The attention output o_proj reads: q_dim, or (MLA) head_count × v_head_dim.
  uint64_t attn_out_dim() const { return config_.mla() ? config_.head_count * config_.v_head_dim : q_dim(); }

 private:
  Model() = default;
  Error bind();

  std::unique_ptr<image::Image> image_;
  ModelConfig config_;
  TokenizerInfo tokenizer_;
  WeightMatrix token_embd_, output_;
  WeightVector output_norm_;
  std::vector<LayerWeights> layers_;
  std::string numa_report_ = "off";
};

}  // namespace colibri::model

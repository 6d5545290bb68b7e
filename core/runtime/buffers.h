// core/runtime/buffers.h — the activation arena of a session: every buffer the forward pass
// touches, sized once at creation for max_batch_tokens, so that forward() never allocates.
// Shapes are in the comments (N = max_batch_tokens, K = top_k, P = threads).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "model/model.h"
#include "runtime/session.h"

namespace colibri::runtime {

inline constexpr uint32_t kNoPosition = 0xFFFFFFFFu;

// The rotary_dim / 2 RoPE inverse frequencies of the model, in fp32 as transformers computes
// them: θ^(−2i/r), or YaRN's blend of those and θ^(−2i/r) / factor (attention.cpp).
void rope_inverse_frequencies(const model::ModelConfig &c, float *out);

struct ExpertTask {
  uint32_t expert;
  uint32_t row_begin, row_end;
};

// An expert computed with the prefill kernel (more than 8 tokens) is cut into row stripes of
// at most this many rows per phase (see run_experts in moe.cpp).
inline constexpr size_t kExpertPrefillStripeRows = 256;

// Attention reads the cache in runs of at most this many positions of one KV head (keys, then
// values), never crossing a cache block or a ring's wrap: a run of an f16 cache is widened to
// f32 once into the thread's kv_rows and goes through the same block kernels as an f32 cache;
// a run serves every query of the task's tile while it is in L1/L2 (64 rows × head_dim 128 ×
// 4 B = 32 KB).
inline constexpr size_t kAttentionRunRows = 64;
// A task of the attention takes a tile of up to kAttentionTileTokens consecutive entries of
// one sequence (a prefill chunk), so that each run of cached rows is read once for all of
// them. The tile's score rows live in the thread's scores buffer; where kAttentionTileTokens
// rows would exceed kAttentionTileScoreBytes (long contexts) the tile is shorter (>= 1).
inline constexpr size_t kAttentionTileTokens = 16;
inline constexpr size_t kAttentionTileScoreBytes = size_t(1) << 20;
// A batch with fewer tasks than threads (a decode step of one or a few sequences) splits each
// entry's attention instead: scores over slices of kAttentionSplitRows positions, the softmax
// per head, the weighted values over slices of kAttentionSplitDims dimensions (64 bytes: one
// cache line of an f32 value row). Every score and every output element is computed by the
// same kernel steps in either form: the bits do not depend on the split.
inline constexpr size_t kAttentionSplitRows = 256;
inline constexpr size_t kAttentionSplitDims = 16;

struct Session::Buffers {
  std::vector<float> x;        // [N, hidden] residual stream
  std::vector<float> xn;       // [N, hidden] normed input of a block
  std::vector<float> q;        // [N, q_dim]
  std::vector<float> k, v;     // [N, kv_dim]
  std::vector<float> attn;     // [N, q_dim] attention output before o_proj
  std::vector<float> ffn_out;  // [N, hidden]
  std::vector<float> scores;   // [P, tile tokens, attention_group, score_stride] attention scores per thread
  // A head's row of scores: every position of the context, and one more for an attention sink.
  static size_t score_stride(const SessionOptions &o) { return size_t(o.context_length) + 1; }
  std::vector<float> kv_rows;          // [P, kAttentionRunRows, head_dim or MLA row] cache rows widened to f32 (F16 only)
  std::vector<uint32_t> attention_tiles;  // [N + 1] first entry of each attention tile, then the batch size
  std::vector<float> rope_inv_freq;    // [rotary_dim / 2] θ^(−2i/r), fixed for the model
  std::vector<float> rope_trig;        // [N, head_dim]: cos | sin (rotary_dim / 2 each) of each entry's position
  // Multi-head latent attention (empty otherwise; r = kv_lora_rank, d = head_dim, the rope part):
  std::vector<float> mla_q_a;          // [N, q_lora_rank] q_a_proj's output, then normed
  std::vector<float> mla_query;        // [N, heads, r + d] absorbed queries: attn_k_b[h]·q_nope_h ⊕ q_rope_h
  std::vector<float> mla_context;      // [N, heads, r] attention-weighted latents
  std::vector<float> mla_gather;       // [P, N, max(nope, r)] one head's inputs, contiguous, per thread
  // MoE
  std::vector<float> router_logits;       // [N, E]
  std::vector<float> router_scratch;      // [2E] sigmoid routing's choices and group scores
  std::vector<int32_t> topk_expert;       // [N, K]
  std::vector<float> topk_weight;         // [N, K]
  std::vector<uint32_t> expert_count;     // [E]
  std::vector<uint32_t> expert_offset;    // [E + 1] start of each expert's rows in the gathered order
  std::vector<uint32_t> slot_row;         // [N, K] gathered row of (token, slot)
  std::vector<uint32_t> row_token;        // [N·K] token of each gathered row
  std::vector<float> gathered;            // [N·K, hidden] inputs grouped by expert
  std::vector<float> gate, up;            // [N·K, max_ffn]
  std::vector<float> expert_out;          // [N·K, hidden]
  std::vector<unsigned char> tokens_q8;   // [N, q8 row of hidden] activations quantised once per token
  std::vector<unsigned char> gathered_q8; // [N·K, q8 row of max(hidden, ffn)] grouped by expert
  std::vector<unsigned char> matmul_q8;   // [N, q8 row of max(hidden, q_dim, ffn)] input of Session::matmuls
  std::vector<float> shared_gate_logit;   // [N]
  std::vector<ExpertTask> tasks;          // work list of one phase
  std::vector<uint32_t> logit_sources;    // [N] entry index of each logits row
  std::vector<uint32_t> scratch_lengths;  // [sequences]
  std::vector<uint32_t> scratch_last_position;  // [sequences]
  std::vector<uint32_t> scratch_first_position;  // [sequences]

  // Query heads that one attention call reads a run of cache rows for: a KV head's group, or
  // (MLA, where every head reads the one latent row) up to kMlaHeadsPerTask of them.
  static constexpr size_t kMlaHeadsPerTask = 8;
  static size_t attention_group(const model::ModelConfig &c) {
    return c.mla() ? std::min<size_t>(c.head_count, kMlaHeadsPerTask) : c.head_count / c.kv_head_count;
  }
  // Entries per attention tile (see kAttentionTileTokens).
  static size_t attention_tile_tokens(const model::ModelConfig &c, const SessionOptions &o) {
    const size_t row_bytes = attention_group(c) * score_stride(o) * sizeof(float);
    return std::clamp<size_t>(kAttentionTileScoreBytes / row_bytes, 1, std::min<size_t>(kAttentionTileTokens, o.max_batch_tokens));
  }

  Buffers(const model::Model &m, const SessionOptions &o, size_t threads) {
    const model::ModelConfig &c = m.config();
    const size_t N = o.max_batch_tokens, H = c.hidden_size, K = std::max<uint64_t>(c.top_k, 1);
    const size_t E = std::max<uint64_t>(c.expert_count, 1);
    const size_t ffn = std::max({c.expert_ffn_size, c.shared_expert_ffn_size, c.dense_ffn_size});
    x.assign(N * H, 0.0f);
    xn.assign(N * H, 0.0f);
    q.assign(N * m.q_dim(), 0.0f);
    k.assign(N * m.kv_dim(), 0.0f);
    v.assign(N * m.kv_dim(), 0.0f);
    attn.assign(N * std::max(m.q_dim(), m.attn_out_dim()), 0.0f);
    ffn_out.assign(N * H, 0.0f);
    scores.assign(threads * attention_tile_tokens(c, o) * attention_group(c) * score_stride(o), 0.0f);
    attention_tiles.assign(N + 1, 0);
    rope_inv_freq.resize(c.rotary_dim / 2);
    rope_inverse_frequencies(c, rope_inv_freq.data());
    rope_trig.assign(N * c.head_dim, 0.0f);
    // An f16 cache's rows widened per thread: one KV head's keys or values (head_dim), or an MLA
    // cache row (the latent and the rope key).
    const size_t widened = c.mla() ? m.kv_dim() : c.head_dim;
    if (o.kv_dtype == KvDtype::F16) kv_rows.assign(threads * kAttentionRunRows * widened, 0.0f);
    if (c.mla()) {
      const size_t r = c.kv_lora_rank, heads = c.head_count;
      mla_q_a.assign(N * c.q_lora_rank, 0.0f);
      mla_query.assign(N * heads * (r + c.head_dim), 0.0f);
      mla_context.assign(N * heads * r, 0.0f);
      mla_gather.assign(threads * N * std::max<size_t>(c.qk_nope_head_dim, r), 0.0f);
    }
    router_logits.assign(N * E, 0.0f);
    router_scratch.assign(2 * E, 0.0f);  // select_top_k_sigmoid: E choices + at most E / 2 groups
    topk_expert.assign(N * K, 0);
    topk_weight.assign(N * K, 0.0f);
    expert_count.assign(E, 0);
    expert_offset.assign(E + 1, 0);
    slot_row.assign(N * K, 0);
    row_token.assign(N * K, 0);
    gathered.assign(N * K * H, 0.0f);
    gate.assign(N * K * ffn, 0.0f);
    up.assign(N * K * ffn, 0.0f);
    expert_out.assign(N * K * H, 0.0f);
    // q8 rows are largest with group 32: 36 bytes per 32 values (+1 block of slack).
    auto q8_row_bound = [](size_t cols) { return (cols / 32 + 1) * 36; };
    tokens_q8.assign(N * q8_row_bound(H), 0);
    gathered_q8.assign(N * K * q8_row_bound(std::max<size_t>(H, ffn)), 0);
    matmul_q8.assign(N * q8_row_bound(std::max({H, static_cast<size_t>(m.q_dim()), ffn})), 0);
    shared_gate_logit.assign(N, 0.0f);
    // At most E experts × row blocks per phase; blocks per matrix ≤ 4·threads + 1, or the
    // prefill stripes of the larger of the two matrix heights.
    const size_t stripes = (std::max<size_t>(H, ffn) + kExpertPrefillStripeRows - 1) / kExpertPrefillStripeRows;
    tasks.reserve(E * (std::max<size_t>(4 * threads, stripes) + 2) + 8);
    logit_sources.assign(N, 0);
    scratch_lengths.assign(o.max_sequences, 0);
    scratch_last_position.assign(o.max_sequences, 0);
    scratch_first_position.assign(o.max_sequences, 0);
  }
};

}  // namespace colibri::runtime

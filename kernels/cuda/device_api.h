/* kernels/cuda/device_api.h — the internal, versioned C interface between libcolibri and a
 * device backend module (libcolibri_cuda.so), docs/architecture.md §13.
 *
 * libcolibri dlopens the module only when a session asks for a CUDA device, looks up one
 * symbol, colibri_device_api_get, and calls it with the interface version it was built
 * against. The module answers with its function table, or NULL when it does not speak that
 * version. Everything that crosses the boundary is plain C (fixed-width integers, pointers,
 * caller-provided message buffers): no C++ type, no exception, no allocation handed across.
 *
 * This header is not public (not installed, not part of the C ABI): libcolibri and the
 * module come from the same build and are installed side by side. A change of any struct or
 * function here bumps COLIBRI_DEVICE_API_VERSION.
 *
 * Status codes of every function: COLIBRI_DEVICE_OK or one of the errors below, with a
 * NUL-terminated message written into the caller's buffer (truncated to its size). */
#ifndef COLIBRI_KERNELS_CUDA_DEVICE_API_H
#define COLIBRI_KERNELS_CUDA_DEVICE_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COLIBRI_DEVICE_API_VERSION 1u
#define COLIBRI_DEVICE_API_SYMBOL "colibri_device_api_get"

#define COLIBRI_DEVICE_OK 0
#define COLIBRI_DEVICE_ERROR_NO_DEVICE -1     /* no driver, no device, index out of range */
#define COLIBRI_DEVICE_ERROR_UNSUPPORTED -2   /* a model feature the backend does not implement yet */
#define COLIBRI_DEVICE_ERROR_OUT_OF_MEMORY -3 /* device (VRAM budget) or pinned host memory */
#define COLIBRI_DEVICE_ERROR_INVALID -4       /* a bad argument (a bug in the caller) */
#define COLIBRI_DEVICE_ERROR_DEVICE -5        /* a CUDA call failed (message names it) */
#define COLIBRI_DEVICE_ERROR_NON_FINITE -6    /* logits not finite */

/* Weight dtypes: the values of kernels::DType (kernels/cpu/kernels.h). */
#define COLIBRI_DEVICE_DTYPE_F32 0u
#define COLIBRI_DEVICE_DTYPE_F16 1u
#define COLIBRI_DEVICE_DTYPE_BF16 2u
#define COLIBRI_DEVICE_DTYPE_Q8 3u /* group_size 32 or 64 */

/* Stages of the per-stage device time forward reports (the values of runtime::Stage). */
#define COLIBRI_DEVICE_STAGE_EMBEDDING 0u
#define COLIBRI_DEVICE_STAGE_ATTENTION 1u
#define COLIBRI_DEVICE_STAGE_ROUTER 2u
#define COLIBRI_DEVICE_STAGE_TOP_K 3u
#define COLIBRI_DEVICE_STAGE_DISPATCH 4u
#define COLIBRI_DEVICE_STAGE_EXPERTS 5u
#define COLIBRI_DEVICE_STAGE_MERGE 6u
#define COLIBRI_DEVICE_STAGE_LM_HEAD 7u
#define COLIBRI_DEVICE_STAGE_COUNT 8u

/* The most tokens one device pass computes together (the fused multi-token GEMVs keep this
 * many accumulators per row); longer batches run in chunks of this size. */
#define COLIBRI_DEVICE_MAX_CHUNK_TOKENS 8u

/* A [rows, cols] row-major matrix in host memory (the image mapping), or `count` of them
 * stacked (experts: matrix e at data + e * matrix_bytes). data == NULL: absent. */
typedef struct colibri_device_matrix {
  const void *data;
  uint32_t dtype;
  uint32_t group_size;
  uint64_t rows, cols, count;
  uint64_t row_bytes, matrix_bytes;
} colibri_device_matrix;

/* An f32 vector in host memory; data == NULL: absent. */
typedef struct colibri_device_vector {
  const float *data;
  uint64_t size;
} colibri_device_vector;

typedef struct colibri_device_layer {
  colibri_device_vector attn_norm, ffn_norm;
  colibri_device_matrix attn_q, attn_k, attn_v, attn_output; /* [q_dim,H] [kv_dim,H] x2 [H,q_dim] */
  colibri_device_vector attn_q_bias, attn_k_bias, attn_v_bias;
  colibri_device_vector attn_q_norm, attn_k_norm; /* [head_dim] (per head) or [q_dim]/[kv_dim] (full) */
  uint32_t is_moe;
  uint32_t reserved;
  colibri_device_matrix router;                                   /* [E, H] f32 */
  colibri_device_matrix experts_gate, experts_up, experts_down;   /* E x [F,H], E x [F,H], E x [H,F] */
  colibri_device_matrix shared_gate, shared_up, shared_down;      /* [S,H] x2, [H,S] */
  colibri_device_matrix shared_expert_gate;                       /* [1, H] f32 */
  colibri_device_matrix dense_gate, dense_up, dense_down;         /* dense FFN layers */
} colibri_device_layer;

#define COLIBRI_DEVICE_QK_NORM_NONE 0u
#define COLIBRI_DEVICE_QK_NORM_PER_HEAD 1u
#define COLIBRI_DEVICE_QK_NORM_FULL 2u

/* What the module needs of the model: hyper-parameters (core/model/config.h) and the weights'
 * host addresses. The host memory must stay mapped while context_create runs (weights are
 * uploaded once; the module keeps no pointer into it afterwards). */
typedef struct colibri_device_model {
  uint32_t struct_size;
  uint32_t qk_norm;              /* COLIBRI_DEVICE_QK_NORM_* */
  uint64_t vocab_size, hidden_size, layer_count, head_count, kv_head_count, head_dim;
  uint64_t expert_count, expert_ffn_size, top_k;
  float rms_norm_eps;
  float clip_qkv;                /* 0: none */
  uint32_t norm_topk_prob;       /* renormalise the k selected weights */
  uint32_t router_softmax;       /* 1: softmax scores (the only scoring the engine has today) */
  const float *rope_inv_freq;    /* [head_dim / 2] fp32, as the CPU session computes them */
  colibri_device_matrix token_embedding; /* [vocab, H] */
  colibri_device_vector output_norm;
  colibri_device_matrix output;          /* [vocab, H] (the embedding when tied) */
  const colibri_device_layer *layers;    /* [layer_count] */
} colibri_device_model;

/* The session's shape. */
typedef struct colibri_device_session {
  uint32_t struct_size;
  uint32_t device_index;     /* cuda:N */
  uint32_t context_length;   /* positions per sequence */
  uint32_t max_sequences;    /* contiguous KV slots */
  uint32_t max_logit_rows;   /* rows of logits one forward may return */
  uint32_t kv_f16;           /* 1: f16 KV cache, else f32 */
  uint32_t use_graphs;       /* 1: capture the one-token decode step in a CUDA graph and replay it */
  uint32_t max_batch_tokens; /* entries one forward call may pass */
} colibri_device_session;

/* One token of a batch (the runtime's BatchEntry, checked by the caller already). */
typedef struct colibri_device_entry {
  uint32_t sequence;
  uint32_t position;
  int32_t token;
  uint32_t want_logits;
} colibri_device_entry;

/* What a context reports about itself (after creation). */
typedef struct colibri_device_context_info {
  uint64_t weight_bytes;      /* uploaded weights */
  uint64_t kv_cache_bytes;    /* the device KV cache */
  uint64_t buffer_bytes;      /* activations and scratch */
  uint64_t graph_launches;    /* decode steps replayed from the CUDA graph */
  uint64_t eager_steps;       /* device passes launched kernel by kernel */
  uint64_t graph_kernels;     /* kernels in the captured decode step (0 before the capture) */
  double device_ms;           /* device time of all passes (CUDA events) */
  char device_name[128];
} colibri_device_context_info;

typedef struct colibri_device_api {
  uint32_t struct_size;
  uint32_t version;          /* COLIBRI_DEVICE_API_VERSION */
  /* Names the device, or says why there is none. Cheap (no context is created). */
  int32_t (*probe)(uint32_t device_index, char *name, size_t name_size, char *message, size_t message_size);
  /* Uploads the weights (after the VRAM budget check) and allocates the KV cache and the
   * buffers. On success *context_out is owned by the caller (context_free). */
  int32_t (*context_create)(const colibri_device_model *model, const colibri_device_session *session,
                            void **context_out, char *message, size_t message_size);
  void (*context_free)(void *context);
  /* Runs the batch (entries in order; a sequence's entries are consecutive positions) and
   * writes the logits of the entries with want_logits into logits [rows, vocab] in entry
   * order, *logit_rows their count. Adds each stage's device time (CUDA events between the
   * stages' kernels, nanoseconds) to stage_ns[COLIBRI_DEVICE_STAGE_COUNT] (may be NULL); a
   * stage whose events cannot be timed adds nothing. */
  int32_t (*forward)(void *context, const colibri_device_entry *entries, size_t count, float *logits,
                     size_t *logit_rows, uint64_t *stage_ns, char *message, size_t message_size);
  int32_t (*context_info)(void *context, colibri_device_context_info *info);
} colibri_device_api;

/* The one exported symbol of the module. Returns NULL for a version it does not implement. */
typedef const colibri_device_api *(*colibri_device_api_get_fn)(uint32_t version);

#ifdef __cplusplus
}
#endif

#endif /* COLIBRI_KERNELS_CUDA_DEVICE_API_H */

/* bindings/go/shim.h — the C side of the Go binding: dlopen + a function table per loaded
 * library, and one wrapper per call that reads the thread-local error message inside the
 * same C call as the failing function (a goroutine can move to another OS thread between two
 * cgo calls, so reading colibri_last_error in a second call could see another thread's state).
 *
 * Every wrapper that can fail takes `char **err`: on a negative status it receives a malloc'd
 * copy of the message (the Go side frees it); otherwise it is left untouched. */
#ifndef COLIBRI_GO_SHIM_H
#define COLIBRI_GO_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "colibri.h"

typedef struct colibri_go_api colibri_go_api;

/* Loads `path` (NULL: the SONAME libcolibri.so.1), checks colibri_abi_version() against the
 * COLIBRI_ABI_VERSION of the bundled colibri.h and resolves every function. On failure: NULL,
 * *err, and *status COLIBRI_ERROR_IO (dlopen failed) or COLIBRI_ERROR_UNSUPPORTED (not
 * libcolibri, another ABI generation, a missing function). The table is never freed
 * (libcolibri is -z nodelete; Go caches one per path). */
const colibri_go_api *cgo_load(const char *path, int32_t *status, char **err);

uint32_t cgo_abi_version(const colibri_go_api *a);
const char *cgo_version_string(const colibri_go_api *a);
const char *cgo_status_string(const colibri_go_api *a, int32_t status);
const char *cgo_dtype_name(const colibri_go_api *a, uint32_t dtype);
const char *cgo_stage_name(const colibri_go_api *a, uint32_t stage);
int32_t cgo_set_log_callback(const colibri_go_api *a, uintptr_t handle, int32_t min_level, char **err);

/* Options structs: the library's defaults. */
int32_t cgo_model_options_init(const colibri_go_api *a, colibri_model_options *o, char **err);
int32_t cgo_session_options_init(const colibri_go_api *a, colibri_session_options *o, char **err);
int32_t cgo_sampler_options_init(const colibri_go_api *a, colibri_sampler_options *o, char **err);

int32_t cgo_model_open(const colibri_go_api *a, const char *path, const colibri_model_options *o,
                       colibri_model **out, char **err);
void cgo_model_close(const colibri_go_api *a, colibri_model *m);
int32_t cgo_model_get_info(const colibri_go_api *a, const colibri_model *m, colibri_model_info *info, char **err);
int32_t cgo_model_eos_tokens(const colibri_go_api *a, const colibri_model *m, int32_t *ids, size_t capacity,
                             size_t *count, char **err);
int32_t cgo_model_metadata(const colibri_go_api *a, const colibri_model *m, const char **json, size_t *size,
                           char **err);
int32_t cgo_model_tensor_count(const colibri_go_api *a, const colibri_model *m, size_t *count, char **err);
int32_t cgo_model_tensor_info(const colibri_go_api *a, const colibri_model *m, size_t index,
                              colibri_tensor_info *info, char **err);
int32_t cgo_model_find_tensor(const colibri_go_api *a, const colibri_model *m, const char *name, size_t *index,
                              char **err);

int32_t cgo_tokenize(const colibri_go_api *a, const colibri_model *m, const char *text, size_t text_size,
                     uint32_t flags, int32_t *tokens, size_t capacity, size_t *count, char **err);
int32_t cgo_detokenize(const colibri_go_api *a, const colibri_model *m, const int32_t *tokens, size_t count,
                       uint32_t flags, char *text, size_t capacity, size_t *size, char **err);
int32_t cgo_token_text(const colibri_go_api *a, const colibri_model *m, int32_t token, char *text,
                       size_t capacity, size_t *size, char **err);
/* roles/contents/names/values: C arrays of C strings. */
int32_t cgo_chat_render(const colibri_go_api *a, const colibri_model *m, char **roles, char **contents,
                        size_t message_count, uint32_t add_generation_prompt, const char *template_text,
                        char **names, char **values, size_t variable_count, char *text, size_t capacity,
                        size_t *size, char **err);

int32_t cgo_session_create(const colibri_go_api *a, colibri_model *m, const colibri_session_options *o,
                           colibri_session **out, char **err);
void cgo_session_free(const colibri_go_api *a, colibri_session *s);
int32_t cgo_session_get_info(const colibri_go_api *a, const colibri_session *s, colibri_session_info *info,
                             char **err);
int32_t cgo_session_reset(const colibri_go_api *a, colibri_session *s, char **err);
int32_t cgo_session_reset_sequence(const colibri_go_api *a, colibri_session *s, uint32_t sequence, char **err);
int32_t cgo_session_sequence_length(const colibri_go_api *a, const colibri_session *s, uint32_t sequence,
                                    uint32_t *length, char **err);
int32_t cgo_session_prefill(const colibri_go_api *a, colibri_session *s, uint32_t sequence, const int32_t *tokens,
                            size_t count, char **err);
int32_t cgo_session_decode(const colibri_go_api *a, colibri_session *s, uint32_t sequence, int32_t token,
                           char **err);
int32_t cgo_session_batch(const colibri_go_api *a, colibri_session *s, const uint32_t *sequences,
                          const uint32_t *positions, const int32_t *tokens, const uint32_t *want_logits,
                          size_t count, char **err);
/* *row_count (may be NULL) receives the number of logit rows. */
int32_t cgo_session_copy_logits(const colibri_go_api *a, const colibri_session *s, size_t row, float *buffer,
                                size_t capacity, size_t *row_count, char **err);
int32_t cgo_session_moe_layer(const colibri_go_api *a, colibri_session *s, uint32_t layer, const float *hidden,
                              size_t rows, const int32_t *route_experts, const float *route_weights, float *out,
                              char **err);
int32_t cgo_session_get_stats(const colibri_go_api *a, const colibri_session *s, colibri_stats *stats, char **err);
int32_t cgo_session_reset_stats(const colibri_go_api *a, colibri_session *s, char **err);

/* Generation options without pointers (so Go memory may hold it); the arrays travel as
 * arguments. */
typedef struct cgo_generate_args {
  uint32_t max_tokens;
  uint32_t sequence;
  uint32_t ignore_eos;
  uint32_t has_sampler; /* 0: the library's sampler defaults */
  uint32_t has_eos;     /* 0: the model's EOS ids */
  uint32_t reserved;
  colibri_sampler_options sampler;
} cgo_generate_args;

/* colibri_generate with the Go piece callback (cgo handle `handle`; 0 = no callback). */
int32_t cgo_generate(const colibri_go_api *a, colibri_session *s, const int32_t *prompt, size_t prompt_count,
                     const cgo_generate_args *g, const int32_t *eos, size_t eos_count, char **stops,
                     size_t stop_count, uintptr_t handle, colibri_generate_result *result, char **err);
int32_t cgo_stream_open(const colibri_go_api *a, colibri_session *s, const int32_t *prompt, size_t prompt_count,
                        const cgo_generate_args *g, const int32_t *eos, size_t eos_count, char **stops,
                        size_t stop_count, colibri_stream **out, char **err);
int32_t cgo_stream_next(const colibri_go_api *a, colibri_stream *st, const char **piece, size_t *size, char **err);
int32_t cgo_stream_get_result(const colibri_go_api *a, const colibri_stream *st, colibri_generate_result *result,
                              char **err);
int32_t cgo_stream_tokens(const colibri_go_api *a, const colibri_stream *st, int32_t *tokens, size_t capacity,
                          size_t *count, char **err);
void cgo_stream_close(const colibri_go_api *a, colibri_stream *st);

/* The serving engine. eo->session is ignored: so (NULL: defaults) is used instead, so that Go
 * memory holding eo has no pointer in it. */
int32_t cgo_engine_options_init(const colibri_go_api *a, colibri_engine_options *o, char **err);
int32_t cgo_engine_create(const colibri_go_api *a, colibri_model *m, const colibri_engine_options *eo,
                          const colibri_session_options *so, colibri_engine **out, char **err);
void cgo_engine_free(const colibri_go_api *a, colibri_engine *e);
int32_t cgo_engine_get_stats(const colibri_go_api *a, const colibri_engine *e, colibri_engine_stats *stats,
                             char **err);
/* Request options without pointers; the arrays travel as arguments (as cgo_generate_args). */
typedef struct cgo_request_args {
  uint32_t max_tokens;
  uint32_t ignore_eos;
  uint32_t has_sampler; /* 0: the library's sampler defaults */
  uint32_t has_eos;     /* 0: the model's EOS ids */
  uint64_t timeout_ns;
  uint32_t logprobs;     /* colibri_request_options.logprobs */
  uint32_t top_logprobs; /* colibri_request_options.top_logprobs */
  colibri_sampler_options sampler;
} cgo_request_args;
int32_t cgo_request_submit(const colibri_go_api *a, colibri_engine *e, const int32_t *prompt, size_t prompt_count,
                           const cgo_request_args *r, const int32_t *eos, size_t eos_count, char **stops,
                           size_t stop_count, colibri_request **out, char **err);
/* colibri_request_submit_chat: the messages and chat options as for cgo_chat_render. */
int32_t cgo_request_submit_chat(const colibri_go_api *a, colibri_engine *e, char **roles, char **contents,
                                size_t message_count, uint32_t add_generation_prompt, const char *template_text,
                                char **names, char **values, size_t variable_count, const cgo_request_args *r,
                                const int32_t *eos, size_t eos_count, char **stops, size_t stop_count,
                                colibri_request **out, char **err);
int32_t cgo_request_next(const colibri_go_api *a, colibri_request *r, int64_t timeout_ns, const char **piece,
                         size_t *size, char **err);
int32_t cgo_request_cancel(const colibri_go_api *a, colibri_request *r, char **err);
int32_t cgo_request_get_result(const colibri_go_api *a, const colibri_request *r, colibri_request_result *result,
                               char **err);
int32_t cgo_request_tokens(const colibri_go_api *a, const colibri_request *r, int32_t *tokens, size_t capacity,
                           size_t *count, char **err);
int32_t cgo_request_logprobs(const colibri_go_api *a, const colibri_request *r, size_t index,
                             colibri_token_logprob *chosen, colibri_token_logprob *top, size_t capacity,
                             size_t *count, char **err);
void cgo_request_free(const colibri_go_api *a, colibri_request *r);

#endif /* COLIBRI_GO_SHIM_H */

/*
 * bindings/c/colibri_loader.h — load libcolibri at run time (dlopen) into a table of function
 * pointers, with an ABI check, for C programs that must not link against the library (plugins,
 * optional features, choosing a build at run time). Types and constants come from colibri.h;
 * calls go through the table: api.model_open(...) instead of colibri_model_open(...).
 *
 *   colibri_api api;
 *   char error[512];
 *   if (colibri_api_load(&api, NULL, error, sizeof error) != 0) { fprintf(stderr, "%s\n", error); ... }
 *   api.model_open("model.colibri", NULL, &model);
 *   ...
 *   colibri_api_unload(&api);
 *
 * The table is filled completely or not at all: a library that lacks a function the header
 * declares (an older libcolibri) is refused, naming the function. Thread safety: load and
 * unload are not thread-safe with respect to each other or to calls through the table; the
 * table itself is read-only after loading and the functions follow colibri.h's rules.
 * libcolibri is linked with -z nodelete, so unloading never unmaps its code.
 */
#ifndef COLIBRI_LOADER_H
#define COLIBRI_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "colibri.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every function of colibri.h: X(return type, name without "colibri_", (parameters)).
 * Generated from colibri.h; test_c_loader checks that it lists every exported symbol. */
#define COLIBRI_LOADER_FUNCTIONS(X) \
  X(uint32_t, abi_version, (void)) \
  X(const char *, version_string, (void)) \
  X(const char *, status_string, (int32_t status)) \
  X(int32_t, last_error, (char *buffer, size_t buffer_size, size_t *message_size)) \
  X(int32_t, set_log_callback, (colibri_log_fn fn, void *user, int32_t min_level)) \
  X(const char *, dtype_name, (uint32_t dtype)) \
  X(int32_t, model_options_init, (colibri_model_options *options, size_t struct_size)) \
  X(int32_t, model_open, (const char *path, const colibri_model_options *options, colibri_model **model_out)) \
  X(void, model_close, (colibri_model *model)) \
  X(int32_t, model_get_info, (const colibri_model *model, colibri_model_info *info)) \
  X(int32_t, model_eos_tokens, (const colibri_model *model, int32_t *ids, size_t capacity, size_t *count)) \
  X(int32_t, model_metadata, (const colibri_model *model, const char **json, size_t *json_size)) \
  X(int32_t, model_tensor_count, (const colibri_model *model, size_t *count)) \
  X(int32_t, model_tensor_info, (const colibri_model *model, size_t index, colibri_tensor_info *info)) \
  X(int32_t, model_find_tensor, (const colibri_model *model, const char *name, size_t *index)) \
  X(int32_t, tokenize, (const colibri_model *model, const char *text, size_t text_size, uint32_t flags, int32_t *tokens, size_t capacity, size_t *count)) \
  X(int32_t, detokenize, (const colibri_model *model, const int32_t *tokens, size_t token_count, uint32_t flags, char *text, size_t capacity, size_t *text_size)) \
  X(int32_t, token_text, (const colibri_model *model, int32_t token, char *text, size_t capacity, size_t *text_size)) \
  X(int32_t, chat_options_init, (colibri_chat_options *options, size_t struct_size)) \
  X(int32_t, chat_render, (const colibri_model *model, const colibri_chat_message *messages, size_t message_count, const colibri_chat_options *options, char *text, size_t capacity, size_t *text_size)) \
  X(int32_t, session_options_init, (colibri_session_options *options, size_t struct_size)) \
  X(int32_t, session_create, (colibri_model *model, const colibri_session_options *options, colibri_session **session_out)) \
  X(void, session_free, (colibri_session *session)) \
  X(int32_t, session_get_info, (const colibri_session *session, colibri_session_info *info)) \
  X(int32_t, session_reset, (colibri_session *session)) \
  X(int32_t, session_reset_sequence, (colibri_session *session, uint32_t sequence)) \
  X(int32_t, session_sequence_length, (const colibri_session *session, uint32_t sequence, uint32_t *length)) \
  X(int32_t, session_prefill, (colibri_session *session, uint32_t sequence, const int32_t *tokens, size_t token_count)) \
  X(int32_t, session_decode, (colibri_session *session, uint32_t sequence, int32_t token)) \
  X(int32_t, session_batch, (colibri_session *session, const uint32_t *sequences, const uint32_t *positions, const int32_t *tokens, const uint32_t *want_logits, size_t count)) \
  X(int32_t, session_logits, (const colibri_session *session, size_t row, const float **logits, size_t *vocab_size, size_t *row_count)) \
  X(int32_t, session_copy_logits, (const colibri_session *session, size_t row, float *buffer, size_t capacity)) \
  X(int32_t, sampler_options_init, (colibri_sampler_options *options, size_t struct_size)) \
  X(int32_t, sampler_create, (const colibri_sampler_options *options, size_t vocab_size, colibri_sampler **sampler_out)) \
  X(void, sampler_free, (colibri_sampler *sampler)) \
  X(int32_t, sampler_sample, (colibri_sampler *sampler, const float *logits, int32_t *token)) \
  X(int32_t, sampler_accept, (colibri_sampler *sampler, int32_t token)) \
  X(int32_t, sampler_reset, (colibri_sampler *sampler)) \
  X(int32_t, generate_options_init, (colibri_generate_options *options, size_t struct_size)) \
  X(int32_t, generate, (colibri_session *session, const int32_t *prompt, size_t prompt_count, const colibri_generate_options *options, colibri_piece_fn on_piece, void *user, colibri_generate_result *result)) \
  X(int32_t, stream_open, (colibri_session *session, const int32_t *prompt, size_t prompt_count, const colibri_generate_options *options, colibri_stream **stream_out)) \
  X(int32_t, stream_next, (colibri_stream *stream, const char **piece, size_t *piece_size)) \
  X(int32_t, stream_get_result, (const colibri_stream *stream, colibri_generate_result *result)) \
  X(int32_t, stream_tokens, (const colibri_stream *stream, int32_t *tokens, size_t capacity, size_t *count)) \
  X(void, stream_close, (colibri_stream *stream)) \
  X(int32_t, session_moe_layer, (colibri_session *session, uint32_t layer, const float *hidden, size_t row_count, const int32_t *route_experts, const float *route_weights, float *out)) \
  X(int32_t, session_set_expert_fn, (colibri_session *session, colibri_expert_fn fn, void *user)) \
  X(const char *, stage_name, (uint32_t stage)) \
  X(int32_t, session_get_stats, (const colibri_session *session, colibri_stats *stats)) \
  X(int32_t, session_reset_stats, (colibri_session *session)) \
  X(int32_t, engine_options_init, (colibri_engine_options *options, size_t struct_size)) \
  X(int32_t, engine_create, (colibri_model *model, const colibri_engine_options *options, colibri_engine **engine_out)) \
  X(void, engine_free, (colibri_engine *engine)) \
  X(int32_t, engine_get_stats, (const colibri_engine *engine, colibri_engine_stats *stats)) \
  X(int32_t, request_options_init, (colibri_request_options *options, size_t struct_size)) \
  X(int32_t, request_submit, (colibri_engine *engine, const int32_t *prompt, size_t prompt_count, const colibri_request_options *options, colibri_request **request_out)) \
  X(int32_t, request_next, (colibri_request *request, int64_t timeout_ns, const char **piece, size_t *piece_size)) \
  X(int32_t, request_cancel, (colibri_request *request)) \
  X(int32_t, request_get_result, (const colibri_request *request, colibri_request_result *result)) \
  X(int32_t, request_tokens, (const colibri_request *request, int32_t *tokens, size_t capacity, size_t *count)) \
  X(void, request_free, (colibri_request *request)) \
  X(int32_t, request_submit_chat, (colibri_engine *engine, const colibri_chat_message *messages, size_t message_count, const colibri_chat_options *chat_options, const colibri_request_options *options, colibri_request **request_out)) \
  X(int32_t, request_logprobs, (const colibri_request *request, size_t token_index, colibri_token_logprob *chosen, colibri_token_logprob *top, size_t capacity, size_t *count))


typedef struct colibri_api {
  void *library;             /* the dlopen handle; NULL when not loaded */
  uint32_t loaded_abi_version; /* colibri_abi_version() of the loaded library */
#define COLIBRI_LOADER_FIELD(ret, name, params) ret(*name) params;
  COLIBRI_LOADER_FUNCTIONS(COLIBRI_LOADER_FIELD)
#undef COLIBRI_LOADER_FIELD
} colibri_api;

/* Opens `path` (NULL: the SONAME "libcolibri.so.1", found the way the dynamic linker finds
 * libraries: rpath, LD_LIBRARY_PATH, ld.so.cache) with RTLD_NOW | RTLD_LOCAL, checks that its
 * ABI generation equals the COLIBRI_ABI_VERSION this program was compiled with, and resolves
 * every function. Returns 0 on success; otherwise -1, *api zeroed, and a message in error
 * (NUL-terminated, truncated to error_size; error may be NULL). */
int colibri_api_load(colibri_api *api, const char *path, char *error, size_t error_size);

/* dlclose-s the library and zeroes *api. Every handle from it must be freed before. */
void colibri_api_unload(colibri_api *api);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* COLIBRI_LOADER_H */

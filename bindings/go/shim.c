/* bindings/go/shim.c — see shim.h. */
#include "shim.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "_cgo_export.h"

/* The functions the binding calls. Their types come from colibri.h itself (__typeof__), so
 * the table cannot disagree with the header. */
#define COLIBRI_GO_FUNCTIONS(X) \
  X(abi_version) X(version_string) X(status_string) X(last_error) X(set_log_callback) X(dtype_name) \
  X(stage_name) X(model_options_init) X(model_open) X(model_close) X(model_get_info) X(model_eos_tokens) \
  X(model_metadata) X(model_tensor_count) X(model_tensor_info) X(model_find_tensor) X(tokenize) \
  X(detokenize) X(token_text) X(chat_options_init) X(chat_render) X(session_options_init) \
  X(session_create) X(session_free) X(session_get_info) X(session_reset) X(session_reset_sequence) \
  X(session_sequence_length) X(session_prefill) X(session_decode) X(session_batch) X(session_copy_logits) \
  X(session_logits) X(sampler_options_init) X(generate_options_init) X(generate) X(stream_open) \
  X(stream_next) X(stream_get_result) X(stream_tokens) X(stream_close) X(session_moe_layer) \
  X(session_get_stats) X(session_reset_stats) X(engine_options_init) X(engine_create) X(engine_free) \
  X(engine_get_stats) X(request_options_init) X(request_submit) X(request_next) X(request_cancel) \
  X(request_get_result) X(request_tokens) X(request_free) X(request_logprobs) \
  X(request_submit_chat)

struct colibri_go_api {
#define COLIBRI_GO_FIELD(name) __typeof__(colibri_##name) *name;
  COLIBRI_GO_FUNCTIONS(COLIBRI_GO_FIELD)
#undef COLIBRI_GO_FIELD
};

static char *dup_message(const char *text) {
  size_t n = strlen(text);
  char *copy = malloc(n + 1);
  if (copy) memcpy(copy, text, n + 1);
  return copy;
}

/* The calling thread's last error, right after the failing call (same thread, same cgo call). */
static int32_t check(const colibri_go_api *a, int32_t status, char **err) {
  if (status < 0 && err) {
    size_t size = 0;
    char *message;
    a->last_error(NULL, 0, &size);
    message = malloc(size + 1);
    if (message) {
      a->last_error(message, size + 1, NULL);
      message[size] = '\0';
    }
    *err = message;
  }
  return status;
}

const colibri_go_api *cgo_load(const char *path, int32_t *status, char **err) {
  const char *name = path ? path : "libcolibri.so.1";
  char text[1024];
  void *library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  void *symbol;
  uint32_t (*abi_version)(void);
  colibri_go_api *a;
  *status = COLIBRI_ERROR_UNSUPPORTED;
  if (!library) {
    *status = COLIBRI_ERROR_IO;
    const char *why = dlerror();
    snprintf(text, sizeof text, "cannot load %s: %s", name, why ? why : "unknown dlopen error");
    *err = dup_message(text);
    return NULL;
  }
  symbol = dlsym(library, "colibri_abi_version");
  if (!symbol) {
    snprintf(text, sizeof text, "%s is not libcolibri: it has no colibri_abi_version", name);
    *err = dup_message(text);
    dlclose(library);
    return NULL;
  }
  memcpy(&abi_version, &symbol, sizeof symbol);
  if (abi_version() != COLIBRI_ABI_VERSION) {
    snprintf(text, sizeof text, "%s has ABI version %u; this Go binding was built for %d (libcolibri.so.%d)",
             name, (unsigned)abi_version(), COLIBRI_ABI_VERSION, COLIBRI_ABI_VERSION);
    *err = dup_message(text);
    dlclose(library);
    return NULL;
  }
  a = calloc(1, sizeof *a);
  if (!a) {
    *status = COLIBRI_ERROR_OUT_OF_MEMORY;
    *err = dup_message("out of memory");
    dlclose(library);
    return NULL;
  }
#define COLIBRI_GO_RESOLVE(fn)                                                                          \
  symbol = dlsym(library, "colibri_" #fn);                                                              \
  if (!symbol) {                                                                                        \
    snprintf(text, sizeof text, "%s lacks colibri_" #fn " (it is older than the Go binding's colibri.h %s)", \
             name, COLIBRI_VERSION_STRING);                                                             \
    *err = dup_message(text);                                                                           \
    free(a);                                                                                            \
    dlclose(library);                                                                                   \
    return NULL;                                                                                        \
  }                                                                                                     \
  memcpy(&a->fn, &symbol, sizeof symbol);
  COLIBRI_GO_FUNCTIONS(COLIBRI_GO_RESOLVE)
#undef COLIBRI_GO_RESOLVE
  *status = COLIBRI_OK;
  return a;
}

uint32_t cgo_abi_version(const colibri_go_api *a) { return a->abi_version(); }
const char *cgo_version_string(const colibri_go_api *a) { return a->version_string(); }
const char *cgo_status_string(const colibri_go_api *a, int32_t status) { return a->status_string(status); }
const char *cgo_dtype_name(const colibri_go_api *a, uint32_t dtype) { return a->dtype_name(dtype); }
const char *cgo_stage_name(const colibri_go_api *a, uint32_t stage) { return a->stage_name(stage); }

static void log_trampoline(void *user, int32_t level, const char *message) {
  colibriGoLog((uintptr_t)user, level, (char *)message);
}

int32_t cgo_set_log_callback(const colibri_go_api *a, uintptr_t handle, int32_t min_level, char **err) {
  return check(a, a->set_log_callback(handle ? log_trampoline : NULL, (void *)handle, min_level), err);
}

int32_t cgo_model_options_init(const colibri_go_api *a, colibri_model_options *o, char **err) {
  return check(a, a->model_options_init(o, sizeof *o), err);
}
int32_t cgo_session_options_init(const colibri_go_api *a, colibri_session_options *o, char **err) {
  return check(a, a->session_options_init(o, sizeof *o), err);
}
int32_t cgo_sampler_options_init(const colibri_go_api *a, colibri_sampler_options *o, char **err) {
  return check(a, a->sampler_options_init(o, sizeof *o), err);
}

int32_t cgo_model_open(const colibri_go_api *a, const char *path, const colibri_model_options *o,
                       colibri_model **out, char **err) {
  return check(a, a->model_open(path, o, out), err);
}
void cgo_model_close(const colibri_go_api *a, colibri_model *m) { a->model_close(m); }
int32_t cgo_model_get_info(const colibri_go_api *a, const colibri_model *m, colibri_model_info *info, char **err) {
  info->struct_size = sizeof *info;
  return check(a, a->model_get_info(m, info), err);
}
int32_t cgo_model_eos_tokens(const colibri_go_api *a, const colibri_model *m, int32_t *ids, size_t capacity,
                             size_t *count, char **err) {
  return check(a, a->model_eos_tokens(m, ids, capacity, count), err);
}
int32_t cgo_model_metadata(const colibri_go_api *a, const colibri_model *m, const char **json, size_t *size,
                           char **err) {
  return check(a, a->model_metadata(m, json, size), err);
}
int32_t cgo_model_tensor_count(const colibri_go_api *a, const colibri_model *m, size_t *count, char **err) {
  return check(a, a->model_tensor_count(m, count), err);
}
int32_t cgo_model_tensor_info(const colibri_go_api *a, const colibri_model *m, size_t index,
                              colibri_tensor_info *info, char **err) {
  info->struct_size = sizeof *info;
  return check(a, a->model_tensor_info(m, index, info), err);
}
int32_t cgo_model_find_tensor(const colibri_go_api *a, const colibri_model *m, const char *name, size_t *index,
                              char **err) {
  return check(a, a->model_find_tensor(m, name, index), err);
}

int32_t cgo_tokenize(const colibri_go_api *a, const colibri_model *m, const char *text, size_t text_size,
                     uint32_t flags, int32_t *tokens, size_t capacity, size_t *count, char **err) {
  return check(a, a->tokenize(m, text, text_size, flags, tokens, capacity, count), err);
}
int32_t cgo_detokenize(const colibri_go_api *a, const colibri_model *m, const int32_t *tokens, size_t count,
                       uint32_t flags, char *text, size_t capacity, size_t *size, char **err) {
  return check(a, a->detokenize(m, tokens, count, flags, text, capacity, size), err);
}
int32_t cgo_token_text(const colibri_go_api *a, const colibri_model *m, int32_t token, char *text,
                       size_t capacity, size_t *size, char **err) {
  return check(a, a->token_text(m, token, text, capacity, size), err);
}
/* The chat options and a malloc'ed message array (free it) from C string arrays. */
static int32_t chat_prepare(const colibri_go_api *a, char **roles, char **contents, size_t message_count,
                            uint32_t add_generation_prompt, const char *template_text, char **names, char **values,
                            size_t variable_count, colibri_chat_options *options, colibri_chat_message **messages,
                            char **err) {
  size_t i;
  int32_t status = a->chat_options_init(options, sizeof *options);
  *messages = NULL;
  if (status < 0) return check(a, status, err);
  options->add_generation_prompt = add_generation_prompt;
  options->template_text = template_text;
  options->variable_names = (const char *const *)names;
  options->variable_values = (const char *const *)values;
  options->variable_count = variable_count;
  if (message_count > 0) {
    *messages = malloc(message_count * sizeof **messages);
    if (!*messages) {
      *err = dup_message("out of memory");
      return COLIBRI_ERROR_OUT_OF_MEMORY;
    }
    for (i = 0; i < message_count; ++i) {
      (*messages)[i].role = roles[i];
      (*messages)[i].content = contents[i];
    }
  }
  return COLIBRI_OK;
}

int32_t cgo_chat_render(const colibri_go_api *a, const colibri_model *m, char **roles, char **contents,
                        size_t message_count, uint32_t add_generation_prompt, const char *template_text,
                        char **names, char **values, size_t variable_count, char *text, size_t capacity,
                        size_t *size, char **err) {
  colibri_chat_options options;
  colibri_chat_message *messages;
  int32_t status = chat_prepare(a, roles, contents, message_count, add_generation_prompt, template_text, names,
                                values, variable_count, &options, &messages, err);
  if (status < 0) return status;
  status = check(a, a->chat_render(m, messages, message_count, &options, text, capacity, size), err);
  free(messages);
  return status;
}

int32_t cgo_session_create(const colibri_go_api *a, colibri_model *m, const colibri_session_options *o,
                           colibri_session **out, char **err) {
  return check(a, a->session_create(m, o, out), err);
}
void cgo_session_free(const colibri_go_api *a, colibri_session *s) { a->session_free(s); }
int32_t cgo_session_get_info(const colibri_go_api *a, const colibri_session *s, colibri_session_info *info,
                             char **err) {
  info->struct_size = sizeof *info;
  return check(a, a->session_get_info(s, info), err);
}
int32_t cgo_session_reset(const colibri_go_api *a, colibri_session *s, char **err) {
  return check(a, a->session_reset(s), err);
}
int32_t cgo_session_reset_sequence(const colibri_go_api *a, colibri_session *s, uint32_t sequence, char **err) {
  return check(a, a->session_reset_sequence(s, sequence), err);
}
int32_t cgo_session_sequence_length(const colibri_go_api *a, const colibri_session *s, uint32_t sequence,
                                    uint32_t *length, char **err) {
  return check(a, a->session_sequence_length(s, sequence, length), err);
}
int32_t cgo_session_prefill(const colibri_go_api *a, colibri_session *s, uint32_t sequence, const int32_t *tokens,
                            size_t count, char **err) {
  return check(a, a->session_prefill(s, sequence, tokens, count), err);
}
int32_t cgo_session_decode(const colibri_go_api *a, colibri_session *s, uint32_t sequence, int32_t token,
                           char **err) {
  return check(a, a->session_decode(s, sequence, token), err);
}
int32_t cgo_session_batch(const colibri_go_api *a, colibri_session *s, const uint32_t *sequences,
                          const uint32_t *positions, const int32_t *tokens, const uint32_t *want_logits,
                          size_t count, char **err) {
  return check(a, a->session_batch(s, sequences, positions, tokens, want_logits, count), err);
}
int32_t cgo_session_copy_logits(const colibri_go_api *a, const colibri_session *s, size_t row, float *buffer,
                                size_t capacity, size_t *row_count, char **err) {
  const float *logits;
  int32_t status;
  if (row_count) {
    status = a->session_logits(s, 0, &logits, NULL, row_count);
    if (status < 0) return check(a, status, err);
  }
  return check(a, a->session_copy_logits(s, row, buffer, capacity), err);
}
int32_t cgo_session_moe_layer(const colibri_go_api *a, colibri_session *s, uint32_t layer, const float *hidden,
                              size_t rows, const int32_t *route_experts, const float *route_weights, float *out,
                              char **err) {
  return check(a, a->session_moe_layer(s, layer, hidden, rows, route_experts, route_weights, out), err);
}
int32_t cgo_session_get_stats(const colibri_go_api *a, const colibri_session *s, colibri_stats *stats, char **err) {
  stats->struct_size = sizeof *stats;
  return check(a, a->session_get_stats(s, stats), err);
}
int32_t cgo_session_reset_stats(const colibri_go_api *a, colibri_session *s, char **err) {
  return check(a, a->session_reset_stats(s), err);
}

static int32_t fill_generate_options(const colibri_go_api *a, const cgo_generate_args *g, const int32_t *eos,
                                     size_t eos_count, char **stops, size_t stop_count,
                                     colibri_generate_options *options, char **err) {
  int32_t status = a->generate_options_init(options, sizeof *options);
  if (status < 0) return check(a, status, err);
  if (g->max_tokens) options->max_tokens = g->max_tokens;
  options->sequence = g->sequence;
  options->ignore_eos = g->ignore_eos;
  if (g->has_sampler) options->sampler = &g->sampler;
  if (g->has_eos) {
    options->eos_tokens = eos;
    options->eos_token_count = eos_count;
  }
  options->stop_strings = (const char *const *)stops;
  options->stop_string_count = stop_count;
  return COLIBRI_OK;
}

static int32_t piece_trampoline(void *user, const char *piece, size_t piece_size) {
  return colibriGoPiece((uintptr_t)user, (char *)piece, piece_size);
}

int32_t cgo_generate(const colibri_go_api *a, colibri_session *s, const int32_t *prompt, size_t prompt_count,
                     const cgo_generate_args *g, const int32_t *eos, size_t eos_count, char **stops,
                     size_t stop_count, uintptr_t handle, colibri_generate_result *result, char **err) {
  colibri_generate_options options;
  int32_t status = fill_generate_options(a, g, eos, eos_count, stops, stop_count, &options, err);
  if (status < 0) return status;
  result->struct_size = sizeof *result;
  return check(a, a->generate(s, prompt, prompt_count, &options, handle ? piece_trampoline : NULL,
                              (void *)handle, result), err);
}
int32_t cgo_stream_open(const colibri_go_api *a, colibri_session *s, const int32_t *prompt, size_t prompt_count,
                        const cgo_generate_args *g, const int32_t *eos, size_t eos_count, char **stops,
                        size_t stop_count, colibri_stream **out, char **err) {
  colibri_generate_options options;
  int32_t status = fill_generate_options(a, g, eos, eos_count, stops, stop_count, &options, err);
  if (status < 0) return status;
  return check(a, a->stream_open(s, prompt, prompt_count, &options, out), err);
}
int32_t cgo_stream_next(const colibri_go_api *a, colibri_stream *st, const char **piece, size_t *size, char **err) {
  return check(a, a->stream_next(st, piece, size), err);
}
int32_t cgo_stream_get_result(const colibri_go_api *a, const colibri_stream *st, colibri_generate_result *result,
                              char **err) {
  result->struct_size = sizeof *result;
  return check(a, a->stream_get_result(st, result), err);
}
int32_t cgo_stream_tokens(const colibri_go_api *a, const colibri_stream *st, int32_t *tokens, size_t capacity,
                          size_t *count, char **err) {
  return check(a, a->stream_tokens(st, tokens, capacity, count), err);
}
void cgo_stream_close(const colibri_go_api *a, colibri_stream *st) { a->stream_close(st); }

int32_t cgo_engine_options_init(const colibri_go_api *a, colibri_engine_options *o, char **err) {
  return check(a, a->engine_options_init(o, sizeof *o), err);
}
int32_t cgo_engine_create(const colibri_go_api *a, colibri_model *m, const colibri_engine_options *eo,
                          const colibri_session_options *so, colibri_engine **out, char **err) {
  colibri_engine_options options = *eo;
  options.session = so;
  return check(a, a->engine_create(m, &options, out), err);
}
void cgo_engine_free(const colibri_go_api *a, colibri_engine *e) { a->engine_free(e); }
int32_t cgo_engine_get_stats(const colibri_go_api *a, const colibri_engine *e, colibri_engine_stats *stats,
                             char **err) {
  stats->struct_size = sizeof *stats;
  return check(a, a->engine_get_stats(e, stats), err);
}
/* colibri_request_options from the pointer-free arguments (the arrays borrowed). */
static int32_t request_prepare(const colibri_go_api *a, const cgo_request_args *r, const int32_t *eos,
                               size_t eos_count, char **stops, size_t stop_count, colibri_request_options *options,
                               char **err) {
  int32_t status = a->request_options_init(options, sizeof *options);
  if (status < 0) return check(a, status, err);
  if (r->max_tokens) options->max_tokens = r->max_tokens;
  options->ignore_eos = r->ignore_eos;
  if (r->has_sampler) options->sampler = &r->sampler;
  if (r->has_eos) {
    options->eos_tokens = eos;
    options->eos_token_count = eos_count;
  }
  options->stop_strings = (const char *const *)stops;
  options->stop_string_count = stop_count;
  options->timeout_ns = r->timeout_ns;
  options->logprobs = r->logprobs;
  options->top_logprobs = r->top_logprobs;
  return COLIBRI_OK;
}

int32_t cgo_request_submit(const colibri_go_api *a, colibri_engine *e, const int32_t *prompt, size_t prompt_count,
                           const cgo_request_args *r, const int32_t *eos, size_t eos_count, char **stops,
                           size_t stop_count, colibri_request **out, char **err) {
  colibri_request_options options;
  int32_t status = request_prepare(a, r, eos, eos_count, stops, stop_count, &options, err);
  if (status < 0) return status;
  return check(a, a->request_submit(e, prompt, prompt_count, &options, out), err);
}
int32_t cgo_request_submit_chat(const colibri_go_api *a, colibri_engine *e, char **roles, char **contents,
                                size_t message_count, uint32_t add_generation_prompt, const char *template_text,
                                char **names, char **values, size_t variable_count, const cgo_request_args *r,
                                const int32_t *eos, size_t eos_count, char **stops, size_t stop_count,
                                colibri_request **out, char **err) {
  colibri_request_options options;
  colibri_chat_options chat;
  colibri_chat_message *messages;
  int32_t status = request_prepare(a, r, eos, eos_count, stops, stop_count, &options, err);
  if (status < 0) return status;
  status = chat_prepare(a, roles, contents, message_count, add_generation_prompt, template_text, names, values,
                        variable_count, &chat, &messages, err);
  if (status < 0) return status;
  status = check(a, a->request_submit_chat(e, messages, message_count, &chat, &options, out), err);
  free(messages);
  return status;
}
int32_t cgo_request_next(const colibri_go_api *a, colibri_request *r, int64_t timeout_ns, const char **piece,
                         size_t *size, char **err) {
  return check(a, a->request_next(r, timeout_ns, piece, size), err);
}
int32_t cgo_request_cancel(const colibri_go_api *a, colibri_request *r, char **err) {
  return check(a, a->request_cancel(r), err);
}
int32_t cgo_request_get_result(const colibri_go_api *a, const colibri_request *r, colibri_request_result *result,
                               char **err) {
  result->struct_size = sizeof *result;
  return check(a, a->request_get_result(r, result), err);
}
int32_t cgo_request_tokens(const colibri_go_api *a, const colibri_request *r, int32_t *tokens, size_t capacity,
                           size_t *count, char **err) {
  return check(a, a->request_tokens(r, tokens, capacity, count), err);
}
int32_t cgo_request_logprobs(const colibri_go_api *a, const colibri_request *r, size_t index,
                             colibri_token_logprob *chosen, colibri_token_logprob *top, size_t capacity,
                             size_t *count, char **err) {
  return check(a, a->request_logprobs(r, index, chosen, top, capacity, count), err);
}
void cgo_request_free(const colibri_go_api *a, colibri_request *r) { a->request_free(r); }

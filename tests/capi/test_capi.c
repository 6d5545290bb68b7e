/* tests/capi/test_capi.c — the C API, from C99, linked against libcolibri.so only (no engine
 * headers): versions, status codes and the last error, options structs across sizes, model
 * open errors and info, tensors, tokenizer, prefill/decode/batch against the transformers
 * oracle, sampling, generation (callback with cancel, pull stream), the MoE layer API with
 * routes and an expert callback, stats, logging, and handle lifetime rules.
 *
 * Usage: test_capi IMAGE TMPDIR   (IMAGE: tests/fixtures/oracle/mixtral_gqa converted by
 * colibri-model; TMPDIR: a scratch directory that also holds the NaN images make_nan_image wrote
 * and gpt_oss_mxfp4.colibri, the gpt_oss_mxfp4 fixture converted with no --dtype)
 * The oracle's ids and the logits file come from compile definitions (tests/capi/CMakeLists.txt). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"


static const char *g_image_path;

static int32_t argmax(const float *row, size_t n) {
  size_t best = 0, i;
  for (i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return (int32_t)best;
}

static colibri_model *open_model(void) {
  colibri_model *model = NULL;
  CHECK_OK(colibri_model_open(g_image_path, NULL, &model));
  if (!model) {
    fprintf(stderr, "cannot open %s; stopping\n", g_image_path);
    exit(1);
  }
  return model;
}

static colibri_session *make_session(colibri_model *model, uint32_t sequences) {
  colibri_session_options so;
  colibri_session *session = NULL;
  CHECK_OK(colibri_session_options_init(&so, sizeof so));
  so.context_length = 64;
  so.max_sequences = sequences;
  so.max_batch_tokens = 32;
  so.max_logit_rows = 32;
  so.threads = 2;
  CHECK_OK(colibri_session_create(model, &so, &session));
  if (!session) exit(1);
  return session;
}

/* ---------------------------------------------------------------------------------------- */

static void test_versions_and_status(void) {
  char buffer[64];
  size_t size = 0;
  CHECK(colibri_abi_version() == COLIBRI_ABI_VERSION);
  CHECK(strcmp(colibri_version_string(), COLIBRI_VERSION_STRING) == 0);
  CHECK(strcmp(colibri_status_string(COLIBRI_OK), "ok") == 0);
  CHECK(strcmp(colibri_status_string(COLIBRI_DONE), "done") == 0);
  CHECK(strcmp(colibri_status_string(COLIBRI_ERROR_CONTEXT_FULL), "context full") == 0);
  CHECK(strcmp(colibri_status_string(-9999), "unknown status") == 0);
  CHECK(strcmp(colibri_dtype_name(COLIBRI_DTYPE_Q8), "q8") == 0);
  CHECK(strcmp(colibri_dtype_name(COLIBRI_DTYPE_Q4), "q4") == 0);
  CHECK(strcmp(colibri_dtype_name(COLIBRI_DTYPE_Q8F16), "q8f16") == 0);
  CHECK(strcmp(colibri_dtype_name(COLIBRI_DTYPE_MXFP4), "mxfp4") == 0);
  CHECK(strcmp(colibri_dtype_name(7), "unknown") == 0);
  CHECK(strcmp(colibri_stage_name(COLIBRI_STAGE_EXPERTS), "experts") == 0);
  CHECK(colibri_stage_name(COLIBRI_STATS_MAX_STAGES) == NULL);
  /* A failing call sets the thread's error; a succeeding one clears it. */
  CHECK_STATUS(colibri_model_options_init(NULL, sizeof(colibri_model_options)), COLIBRI_ERROR_INVALID_ARGUMENT);
  CHECK(colibri_last_error(buffer, sizeof buffer, &size) == COLIBRI_ERROR_INVALID_ARGUMENT);
  CHECK(size > 0 && strlen(buffer) == (size < sizeof buffer ? size : sizeof buffer - 1));
  /* Truncation keeps a NUL; a NULL buffer reports the size only. */
  CHECK(colibri_last_error(buffer, 4, NULL) == COLIBRI_ERROR_INVALID_ARGUMENT && strlen(buffer) <= 3);
  CHECK(colibri_last_error(NULL, 0, &size) == COLIBRI_ERROR_INVALID_ARGUMENT && size > 0);
  {
    colibri_model_options o;
    CHECK_OK(colibri_model_options_init(&o, sizeof o));
  }
  CHECK(colibri_last_error(buffer, sizeof buffer, &size) == COLIBRI_OK && size == 0 && buffer[0] == '\0');
}

/* Options structs: an older (smaller) caller struct works, a newer one with unknown non-zero
 * fields is refused, and init writes only struct_size bytes. */
static void test_options_struct_sizes(void) {
  unsigned char bytes[sizeof(colibri_session_options) + 16];
  colibri_session_options *o = (colibri_session_options *)(void *)bytes;
  colibri_model *model = open_model();
  colibri_session *session = NULL;
  colibri_session_info info;

  memset(bytes, 0xAB, sizeof bytes);
  CHECK_OK(colibri_session_options_init(o, sizeof *o));
  CHECK(o->struct_size == sizeof *o);
  CHECK(o->max_sequences == 1 && o->max_batch_tokens == 512 && o->kv_dtype == COLIBRI_DTYPE_F32);
  CHECK(bytes[sizeof *o] == 0xAB); /* nothing written past struct_size */
  CHECK_STATUS(colibri_session_options_init(o, 8), COLIBRI_ERROR_INVALID_ARGUMENT);

  /* A caller built against a newer header: 16 more bytes, zero → accepted. */
  CHECK_OK(colibri_session_options_init(o, sizeof bytes));
  CHECK(bytes[sizeof bytes - 1] == 0);
  o->context_length = 32;
  CHECK_OK(colibri_session_create(model, o, &session));
  info.struct_size = sizeof info;
  CHECK_OK(colibri_session_get_info(session, &info));
  CHECK(info.context_length == 32);
  colibri_session_free(session);
  /* ... non-zero in a field this library does not know → UNSUPPORTED, naming the offset. */
  bytes[sizeof *o + 3] = 1;
  session = (colibri_session *)1;
  CHECK_STATUS(colibri_session_create(model, o, &session), COLIBRI_ERROR_UNSUPPORTED);
  CHECK(session == NULL);
  {
    char message[256];
    colibri_last_error(message, sizeof message, NULL);
    CHECK(strstr(message, "offset") != NULL);
  }
  /* Out-of-range values are refused with the field's name. */
  CHECK_OK(colibri_session_options_init(o, sizeof *o));
  o->max_sequences = 0;
  CHECK_STATUS(colibri_session_create(model, o, &session), COLIBRI_ERROR_INVALID_ARGUMENT);
  o->max_sequences = 1;
  o->kv_dtype = COLIBRI_DTYPE_Q8;
  CHECK_STATUS(colibri_session_create(model, o, &session), COLIBRI_ERROR_UNSUPPORTED);
  /* Output structs: a caller struct larger than the library's gets zeros beyond it. */
  {
    unsigned char big[sizeof(colibri_model_info) + 8];
    colibri_model_info *mi = (colibri_model_info *)(void *)big;
    memset(big, 0xCD, sizeof big);
    mi->struct_size = sizeof big;
    CHECK_OK(colibri_model_get_info(model, mi));
    CHECK(big[sizeof big - 1] == 0 && mi->vocab_size == 512);
    mi->struct_size = 4;
    CHECK_STATUS(colibri_model_get_info(model, mi), COLIBRI_ERROR_INVALID_ARGUMENT);
    /* An absurd struct_size (uninitialised stack memory) is refused, never used to zero or
     * read that many bytes: the caller's struct is all there is. */
    memset(big, 0xCD, sizeof big);
    mi->struct_size = 0x7FFFFFF0u;
    CHECK_STATUS(colibri_model_get_info(model, mi), COLIBRI_ERROR_INVALID_ARGUMENT);
    CHECK(big[sizeof big - 1] == 0xCD);
  }
  {
    char message[256];
    memset(bytes, 0, sizeof bytes);
    CHECK_OK(colibri_session_options_init(o, sizeof *o));
    o->struct_size = 0xFFFFFFFFu;
    CHECK_STATUS(colibri_session_create(model, o, &session), COLIBRI_ERROR_INVALID_ARGUMENT);
    colibri_last_error(message, sizeof message, NULL);
    CHECK(strstr(message, "uninitialised") != NULL);
    o->struct_size = (uint32_t)(sizeof *o + 4096 + 4); /* just beyond the bound */
    CHECK_STATUS(colibri_session_create(model, o, &session), COLIBRI_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(colibri_session_options_init(o, (size_t)1 << 40), COLIBRI_ERROR_INVALID_ARGUMENT);
  }
  colibri_model_close(model);
}

static void write_file(const char *path, const void *data, size_t size) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  if (size) CHECK(fwrite(data, 1, size, f) == size);
  fclose(f);
}

/* Broken files give their own status and a message naming the cause. */
static void test_open_errors(const char *tmpdir) {
  char path[1024], message[1024];
  colibri_model *model = (colibri_model *)1;
  snprintf(path, sizeof path, "%s/does-not-exist.colibri", tmpdir);
  CHECK_STATUS(colibri_model_open(path, NULL, &model), COLIBRI_ERROR_IO);
  CHECK(model == NULL);

  snprintf(path, sizeof path, "%s/text.colibri", tmpdir);
  write_file(path, "hello, this is not a model\n", 27);
  CHECK_STATUS(colibri_model_open(path, NULL, &model), COLIBRI_ERROR_NOT_AN_IMAGE);
  colibri_last_error(message, sizeof message, NULL);
  CHECK(strstr(message, "text") != NULL);

  snprintf(path, sizeof path, "%s/empty.colibri", tmpdir);
  write_file(path, "", 0);
  CHECK_STATUS(colibri_model_open(path, NULL, &model), COLIBRI_ERROR_NOT_AN_IMAGE);
  colibri_last_error(message, sizeof message, NULL);
  CHECK(strstr(message, "empty") != NULL);

  /* The first 4096 bytes of the real image: a truncated download. */
  {
    FILE *f = fopen(g_image_path, "rb");
    static unsigned char head[4096];
    size_t n = f ? fread(head, 1, sizeof head, f) : 0;
    if (f) fclose(f);
    snprintf(path, sizeof path, "%s/truncated.colibri", tmpdir);
    write_file(path, head, n);
    CHECK_STATUS(colibri_model_open(path, NULL, &model), COLIBRI_ERROR_CORRUPT);
    colibri_last_error(message, sizeof message, NULL);
    CHECK(strstr(message, "truncated") != NULL || strstr(message, "expected") != NULL);
  }
  CHECK_STATUS(colibri_model_open(NULL, NULL, &model), COLIBRI_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(colibri_model_open(g_image_path, NULL, NULL), COLIBRI_ERROR_INVALID_ARGUMENT);
  {
    colibri_model_options o;
    CHECK_OK(colibri_model_options_init(&o, sizeof o));
    o.advice = 99;
    CHECK_STATUS(colibri_model_open(g_image_path, &o, &model), COLIBRI_ERROR_INVALID_ARGUMENT);
  }
  colibri_model_close(NULL); /* accepted */
  colibri_session_free(NULL);
  colibri_stream_close(NULL);
  colibri_sampler_free(NULL);
}

static void test_model_info_and_tensors(void) {
  colibri_model_options o;
  colibri_model *model = NULL;
  colibri_model_info info;
  colibri_tensor_info tensor;
  size_t count = 0, index = 0, i, eos_count = 0;
  int32_t eos[4];
  const char *json = NULL;
  size_t json_size = 0;
  uint64_t total_params = 0;

  CHECK_OK(colibri_model_options_init(&o, sizeof o));
  o.verify_checksums = 1;
  o.populate = 1;
  o.advice = COLIBRI_ADVICE_WILLNEED;
  o.threads = 2;
  CHECK_OK(colibri_model_open(g_image_path, &o, &model));
  if (!model) return;
  info.struct_size = sizeof info;
  CHECK_OK(colibri_model_get_info(model, &info));
  CHECK(strcmp(info.family, "mixtral") == 0);
  CHECK(strcmp(info.architecture, "MixtralForCausalLM") == 0);
  CHECK(strcmp(info.path, g_image_path) == 0);
  CHECK(info.vocab_size == 512 && info.hidden_size == 64 && info.layer_count == 2 && info.moe_layer_count == 2);
  CHECK(info.head_count == 4 && info.kv_head_count == 2 && info.head_dim == 16);
  CHECK(info.expert_count == 8 && info.top_k == 2 && info.expert_ffn_size == 32);
  CHECK(strcmp(info.router_score, "softmax") == 0 && info.norm_topk_prob == 1);
  /* The appended fields: full rotary embeddings and none of the sigmoid routers' extras. */
  CHECK(info.rotary_dim == 16 && info.router_select_bias == 0);
  CHECK(info.expert_group_count == 1 && info.expert_group_top == 1);
  CHECK(info.routed_scaling_factor == 1.0 && info.topk_norm_epsilon == 0.0);
  CHECK(strcmp(info.rope_scaling, "none") == 0 && info.rope_factor == 1.0 && info.rope_attention_factor == 1.0);
  CHECK(info.sliding_window == 0 && info.sliding_layer_count == 0 && info.attention_sinks == 0);
  CHECK(info.attention_output_bias == 0 && info.router_bias == 0 && info.expert_bias == 0);
  CHECK(strcmp(info.expert_activation, "silu") == 0 && info.swiglu_limit == 0.0 && info.swiglu_alpha == 0.0);
  /* Grouped-query attention: no latent ranks; the softmax scale 1/sqrt(16); per position and layer
   * 2 (k, v) x 2 KV heads x 16 values x 4 bytes. */
  CHECK(strcmp(info.attention, "gqa") == 0 && info.q_lora_rank == 0 && info.kv_lora_rank == 0);
  CHECK(info.qk_nope_head_dim == 0 && info.v_head_dim == 0 && info.rope_interleave == 0 && info.mtp_layer_count == 0);
  CHECK(fabs(info.attention_scale - 0.25) < 1e-15);
  CHECK(info.kv_cache_bytes_per_token == 2ull * 2 * 2 * 16 * 4);
  CHECK(strcmp(info.qk_norm, "none") == 0);
  CHECK(fabs(info.rope_theta - 10000.0) < 1e-9 && fabs(info.rms_norm_eps - 1e-5) < 1e-12);
  CHECK(info.weight_dtype == COLIBRI_DTYPE_F32);
  CHECK(info.bos_token_id == 1 && info.eos_token_id == 2 && info.eos_token_count >= 1);
  CHECK(info.has_tokenizer == 1);
  CHECK(info.active_parameter_count < info.parameter_count);
  CHECK(info.active_weight_bytes > 0 && info.active_weight_bytes < info.file_size_bytes);
  CHECK(info.numa_report != NULL);

  CHECK_OK(colibri_model_eos_tokens(model, NULL, 0, &eos_count));
  CHECK(eos_count == info.eos_token_count);
  CHECK_OK(colibri_model_eos_tokens(model, eos, 4, &eos_count));
  CHECK(eos[0] == 2);
  CHECK_OK(colibri_model_metadata(model, &json, &json_size));
  CHECK(json_size > 2 && json[0] == '{');

  CHECK_OK(colibri_model_tensor_count(model, &count));
  CHECK(count == info.tensor_count && count > 10);
  for (i = 0; i < count; ++i) {
    uint64_t elements = 1;
    uint32_t d;
    tensor.struct_size = sizeof tensor;
    CHECK_OK(colibri_model_tensor_info(model, i, &tensor));
    CHECK(tensor.rank >= 1 && tensor.rank <= COLIBRI_MAX_TENSOR_RANK);
    for (d = 0; d < tensor.rank; ++d) elements *= tensor.shape[d];
    CHECK(tensor.dtype != COLIBRI_DTYPE_F32 || tensor.size_bytes == elements * 4);
    CHECK(tensor.offset_bytes % 64 == 0);
    total_params += elements;
  }
  CHECK(total_params == info.parameter_count);
  tensor.struct_size = sizeof tensor;
  CHECK_OK(colibri_model_tensor_info(model, 0, &tensor));
  CHECK_OK(colibri_model_find_tensor(model, tensor.name, &index));
  CHECK(index == 0);
  CHECK_STATUS(colibri_model_find_tensor(model, "no.such.tensor", &index), COLIBRI_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(colibri_model_tensor_info(model, count, &tensor), COLIBRI_ERROR_INVALID_ARGUMENT);
  colibri_model_close(model);
}

static void test_tokenizer(colibri_model *model) {
  int32_t ids[256];
  size_t count = 0, size = 0;
  char text[512];
  const char *prompt = ORACLE_PROMPT_TEXT;
  size_t i;

  /* Size query, then the real call. The oracle's input ids start with BOS + the prompt text's
   * ids (the fixture generator may append more ids after them). */
  size_t prompt_count = 0;
  CHECK_OK(colibri_tokenize(model, prompt, strlen(prompt), COLIBRI_TOKENIZE_ADD_SPECIAL, NULL, 0, &prompt_count));
  CHECK(prompt_count >= 2 && prompt_count <= INPUT_COUNT);
  CHECK_STATUS(colibri_tokenize(model, prompt, strlen(prompt), COLIBRI_TOKENIZE_ADD_SPECIAL, ids, 1, &count),
               COLIBRI_ERROR_BUFFER_TOO_SMALL);
  CHECK(count == prompt_count);
  CHECK_OK(colibri_tokenize(model, prompt, strlen(prompt), COLIBRI_TOKENIZE_ADD_SPECIAL, ids, 256, &count));
  CHECK(count == prompt_count);
  for (i = 0; i < count && i < INPUT_COUNT; ++i) CHECK(ids[i] == kInputIds[i]);
  /* Without special tokens: no BOS. */
  CHECK_OK(colibri_tokenize(model, prompt, strlen(prompt), 0, ids, 256, &count));
  CHECK(count == prompt_count - 1 && ids[0] == kInputIds[1]);
  /* Special-token text is text unless PARSE_SPECIAL. */
  CHECK_OK(colibri_tokenize(model, "</s>", 4, 0, ids, 256, &count));
  CHECK(!(count == 1 && ids[0] == 2));
  CHECK_OK(colibri_tokenize(model, "</s>", 4, COLIBRI_TOKENIZE_PARSE_SPECIAL, ids, 256, &count));
  CHECK(count == 1 && ids[0] == 2);
  CHECK_STATUS(colibri_tokenize(model, "x", 1, 0x80, ids, 256, &count), COLIBRI_ERROR_INVALID_ARGUMENT);

  /* Decode round trip, with and without the BOS. */
  CHECK_OK(colibri_detokenize(model, kInputIds, prompt_count, COLIBRI_DETOKENIZE_SKIP_SPECIAL, text, sizeof text, &size));
  CHECK(strcmp(text, prompt) == 0 && size == strlen(prompt));
  CHECK_OK(colibri_detokenize(model, kInputIds, prompt_count, 0, NULL, 0, &size));
  CHECK(size > strlen(prompt)); /* "<s>" too */
  CHECK_STATUS(colibri_detokenize(model, kInputIds, INPUT_COUNT, 0, text, 3, &size), COLIBRI_ERROR_BUFFER_TOO_SMALL);
  {
    int32_t bad = 100000;
    CHECK_STATUS(colibri_detokenize(model, &bad, 1, 0, text, sizeof text, &size), COLIBRI_ERROR_INVALID_ARGUMENT);
  }
  CHECK_OK(colibri_token_text(model, 2, text, sizeof text, &size));
  CHECK(strcmp(text, "</s>") == 0);
  CHECK_STATUS(colibri_token_text(model, -1, text, sizeof text, &size), COLIBRI_ERROR_INVALID_ARGUMENT);
}

static void test_chat_template(colibri_model *model) {
  colibri_chat_message messages[1];
  colibri_chat_options o;
  char text[1024];
  size_t size = 0;
  int32_t status;
  messages[0].role = "user";
  messages[0].content = "Hello! Who are you?";
  CHECK_OK(colibri_chat_options_init(&o, sizeof o));
  CHECK(o.add_generation_prompt == 1 && o.template_text == NULL);
  status = colibri_chat_render(model, messages, 1, &o, text, sizeof text, &size);
  if (status == COLIBRI_ERROR_UNSUPPORTED) {
    fprintf(stderr, "note: chat templates are not available in this build (skipped)\n");
    return;
  }
  CHECK_OK(status);
  CHECK(strcmp(text, "<s>[INST] Hello! Who are you? [/INST]") == 0);
  CHECK(size == strlen(text));
  o.template_text = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}";
  CHECK_OK(colibri_chat_render(model, messages, 1, &o, text, sizeof text, &size));
  CHECK(strcmp(text, "[user] Hello! Who are you?\n") == 0);
  /* Extra variables reach the template as JSON values. */
  {
    const char *names[1] = {"enable_thinking"};
    const char *values[1] = {"false"};
    o.template_text = "{% if enable_thinking is false %}no-think{% endif %}|{{ messages | length }}";
    o.variable_names = names;
    o.variable_values = values;
    o.variable_count = 1;
    CHECK_OK(colibri_chat_render(model, messages, 1, &o, text, sizeof text, &size));
    CHECK(strcmp(text, "no-think|1") == 0);
    o.variable_count = 0;
  }
  /* raise_exception in a template: INVALID_ARGUMENT with its message; unsupported Jinja. */
  o.template_text = "{{ raise_exception('only user messages, please') }}";
  CHECK_STATUS(colibri_chat_render(model, messages, 1, &o, text, sizeof text, &size), COLIBRI_ERROR_INVALID_ARGUMENT);
  {
    char message[256];
    colibri_last_error(message, sizeof message, NULL);
    CHECK(strstr(message, "only user messages, please") != NULL);
  }
  o.template_text = "{% call m() %}x{% endcall %}";
  CHECK_STATUS(colibri_chat_render(model, messages, 1, &o, text, sizeof text, &size), COLIBRI_ERROR_UNSUPPORTED);
  CHECK_STATUS(colibri_chat_render(model, messages, 1, NULL, text, 5, &size), COLIBRI_ERROR_BUFFER_TOO_SMALL);
  CHECK(size == strlen("<s>[INST] Hello! Who are you? [/INST]"));
  messages[0].content = NULL;
  CHECK_STATUS(colibri_chat_render(model, messages, 1, NULL, text, sizeof text, &size), COLIBRI_ERROR_INVALID_ARGUMENT);
}

static float *read_logits_file(size_t count) {
  FILE *f = fopen(ORACLE_LOGITS_FILE, "rb");
  float *data = (float *)malloc(count * sizeof(float));
  CHECK(f != NULL && data != NULL);
  if (!f || !data) return data;
  CHECK(fread(data, sizeof(float), count, f) == count);
  fclose(f);
  return data;
}

/* The forward pass through the API equals the transformers oracle: logits at every position
 * (one batch call) and the greedy continuation (prefill + decode). */
static void test_oracle_logits_and_greedy(colibri_model *model) {
  colibri_session *session = make_session(model, 1);
  const float *logits = NULL;
  size_t vocab = 0, rows = 0, i, v;
  uint32_t want[INPUT_COUNT], length = 0;
  float *expected = read_logits_file(INPUT_COUNT * 512);
  double max_diff = 0;
  int32_t next;
  float copy[512];

  CHECK_STATUS(colibri_session_logits(session, 0, &logits, &vocab, &rows), COLIBRI_ERROR_BAD_STATE);
  for (i = 0; i < INPUT_COUNT; ++i) want[i] = 1;
  CHECK_OK(colibri_session_batch(session, NULL, NULL, kInputIds, want, INPUT_COUNT));
  CHECK_OK(colibri_session_logits(session, 0, &logits, &vocab, &rows));
  CHECK(vocab == 512 && rows == INPUT_COUNT);
  for (i = 0; i < rows && expected; ++i) {
    CHECK_OK(colibri_session_logits(session, i, &logits, NULL, NULL));
    for (v = 0; v < vocab; ++v) {
      double d = fabs((double)logits[v] - (double)expected[i * 512 + v]);
      if (d > max_diff) max_diff = d;
    }
  }
  CHECK(max_diff < 1e-4);
  free(expected);
  CHECK_STATUS(colibri_session_logits(session, rows, &logits, NULL, NULL), COLIBRI_ERROR_INVALID_ARGUMENT);

  /* Prefill (a fresh sequence) + greedy decode gives the oracle's tokens exactly. */
  CHECK_OK(colibri_session_reset(session));
  CHECK_STATUS(colibri_session_logits(session, 0, &logits, NULL, NULL), COLIBRI_ERROR_BAD_STATE);
  CHECK_OK(colibri_session_prefill(session, 0, kInputIds, INPUT_COUNT));
  CHECK_OK(colibri_session_sequence_length(session, 0, &length));
  CHECK(length == INPUT_COUNT);
  CHECK_OK(colibri_session_logits(session, 0, &logits, &vocab, &rows));
  CHECK(rows == 1);
  next = argmax(logits, vocab);
  for (i = 0; i < GREEDY_COUNT; ++i) {
    CHECK(next == kGreedy[i]);
    CHECK_OK(colibri_session_decode(session, 0, next));
    CHECK_OK(colibri_session_copy_logits(session, 0, copy, 512));
    next = argmax(copy, 512);
  }
  CHECK_STATUS(colibri_session_copy_logits(session, 0, copy, 10), COLIBRI_ERROR_BUFFER_TOO_SMALL);

  /* Bad input: a token outside the vocabulary, a sequence that does not exist. */
  {
    int32_t bad = 512;
    CHECK_STATUS(colibri_session_decode(session, 0, bad), COLIBRI_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(colibri_session_decode(session, 1, 5), COLIBRI_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(colibri_session_prefill(session, 0, kInputIds, 0), COLIBRI_ERROR_INVALID_ARGUMENT);
  }
  /* The context (64) fills up: CONTEXT_FULL, nothing processed. */
  CHECK_OK(colibri_session_sequence_length(session, 0, &length));
  {
    int32_t many[64];
    for (i = 0; i < 64; ++i) many[i] = 5;
    CHECK_STATUS(colibri_session_prefill(session, 0, many, 64 - length + 1), COLIBRI_ERROR_CONTEXT_FULL);
    CHECK_OK(colibri_session_sequence_length(session, 0, &length));
    CHECK_OK(colibri_session_prefill(session, 0, many, 64 - length));
    CHECK_STATUS(colibri_session_decode(session, 0, 5), COLIBRI_ERROR_CONTEXT_FULL);
    {
      /* The message counts what the sequence holds and what the batch adds; a position far
       * beyond the context is a gap (INVALID_ARGUMENT), not a full context. */
      char message[256];
      uint32_t far = 1000000;
      CHECK_STATUS(colibri_session_batch(session, NULL, NULL, many, NULL, 3), COLIBRI_ERROR_CONTEXT_FULL);
      colibri_last_error(message, sizeof message, NULL);
      CHECK(strstr(message, "holds 64 tokens; 3 more") != NULL);
      CHECK_OK(colibri_session_reset_sequence(session, 0));
      CHECK_STATUS(colibri_session_batch(session, NULL, &far, many, NULL, 1), COLIBRI_ERROR_INVALID_ARGUMENT);
      colibri_last_error(message, sizeof message, NULL);
      CHECK(strstr(message, "gap") != NULL);
    }
  }
  CHECK_OK(colibri_session_reset_sequence(session, 0));
  CHECK_OK(colibri_session_sequence_length(session, 0, &length));
  CHECK(length == 0);
  colibri_session_free(session);
}

/* Two sequences decoded together in one batch equal each run alone. */
static void test_multi_sequence_batch(colibri_model *model) {
  colibri_session *session = make_session(model, 2);
  const float *logits;
  float alone[2][512];
  uint32_t sequences[2] = {0, 1};
  int32_t tokens[2];
  int32_t prompt_b[5] = {1, 300, 301, 302, 303};
  size_t rows = 0;
  CHECK_OK(colibri_session_prefill(session, 0, kInputIds, INPUT_COUNT));
  CHECK_OK(colibri_session_prefill(session, 1, prompt_b, 5));
  tokens[0] = 10;
  tokens[1] = 20;
  CHECK_OK(colibri_session_batch(session, sequences, NULL, tokens, sequences /* want: 0, 1 */, 2));
  /* want_logits = {0, 1}: only sequence 1's row. */
  CHECK_OK(colibri_session_logits(session, 0, &logits, NULL, &rows));
  CHECK(rows == 1);
  memcpy(alone[1], logits, sizeof alone[1]);
  {
    colibri_session *single = make_session(model, 1);
    CHECK_OK(colibri_session_prefill(single, 0, prompt_b, 5));
    CHECK_OK(colibri_session_decode(single, 0, 20));
    CHECK_OK(colibri_session_copy_logits(single, 0, alone[0], 512));
    {
      double d = 0;
      size_t v;
      for (v = 0; v < 512; ++v) d = fmax(d, fabs((double)alone[0][v] - (double)alone[1][v]));
      CHECK(d <= 1e-5);
    }
    colibri_session_free(single);
  }
  colibri_session_free(session);
}

static void test_sampler(void) {
  colibri_sampler_options o;
  colibri_sampler *sampler = NULL, *again = NULL;
  float logits[8] = {0.1f, 2.0f, 0.3f, 2.0f, -1.0f, 0.0f, 0.5f, 1.9f};
  int32_t token = -1, a, b;
  int i, same = 1;
  CHECK_OK(colibri_sampler_options_init(&o, sizeof o));
  CHECK(fabsf(o.temperature - 0.8f) < 1e-6f && o.top_k == 40 && o.seed == COLIBRI_SEED_FROM_SESSION);
  o.temperature = 0.0f;
  CHECK_OK(colibri_sampler_create(&o, 8, &sampler));
  CHECK_OK(colibri_sampler_sample(sampler, logits, &token));
  CHECK(token == 1); /* greedy, ties to the lower id */
  CHECK_STATUS(colibri_sampler_accept(sampler, 8), COLIBRI_ERROR_INVALID_ARGUMENT);
  /* -inf masks a token; NaN and +inf are refused (not silently read as "token 0" or skipped);
   * a row with nothing but -inf has nothing to sample. */
  {
    float masked[8], odd[8];
    memcpy(masked, logits, sizeof masked);
    masked[1] = -INFINITY;
    CHECK_OK(colibri_sampler_sample(sampler, masked, &token));
    CHECK(token == 3);
    memcpy(odd, logits, sizeof odd);
    odd[0] = NAN;
    CHECK_STATUS(colibri_sampler_sample(sampler, odd, &token), COLIBRI_ERROR_NON_FINITE);
    odd[0] = 0.1f;
    odd[5] = INFINITY;
    CHECK_STATUS(colibri_sampler_sample(sampler, odd, &token), COLIBRI_ERROR_NON_FINITE);
    {
      char message[256];
      colibri_last_error(message, sizeof message, NULL);
      CHECK(strstr(message, "logits[5]") != NULL);
    }
    for (i = 0; i < 8; ++i) odd[i] = -INFINITY;
    CHECK_STATUS(colibri_sampler_sample(sampler, odd, &token), COLIBRI_ERROR_INVALID_ARGUMENT);
    /* An all-NaN row (what a NaN weight after the last MoE input makes): never an id. */
    for (i = 0; i < 8; ++i) odd[i] = (float)NAN;
    token = -7;
    CHECK_STATUS(colibri_sampler_sample(sampler, odd, &token), COLIBRI_ERROR_NON_FINITE);
    CHECK(token == -7);
  }
  colibri_sampler_free(sampler);
  /* Seeded sampling reproduces. */
  o.temperature = 1.0f;
  o.top_k = 0;
  o.top_p = 1.0f;
  o.min_p = 0.0f;
  o.seed = 1234;
  CHECK_OK(colibri_sampler_create(&o, 8, &sampler));
  CHECK_OK(colibri_sampler_create(&o, 8, &again));
  for (i = 0; i < 50; ++i) {
    CHECK_OK(colibri_sampler_sample(sampler, logits, &a));
    CHECK_OK(colibri_sampler_sample(again, logits, &b));
    same &= a == b;
  }
  CHECK(same);
  {
    float masked[8];
    int never = 1;
    for (i = 0; i < 8; ++i) masked[i] = i % 2 ? -INFINITY : 0.0f;
    for (i = 0; i < 50; ++i) {
      CHECK_OK(colibri_sampler_sample(sampler, masked, &a));
      never &= a % 2 == 0;
    }
    CHECK(never); /* a masked token is never drawn */
  }
  CHECK_OK(colibri_sampler_reset(sampler));
  colibri_sampler_free(sampler);
  colibri_sampler_free(again);
  o.top_p = 2.0f;
  sampler = (colibri_sampler *)1;
  CHECK_STATUS(colibri_sampler_create(&o, 8, &sampler), COLIBRI_ERROR_INVALID_ARGUMENT);
  CHECK(sampler == NULL);
}

struct collected {
  char text[4096];
  size_t length;
  int pieces;
  int stop_after; /* cancel after this many pieces (0 = never) */
};

static int32_t collect_piece(void *user, const char *piece, size_t size) {
  struct collected *c = (struct collected *)user;
  CHECK(size > 0 && strlen(piece) == size);
  if (c->length + size < sizeof c->text) {
    memcpy(c->text + c->length, piece, size);
    c->length += size;
    c->text[c->length] = '\0';
  }
  ++c->pieces;
  return c->stop_after && c->pieces >= c->stop_after ? 1 : 0;
}

static void greedy_options(colibri_generate_options *g, colibri_sampler_options *s) {
  CHECK_OK(colibri_sampler_options_init(s, sizeof *s));
  s->temperature = 0.0f;
  CHECK_OK(colibri_generate_options_init(g, sizeof *g));
  g->max_tokens = GREEDY_COUNT;
  g->sampler = s;
}

/* Generation: greedy callback text equals the decoded oracle tokens; the stream gives the
 * same text and token ids; a callback can cancel; stop strings end it. */
static void test_generation(colibri_model *model) {
  colibri_session *session = make_session(model, 1);
  colibri_generate_options g;
  colibri_sampler_options s;
  colibri_generate_result result;
  struct collected c;
  char expected[4096];
  size_t size = 0, count = 0, i;
  int32_t tokens[64];
  colibri_stream *stream = NULL;
  const char *piece;
  int32_t status;

  greedy_options(&g, &s);
  CHECK_OK(colibri_detokenize(model, kGreedy, GREEDY_COUNT, 0, expected, sizeof expected, &size));

  memset(&c, 0, sizeof c);
  result.struct_size = sizeof result;
  CHECK_OK(colibri_generate(session, kInputIds, INPUT_COUNT, &g, collect_piece, &c, &result));
  CHECK(result.finish_reason == COLIBRI_FINISH_LENGTH);
  CHECK(result.prompt_token_count == INPUT_COUNT && result.generated_token_count == GREEDY_COUNT);
  CHECK(result.prefill_ns > 0 && result.decode_ns > 0);
  CHECK(strcmp(c.text, expected) == 0);

  /* Pull stream: same text, same ids. */
  CHECK_OK(colibri_stream_open(session, kInputIds, INPUT_COUNT, &g, &stream));
  CHECK_STATUS(colibri_session_decode(session, 0, 5), COLIBRI_ERROR_BAD_STATE); /* busy */
  memset(&c, 0, sizeof c);
  while ((status = colibri_stream_next(stream, &piece, &size)) == COLIBRI_OK) collect_piece(&c, piece, size);
  CHECK(status == COLIBRI_DONE && size == 0 && piece != NULL && piece[0] == '\0');
  CHECK(colibri_stream_next(stream, &piece, &size) == COLIBRI_DONE);
  CHECK(strcmp(c.text, expected) == 0);
  CHECK_OK(colibri_stream_tokens(stream, tokens, 64, &count));
  CHECK(count == GREEDY_COUNT);
  for (i = 0; i < count && i < GREEDY_COUNT; ++i) CHECK(tokens[i] == kGreedy[i]);
  result.struct_size = sizeof result;
  CHECK_OK(colibri_stream_get_result(stream, &result));
  CHECK(result.finish_reason == COLIBRI_FINISH_LENGTH);
  colibri_stream_close(stream);
  CHECK_OK(colibri_session_decode(session, 0, 5)); /* free again */

  /* Cancellation from the callback: not an error, reason CANCELLED, fewer pieces. */
  memset(&c, 0, sizeof c);
  c.stop_after = 2;
  CHECK_OK(colibri_generate(session, kInputIds, INPUT_COUNT, &g, collect_piece, &c, &result));
  CHECK(result.finish_reason == COLIBRI_FINISH_CANCELLED && c.pieces == 2);
  CHECK(result.generated_token_count < GREEDY_COUNT);
  CHECK(strncmp(c.text, expected, c.length) == 0);

  /* A stop string inside the expected text ends generation before it. */
  if (strlen(expected) > 6) {
    const char *stops[1];
    char stop[4];
    memcpy(stop, expected + 4, 3);
    stop[3] = '\0';
    stops[0] = stop;
    g.stop_strings = stops;
    g.stop_string_count = 1;
    memset(&c, 0, sizeof c);
    CHECK_OK(colibri_generate(session, kInputIds, INPUT_COUNT, &g, collect_piece, &c, &result));
    CHECK(result.finish_reason == COLIBRI_FINISH_STOP);
    CHECK(strstr(c.text, stop) == NULL);
    CHECK(strncmp(c.text, expected, c.length) == 0);
    g.stop_strings = NULL;
    g.stop_string_count = 0;
  }
  /* A greedy token given as EOS ends generation there (EOS not in the text). */
  {
    int32_t eos = kGreedy[3];
    g.eos_tokens = &eos;
    g.eos_token_count = 1;
    CHECK_OK(colibri_generate(session, kInputIds, INPUT_COUNT, &g, NULL, NULL, &result));
    CHECK(result.finish_reason == COLIBRI_FINISH_EOS && result.generated_token_count == 4);
    g.eos_tokens = NULL;
    g.eos_token_count = 0;
  }
  /* Errors: empty prompt, a prompt that fills the context, a context that fills up. */
  CHECK_STATUS(colibri_generate(session, kInputIds, 0, &g, NULL, NULL, NULL), COLIBRI_ERROR_INVALID_ARGUMENT);
  {
    int32_t long_prompt[64];
    for (i = 0; i < 64; ++i) long_prompt[i] = 5;
    CHECK_STATUS(colibri_generate(session, long_prompt, 64, &g, NULL, NULL, NULL), COLIBRI_ERROR_CONTEXT_FULL);
    g.max_tokens = 100;
    memset(&c, 0, sizeof c);
    CHECK_STATUS(colibri_generate(session, long_prompt, 50, &g, collect_piece, &c, NULL), COLIBRI_ERROR_CONTEXT_FULL);
    CHECK(c.pieces > 0); /* the text so far was delivered */
    g.max_tokens = GREEDY_COUNT;
  }
  /* Freeing the session detaches an open stream: BAD_STATE, then close. */
  CHECK_OK(colibri_stream_open(session, kInputIds, INPUT_COUNT, &g, &stream));
  colibri_session_free(session);
  CHECK_STATUS(colibri_stream_next(stream, &piece, &size), COLIBRI_ERROR_BAD_STATE);
  colibri_stream_close(stream);
}

/* Seeded sampling through generation reproduces, and the session seed is the default. */
static void test_seeded_generation(colibri_model *model) {
  colibri_session_options so;
  colibri_session *a = NULL, *b = NULL;
  colibri_generate_options g;
  struct collected ca, cb;
  CHECK_OK(colibri_session_options_init(&so, sizeof so));
  so.context_length = 64;
  so.seed = 77;
  so.threads = 1;
  CHECK_OK(colibri_session_create(model, &so, &a));
  so.threads = 2;
  CHECK_OK(colibri_session_create(model, &so, &b));
  CHECK_OK(colibri_generate_options_init(&g, sizeof g));
  g.max_tokens = 12;
  g.ignore_eos = 1;
  memset(&ca, 0, sizeof ca);
  memset(&cb, 0, sizeof cb);
  CHECK_OK(colibri_generate(a, kInputIds, INPUT_COUNT, &g, collect_piece, &ca, NULL));
  CHECK_OK(colibri_generate(b, kInputIds, INPUT_COUNT, &g, collect_piece, &cb, NULL));
  CHECK(strcmp(ca.text, cb.text) == 0);
  colibri_session_free(a);
  colibri_session_free(b);
}

struct expert_calls {
  int calls;
  uint32_t last_expert;
  int fail;
  int ordered;
};

static int32_t zero_expert(void *user, uint32_t layer, uint32_t expert, const float *rows_in, size_t row_count,
                           size_t hidden, float *rows_out) {
  struct expert_calls *e = (struct expert_calls *)user;
  (void)layer;
  (void)rows_in;
  if (e->calls > 0 && expert <= e->last_expert) e->ordered = 0;
  e->last_expert = expert;
  ++e->calls;
  memset(rows_out, 0, row_count * hidden * sizeof(float));
  return e->fail;
}

static void test_moe_layer(colibri_model *model) {
  colibri_session *session = make_session(model, 1);
  enum { TOKENS = 4, H = 64, K = 2 };
  float hidden[TOKENS * H], routed[TOKENS * H], given[TOKENS * H], single[H];
  int32_t experts[TOKENS * K];
  float weights[TOKENS * K];
  struct expert_calls calls;
  colibri_stats stats;
  size_t i;
  double diff = 0;

  for (i = 0; i < TOKENS * H; ++i) hidden[i] = (float)sin(0.37 * (double)i);
  for (i = 0; i < TOKENS; ++i) {
    experts[i * K] = 3;
    weights[i * K] = 1.0f;
    experts[i * K + 1] = 5;
    weights[i * K + 1] = 0.0f;
  }
  CHECK_OK(colibri_session_moe_layer(session, 0, hidden, TOKENS, NULL, NULL, routed));
  CHECK_OK(colibri_session_moe_layer(session, 0, hidden, TOKENS, experts, weights, given));
  for (i = 0; i < TOKENS * H; ++i) diff += fabs((double)routed[i] - (double)given[i]);
  CHECK(diff > 1e-3);
  /* Caller routes are batch-independent. */
  CHECK_OK(colibri_session_moe_layer(session, 0, hidden + H, 1, experts + K, weights + K, single));
  CHECK(memcmp(single, given + H, sizeof single) == 0);
  CHECK_STATUS(colibri_session_moe_layer(session, 0, hidden, TOKENS, experts, NULL, given), COLIBRI_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(colibri_session_moe_layer(session, 7, hidden, 1, NULL, NULL, given), COLIBRI_ERROR_INVALID_ARGUMENT);
  experts[0] = 8;
  CHECK_STATUS(colibri_session_moe_layer(session, 0, hidden, TOKENS, experts, weights, given), COLIBRI_ERROR_INVALID_ARGUMENT);
  experts[0] = 3;

  /* An expert function that outputs zeros: the merged output is zero (Mixtral has no shared
   * expert); it is called once per active expert, in ascending order. */
  memset(&calls, 0, sizeof calls);
  calls.ordered = 1;
  CHECK_OK(colibri_session_set_expert_fn(session, zero_expert, &calls));
  CHECK_OK(colibri_session_moe_layer(session, 0, hidden, TOKENS, experts, weights, given));
  CHECK(calls.calls == 2 && calls.ordered); /* experts 3 and 5 */
  for (i = 0; i < TOKENS * H; ++i) CHECK(given[i] == 0.0f);
  calls.calls = 0;
  CHECK_OK(colibri_session_moe_layer(session, 1, hidden, TOKENS, NULL, NULL, given));
  CHECK(calls.calls >= 2 && calls.ordered);
  /* ... also in the forward pass; a non-zero return is COLIBRI_ERROR_CALLBACK. */
  calls.calls = 0;
  CHECK_OK(colibri_session_decode(session, 0, 1));
  CHECK(calls.calls == 2 * K);
  calls.fail = 5;
  CHECK_STATUS(colibri_session_decode(session, 0, 1), COLIBRI_ERROR_CALLBACK);
  {
    char message[256];
    colibri_last_error(message, sizeof message, NULL);
    CHECK(strstr(message, "returned 5") != NULL);
  }
  CHECK_OK(colibri_session_set_expert_fn(session, NULL, NULL));
  CHECK_OK(colibri_session_moe_layer(session, 0, hidden, TOKENS, NULL, NULL, given));
  CHECK(memcmp(given, routed, sizeof given) == 0);

  /* Stats: per stage, tokens, reset. */
  stats.struct_size = sizeof stats;
  CHECK_OK(colibri_session_get_stats(session, &stats));
  CHECK(stats.stage_count == 8);
  CHECK(stats.tokens >= 1 && stats.forward_calls >= 1 && stats.weight_bytes_read > 0 && stats.expert_activations > 0);
  CHECK(stats.stage_ns[COLIBRI_STAGE_EXPERTS] > 0 && stats.stage_ns[COLIBRI_STAGE_ATTENTION] > 0);
  CHECK_OK(colibri_session_reset_stats(session));
  CHECK_OK(colibri_session_get_stats(session, &stats));
  CHECK(stats.tokens == 0 && stats.stage_ns[COLIBRI_STAGE_EXPERTS] == 0);
  colibri_session_free(session);
}

/* Non-finite policy ZERO from the model options is inherited by sessions. */
static void test_non_finite_policy(void) {
  colibri_model_options mo;
  colibri_model *model = NULL;
  colibri_session *strict = NULL, *lenient = NULL;
  colibri_session_options so;
  colibri_session_info info;
  colibri_stats stats;
  float hidden[3 * 64], out[3 * 64];
  size_t i;
  for (i = 0; i < 3 * 64; ++i) hidden[i] = 0.5f;
  hidden[64 + 7] = (float)NAN;
  CHECK_OK(colibri_model_options_init(&mo, sizeof mo));
  mo.non_finite_policy = COLIBRI_NON_FINITE_ZERO;
  mo.threads = 2;
  CHECK_OK(colibri_model_open(g_image_path, &mo, &model));
  if (!model) return;
  CHECK_OK(colibri_session_create(model, NULL, &lenient));
  info.struct_size = sizeof info;
  CHECK_OK(colibri_session_get_info(lenient, &info));
  CHECK(info.non_finite_policy == COLIBRI_NON_FINITE_ZERO && info.thread_count == 2);
  CHECK(info.context_length == 4096 && info.kv_cache_bytes > 0 && info.backend != NULL);
  CHECK_OK(colibri_session_moe_layer(lenient, 1, hidden, 3, NULL, NULL, out));
  stats.struct_size = sizeof stats;
  CHECK_OK(colibri_session_get_stats(lenient, &stats));
  CHECK(stats.non_finite_rows == 1);
  CHECK_OK(colibri_session_options_init(&so, sizeof so));
  so.non_finite_policy = COLIBRI_NON_FINITE_ERROR;
  so.context_length = 16;
  CHECK_OK(colibri_session_create(model, &so, &strict));
  CHECK_STATUS(colibri_session_moe_layer(strict, 1, hidden, 3, NULL, NULL, out), COLIBRI_ERROR_NON_FINITE);
  /* The model may be closed while sessions live. */
  colibri_model_close(model);
  CHECK_OK(colibri_session_decode(strict, 0, 1));
  colibri_session_free(strict);
  colibri_session_free(lenient);
}

/* NaN after the last MoE input (issue 18, item 7): the tiny synthetic model with its final
 * norm, or its last layer's experts, all NaN (written by make_nan_image into TMPDIR). Every
 * form of generation stops with NON_FINITE naming the stage and the position; no token comes
 * out, and the session holds no logits to read. */
static void test_non_finite_generation(const char *dir) {
  static const struct {
    const char *file;
    const char *stage;
  } cases[] = {{"nan_output_norm.colibri", "(stage: output_norm;"},
               {"nan_last_experts.colibri", "(stage: MoE output of layer 1;"}};
  const int32_t prompt[] = {1, 5, 6}; /* <s> and two letters of the tiny vocabulary */
  size_t c;
  for (c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    char path[1024], message[1024];
    colibri_model *model = NULL;
    colibri_session *session = NULL;
    colibri_stream *stream = NULL;
    colibri_generate_options g;
    colibri_sampler_options sampling;
    colibri_generate_result result;
    struct collected pieces;
    const float *logits = NULL;
    int greedy;
    snprintf(path, sizeof path, "%s/%s", dir, cases[c].file);
    CHECK_OK(colibri_model_open(path, NULL, &model));
    if (!model) continue;
    session = make_session(model, 1);
    for (greedy = 1; greedy >= 0; --greedy) {
      greedy_options(&g, &sampling);
      g.max_tokens = 8;
      if (!greedy) sampling.temperature = 0.8f;
      memset(&pieces, 0, sizeof pieces);
      memset(&result, 0, sizeof result);
      result.struct_size = sizeof result;
      CHECK_STATUS(colibri_generate(session, prompt, 3, &g, collect_piece, &pieces, &result), COLIBRI_ERROR_NON_FINITE);
      CHECK(pieces.pieces == 0 && result.generated_token_count == 0);
      colibri_last_error(message, sizeof message, NULL);
      CHECK(strstr(message, cases[c].stage) != NULL);
      CHECK(strstr(message, "position") != NULL);
      if (!strstr(message, cases[c].stage)) fprintf(stderr, "  message: %s\n", message);
    }
    CHECK_STATUS(colibri_stream_open(session, prompt, 3, &g, &stream), COLIBRI_ERROR_NON_FINITE);
    CHECK(stream == NULL);
    /* The raw forward calls: decode fails the same way and leaves no logits behind. */
    CHECK_OK(colibri_session_reset(session));
    CHECK_STATUS(colibri_session_decode(session, 0, 1), COLIBRI_ERROR_NON_FINITE);
    colibri_last_error(message, sizeof message, NULL);
    CHECK(strstr(message, cases[c].stage) != NULL && strstr(message, "at position 0 of sequence 0") != NULL);
    CHECK_STATUS(colibri_session_logits(session, 0, &logits, NULL, NULL), COLIBRI_ERROR_BAD_STATE);
    CHECK(logits == NULL);
    colibri_session_free(session);
    colibri_model_close(model);
  }
}

/* Misuse of handles (issue 18, item 6): double frees, calls on freed handles, handles of the
 * wrong type and garbage pointers are BAD_STATE with a message, never a crash; a callback that
 * calls back into its own session is told so; a callback's failed call does not outlive the
 * outer call that succeeds (colibri_last_error is cleared by it). */

struct reentry {
  colibri_session *session;
  colibri_model *model;
  int32_t decode_status;
  int32_t logits_status;
  int32_t free_checked;
  char message[1024];
  int pieces;
};

/* A piece callback that misuses its own session, then makes a failing call of its own. */
static int32_t reenter_piece(void *user, const char *piece, size_t size) {
  struct reentry *r = (struct reentry *)user;
  const float *logits = NULL;
  (void)piece;
  (void)size;
  if (r->pieces++ == 0) {
    r->decode_status = colibri_session_decode(r->session, 0, 1);
    colibri_last_error(r->message, sizeof r->message, NULL);
    r->logits_status = colibri_session_logits(r->session, 0, &logits, NULL, NULL);
    colibri_session_free(r->session); /* refused: the session is running this callback */
    r->free_checked = last_error_has(COLIBRI_ERROR_BAD_STATE, "inside a callback");
    /* A failing call of the callback's own: its error must not survive generate's OK. */
    CHECK_STATUS(colibri_tokenize(r->model, NULL, 3, 0, NULL, 0, NULL), COLIBRI_ERROR_INVALID_ARGUMENT);
  }
  return 0;
}

static int32_t reenter_expert(void *user, uint32_t layer, uint32_t expert, const float *rows_in, size_t row_count,
                              size_t hidden, float *rows_out) {
  struct reentry *r = (struct reentry *)user;
  uint32_t length = 0;
  (void)layer;
  (void)expert;
  (void)rows_in;
  if (r->pieces++ == 0) {
    r->decode_status = colibri_session_sequence_length(r->session, 0, &length);
    colibri_last_error(r->message, sizeof r->message, NULL);
  }
  memset(rows_out, 0, row_count * hidden * sizeof(float));
  return 0;
}

static void test_misuse(const char *tmpdir) {
  colibri_model *model = open_model(), *model2 = NULL;
  colibri_session *session = make_session(model, 1), *freed = make_session(model, 1);
  colibri_sampler *sampler = NULL;
  colibri_stream *stream = NULL;
  colibri_generate_options g;
  colibri_sampler_options so;
  colibri_model_info info;
  const int32_t prompt[] = {1, 5, 6};
  const char *piece = NULL;
  int32_t token = 0;
  float logits[4] = {0.0f, 1.0f, 2.0f, 3.0f};
  uint32_t length = 0;
  union {
    unsigned char bytes[256];
    uint64_t align;
  } garbage;
  (void)tmpdir;
  memset(garbage.bytes, 0x5A, sizeof garbage.bytes);

  /* Double free / close of each handle type: recorded as BAD_STATE, nothing else happens. */
  colibri_session_free(freed);
  CHECK(last_error_has(COLIBRI_OK, ""));
  colibri_session_free(freed);
  CHECK(last_error_has(COLIBRI_ERROR_BAD_STATE, "already freed"));
  CHECK_STATUS(colibri_session_decode(freed, 0, 1), COLIBRI_ERROR_BAD_STATE); /* use after free */
  CHECK(last_error_has(COLIBRI_ERROR_BAD_STATE, "already freed"));
  CHECK_STATUS(colibri_session_get_info(freed, NULL), COLIBRI_ERROR_BAD_STATE);
  CHECK_STATUS(colibri_generate(freed, prompt, 3, NULL, NULL, NULL, NULL), COLIBRI_ERROR_BAD_STATE);

  CHECK_OK(colibri_sampler_create(NULL, 4, &sampler));
  colibri_sampler_free(sampler);
  colibri_sampler_free(sampler);
  CHECK(last_error_has(COLIBRI_ERROR_BAD_STATE, "colibri_sampler"));
  CHECK_STATUS(colibri_sampler_sample(sampler, logits, &token), COLIBRI_ERROR_BAD_STATE);

  greedy_options(&g, &so);
  g.max_tokens = 2;
  CHECK_OK(colibri_stream_open(session, prompt, 3, &g, &stream));
  colibri_stream_close(stream);
  CHECK(last_error_has(COLIBRI_OK, ""));
  colibri_stream_close(stream);
  CHECK(last_error_has(COLIBRI_ERROR_BAD_STATE, "already closed"));
  CHECK_STATUS(colibri_stream_next(stream, &piece, NULL), COLIBRI_ERROR_BAD_STATE);
  CHECK(piece != NULL && piece[0] == '\0');
  CHECK_OK(colibri_session_decode(session, 0, 1)); /* the session is free of the closed stream */

  CHECK_OK(colibri_model_open(g_image_path, NULL, &model2));
  colibri_model_close(model2);
  colibri_model_close(model2);
  CHECK(last_error_has(COLIBRI_ERROR_BAD_STATE, "already closed"));
  info.struct_size = sizeof info;
  CHECK_STATUS(colibri_model_get_info(model2, &info), COLIBRI_ERROR_BAD_STATE);
  CHECK_STATUS(colibri_session_create(model2, NULL, &freed), COLIBRI_ERROR_BAD_STATE);
  CHECK(freed == NULL);

  /* A handle of another type, garbage memory, a misaligned or small pointer. */
  CHECK_STATUS(colibri_session_decode((colibri_session *)model, 0, 1), COLIBRI_ERROR_BAD_STATE);
  CHECK(last_error_has(COLIBRI_ERROR_BAD_STATE, "is a colibri_model handle, not a colibri_session"));
  CHECK_STATUS(colibri_model_get_info((colibri_model *)session, &info), COLIBRI_ERROR_BAD_STATE);
  CHECK_STATUS(colibri_session_decode((colibri_session *)garbage.bytes, 0, 1), COLIBRI_ERROR_BAD_STATE);
  CHECK(last_error_has(COLIBRI_ERROR_BAD_STATE, "not a live colibri_session"));
  CHECK_STATUS(colibri_session_decode((colibri_session *)(garbage.bytes + 3), 0, 1), COLIBRI_ERROR_BAD_STATE);
  CHECK_STATUS(colibri_sampler_sample((colibri_sampler *)(size_t)8, logits, &token), COLIBRI_ERROR_BAD_STATE);
  CHECK(last_error_has(COLIBRI_ERROR_BAD_STATE, "no handle lies at that address"));
  colibri_session_free((colibri_session *)garbage.bytes);
  CHECK(last_error_has(COLIBRI_ERROR_BAD_STATE, "not a live colibri_session"));
  colibri_model_close((colibri_model *)garbage.bytes);
  colibri_stream_close((colibri_stream *)garbage.bytes);
  colibri_sampler_free((colibri_sampler *)garbage.bytes);
  CHECK(last_error_has(COLIBRI_ERROR_BAD_STATE, "not a live colibri_sampler"));
  CHECK_STATUS(colibri_session_sequence_length(NULL, 0, &length), COLIBRI_ERROR_INVALID_ARGUMENT);

  /* Engines and requests (issue 18): double free, use after free, wrong type, garbage. */
  {
    colibri_engine_options eo;
    colibri_engine *engine = NULL;
    colibri_request *request = NULL;
    colibri_request_result rr;
    colibri_engine_stats st;
    int32_t ids[4];
    size_t count = 0;
    CHECK_OK(colibri_engine_options_init(&eo, sizeof eo));
    eo.max_sequences = 1;
    eo.context_length = 32;
    eo.step_tokens = 8;
    CHECK_OK(colibri_engine_create(model, &eo, &engine));
    CHECK_OK(colibri_request_submit(engine, prompt, 3, NULL, &request));
    rr.struct_size = sizeof rr;
    st.struct_size = sizeof st;
    CHECK_STATUS(colibri_request_get_result((colibri_request *)engine, &rr), COLIBRI_ERROR_BAD_STATE);
    CHECK(last_error_has(COLIBRI_ERROR_BAD_STATE, "is a colibri_engine handle, not a colibri_request"));
    CHECK_STATUS(colibri_engine_get_stats((colibri_engine *)session, &st), COLIBRI_ERROR_BAD_STATE);
    CHECK(last_error_has(COLIBRI_ERROR_BAD_STATE, "is a colibri_session handle, not a colibri_engine"));
    {
      colibri_request *other = (colibri_request *)1;
      CHECK_STATUS(colibri_request_submit((colibri_engine *)request, prompt, 3, NULL, &other), COLIBRI_ERROR_BAD_STATE);
      CHECK(other == NULL); /* out parameter cleared on failure */
    }
    colibri_request_free(request); /* frees: leaves the last error as it was */
    colibri_request_free(request);
    CHECK(last_error_has(COLIBRI_ERROR_BAD_STATE, "was already freed"));
    CHECK(last_error_has(COLIBRI_ERROR_BAD_STATE, "colibri_request_free"));
    CHECK_STATUS(colibri_request_cancel(request), COLIBRI_ERROR_BAD_STATE);
    CHECK_STATUS(colibri_request_next(request, 0, &piece, &count), COLIBRI_ERROR_BAD_STATE);
    CHECK_STATUS(colibri_request_tokens(request, ids, 4, &count), COLIBRI_ERROR_BAD_STATE);
    CHECK_STATUS(colibri_request_get_result(request, &rr), COLIBRI_ERROR_BAD_STATE);
    CHECK_STATUS(colibri_request_logprobs(request, 0, NULL, NULL, 0, &count), COLIBRI_ERROR_BAD_STATE);
    CHECK(last_error_has(COLIBRI_ERROR_BAD_STATE, "was already freed"));
    colibri_engine_free(engine); /* frees: leaves the last error as it was */
    colibri_engine_free(engine);
    CHECK(last_error_has(COLIBRI_ERROR_BAD_STATE, "after colibri_engine_free; nothing was freed"));
    CHECK_STATUS(colibri_engine_get_stats(engine, &st), COLIBRI_ERROR_BAD_STATE);
    CHECK(last_error_has(COLIBRI_ERROR_BAD_STATE, "already freed"));
    CHECK_STATUS(colibri_request_submit(engine, prompt, 3, NULL, &request), COLIBRI_ERROR_BAD_STATE);
    CHECK_STATUS(colibri_request_submit_chat(engine, NULL, 0, NULL, NULL, &request), COLIBRI_ERROR_BAD_STATE);
    colibri_engine_free((colibri_engine *)garbage.bytes);
    CHECK(last_error_has(COLIBRI_ERROR_BAD_STATE, "not a live colibri_engine"));
    colibri_request_free((colibri_request *)garbage.bytes);
    CHECK(last_error_has(COLIBRI_ERROR_BAD_STATE, "not a live colibri_request"));
    colibri_request_free((colibri_request *)(size_t)16);
    CHECK(last_error_has(COLIBRI_ERROR_BAD_STATE, "no handle lies at that address"));
    CHECK_STATUS(colibri_request_cancel((colibri_request *)(garbage.bytes + 3)), COLIBRI_ERROR_BAD_STATE);
    CHECK_STATUS(colibri_engine_get_stats(NULL, &st), COLIBRI_ERROR_INVALID_ARGUMENT);
  }

  /* A piece callback that calls back into its own session: told so; generation goes on. */
  {
    struct reentry r;
    struct collected unused;
    colibri_generate_result result;
    memset(&r, 0, sizeof r);
    memset(&unused, 0, sizeof unused);
    r.session = session;
    r.model = model;
    g.max_tokens = 4;
    result.struct_size = sizeof result;
    CHECK_OK(colibri_generate(session, prompt, 3, &g, reenter_piece, &r, &result));
    CHECK(r.decode_status == COLIBRI_ERROR_BAD_STATE && strstr(r.message, "callback") != NULL);
    CHECK(r.logits_status == COLIBRI_ERROR_BAD_STATE);
    CHECK(r.free_checked);
    CHECK(result.generated_token_count == 4);
    /* The callback's own INVALID_ARGUMENT was cleared by generate's OK (the header's promise). */
    CHECK(last_error_has(COLIBRI_OK, ""));
    CHECK_OK(colibri_session_decode(session, 0, 1)); /* not freed by the callback */
    (void)unused;
  }
  /* The same from an expert callback. */
  {
    struct reentry r;
    memset(&r, 0, sizeof r);
    r.session = session;
    CHECK_OK(colibri_session_set_expert_fn(session, reenter_expert, &r));
    CHECK_OK(colibri_session_reset(session));
    CHECK_OK(colibri_session_decode(session, 0, 1));
    CHECK(r.decode_status == COLIBRI_ERROR_BAD_STATE && strstr(r.message, "callback") != NULL);
    CHECK_OK(colibri_session_set_expert_fn(session, NULL, NULL));
  }
  colibri_session_free(session);
  colibri_model_close(model);
}

/* KV cache in f16: greedy tokens still match the oracle on this model. */
static void test_kv_f16(colibri_model *model) {
  colibri_session_options so;
  colibri_session *session = NULL;
  colibri_session_info info;
  const float *logits;
  size_t vocab;
  int32_t status;
  CHECK_OK(colibri_session_options_init(&so, sizeof so));
  so.context_length = 64;
  so.kv_dtype = COLIBRI_DTYPE_F16;
  status = colibri_session_create(model, &so, &session);
  CHECK_OK(status);
  if (status != COLIBRI_OK) return;
  info.struct_size = sizeof info;
  CHECK_OK(colibri_session_get_info(session, &info));
  CHECK(info.kv_dtype == COLIBRI_DTYPE_F16);
  CHECK_OK(colibri_session_prefill(session, 0, kInputIds, INPUT_COUNT));
  CHECK_OK(colibri_session_logits(session, 0, &logits, &vocab, NULL));
  CHECK(argmax(logits, vocab) == kGreedy[0]);
  colibri_session_free(session);
}

/* max_isa caps the kernels: the backend is min(cap, the CPU's best); one cap gives the same bits
 * every time, SCALAR equals force_scalar, levels agree within the numerics bound; a value out
 * of range and the ABI-1 struct (without the field) are handled. */
static int isa_rank(const char *backend) {
  if (strcmp(backend, "cpu-scalar") == 0) return COLIBRI_ISA_SCALAR;
  if (strcmp(backend, "cpu-avx2") == 0) return COLIBRI_ISA_AVX2;
  if (strcmp(backend, "cpu-avx512") == 0) return COLIBRI_ISA_AVX512;
  return -1;
}

static int isa_session_logits(colibri_model *model, size_t struct_size, uint32_t max_isa, uint32_t force_scalar,
                              float *out, int *rank) {
  union {
    colibri_session_options options;
    unsigned char bytes[sizeof(colibri_session_options)];
  } storage;
  colibri_session_options *so = &storage.options;
  colibri_session *session = NULL;
  colibri_session_info info;
  const float *logits = NULL;
  size_t vocab = 0;
  memset(storage.bytes, 0, sizeof storage.bytes);
  CHECK_OK(colibri_session_options_init(so, struct_size));
  so->context_length = 64;
  so->threads = 2;
  so->force_scalar = force_scalar;
  if (struct_size == sizeof *so) so->max_isa = max_isa;
  if (colibri_session_create(model, so, &session) != COLIBRI_OK || !session) return 0;
  info.struct_size = sizeof info;
  CHECK_OK(colibri_session_get_info(session, &info));
  *rank = isa_rank(info.backend);
  CHECK_OK(colibri_session_prefill(session, 0, kInputIds, INPUT_COUNT));
  CHECK_OK(colibri_session_logits(session, 0, &logits, &vocab, NULL));
  CHECK(vocab == 512);
  if (logits) memcpy(out, logits, 512 * sizeof(float));
  colibri_session_free(session);
  return logits != NULL;
}

static void test_max_isa(colibri_model *model) {
  static float auto_logits[512], capped[512], again[512];
  int best = 0, rank = 0, rank2 = 0;
  uint32_t cap;
  size_t v;
  colibri_session_options so;
  colibri_session *session = NULL;
  CHECK_OK(colibri_session_options_init(&so, sizeof so));
  CHECK(so.max_isa == COLIBRI_ISA_AUTO);
  CHECK(isa_session_logits(model, sizeof so, COLIBRI_ISA_AUTO, 0, auto_logits, &best));
  CHECK(best >= COLIBRI_ISA_SCALAR);
  for (cap = COLIBRI_ISA_SCALAR; cap <= COLIBRI_ISA_AVX512; ++cap) {
    double max_diff = 0;
    CHECK(isa_session_logits(model, sizeof so, cap, 0, capped, &rank));
    CHECK(rank == ((int)cap < best ? (int)cap : best));
    CHECK(isa_session_logits(model, sizeof so, cap, 0, again, &rank2));
    CHECK(rank2 == rank && memcmp(capped, again, sizeof capped) == 0);
    for (v = 0; v < 512; ++v) {
      double d = fabs((double)capped[v] - (double)auto_logits[v]);
      if (d > max_diff) max_diff = d;
    }
    CHECK(max_diff < 1e-4);
    if (rank == best) CHECK(memcmp(capped, auto_logits, sizeof capped) == 0);
  }
  /* SCALAR is force_scalar. */
  CHECK(isa_session_logits(model, sizeof so, COLIBRI_ISA_SCALAR, 0, capped, &rank));
  CHECK(isa_session_logits(model, sizeof so, COLIBRI_ISA_AUTO, 1, again, &rank2));
  CHECK(rank == COLIBRI_ISA_SCALAR && rank2 == COLIBRI_ISA_SCALAR && memcmp(capped, again, sizeof capped) == 0);
  /* The ABI-1 struct, which ends before max_isa: accepted, AUTO. */
  CHECK(isa_session_logits(model, offsetof(colibri_session_options, max_isa), 0, 0, capped, &rank));
  CHECK(rank == best && memcmp(capped, auto_logits, sizeof capped) == 0);
  /* reserved0 (the named padding after max_isa) must be 0. */
  so.reserved0 = 1;
  CHECK_STATUS(colibri_session_create(model, &so, &session), COLIBRI_ERROR_INVALID_ARGUMENT);
  so.reserved0 = 0;
  /* Out of range: INVALID_ARGUMENT naming the field. */
  so.max_isa = COLIBRI_ISA_AVX512 + 1;
  session = (colibri_session *)1;
  CHECK_STATUS(colibri_session_create(model, &so, &session), COLIBRI_ERROR_INVALID_ARGUMENT);
  CHECK(session == NULL);
  {
    char message[256];
    colibri_last_error(message, sizeof message, NULL);
    CHECK(strstr(message, "max_isa") != NULL);
  }
}

struct log_capture {
  int count;
  int min_seen;
};

static void capture_log(void *user, int32_t level, const char *message) {
  struct log_capture *c = (struct log_capture *)user;
  CHECK(message != NULL);
  ++c->count;
  if (level < c->min_seen) c->min_seen = level;
}

static void test_logging(void) {
  struct log_capture capture = {0, 100};
  colibri_model *model = NULL;
  CHECK_STATUS(colibri_set_log_callback(capture_log, &capture, 7), COLIBRI_ERROR_INVALID_ARGUMENT);
  CHECK_OK(colibri_set_log_callback(capture_log, &capture, COLIBRI_LOG_INFO));
  CHECK_OK(colibri_model_open(g_image_path, NULL, &model));
  CHECK(capture.count >= 1 && capture.min_seen == COLIBRI_LOG_INFO);
  colibri_model_close(model);
  /* DEBUG shows failing calls. */
  capture.count = 0;
  CHECK_OK(colibri_set_log_callback(capture_log, &capture, COLIBRI_LOG_DEBUG));
  CHECK_STATUS(colibri_model_open("/nonexistent/x.colibri", NULL, &model), COLIBRI_ERROR_IO);
  CHECK(capture.count == 1 && capture.min_seen == COLIBRI_LOG_DEBUG);
  CHECK_OK(colibri_set_log_callback(NULL, NULL, COLIBRI_LOG_OFF));
  capture.count = 0;
  CHECK_STATUS(colibri_model_open("/nonexistent/x.colibri", NULL, &model), COLIBRI_ERROR_IO);
  CHECK(capture.count == 0);
}

/* load_into_memory: the copy gives the mapped model's logits bit for bit (and so the oracle's);
 * a value other than 0/1 is refused; a caller struct from before the field existed (its
 * struct_size ends before it) is accepted and means "mapped". */
static void test_load_into_memory(colibri_model *mapped) {
  colibri_model_options o;
  colibri_model *loaded = NULL;
  colibri_session *a, *b;
  const float *la = NULL, *lb = NULL;
  uint32_t want[INPUT_COUNT];
  size_t vocab = 0, rows = 0, i;
  char message[512];

  CHECK_OK(colibri_model_options_init(&o, sizeof o));
  CHECK(o.load_into_memory == 0);
  o.load_into_memory = 2;
  CHECK_STATUS(colibri_model_open(g_image_path, &o, &loaded), COLIBRI_ERROR_INVALID_ARGUMENT);
  colibri_last_error(message, sizeof message, NULL);
  CHECK(strstr(message, "load_into_memory") != NULL);
  o.load_into_memory = 0;
  o.struct_size = (uint32_t)offsetof(colibri_model_options, load_into_memory);
  CHECK_OK(colibri_model_open(g_image_path, &o, &loaded));
  colibri_model_close(loaded);
  loaded = NULL;

  CHECK_OK(colibri_model_options_init(&o, sizeof o));
  o.load_into_memory = 1;
  o.populate = 1;
  CHECK_OK(colibri_model_open(g_image_path, &o, &loaded));
  if (!loaded) return;
  test_oracle_logits_and_greedy(loaded);
  a = make_session(mapped, 1);
  b = make_session(loaded, 1);
  for (i = 0; i < INPUT_COUNT; ++i) want[i] = 1;
  CHECK_OK(colibri_session_batch(a, NULL, NULL, kInputIds, want, INPUT_COUNT));
  CHECK_OK(colibri_session_batch(b, NULL, NULL, kInputIds, want, INPUT_COUNT));
  CHECK_OK(colibri_session_logits(b, 0, &lb, &vocab, &rows));
  CHECK(rows == INPUT_COUNT);
  for (i = 0; i < rows; ++i) {
    CHECK_OK(colibri_session_logits(a, i, &la, NULL, NULL));
    CHECK_OK(colibri_session_logits(b, i, &lb, NULL, NULL));
    CHECK(la && lb && memcmp(la, lb, vocab * sizeof(float)) == 0);
  }
  colibri_session_free(a);
  colibri_session_free(b);
  colibri_model_close(loaded);
}

/* gpt-oss from its MXFP4 checkpoint (tests/fixtures/oracle/gpt_oss_mxfp4, converted as shipped
 * into TMPDIR by ctest): the appended fields describe its attention and experts, and the expert
 * weights report their dtype. */
static void test_gpt_oss_info(const char *tmpdir) {
  char path[4096];
  colibri_model *m = NULL;
  colibri_model_info info;
  memset(&info, 0, sizeof info);
  snprintf(path, sizeof path, "%s/gpt_oss_mxfp4.colibri", tmpdir);
  CHECK_OK(colibri_model_open(path, NULL, &m));
  if (!m) return;
  info.struct_size = sizeof info;
  CHECK_OK(colibri_model_get_info(m, &info));
  CHECK(strcmp(info.family, "gpt_oss") == 0 && strcmp(info.architecture, "GptOssForCausalLM") == 0);
  CHECK(info.layer_count == 2 && info.sliding_window == 4 && info.sliding_layer_count == 1);
  CHECK(info.attention_bias == 1 && info.attention_output_bias == 1 && info.attention_sinks == 1);
  CHECK(info.router_bias == 1 && info.expert_bias == 1);
  CHECK(strcmp(info.expert_activation, "swiglu_clamped") == 0);
  CHECK(info.swiglu_limit == 7.0 && info.swiglu_alpha == 1.702);
  CHECK(strcmp(info.rope_scaling, "yarn") == 0 && info.rope_factor == 32.0);
  CHECK(info.weight_dtype == COLIBRI_DTYPE_MXFP4 && info.weight_group_size == 32);
  colibri_model_close(m);
}

/* DeepSeek-V3 (tests/fixtures/oracle/deepseek_v3_mla, converted into TMPDIR by ctest): the
 * multi-head latent attention fields, and the latent cache's size. */
static void test_deepseek_info(const char *tmpdir) {
  char path[4096];
  colibri_model *m = NULL;
  colibri_model_info info;
  memset(&info, 0, sizeof info);
  snprintf(path, sizeof path, "%s/deepseek_v3_mla.colibri", tmpdir);
  CHECK_OK(colibri_model_open(path, NULL, &m));
  if (!m) return;
  info.struct_size = sizeof info;
  CHECK_OK(colibri_model_get_info(m, &info));
  CHECK(strcmp(info.family, "deepseek_v3") == 0 && strcmp(info.architecture, "DeepseekV3ForCausalLM") == 0);
  CHECK(strcmp(info.attention, "mla") == 0 && info.q_lora_rank == 64 && info.kv_lora_rank == 64);
  CHECK(info.qk_nope_head_dim == 32 && info.head_dim == 16 && info.v_head_dim == 32 && info.rope_interleave == 1);
  CHECK(info.head_count == 4 && info.kv_head_count == 4 && info.mtp_layer_count == 1);
  /* (32 + 16)^-1/2, times yarn's get_mscale(4, 1)^2. */
  CHECK(fabs(info.attention_scale - pow(0.1 * log(4.0) + 1.0, 2.0) / sqrt(48.0)) < 1e-12);
  /* 3 layers x (64 latent + 16 rope key) x 4 bytes. */
  CHECK(info.kv_cache_bytes_per_token == 3ull * (64 + 16) * 4);
  CHECK(strcmp(info.router_score, "sigmoid") == 0 && info.router_select_bias == 1 && info.expert_group_count == 4);
  colibri_model_close(m);
}

int main(int argc, char **argv) {
  colibri_model *model;
  const char *tmpdir;
  if (argc != 3) {
    fprintf(stderr, "usage: %s IMAGE TMPDIR\n", argv[0]);
    return 2;
  }
  g_image_path = argv[1];
  tmpdir = argv[2];
  test_versions_and_status();
  test_options_struct_sizes();
  test_open_errors(tmpdir);
  test_model_info_and_tensors();
  test_gpt_oss_info(tmpdir);
  test_deepseek_info(tmpdir);
  model = open_model();
  test_tokenizer(model);
  test_chat_template(model);
  test_oracle_logits_and_greedy(model);
  test_multi_sequence_batch(model);
  test_sampler();
  test_generation(model);
  test_seeded_generation(model);
  test_moe_layer(model);
  test_kv_f16(model);
  test_max_isa(model);
  test_load_into_memory(model);
  colibri_model_close(model);
  test_non_finite_policy();
  test_non_finite_generation(tmpdir);
  test_misuse(tmpdir);
  test_logging();
  return check_summary("test_capi");
}

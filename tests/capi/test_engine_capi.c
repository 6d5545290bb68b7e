/* tests/capi/test_engine_capi.c — the serving engine through the C API (C99, libcolibri.so
 * only): options and their errors, greedy output equal to the oracle's tokens, seeded
 * requests run together equal to colibri_generate on a session one by one, the pull stream
 * (PENDING, DONE), cancellation, timeouts, the bounded queue (BUSY), the prefix cache on a
 * second turn, request results and engine stats, handle lifetimes (requests outlive the
 * engine), per-token logprobs (raw log_softmax, checked against a session's logits; they change
 * no token) and chat submission (equal to rendering and tokenizing by hand).
 *
 * Usage: test_engine_capi IMAGE   (IMAGE: tests/fixtures/oracle/mixtral_gqa converted) */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"

#define REQUESTS 6
#define MAX_OUT 24

static colibri_engine *make_engine(colibri_model *model, uint32_t sequences, uint32_t queue) {
  colibri_engine_options eo;
  colibri_session_options so;
  colibri_engine *engine = NULL;
  CHECK_OK(colibri_session_options_init(&so, sizeof so));
  so.threads = 2;
  so.seed = 5;
  CHECK_OK(colibri_engine_options_init(&eo, sizeof eo));
  eo.max_sequences = sequences;
  eo.context_length = 64;
  eo.step_tokens = 16;
  eo.queue_capacity = queue;
  eo.session = &so;
  CHECK_OK(colibri_engine_create(model, &eo, &engine));
  if (!engine) exit(1);
  return engine;
}

/* Reads a request to its end; returns the final status (DONE or an error). */
static int32_t drain(colibri_request *r, char *text, size_t capacity) {
  const char *piece;
  size_t size, used = 0;
  int32_t status;
  text[0] = '\0';
  while ((status = colibri_request_next(r, -1, &piece, &size)) == COLIBRI_OK) {
    if (used + size + 1 <= capacity) {
      memcpy(text + used, piece, size + 1);
      used += size;
    }
  }
  return status;
}

static void test_options(colibri_model *model) {
  colibri_engine_options eo;
  colibri_engine *engine = (colibri_engine *)1;
  CHECK_OK(colibri_engine_options_init(&eo, sizeof eo));
  CHECK(eo.max_sequences == 8 && eo.block_tokens == 16 && eo.step_tokens == 256 && eo.prefix_cache == 1);
  eo.prefix_cache = 2;
  CHECK_STATUS(colibri_engine_create(model, &eo, &engine), COLIBRI_ERROR_INVALID_ARGUMENT);
  CHECK(engine == NULL);
  CHECK_OK(colibri_engine_options_init(&eo, sizeof eo));
  eo.max_sequences = 16;
  eo.step_tokens = 8; /* below max_sequences */
  CHECK_STATUS(colibri_engine_create(model, &eo, &engine), COLIBRI_ERROR_INVALID_ARGUMENT);
  CHECK_OK(colibri_engine_options_init(&eo, sizeof eo));
  eo.kv_budget_bytes = 16; /* not one block */
  CHECK_STATUS(colibri_engine_create(model, &eo, &engine), COLIBRI_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(colibri_engine_create(NULL, NULL, &engine), COLIBRI_ERROR_INVALID_ARGUMENT);
  colibri_engine_free(NULL);
  colibri_request_free(NULL);
  CHECK(strcmp(colibri_status_string(COLIBRI_ERROR_BUSY), "busy") == 0);
  CHECK(strcmp(colibri_status_string(COLIBRI_PENDING), "pending") == 0);
}

/* Greedy equals the oracle; seeded requests submitted together equal colibri_generate alone. */
static void test_batched_equals_alone(colibri_model *model) {
  colibri_engine *engine = make_engine(model, 4, 16);
  colibri_request *requests[REQUESTS];
  colibri_sampler_options samplers[REQUESTS];
  colibri_request_options ro;
  colibri_request_result result;
  colibri_session_options so;
  colibri_session *session = NULL;
  colibri_generate_options g;
  int32_t tokens[MAX_OUT], want[MAX_OUT];
  size_t count = 0, want_count = 0, i;
  char text[4096];

  CHECK_OK(colibri_session_options_init(&so, sizeof so));
  so.context_length = 64;
  so.threads = 1;
  so.seed = 5;
  CHECK_OK(colibri_session_create(model, &so, &session));
  for (i = 0; i < REQUESTS; ++i) {
    CHECK_OK(colibri_sampler_options_init(&samplers[i], sizeof samplers[i]));
    samplers[i].temperature = i == 0 ? 0.0f : 1.0f;
    samplers[i].seed = i == 5 ? COLIBRI_SEED_FROM_SESSION : 1000 + i; /* 5: the engine's seed */
    CHECK_OK(colibri_request_options_init(&ro, sizeof ro));
    ro.max_tokens = i == 0 ? (uint32_t)GREEDY_COUNT : (uint32_t)(8 + 2 * i);
    ro.ignore_eos = 1;
    ro.sampler = &samplers[i];
    CHECK_OK(colibri_request_submit(engine, kInputIds + (i % 3), INPUT_COUNT - (i % 3), &ro, &requests[i]));
  }
  for (i = 0; i < REQUESTS; ++i) {
    colibri_stream *stream = NULL;
    CHECK_STATUS(drain(requests[i], text, sizeof text), COLIBRI_DONE);
    CHECK_OK(colibri_request_tokens(requests[i], tokens, MAX_OUT, &count));
    CHECK_OK(colibri_generate_options_init(&g, sizeof g));
    g.max_tokens = i == 0 ? (uint32_t)GREEDY_COUNT : (uint32_t)(8 + 2 * i);
    g.ignore_eos = 1;
    g.sampler = &samplers[i];
    CHECK_OK(colibri_stream_open(session, kInputIds + (i % 3), INPUT_COUNT - (i % 3), &g, &stream));
    {
      const char *piece;
      size_t size;
      while (colibri_stream_next(stream, &piece, &size) == COLIBRI_OK) {
      }
    }
    CHECK_OK(colibri_stream_tokens(stream, want, MAX_OUT, &want_count));
    colibri_stream_close(stream);
    CHECK(count == want_count && memcmp(tokens, want, count * sizeof tokens[0]) == 0);
    if (i == 0) CHECK(count == GREEDY_COUNT && memcmp(tokens, kGreedy, sizeof kGreedy) == 0);
    result.struct_size = sizeof result;
    CHECK_OK(colibri_request_get_result(requests[i], &result));
    CHECK(result.finish_reason == COLIBRI_FINISH_LENGTH);
    CHECK(result.generated_token_count == count);
    CHECK(result.prompt_token_count == INPUT_COUNT - (i % 3));
    CHECK(result.time_to_first_token_ns > 0);
    /* After DONE, DONE again. */
    {
      const char *piece;
      size_t size;
      CHECK_STATUS(colibri_request_next(requests[i], 0, &piece, &size), COLIBRI_DONE);
    }
    colibri_request_free(requests[i]);
  }
  {
    colibri_engine_stats st;
    st.struct_size = sizeof st;
    CHECK_OK(colibri_engine_get_stats(engine, &st));
    CHECK(st.submitted_count == REQUESTS);
    CHECK(st.step_count > 0 && st.decode_token_count > 0 && st.prefill_token_count > 0);
    CHECK(st.max_batch_sequences >= 2 && st.max_batch_sequences <= 4);
    CHECK(st.kv_block_tokens == 16 && st.kv_block_count > 0);
  }
  colibri_session_free(session);
  colibri_engine_free(engine);
}

/* Cancel, timeout, BUSY, PENDING, the prefix cache, and requests that outlive the engine. */
static void test_lifecycle(colibri_model *model) {
  colibri_engine *engine = make_engine(model, 1, 1);
  colibri_request_options ro;
  colibri_request *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  colibri_request_result result;
  const char *piece;
  size_t size;
  char text[4096];
  int32_t status;

  CHECK_OK(colibri_request_options_init(&ro, sizeof ro));
  ro.max_tokens = 40;
  ro.ignore_eos = 1;
  /* One slot and a queue of one: a and b are accepted, c (submitted before a can have
   * finished its 40 tokens) is refused. */
  CHECK_OK(colibri_request_submit(engine, kInputIds, INPUT_COUNT, &ro, &a));
  CHECK_OK(colibri_request_submit(engine, kInputIds, INPUT_COUNT, &ro, &b)); /* waits */
  CHECK_STATUS(colibri_request_submit(engine, kInputIds, INPUT_COUNT, &ro, &c), COLIBRI_ERROR_BUSY);
  CHECK(c == NULL);
  CHECK_OK(colibri_request_cancel(b));
  CHECK_OK(colibri_request_cancel(b));
  CHECK_STATUS(drain(b, text, sizeof text), COLIBRI_DONE);
  result.struct_size = sizeof result;
  CHECK_OK(colibri_request_get_result(b, &result));
  CHECK(result.finish_reason == COLIBRI_FINISH_CANCELLED && result.generated_token_count == 0);
  CHECK_STATUS(drain(a, text, sizeof text), COLIBRI_DONE);
  CHECK_OK(colibri_request_get_result(a, &result));
  CHECK(result.finish_reason == COLIBRI_FINISH_LENGTH && result.generated_token_count == 40);

  /* The second turn: the first turn's prompt + output as history hits the prefix cache. */
  {
    int32_t history[64];
    size_t n = 0;
    memcpy(history, kInputIds, sizeof kInputIds);
    CHECK_OK(colibri_request_tokens(a, history + INPUT_COUNT, 64 - INPUT_COUNT, &n));
    ro.max_tokens = 4;
    CHECK_OK(colibri_request_submit(engine, history, INPUT_COUNT + 20, &ro, &d));
    CHECK_STATUS(drain(d, text, sizeof text), COLIBRI_DONE);
    CHECK_OK(colibri_request_get_result(d, &result));
    CHECK(result.prefix_hit_token_count >= 16 && result.prefix_hit_token_count % 16 == 0);
    colibri_request_free(d);
  }
  colibri_request_free(a);
  colibri_request_free(b);

  /* A timeout ends the request with DEADLINE (1 us: before it can finish); PENDING while
   * nothing is ready. */
  ro.max_tokens = 1000000;
  ro.timeout_ns = 1000;
  CHECK_OK(colibri_request_submit(engine, kInputIds, INPUT_COUNT, &ro, &a));
  status = colibri_request_next(a, 0, &piece, &size);
  CHECK(status == COLIBRI_OK || status == COLIBRI_PENDING || status == COLIBRI_DONE);
  CHECK_STATUS(drain(a, text, sizeof text), COLIBRI_DONE);
  CHECK_OK(colibri_request_get_result(a, &result));
  CHECK(result.finish_reason == COLIBRI_FINISH_DEADLINE);
  colibri_request_free(a);

  /* The context fills up before max_tokens: the text comes, then CONTEXT_FULL, then DONE. */
  ro.timeout_ns = 0;
  ro.max_tokens = 1000;
  CHECK_OK(colibri_request_submit(engine, kInputIds, INPUT_COUNT, &ro, &a));
  CHECK_STATUS(drain(a, text, sizeof text), COLIBRI_ERROR_CONTEXT_FULL);
  CHECK_STATUS(colibri_request_next(a, 0, &piece, &size), COLIBRI_DONE);
  CHECK_OK(colibri_request_get_result(a, &result));
  CHECK(result.finish_reason == COLIBRI_FINISH_ERROR && result.generated_token_count == 64 - INPUT_COUNT + 1);
  colibri_request_free(a);
  /* A prompt longer than the context is refused at submit. */
  {
    int32_t long_prompt[64];
    memset(long_prompt, 0, sizeof long_prompt);
    CHECK_STATUS(colibri_request_submit(engine, long_prompt, 64, &ro, &a), COLIBRI_ERROR_CONTEXT_FULL);
  }

  /* A running request outlives its engine: cancelled, still readable, then freed. */
  CHECK_OK(colibri_request_submit(engine, kInputIds, INPUT_COUNT, &ro, &a));
  colibri_engine_free(engine);
  status = drain(a, text, sizeof text);
  CHECK(status == COLIBRI_DONE);
  CHECK_OK(colibri_request_get_result(a, &result));
  CHECK(result.finish_reason == COLIBRI_FINISH_CANCELLED);
  colibri_request_free(a);
}

/* The log_softmax of a logits row, in double (the reference the engine's fp32 values meet). */
static void log_softmax(const float *row, size_t n, double *out) {
  double max = row[0], sum = 0.0;
  size_t i;
  for (i = 1; i < n; ++i)
    if (row[i] > max) max = row[i];
  for (i = 0; i < n; ++i) sum += exp((double)row[i] - max);
  for (i = 0; i < n; ++i) out[i] = (double)row[i] - max - log(sum);
}

#define LOGPROB_TOLERANCE 1e-4
#define MAX_VOCAB 4096

/* Checks request `r`'s logprobs (top_count alternatives per token) against the raw logits of
 * a session fed the same prompt and tokens: the chosen token's value and every alternative's
 * equal log_softmax of the unpenalised row, the alternatives are the most likely tokens in
 * order (most likely first), and greedy picks the first. */
static void check_logprobs_against_session(colibri_model *model, colibri_request *r, const int32_t *tokens,
                                           size_t token_count, size_t top_count, int greedy) {
  static double ref[MAX_VOCAB];
  colibri_session_options so;
  colibri_session *session = NULL;
  colibri_token_logprob chosen, top[COLIBRI_MAX_TOP_LOGPROBS];
  const float *logits = NULL;
  size_t vocab = 0, count = 0, i, k, t;
  CHECK_OK(colibri_session_options_init(&so, sizeof so));
  so.context_length = 64;
  so.threads = 1;
  CHECK_OK(colibri_session_create(model, &so, &session));
  if (!session) return;
  CHECK_OK(colibri_session_prefill(session, 0, kInputIds, INPUT_COUNT));
  for (i = 0; i < token_count; ++i) {
    double mass = 0.0;
    CHECK_OK(colibri_session_logits(session, 0, &logits, &vocab, NULL));
    if (!logits || vocab > MAX_VOCAB) break;
    log_softmax(logits, vocab, ref);
    CHECK_OK(colibri_request_logprobs(r, i, &chosen, top, COLIBRI_MAX_TOP_LOGPROBS, &count));
    CHECK(count == top_count);
    CHECK(chosen.token == tokens[i]);
    CHECK(chosen.logprob <= 0.0f && fabs(chosen.logprob - ref[chosen.token]) < LOGPROB_TOLERANCE);
    for (k = 0; k < count && k < COLIBRI_MAX_TOP_LOGPROBS; ++k) {
      CHECK(top[k].token >= 0 && (size_t)top[k].token < vocab);
      CHECK(fabs(top[k].logprob - ref[top[k].token]) < LOGPROB_TOLERANCE);
      CHECK(top[k].logprob <= 0.0f);
      if (k > 0) CHECK(top[k].logprob < top[k - 1].logprob ||
                       (top[k].logprob == top[k - 1].logprob && top[k].token > top[k - 1].token));
      mass += exp(top[k].logprob);
    }
    CHECK(mass <= 1.0 + 1e-5);
    if (count > 0) {
      /* No token outside the list is more likely than the last one in it. */
      for (t = 0; t < vocab; ++t) {
        int listed = 0;
        for (k = 0; k < count; ++k) listed |= top[k].token == (int32_t)t;
        if (!listed) CHECK(ref[t] <= top[count - 1].logprob + LOGPROB_TOLERANCE);
      }
    }
    if (greedy) CHECK(count > 0 && chosen.token == top[0].token && chosen.logprob == top[0].logprob);
    CHECK_OK(colibri_session_decode(session, 0, tokens[i]));
  }
  colibri_session_free(session);
}

static void test_logprobs(colibri_model *model) {
  colibri_engine *engine = make_engine(model, 3, 8);
  colibri_request_options ro;
  colibri_sampler_options greedy, sampled;
  colibri_request *g = NULL, *with = NULL, *without = NULL, *bad = NULL;
  colibri_token_logprob chosen, top[COLIBRI_MAX_TOP_LOGPROBS];
  int32_t g_tokens[MAX_OUT], with_tokens[MAX_OUT], without_tokens[MAX_OUT];
  size_t g_count = 0, with_count = 0, without_count = 0, count = 0;
  char text[4096];

  /* Options: the fields are range-checked and named; an older caller's struct is accepted. */
  CHECK_OK(colibri_request_options_init(&ro, sizeof ro));
  CHECK(ro.logprobs == 0 && ro.top_logprobs == 0);
  ro.top_logprobs = COLIBRI_MAX_TOP_LOGPROBS + 1;
  CHECK_STATUS(colibri_request_submit(engine, kInputIds, INPUT_COUNT, &ro, &bad), COLIBRI_ERROR_INVALID_ARGUMENT);
  CHECK(last_error_has(COLIBRI_ERROR_INVALID_ARGUMENT, "colibri_request_options.top_logprobs 21 is out of range (0..20)"));
  CHECK(bad == NULL);
  ro.top_logprobs = 0;
  ro.logprobs = 2;
  CHECK_STATUS(colibri_request_submit(engine, kInputIds, INPUT_COUNT, &ro, &bad), COLIBRI_ERROR_INVALID_ARGUMENT);
  CHECK(last_error_has(COLIBRI_ERROR_INVALID_ARGUMENT, "colibri_request_options.logprobs"));
  CHECK_OK(colibri_request_options_init(&ro, offsetof(colibri_request_options, logprobs)));
  ro.max_tokens = 2;
  CHECK_OK(colibri_request_submit(engine, kInputIds, INPUT_COUNT, &ro, &bad));
  CHECK_STATUS(drain(bad, text, sizeof text), COLIBRI_DONE);
  CHECK_STATUS(colibri_request_logprobs(bad, 0, &chosen, NULL, 0, &count), COLIBRI_ERROR_BAD_STATE);
  CHECK(last_error_has(COLIBRI_ERROR_BAD_STATE, "records no logprobs"));
  colibri_request_free(bad);

  /* Greedy with the top 20; seeded sampling with penalties, with and without logprobs. */
  CHECK_OK(colibri_sampler_options_init(&greedy, sizeof greedy));
  greedy.temperature = 0.0f;
  CHECK_OK(colibri_sampler_options_init(&sampled, sizeof sampled));
  sampled.temperature = 1.5f;
  sampled.top_k = 0;
  sampled.min_p = 0.0f;
  sampled.repetition_penalty = 1.3f;
  sampled.presence_penalty = 1.0f;
  sampled.seed = 77;
  CHECK_OK(colibri_request_options_init(&ro, sizeof ro));
  ro.ignore_eos = 1;
  ro.max_tokens = (uint32_t)GREEDY_COUNT;
  ro.sampler = &greedy;
  ro.top_logprobs = COLIBRI_MAX_TOP_LOGPROBS;
  CHECK_OK(colibri_request_submit(engine, kInputIds, INPUT_COUNT, &ro, &g));
  ro.max_tokens = 20;
  ro.sampler = &sampled;
  ro.top_logprobs = 0;
  ro.logprobs = 1;
  CHECK_OK(colibri_request_submit(engine, kInputIds, INPUT_COUNT, &ro, &with));
  ro.logprobs = 0;
  CHECK_OK(colibri_request_submit(engine, kInputIds, INPUT_COUNT, &ro, &without));
  CHECK_STATUS(drain(g, text, sizeof text), COLIBRI_DONE);
  CHECK_STATUS(drain(with, text, sizeof text), COLIBRI_DONE);
  CHECK_STATUS(drain(without, text, sizeof text), COLIBRI_DONE);
  CHECK_OK(colibri_request_tokens(g, g_tokens, MAX_OUT, &g_count));
  CHECK_OK(colibri_request_tokens(with, with_tokens, MAX_OUT, &with_count));
  CHECK_OK(colibri_request_tokens(without, without_tokens, MAX_OUT, &without_count));
  /* Recording logprobs changes no token. */
  CHECK(g_count == GREEDY_COUNT && memcmp(g_tokens, kGreedy, sizeof kGreedy) == 0);
  CHECK(with_count == 20 && with_count == without_count &&
        memcmp(with_tokens, without_tokens, with_count * sizeof with_tokens[0]) == 0);
  /* The values are the raw distribution's (penalties and temperature do not enter). */
  check_logprobs_against_session(model, g, g_tokens, g_count, COLIBRI_MAX_TOP_LOGPROBS, 1);
  check_logprobs_against_session(model, with, with_tokens, with_count, 0, 0);

  /* Buffer rules and the index range. */
  CHECK_OK(colibri_request_logprobs(g, 0, NULL, NULL, 0, &count)); /* size query */
  CHECK(count == COLIBRI_MAX_TOP_LOGPROBS);
  CHECK_STATUS(colibri_request_logprobs(g, 0, &chosen, top, 5, &count), COLIBRI_ERROR_BUFFER_TOO_SMALL);
  CHECK(count == COLIBRI_MAX_TOP_LOGPROBS);
  CHECK_OK(colibri_request_logprobs(with, 3, &chosen, NULL, 0, &count));
  CHECK(count == 0 && chosen.token == with_tokens[3]);
  CHECK_STATUS(colibri_request_logprobs(g, g_count, &chosen, top, COLIBRI_MAX_TOP_LOGPROBS, &count),
               COLIBRI_ERROR_INVALID_ARGUMENT);
  CHECK(last_error_has(COLIBRI_ERROR_INVALID_ARGUMENT, "token_index 16 is not generated yet"));
  CHECK_STATUS(colibri_request_logprobs(without, 0, &chosen, NULL, 0, &count), COLIBRI_ERROR_BAD_STATE);
  CHECK_STATUS(colibri_request_logprobs(NULL, 0, &chosen, NULL, 0, &count), COLIBRI_ERROR_INVALID_ARGUMENT);
  colibri_request_free(g);
  colibri_request_free(with);
  colibri_request_free(without);
  colibri_engine_free(engine);
}

/* colibri_request_submit_chat = colibri_chat_render + colibri_tokenize(PARSE_SPECIAL) + submit. */
static void test_submit_chat(colibri_model *model) {
  colibri_engine *engine = make_engine(model, 2, 8);
  const colibri_chat_message messages[2] = {{"system", "Be brief."}, {"user", "The test is"}};
  colibri_chat_message broken[1] = {{"user", NULL}};
  colibri_chat_options co;
  colibri_request_options ro;
  colibri_sampler_options greedy;
  colibri_request_result result;
  colibri_request *by_hand = NULL, *chat = NULL, *bad = (colibri_request *)1;
  char rendered[4096], text[4096];
  int32_t ids[256], a[MAX_OUT], b[MAX_OUT];
  size_t size = 0, id_count = 0, a_count = 0, b_count = 0;

  CHECK_OK(colibri_chat_render(model, messages, 2, NULL, rendered, sizeof rendered, &size));
  CHECK_OK(colibri_tokenize(model, rendered, size, COLIBRI_TOKENIZE_PARSE_SPECIAL, ids, 256, &id_count));
  CHECK_OK(colibri_sampler_options_init(&greedy, sizeof greedy));
  greedy.temperature = 0.0f;
  CHECK_OK(colibri_request_options_init(&ro, sizeof ro));
  ro.max_tokens = 6;
  ro.ignore_eos = 1;
  ro.sampler = &greedy;
  CHECK_OK(colibri_request_submit(engine, ids, id_count, &ro, &by_hand));
  CHECK_OK(colibri_request_submit_chat(engine, messages, 2, NULL, &ro, &chat));
  CHECK_STATUS(drain(by_hand, text, sizeof text), COLIBRI_DONE);
  CHECK_STATUS(drain(chat, text, sizeof text), COLIBRI_DONE);
  CHECK_OK(colibri_request_tokens(by_hand, a, MAX_OUT, &a_count));
  CHECK_OK(colibri_request_tokens(chat, b, MAX_OUT, &b_count));
  CHECK(a_count == 6 && a_count == b_count && memcmp(a, b, a_count * sizeof a[0]) == 0);
  result.struct_size = sizeof result;
  CHECK_OK(colibri_request_get_result(chat, &result));
  CHECK(result.prompt_token_count == id_count && result.finish_reason == COLIBRI_FINISH_LENGTH);
  colibri_request_free(by_hand);
  colibri_request_free(chat);

  /* Errors: the renderer's, and a template that renders nothing. */
  CHECK_STATUS(colibri_request_submit_chat(engine, broken, 1, NULL, &ro, &bad), COLIBRI_ERROR_INVALID_ARGUMENT);
  CHECK(bad == NULL && last_error_has(COLIBRI_ERROR_INVALID_ARGUMENT, "NULL role or content"));
  CHECK_OK(colibri_chat_options_init(&co, sizeof co));
  co.template_text = "{{ raise_exception('no chat here') }}";
  CHECK_STATUS(colibri_request_submit_chat(engine, messages, 2, &co, &ro, &bad), COLIBRI_ERROR_INVALID_ARGUMENT);
  CHECK(last_error_has(COLIBRI_ERROR_INVALID_ARGUMENT, "no chat here"));
  co.template_text = "";
  CHECK_STATUS(colibri_request_submit_chat(engine, messages, 2, &co, &ro, &bad), COLIBRI_ERROR_INVALID_ARGUMENT);
  CHECK(last_error_has(COLIBRI_ERROR_INVALID_ARGUMENT, "no tokens"));
  CHECK_STATUS(colibri_request_submit_chat(engine, messages, 2, NULL, &ro, NULL), COLIBRI_ERROR_INVALID_ARGUMENT);
  colibri_engine_free(engine);
}

int main(int argc, char **argv) {
  colibri_model *model = NULL;
  if (argc != 2) {
    fprintf(stderr, "usage: %s IMAGE\n", argv[0]);
    return 2;
  }
  CHECK_OK(colibri_model_open(argv[1], NULL, &model));
  if (!model) return 1;
  test_options(model);
  test_batched_equals_alone(model);
  test_lifecycle(model);
  test_logprobs(model);
  test_submit_chat(model);
  colibri_model_close(model);
  return check_summary("test_engine_capi");
}

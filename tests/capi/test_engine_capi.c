/* tests/capi/test_engine_capi.c — the serving engine through the C API (C99, libcolibri.so
 * only): options and their errors, greedy output equal to the oracle's tokens, seeded
 * requests run together equal to colibri_generate on a session one by one, the pull stream
 * (PENDING, DONE), cancellation, timeouts, the bounded queue (BUSY), the prefix cache on a
 * second turn, request results and engine stats, and handle lifetimes (requests outlive the
 * engine).
 *
 * Usage: test_engine_capi IMAGE   (IMAGE: tests/fixtures/oracle/mixtral_gqa converted) */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "colibri.h"

static int g_failures = 0;
static int g_checks = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    ++g_checks;                                                                \
    if (!(cond)) {                                                             \
      ++g_failures;                                                            \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                          \
  } while (0)

#define CHECK_STATUS(expr, expected)                                                                         \
  do {                                                                                                       \
    int32_t status_ = (expr);                                                                                \
    ++g_checks;                                                                                              \
    if (status_ != (expected)) {                                                                             \
      char message_[1024];                                                                                   \
      colibri_last_error(message_, sizeof message_, NULL);                                                   \
      ++g_failures;                                                                                          \
      fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d: %s\n", __FILE__, __LINE__, #expr, status_, \
              colibri_status_string(status_), (int)(expected), message_);                                   \
    }                                                                                                        \
  } while (0)
#define CHECK_OK(expr) CHECK_STATUS(expr, COLIBRI_OK)

static const int32_t kInputIds[] = {ORACLE_INPUT_IDS};
static const int32_t kGreedy[] = {ORACLE_GREEDY_TOKENS};
#define INPUT_COUNT (sizeof kInputIds / sizeof kInputIds[0])
#define GREEDY_COUNT (sizeof kGreedy / sizeof kGreedy[0])
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
  colibri_model_close(model);
  printf("test_engine_capi: %d checks, %d failures\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

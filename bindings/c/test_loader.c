/* bindings/c/test_loader.c — the C binding: the loader resolves every exported function and
 * checks the ABI; through its table, the oracle fixture's greedy tokens come out exactly;
 * streams can be cancelled; broken files and libraries give proper errors.
 *
 * Usage: test_c_loader LIBRARY IMAGE SYMBOLS_TXT TMPDIR
 * (the oracle ids come from compile definitions, see tests/capi/CMakeLists.txt) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "colibri_loader.h"

static int failures = 0;
#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      ++failures;                                                                \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
    }                                                                            \
  } while (0)

static const int32_t kInputIds[] = {ORACLE_INPUT_IDS};
static const int32_t kGreedy[] = {ORACLE_GREEDY_TOKENS};
#define INPUT_COUNT (sizeof kInputIds / sizeof kInputIds[0])
#define GREEDY_COUNT (sizeof kGreedy / sizeof kGreedy[0])

static colibri_api api;

#define NAME_OF(ret, fn, params) "colibri_" #fn,
static const char *const kTableNames[] = {COLIBRI_LOADER_FUNCTIONS(NAME_OF)};
#undef NAME_OF

static void check_ok(int32_t status, const char *what) {
  if (status != COLIBRI_OK) {
    char message[1024];
    api.last_error(message, sizeof message, NULL);
    fprintf(stderr, "%s: %s: %s\n", what, api.status_string(status), message);
    ++failures;
  }
}

/* Every symbol the library exports (capi/abi/symbols.txt) has a slot in the table. */
static void test_table_is_complete(const char *symbols_path) {
  FILE *f = fopen(symbols_path, "r");
  char line[256];
  size_t listed = 0, i;
  CHECK(f != NULL);
  if (!f) return;
  while (fgets(line, sizeof line, f)) {
    int found = 0;
    line[strcspn(line, "\r\n")] = '\0';
    if (line[0] == '#' || line[0] == '\0') continue;
    ++listed;
    for (i = 0; i < sizeof kTableNames / sizeof kTableNames[0]; ++i) found |= strcmp(kTableNames[i], line) == 0;
    if (!found) fprintf(stderr, "the loader table lacks %s\n", line);
    CHECK(found);
  }
  fclose(f);
  CHECK(listed == sizeof kTableNames / sizeof kTableNames[0]);
}

static void test_load_errors(void) {
  colibri_api other;
  char error[512];
  CHECK(colibri_api_load(&other, "/nonexistent/libcolibri.so.1", error, sizeof error) == -1);
  CHECK(strstr(error, "cannot load") != NULL && other.library == NULL);
  CHECK(colibri_api_load(&other, "libm.so.6", error, sizeof error) == -1);
  CHECK(strstr(error, "not libcolibri") != NULL);
}

static int32_t argmax(const float *row, size_t n) {
  size_t best = 0, i;
  for (i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return (int32_t)best;
}

static void test_oracle_greedy(colibri_model *model) {
  colibri_session *session = NULL;
  colibri_session_options so;
  const float *logits;
  size_t vocab = 0, i;
  int32_t next;
  api.session_options_init(&so, sizeof so);
  so.context_length = 64;
  check_ok(api.session_create(model, &so, &session), "session");
  if (!session) return;
  check_ok(api.session_prefill(session, 0, kInputIds, INPUT_COUNT), "prefill");
  check_ok(api.session_logits(session, 0, &logits, &vocab, NULL), "logits");
  next = argmax(logits, vocab);
  for (i = 0; i < GREEDY_COUNT; ++i) {
    CHECK(next == kGreedy[i]);
    check_ok(api.session_decode(session, 0, next), "decode");
    check_ok(api.session_logits(session, 0, &logits, &vocab, NULL), "logits");
    next = argmax(logits, vocab);
  }
  api.session_free(session);
}

static int32_t cancel_after_two(void *user, const char *piece, size_t size) {
  int *pieces = (int *)user;
  (void)piece;
  (void)size;
  return ++*pieces >= 2;
}

static void test_streams(colibri_model *model) {
  colibri_session *session = NULL;
  colibri_sampler_options sampler;
  colibri_generate_options options;
  colibri_generate_result result;
  colibri_stream *stream = NULL;
  const char *piece;
  size_t size, count = 0, i;
  int32_t tokens[64];
  int pieces = 0;

  check_ok(api.session_create(model, NULL, &session), "session");
  if (!session) return;
  api.sampler_options_init(&sampler, sizeof sampler);
  sampler.temperature = 0.0f;
  api.generate_options_init(&options, sizeof options);
  options.max_tokens = GREEDY_COUNT;
  options.sampler = &sampler;

  /* Pull stream to the end: the oracle's greedy tokens. */
  check_ok(api.stream_open(session, kInputIds, INPUT_COUNT, &options, &stream), "stream_open");
  while (api.stream_next(stream, &piece, &size) == COLIBRI_OK) {
  }
  check_ok(api.stream_tokens(stream, tokens, 64, &count), "stream_tokens");
  CHECK(count == GREEDY_COUNT);
  for (i = 0; i < count && i < GREEDY_COUNT; ++i) CHECK(tokens[i] == kGreedy[i]);
  api.stream_close(stream);

  /* Cancel a pull stream: stop after two pieces and close. */
  check_ok(api.stream_open(session, kInputIds, INPUT_COUNT, &options, &stream), "stream_open");
  check_ok(api.stream_next(stream, &piece, &size), "next");
  check_ok(api.stream_next(stream, &piece, &size), "next");
  check_ok(api.stream_tokens(stream, tokens, 64, &count), "stream_tokens");
  CHECK(count >= 2 && count < GREEDY_COUNT);
  result.struct_size = sizeof result;
  check_ok(api.stream_get_result(stream, &result), "result");
  CHECK(result.finish_reason == COLIBRI_FINISH_NONE);
  api.stream_close(stream);

  /* Cancel from the callback. */
  result.struct_size = sizeof result;
  check_ok(api.generate(session, kInputIds, INPUT_COUNT, &options, cancel_after_two, &pieces, &result), "generate");
  CHECK(result.finish_reason == COLIBRI_FINISH_CANCELLED && pieces == 2);
  CHECK(result.generated_token_count < GREEDY_COUNT);
  api.session_free(session);
}

static void test_broken_file(const char *tmpdir) {
  char path[1024], message[1024];
  FILE *f;
  colibri_model *model = NULL;
  snprintf(path, sizeof path, "%s/broken.colibri", tmpdir);
  f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  {
    /* A GGUF header (magic, version 3, counts) given by mistake. */
    static const unsigned char gguf[64] = {'G', 'G', 'U', 'F', 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2};
    CHECK(fwrite(gguf, 1, sizeof gguf, f) == sizeof gguf);
  }
  fclose(f);
  CHECK(api.model_open(path, NULL, &model) == COLIBRI_ERROR_NOT_AN_IMAGE);
  CHECK(model == NULL);
  CHECK(api.last_error(message, sizeof message, NULL) == COLIBRI_ERROR_NOT_AN_IMAGE);
  CHECK(strstr(message, "GGUF") != NULL);
  fprintf(stderr, "broken file message: %s\n", message);
}

int main(int argc, char **argv) {
  char error[512];
  colibri_model *model = NULL;
  colibri_api by_soname;
  if (argc != 5) {
    fprintf(stderr, "usage: %s LIBRARY IMAGE SYMBOLS_TXT TMPDIR\n", argv[0]);
    return 2;
  }
  test_load_errors();
  if (colibri_api_load(&api, argv[1], error, sizeof error) != 0) {
    fprintf(stderr, "%s\n", error);
    return 1;
  }
  CHECK(api.loaded_abi_version == COLIBRI_ABI_VERSION);
  /* The SONAME works too (the test runs with the build directory on LD_LIBRARY_PATH). */
  CHECK(colibri_api_load(&by_soname, NULL, error, sizeof error) == 0);
  colibri_api_unload(&by_soname);
  test_table_is_complete(argv[3]);
  check_ok(api.model_open(argv[2], NULL, &model), "open");
  if (model) {
    test_oracle_greedy(model);
    test_streams(model);
    api.model_close(model);
  }
  test_broken_file(argv[4]);
  colibri_api_unload(&api);
  printf("test_c_loader: %d failures\n", failures);
  return failures == 0 ? 0 : 1;
}

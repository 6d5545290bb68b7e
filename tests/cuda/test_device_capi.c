/* tests/cuda/test_device_capi.c — the device choice of colibri_session_options through
 * libcolibri.so only, from C99 (docs/api.md, "Devices").
 *
 * Usage: test_device_capi options IMAGE     the fields' defaults and range checks, an older
 *                                           struct_size, and the CPU path unchanged (explicit
 *                                           CPU = default, bitwise); runs on any machine
 *        test_device_capi no-device IMAGE   a CUDA request on a machine without the module,
 *                                           the driver or a device gives UNSUPPORTED with
 *                                           "no CUDA device: ..." and leaves the CPU path as
 *                                           it was; exits 77 (skipped) when a device is there
 * IMAGE: the oracle fixture mixtral_gqa converted (tests/capi). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "colibri.h"

#define SKIP_RETURN_CODE 77

static int g_failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      ++g_failures;                                                            \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                          \
  } while (0)

static const int32_t kInputIds[] = {ORACLE_INPUT_IDS};
#define INPUT_COUNT (sizeof kInputIds / sizeof kInputIds[0])

static void last_error(char *buffer, size_t size) {
  buffer[0] = '\0';
  colibri_last_error(buffer, size, NULL);
}

/* Creates a session with `options` and runs the oracle prompt; copies the last row's logits
 * into out (vocab floats). Returns the creation status. */
static int32_t run_prompt(colibri_model *model, const colibri_session_options *options, float *out, size_t vocab) {
  colibri_session *session = NULL;
  int32_t status = colibri_session_create(model, options, &session);
  if (status != COLIBRI_OK) return status;
  CHECK(colibri_session_prefill(session, 0, kInputIds, INPUT_COUNT) == COLIBRI_OK);
  CHECK(colibri_session_copy_logits(session, 0, out, vocab) == COLIBRI_OK);
  colibri_session_free(session);
  return COLIBRI_OK;
}

static int options_checks(colibri_model *model, size_t vocab) {
  colibri_session_options o;
  char message[2048];
  colibri_session *session = NULL;
  float *a = calloc(vocab, sizeof *a), *b = calloc(vocab, sizeof *b);
  CHECK(a && b);
  if (!a || !b) return 1;

  /* Defaults: the CPU, index 0. */
  CHECK(colibri_session_options_init(&o, sizeof o) == COLIBRI_OK);
  CHECK(o.device_kind == COLIBRI_DEVICE_CPU && o.device_index == 0);

  /* Range checks name the field. */
  o.device_kind = 2;
  CHECK(colibri_session_create(model, &o, &session) == COLIBRI_ERROR_INVALID_ARGUMENT && session == NULL);
  last_error(message, sizeof message);
  CHECK(strstr(message, "colibri_session_options.device_kind") != NULL);
  colibri_session_options_init(&o, sizeof o);
  o.device_index = 3; /* an index without CUDA */
  CHECK(colibri_session_create(model, &o, &session) == COLIBRI_ERROR_INVALID_ARGUMENT);
  last_error(message, sizeof message);
  CHECK(strstr(message, "colibri_session_options.device_index") != NULL);
  colibri_session_options_init(&o, sizeof o);
  o.device_kind = COLIBRI_DEVICE_CUDA;
  o.device_index = 1024;
  CHECK(colibri_session_create(model, &o, &session) == COLIBRI_ERROR_INVALID_ARGUMENT);
  last_error(message, sizeof message);
  CHECK(strstr(message, "colibri_session_options.device_index 1024 is out of range") != NULL);

  /* A caller built before the device fields (struct_size ends at reserved0) gets the CPU. */
  colibri_session_options_init(&o, sizeof o);
  o.struct_size = (uint32_t)offsetof(colibri_session_options, device_kind);
  o.device_kind = COLIBRI_DEVICE_CUDA; /* beyond its struct_size: not read */
  CHECK(run_prompt(model, &o, a, vocab) == COLIBRI_OK);

  /* The CPU path is unchanged: explicit CPU = defaults (NULL options), bitwise. */
  CHECK(run_prompt(model, NULL, b, vocab) == COLIBRI_OK);
  CHECK(memcmp(a, b, vocab * sizeof *a) == 0);
  colibri_session_options_init(&o, sizeof o);
  o.device_kind = COLIBRI_DEVICE_CPU;
  CHECK(run_prompt(model, &o, a, vocab) == COLIBRI_OK);
  CHECK(memcmp(a, b, vocab * sizeof *a) == 0);
  {
    colibri_session_info info;
    info.struct_size = sizeof info;
    CHECK(colibri_session_create(model, &o, &session) == COLIBRI_OK);
    CHECK(colibri_session_get_info(session, &info) == COLIBRI_OK);
    CHECK(strncmp(info.backend, "cpu", 3) == 0);
    colibri_session_free(session);
  }
  free(a);
  free(b);
  return 0;
}

static int no_device_checks(colibri_model *model, size_t vocab) {
  colibri_session_options o;
  colibri_session *session = NULL;
  char message[2048];
  int32_t status;
  float *a = calloc(vocab, sizeof *a), *b = calloc(vocab, sizeof *b);
  CHECK(a && b);
  if (!a || !b) return 1;
  CHECK(run_prompt(model, NULL, a, vocab) == COLIBRI_OK);

  colibri_session_options_init(&o, sizeof o);
  o.device_kind = COLIBRI_DEVICE_CUDA;
  o.device_index = 0;
  status = colibri_session_create(model, &o, &session);
  if (status == COLIBRI_OK) {
    colibri_session_free(session);
    free(a);
    free(b);
    printf("a CUDA device is present: skipped (this test is for machines without one)\n");
    return SKIP_RETURN_CODE;
  }
  last_error(message, sizeof message);
  printf("cuda:0 on this machine: %s: %s\n", colibri_status_string(status), message);
  CHECK(status == COLIBRI_ERROR_UNSUPPORTED);
  CHECK(session == NULL);
  CHECK(strncmp(message, "no CUDA device: ", 16) == 0);
  CHECK(strlen(message) > 40); /* names what is missing */

  /* A far index says how many devices there are, or what is missing, the same way. */
  o.device_index = 7;
  CHECK(colibri_session_create(model, &o, &session) == COLIBRI_ERROR_UNSUPPORTED);
  last_error(message, sizeof message);
  CHECK(strncmp(message, "no CUDA device: ", 16) == 0);

  /* The failed requests changed nothing for the CPU. */
  CHECK(run_prompt(model, NULL, b, vocab) == COLIBRI_OK);
  CHECK(memcmp(a, b, vocab * sizeof *a) == 0);
  free(a);
  free(b);
  return 0;
}

int main(int argc, char **argv) {
  colibri_model *model = NULL;
  colibri_model_info info;
  int rc;
  if (argc != 3 || (strcmp(argv[1], "options") != 0 && strcmp(argv[1], "no-device") != 0)) {
    fprintf(stderr, "usage: test_device_capi options|no-device IMAGE\n");
    return 2;
  }
  if (colibri_model_open(argv[2], NULL, &model) != COLIBRI_OK) {
    char message[1024];
    last_error(message, sizeof message);
    fprintf(stderr, "cannot open %s: %s\n", argv[2], message);
    return 1;
  }
  info.struct_size = sizeof info;
  CHECK(colibri_model_get_info(model, &info) == COLIBRI_OK);
  rc = strcmp(argv[1], "options") == 0 ? options_checks(model, (size_t)info.vocab_size)
                                        : no_device_checks(model, (size_t)info.vocab_size);
  colibri_model_close(model);
  if (rc == SKIP_RETURN_CODE) return rc;
  if (g_failures) {
    fprintf(stderr, "%d check(s) failed\n", g_failures);
    return 1;
  }
  return rc;
}

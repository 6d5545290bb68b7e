/* tests/capi/capi_check.h — the check macros and oracle constants the C99 API tests share
 * (test_capi.c, test_engine_capi.c). Each test program includes it once: it defines the
 * counters (static, one per program) and the oracle's ids from the compile definitions of
 * tests/capi/CMakeLists.txt. A failed check prints where it failed and, for a status, the
 * last error; the program counts and goes on. */
#ifndef COLIBRI_TESTS_CAPI_CHECK_H
#define COLIBRI_TESTS_CAPI_CHECK_H

#include <stdio.h>
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

/* Checks a status, printing the last error when it is not the expected one. */
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

/* 1 when the thread's last error is `status` with a message containing `text`; else 0, and
 * what was found is printed. */
static int last_error_has(int32_t status, const char *text) {
  char message[1024];
  int32_t got = colibri_last_error(message, sizeof message, NULL);
  if (got != status || strstr(message, text) == NULL) {
    fprintf(stderr, "  last error %d '%s', expected %d containing '%s'\n", got, message, status, text);
    return 0;
  }
  return 1;
}

/* Prints the summary line and gives the exit status. */
static int check_summary(const char *program) {
  printf("%s: %d checks, %d failures\n", program, g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

static const int32_t kInputIds[] = {ORACLE_INPUT_IDS};
static const int32_t kGreedy[] = {ORACLE_GREEDY_TOKENS};
#define INPUT_COUNT (sizeof kInputIds / sizeof kInputIds[0])
#define GREEDY_COUNT (sizeof kGreedy / sizeof kGreedy[0])

#endif

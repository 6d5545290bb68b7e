/* tests/capi/test_changed_image.c — the image file changed under a running C API caller
 * (issue 18, item 4): truncated, or rewritten in place as `cp other.colibri model.colibri`
 * does (O_TRUNC, then write), between decode calls. The next prefill / decode / MoE-layer call
 * must return COLIBRI_ERROR_IO naming the change ("truncated or replaced while in use"), not
 * die of SIGBUS: the library compares the open file with what it opened before it touches the
 * mapping. Replacing the file by a rename (the safe way) and a loaded copy are unaffected.
 *
 * Usage: test_changed_image IMAGE WORKDIR   (IMAGE: the mixtral_gqa fixture, converted) */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "colibri.h"

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

static unsigned char *g_bytes;
static size_t g_size;

static void last_error(char *buffer, size_t size) { colibri_last_error(buffer, size, NULL); }

static int write_all(const char *path, const unsigned char *bytes, size_t size, int flags) {
  int fd = open(path, O_WRONLY | flags, 0644);
  size_t done = 0;
  if (fd < 0) return -1;
  while (done < size) {
    ssize_t n = write(fd, bytes + done, size - done);
    if (n <= 0) {
      close(fd);
      return -1;
    }
    done += (size_t)n;
  }
  return close(fd);
}

/* Long enough for the file system's timestamp granularity: a rewrite must change the mtime. */
static void pause_a_little(void) {
  struct timespec t = {0, 50 * 1000 * 1000};
  nanosleep(&t, NULL);
}

typedef enum { TRUNCATE, REWRITE_IN_PLACE, RENAME_OVER } change_kind;

/* Opens `path`, prefills and decodes one token, changes the file, decodes again.
 * Returns the status of the decode after the change; *message gets the last error. */
static int32_t decode_after_change(const char *path, const char *workdir, change_kind change, int populate,
                                   int load_into_memory, char *message, size_t message_size, int32_t *moe_status) {
  colibri_model_options mo;
  colibri_model *model = NULL;
  colibri_session *session = NULL;
  int32_t status;
  char other[4096];
  message[0] = '\0';
  *moe_status = COLIBRI_OK;
  CHECK(write_all(path, g_bytes, g_size, O_CREAT | O_TRUNC) == 0);
  colibri_model_options_init(&mo, sizeof mo);
  mo.populate = (uint32_t)populate;
  mo.load_into_memory = (uint32_t)load_into_memory;
  if (colibri_model_open(path, &mo, &model) != COLIBRI_OK) {
    last_error(message, message_size);
    fprintf(stderr, "open failed: %s\n", message);
    ++g_failures;
    return COLIBRI_OK;
  }
  CHECK(colibri_session_create(model, NULL, &session) == COLIBRI_OK);
  CHECK(colibri_session_prefill(session, 0, kInputIds, INPUT_COUNT) == COLIBRI_OK);
  CHECK(colibri_session_decode(session, 0, kInputIds[0]) == COLIBRI_OK);
  pause_a_little();
  switch (change) {
    case TRUNCATE: CHECK(truncate(path, (off_t)(g_size / 2)) == 0); break;
    case REWRITE_IN_PLACE: CHECK(write_all(path, g_bytes, g_size, O_TRUNC) == 0); break; /* what cp does */
    case RENAME_OVER:
      snprintf(other, sizeof other, "%s/replacement.colibri", workdir);
      CHECK(write_all(other, g_bytes, g_size, O_CREAT | O_TRUNC) == 0);
      CHECK(rename(other, path) == 0);
      break;
  }
  status = colibri_session_decode(session, 0, kInputIds[1]);
  if (status != COLIBRI_OK) last_error(message, message_size);
  {
    colibri_model_info info;
    float *hidden, *out;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    CHECK(colibri_model_get_info(model, &info) == COLIBRI_OK);
    hidden = calloc((size_t)info.hidden_size, sizeof(float));
    out = calloc((size_t)info.hidden_size, sizeof(float));
    *moe_status = colibri_session_moe_layer(session, 0, hidden, 1, NULL, NULL, out);
    free(hidden);
    free(out);
  }
  colibri_session_free(session);
  colibri_model_close(model);
  return status;
}

int main(int argc, char **argv) {
  char path[4096], message[2048], expected_sizes[128];
  FILE *f;
  int populate;
  int32_t status, moe_status;
  if (argc != 3) {
    fprintf(stderr, "usage: test_changed_image IMAGE WORKDIR\n");
    return 2;
  }
  f = fopen(argv[1], "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", argv[1]);
    return 1;
  }
  fseek(f, 0, SEEK_END);
  g_size = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  g_bytes = malloc(g_size);
  if (!g_bytes || fread(g_bytes, 1, g_size, f) != g_size) return 1;
  fclose(f);
  snprintf(path, sizeof path, "%s/changed.colibri", argv[2]);

  /* Truncated (truncate, or the first step of cp): an I/O error naming both sizes, for the
   * default mapping and --populate (whose pages were all resident). */
  snprintf(expected_sizes, sizeof expected_sizes, "size %zu \xE2\x86\x92 %zu", g_size, g_size / 2);
  for (populate = 0; populate <= 1; ++populate) {
    status = decode_after_change(path, argv[2], TRUNCATE, populate, 0, message, sizeof message, &moe_status);
    CHECK(status == COLIBRI_ERROR_IO);
    CHECK(moe_status == COLIBRI_ERROR_IO);
    CHECK(strstr(message, "the image was truncated or replaced while in use") != NULL);
    CHECK(strstr(message, expected_sizes) != NULL);
    CHECK(strstr(message, "reopen it") != NULL);
    CHECK(strstr(message, "changed.colibri") != NULL);
    if (g_failures) fprintf(stderr, "populate=%d: status %d, message: %s\n", populate, (int)status, message);
  }

  /* Rewritten in place with the same size (cp over the file in use): the modification is
   * seen (mtime), an I/O error as well. */
  status = decode_after_change(path, argv[2], REWRITE_IN_PLACE, 0, 0, message, sizeof message, &moe_status);
  CHECK(status == COLIBRI_ERROR_IO);
  CHECK(strstr(message, "truncated or replaced while in use") != NULL);
  CHECK(strstr(message, "modified") != NULL);

  /* Replaced by a rename: the open file (the old inode) is unchanged, decoding goes on. */
  status = decode_after_change(path, argv[2], RENAME_OVER, 0, 0, message, sizeof message, &moe_status);
  CHECK(status == COLIBRI_OK);
  CHECK(moe_status == COLIBRI_OK);

  /* A loaded copy does not read the file again: truncating it changes nothing. */
  status = decode_after_change(path, argv[2], TRUNCATE, 0, 1, message, sizeof message, &moe_status);
  CHECK(status == COLIBRI_OK);
  CHECK(moe_status == COLIBRI_OK);

  unlink(path);
  free(g_bytes);
  if (g_failures) {
    fprintf(stderr, "%d check(s) failed\n", g_failures);
    return 1;
  }
  printf("changed image: all checks passed\n");
  return 0;
}

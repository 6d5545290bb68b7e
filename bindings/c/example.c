/* bindings/c/example.c — colibri-c-example: load libcolibri with the loader, open an image,
 * generate greedily from a prompt and print the text as it comes.
 *
 *   colibri-c-example [--library PATH] IMAGE [PROMPT] [MAX_TOKENS]
 *
 * --library defaults to the SONAME libcolibri.so.1 (found by the dynamic linker). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "colibri_loader.h"

static colibri_api api;

static int fail(const char *what) {
  char message[1024];
  int32_t status = api.last_error(message, sizeof message, NULL);
  fprintf(stderr, "colibri-c-example: %s: %s (%s)\n", what, message, api.status_string(status));
  return 1;
}

static int32_t print_piece(void *user, const char *piece, size_t size) {
  (void)user;
  fwrite(piece, 1, size, stdout);
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  const char *library = NULL, *image, *prompt = "The test is";
  unsigned long max_tokens = 32;
  char error[1024];
  int arg = 1;
  colibri_model *model = NULL;
  colibri_session *session = NULL;
  colibri_sampler_options sampler;
  colibri_generate_options options;
  colibri_generate_result result;
  int32_t *tokens;
  size_t count = 0;

  if (arg + 1 < argc && strcmp(argv[arg], "--library") == 0) {
    library = argv[arg + 1];
    arg += 2;
  }
  if (arg >= argc) {
    fprintf(stderr, "usage: %s [--library PATH] IMAGE [PROMPT] [MAX_TOKENS]\n", argv[0]);
    return 2;
  }
  image = argv[arg++];
  if (arg < argc) prompt = argv[arg++];
  if (arg < argc) max_tokens = strtoul(argv[arg++], NULL, 10);

  if (colibri_api_load(&api, library, error, sizeof error) != 0) {
    fprintf(stderr, "colibri-c-example: %s\n", error);
    return 1;
  }
  fprintf(stderr, "libcolibri %s (ABI %u)\n", api.version_string(), api.loaded_abi_version);
  if (api.model_open(image, NULL, &model) != COLIBRI_OK) return fail("open");
  if (api.session_create(model, NULL, &session) != COLIBRI_OK) return fail("session");
  /* Size query, then the ids. */
  if (api.tokenize(model, prompt, strlen(prompt), COLIBRI_TOKENIZE_ADD_SPECIAL, NULL, 0, &count) != COLIBRI_OK)
    return fail("tokenize");
  tokens = (int32_t *)malloc(count * sizeof *tokens);
  if (!tokens || api.tokenize(model, prompt, strlen(prompt), COLIBRI_TOKENIZE_ADD_SPECIAL, tokens, count, &count) != COLIBRI_OK)
    return fail("tokenize");

  api.sampler_options_init(&sampler, sizeof sampler);
  sampler.temperature = 0.0f; /* greedy */
  api.generate_options_init(&options, sizeof options);
  options.max_tokens = (uint32_t)max_tokens;
  options.sampler = &sampler;
  result.struct_size = sizeof result;
  fputs(prompt, stdout);
  if (api.generate(session, tokens, count, &options, print_piece, NULL, &result) != COLIBRI_OK) return fail("generate");
  printf("\n");
  fprintf(stderr, "%llu tokens, %.1f tokens/s\n", (unsigned long long)result.generated_token_count,
          result.decode_ns ? (double)result.generated_token_count * 1e9 / (double)result.decode_ns : 0.0);
  free(tokens);
  api.session_free(session);
  api.model_close(model);
  colibri_api_unload(&api);
  return 0;
}

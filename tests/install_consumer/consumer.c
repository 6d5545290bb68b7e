/* tests/install_consumer/consumer.c — a minimal program built against an installed libcolibri
 * (via pkg-config and via find_package(colibri)): checks the ABI version, opens an image,
 * generates four greedy tokens and prints the text. Usage: consumer IMAGE */
#include <stdio.h>
#include <string.h>

#include <colibri.h>

static int32_t print_piece(void *user, const char *piece, size_t size) {
  (void)user;
  fwrite(piece, 1, size, stdout);
  return 0;
}

int main(int argc, char **argv) {
  colibri_model *model = NULL;
  colibri_session *session = NULL;
  colibri_sampler_options sampler;
  colibri_generate_options options;
  int32_t prompt[64];
  size_t count = 0;
  char message[512];
  if (argc != 2) return 2;
  if (colibri_abi_version() != COLIBRI_ABI_VERSION) {
    fprintf(stderr, "ABI mismatch: library %u, header %d\n", colibri_abi_version(), COLIBRI_ABI_VERSION);
    return 1;
  }
  printf("libcolibri %s (ABI %u)\n", colibri_version_string(), colibri_abi_version());
  if (colibri_model_open(argv[1], NULL, &model) != COLIBRI_OK ||
      colibri_session_create(model, NULL, &session) != COLIBRI_OK ||
      colibri_tokenize(model, "The test", 8, COLIBRI_TOKENIZE_ADD_SPECIAL, prompt, 64, &count) != COLIBRI_OK) {
    colibri_last_error(message, sizeof message, NULL);
    fprintf(stderr, "error: %s\n", message);
    return 1;
  }
  colibri_sampler_options_init(&sampler, sizeof sampler);
  sampler.temperature = 0.0f;
  colibri_generate_options_init(&options, sizeof options);
  options.max_tokens = 4;
  options.sampler = &sampler;
  if (colibri_generate(session, prompt, count, &options, print_piece, NULL, NULL) != COLIBRI_OK) {
    colibri_last_error(message, sizeof message, NULL);
    fprintf(stderr, "error: %s\n", message);
    return 1;
  }
  printf("\nok\n");
  colibri_session_free(session);
  colibri_model_close(model);
  return 0;
}

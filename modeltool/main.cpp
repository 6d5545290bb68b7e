// modeltool/main.cpp — `colibri-model`: the toolkit for model images.
// Subcommands: inspect | verify | repack | convert. Each is a file of its own.
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

#include "colibri_version.h"
#include "modeltool/commands.h"

namespace {

void print_usage(FILE *out) {
  std::fprintf(out,
               "colibri-model %s — inspect, verify, repack and convert Colibri model images\n"
               "\n"
               "usage: colibri-model <command> [options]\n"
               "\n"
               "commands:\n"
               "  inspect FILE [--json]                 header, metadata summary, tensor table, totals\n"
               "  verify FILE [--deep]                  structure + every tensor checksum (+ NaN/Inf scan)\n"
               "  repack IN OUT [--dtype D] [--align N] [--compress | --decompress] [--force]\n"
               "                                        change dtypes/alignment, or write/read .colibri.zst\n"
               "  convert HF_DIR -o OUT [--dtype D] [--force]\n"
               "                                        Hugging Face safetensors checkpoint -> image\n"
               "\n"
               "Run 'colibri-model <command> --help' for a command's options.\n"
               "\n"
               "exit codes: 0 ok, 1 corrupt image, 2 usage error, 3 not an image, 4 I/O error,\n"
               "            5 unsupported input, 70 internal error\n",
               COLIBRI_PROJECT_VERSION_STRING);
}

}  // namespace

int main(int argc, char **argv) {
  using namespace colibri::modeltool;
  if (argc < 2) {
    print_usage(stderr);
    return kExitUsage;
  }
  const char *command = argv[1];
  if (!std::strcmp(command, "--help") || !std::strcmp(command, "-h") || !std::strcmp(command, "help")) {
    print_usage(stdout);
    return kExitOk;
  }
  if (!std::strcmp(command, "--version")) {
    std::printf("colibri-model %s\n", COLIBRI_PROJECT_VERSION_STRING);
    return kExitOk;
  }
  try {
    if (!std::strcmp(command, "inspect")) return run_inspect(argc - 1, argv + 1);
    if (!std::strcmp(command, "verify")) return run_verify(argc - 1, argv + 1);
    if (!std::strcmp(command, "repack")) return run_repack(argc - 1, argv + 1);
    if (!std::strcmp(command, "convert")) return run_convert(argc - 1, argv + 1);
  } catch (const std::bad_alloc &) {
    std::fprintf(stderr, "colibri-model: out of memory\n");
    return kExitInternal;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "colibri-model: internal error: %s\n", e.what());
    return kExitInternal;
  }
  std::fprintf(stderr, "colibri-model: unknown command '%s' (expected inspect, verify, repack or convert)\n\n", command);
  print_usage(stderr);
  return kExitUsage;
}

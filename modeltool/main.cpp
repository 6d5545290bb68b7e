// modeltool/main.cpp — `colibri-model`: the toolkit for model images.
// Subcommands: inspect | verify | repack | convert. Each is a file of its own.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <system_error>

#include "colibri_version.h"
#include "modeltool/cli_support.h"
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
               "  verify FILE [--deep] [--json]         structure + every tensor checksum (+ NaN/Inf scan)\n"
               "  repack IN OUT [--dtype D] [--alignment N] [--compress | --decompress] [--force]\n"
               "                                        change dtypes/alignment, or write/read .colibri.zst\n"
               "  convert HF_DIR -o OUT [--dtype D] [--force]\n"
               "                                        Hugging Face safetensors checkpoint -> image\n"
               "\n"
               "Run 'colibri-model <command> --help' for a command's options.\n"
               "\n"
               "Progress goes to stderr: redrawn on a terminal, a plain line every 5 s otherwise\n"
               "(--progress-every S, --no-progress).\n"
               "\n"
               "exit codes (the same table as colibri's, docs/cli.md): 0 ok, 1 corrupt image,\n"
               "            2 usage error, 3 not an image, 4 I/O error (also out of memory or threads),\n"
               "            5 unsupported input, 70 internal error, 130 interrupted (nothing written),\n"
               "            135 the image changed while in use (SIGBUS)\n",
               COLIBRI_PROJECT_VERSION_STRING);
}

}  // namespace

// Every byte a command printed must have reached stdout: a full disk or a closed file would
// otherwise lose the output under exit status 0 (`colibri-model inspect --json X > /dev/full`).
static int finish_stdout(const char *command, int code) {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int saved = errno;
  if (flushed && !std::ferror(stdout)) return code;
  std::fprintf(stderr, "colibri-model %s: writing to standard output failed%s%s\n", command, saved ? ": " : "",
               saved ? std::strerror(saved) : "");
  return code == colibri::modeltool::kExitOk ? colibri::modeltool::kExitIo : code;
}

int main(int argc, char **argv) {
  using namespace colibri::modeltool;
  install_process_signal_dispositions();
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
    if (!std::strcmp(command, "inspect")) return finish_stdout(command, run_inspect(argc - 1, argv + 1));
    if (!std::strcmp(command, "verify")) return finish_stdout(command, run_verify(argc - 1, argv + 1));
    if (!std::strcmp(command, "repack")) return finish_stdout(command, run_repack(argc - 1, argv + 1));
    if (!std::strcmp(command, "convert")) return finish_stdout(command, run_convert(argc - 1, argv + 1));
  } catch (const std::bad_alloc &) {
    std::fprintf(stderr, "colibri-model: out of memory\n");
    return kExitIo;
  } catch (const std::system_error &e) {
    // A thread the OS refused to start (the commands turn the ones they start into errors;
    // this is the net for any other): resource exhaustion, not a bug.
    if (e.code() != std::errc::resource_unavailable_try_again) {
      std::fprintf(stderr, "colibri-model: internal error: %s\n", e.what());
      return kExitInternal;
    }
    std::fprintf(stderr, "colibri-model: resource exhaustion: %s: a limit on threads is reached (ulimit -u, "
                         "kernel.threads-max, a container's pids.max)\n", e.what());
    return kExitIo;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "colibri-model: internal error: %s\n", e.what());
    return kExitInternal;
  }
  std::fprintf(stderr, "colibri-model: unknown command '%s' (expected inspect, verify, repack or convert)\n\n", command);
  print_usage(stderr);
  return kExitUsage;
}

// cli/main.cpp — `colibri`: the command-line front end of libcolibri (docs/architecture.md §1).
// Dispatches to the subcommands, turns every Failure and unexpected exception into a
// one-line message and an exit code (the table of docs/cli.md "Exit status"). Configuration
// is by flags only: no environment variable changes what the program does.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "commands.h"
#include "common.h"

namespace {

struct Subcommand {
  const char *name;
  const char *summary;
  int (*function)(int argc, char **argv);
};

constexpr Subcommand kSubcommands[] = {
    {"run", "generate text from a prompt, or chat (--chat); streams as it goes", colibri_cli::run_command},
    {"bench", "prefill and decode speed, with the memory-bandwidth roofline (llama-bench style)", colibri_cli::bench_command},
    {"serve", "OpenAI-compatible HTTP server: continuous batching, prefix cache, SSE streaming, /metrics",
     colibri_cli::serve_command},
    {"perplexity", "perplexity of a text file (the protocol of models/colibri-tiny-moe/reference.json)",
     colibri_cli::perplexity_command},
    {"logits", "logits of a token sequence as a float32 .npy file", colibri_cli::logits_command},
    {"tokenize", "text to token ids (comma-separated)", colibri_cli::tokenize_command},
    {"detokenize", "token ids to text", colibri_cli::detokenize_command},
};

void print_help(std::FILE *out) {
  std::fprintf(out,
               "colibri %s (libcolibri %s, ABI %u): run Mixture-of-Experts language models from .colibri images\n\n"
               "Usage:\n  colibri COMMAND [OPTION...]\n  colibri COMMAND --help\n\nCommands:\n",
               COLIBRI_VERSION_STRING, colibri_version_string(), colibri_abi_version());
  for (const Subcommand &c : kSubcommands) std::fprintf(out, "  %-11s %s\n", c.name, c.summary);
  std::fprintf(out,
               "\nWithout -m, commands use the bundled model colibri-tiny-moe (built with the project).\n"
               "Images are made with `colibri-model convert HF_DIR -o X.colibri`.\n\n"
               "Options:\n  -h, --help     show this help\n  --version      print the versions of colibri and libcolibri\n\n"
               "Exit status (the same table as colibri-model's): 0 ok, 1 damaged image or the command failed,\n"
               "2 usage error, 3 not an image, 4 I/O error (also out of memory or threads), 5 unsupported input,\n"
               "70 internal error, 130 interrupted by Ctrl-C, 135 the image changed while in use (SIGBUS).\n"
               "Guide: docs/cli.md\n");
}

// Every byte a command printed must have reached stdout: a full disk or a closed file would
// otherwise lose the output under exit status 0 (`colibri tokenize ... > /dev/full`).
int finish_stdout(const char *command, int code) {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int saved = errno;
  if (flushed && !std::ferror(stdout)) return code;
  std::fprintf(stderr, "colibri %s: writing to standard output failed%s%s\n", command, saved ? ": " : "",
               saved ? std::strerror(saved) : "");
  return code == colibri_cli::kExitOk ? colibri_cli::kExitIo : code;
}

}  // namespace

// SIGBUS: a read of the mapped image faulted because the file shrank under the mapping
// (truncate, or cp over the file in use) during a call; libcolibri reports a change it sees
// between calls as an error, this is the rest. Async-signal-safe: write(2) and _exit only.
extern "C" void on_mapping_fault(int, siginfo_t *info, void *) {
  static const char kChanged[] =
      "colibri: fatal: SIGBUS reading a memory-mapped file: the model image was truncated or overwritten while in use "
      "(cp over it, truncate). Replace an image in use by writing the new one elsewhere and renaming it over the old "
      "(docs/troubleshooting.md, \"The image changed while in use\")\n";
  static const char kOther[] =
      "colibri: fatal: SIGBUS (a bus error that is not a read past the end of a mapped file: a hardware memory error?)\n";
  const bool past_end = info && info->si_code == BUS_ADRERR;
  const ssize_t ignored = ::write(2, past_end ? kChanged : kOther, past_end ? sizeof kChanged - 1 : sizeof kOther - 1);
  (void)ignored;
  ::_exit(colibri_cli::kExitMappingFault);
}

int main(int argc, char **argv) {
  // A write beyond the file-size limit (ulimit -f: `logits -o`) fails with EFBIG and is
  // reported, instead of SIGXFSZ killing the process. libcolibri leaves signals to programs.
  std::signal(SIGXFSZ, SIG_IGN);
  {
    struct sigaction action{};
    action.sa_sigaction = on_mapping_fault;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, nullptr);
  }
  if (argc < 2) {
    print_help(stderr);
    return colibri_cli::kExitUsage;
  }
  const std::string first = argv[1];
  if (first == "-h" || first == "--help" || first == "help") {
    print_help(stdout);
    return colibri_cli::kExitOk;
  }
  if (first == "--version" || first == "version") {
    std::printf("colibri %s\nlibcolibri %s (ABI %u)\n", COLIBRI_VERSION_STRING, colibri_version_string(), colibri_abi_version());
    return colibri_cli::kExitOk;
  }
  // The CLI is built against the header of this release: refuse a different ABI generation.
  if (colibri_abi_version() != COLIBRI_ABI_VERSION) {
    std::fprintf(stderr, "colibri: libcolibri has ABI version %u but this program needs %u; install the matching libcolibri\n",
                 colibri_abi_version(), COLIBRI_ABI_VERSION);
    return colibri_cli::kExitFailure;
  }
  const Subcommand *command = nullptr;
  for (const Subcommand &c : kSubcommands)
    if (first == c.name) command = &c;
  if (!command) {
    std::fprintf(stderr, "colibri: unknown command '%s' (commands: run, bench, serve, perplexity, logits, tokenize, detokenize; "
                 "see 'colibri --help')\n", first.c_str());
    return colibri_cli::kExitUsage;
  }
  try {
    return finish_stdout(command->name, command->function(argc - 1, argv + 1));
  } catch (const colibri_cli::Failure &f) {
    std::fflush(stdout);
    std::fprintf(stderr, "colibri %s: %s\n", command->name, f.message.c_str());
    return f.exit_code;
  } catch (const std::bad_alloc &) {
    std::fflush(stdout);
    std::fprintf(stderr, "colibri %s: out of memory\n", command->name);
    return colibri_cli::kExitFailure;
  } catch (const std::exception &e) {
    std::fflush(stdout);
    std::fprintf(stderr, "colibri %s: internal error: %s\n", command->name, e.what());
    return colibri_cli::kExitInternal;
  }
}

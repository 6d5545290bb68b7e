// cli/common.h — what every `colibri` subcommand shares: exit codes and failures, flag value
// parsing (numbers are parsed here, not by cxxopts, so every message names the flag and its
// range), owned C API handles, opening the model (and finding the bundled default), reading
// files. The CLI sees the engine only through capi/colibri.h.
#pragma once

#include <colibri.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <cxxopts.hpp>
#include <nlohmann/json_fwd.hpp>

namespace colibri_cli {

// Exit codes: one table for colibri and colibri-model (docs/cli.md "Exit status"; the model
// tool's constants in modeltool/commands.h have the same values and meanings).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;      // a damaged image, or the command failed (engine, input text)
inline constexpr int kExitUsage = 2;        // the command line
inline constexpr int kExitNotAnImage = 3;   // a file given as an image is some other kind of file
inline constexpr int kExitIo = 4;           // a file cannot be opened, read or written
inline constexpr int kExitUnsupported = 5;  // valid input that this build cannot handle
inline constexpr int kExitInternal = 70;    // a bug: please report it
// Stopped by Ctrl-C (128 + SIGINT, the shell convention).
inline constexpr int kExitInterrupted = 130;
// The image was truncated or overwritten under the process and a read of its mapping faulted
// (128 + SIGBUS, what a shell reports for the signal); the SIGBUS handler prints why.
inline constexpr int kExitMappingFault = 135;

// The exit code of a failed C API call, by its status.
int exit_code_for_status(int32_t status);

// Thrown by a subcommand; main() prints "colibri CMD: message" and exits with exit_code.
struct Failure {
  int exit_code;
  std::string message;
};

[[noreturn]] void fail_usage(const std::string &message);
[[noreturn]] void fail_runtime(const std::string &message);
[[noreturn]] void fail_io(const std::string &message);
// The calling thread's colibri_last_error() message, or the status name when there is none.
std::string last_api_error(int32_t status);
// Throws a Failure "<what>: <last API error>" when status is negative, with the status's exit code.
void check_api(int32_t status, const std::string &what);

// ---- flag values -------------------------------------------------------------------------
// Each throws a usage Failure naming the flag, the accepted range and the value given.
int64_t parse_integer(const std::string &flag, const std::string &text, int64_t min, int64_t max);
double parse_real(const std::string &flag, const std::string &text, double min, double max);
// "1,2,3" (spaces allowed around the numbers); at least one entry.
std::vector<int64_t> parse_integer_list(const std::string &flag, const std::string &text, int64_t min, int64_t max);

// ---- owned handles -----------------------------------------------------------------------
struct ModelCloser {
  void operator()(colibri_model *m) const { colibri_model_close(m); }
};
struct SessionFreer {
  void operator()(colibri_session *s) const { colibri_session_free(s); }
};
using ModelPtr = std::unique_ptr<colibri_model, ModelCloser>;
using SessionPtr = std::unique_ptr<colibri_session, SessionFreer>;

// ---- the model flags shared by run, bench, logits, perplexity, tokenize, detokenize ----------
struct ModelFlags {
  std::string image;       // -m; empty: the bundled default
  uint32_t threads = 0;    // 0: every CPU (the library's default)
  uint32_t numa_policy = COLIBRI_NUMA_OFF;
  uint32_t numa_node = 0;
  bool lock_memory = false;
  bool populate = false;
  bool load_into_memory = false;
  bool verify = false;
  uint32_t max_isa = COLIBRI_ISA_AUTO;  // --isa: the sessions' kernel cap (a session option)
  bool warm_up = false;                 // --warmup: read every weight page once at open
  uint32_t device_kind = COLIBRI_DEVICE_CPU;  // --device cpu | cuda[:N], --gpu-id N
  uint32_t device_index = 0;
};

enum class FlagSet { ImageOnly, Full, FullWithoutThreads };
// Adds -m and (Full) -t/--threads, --numa, --mlock, --populate, --load-into-memory, --verify, --isa,
// --warmup, --route-deterministic, --device, --gpu-id to `options`.
void add_model_flags(cxxopts::Options &options, FlagSet set);
ModelFlags read_model_flags(const cxxopts::ParseResult &result, FlagSet set);
// Sets the session options --isa and --device decide.
void apply_session_flags(const ModelFlags &flags, colibri_session_options *options);
// Parses a --threads value (1..1024, the library's range).
uint32_t parse_threads(const std::string &flag, const std::string &text);

// Where the bundled model is looked for (docs/cli.md "The default model"): only
// <exe_dir>/<bin-to-data>/colibri/models/colibri-tiny-moe.colibri, the install layout, which the
// build tree mirrors; no build-tree path is compiled in.
std::vector<std::string> default_model_candidates();
// flags.image, or the first default candidate that exists; a Failure saying how to get a
// model when there is none.
std::string resolve_model_path(const ModelFlags &flags);
ModelPtr open_model(const ModelFlags &flags);
colibri_model_info model_info(const colibri_model *model);

// Whole file as bytes; "-" is standard input. Failure names the flag and the OS error.
std::string read_text_file(const std::string &flag, const std::string &path);

// Prints `value` as indented JSON and a newline on standard output. Strings that are not UTF-8
// (file paths may not be) come out with U+FFFD in place of the bad bytes instead of failing.
void print_json(const nlohmann::json &value);

// Parses the subcommand's argv with `options` after the vocabulary layer (args.h) rewrote it,
// and installs the --log-level it gives (every command has it); --help prints the help and
// exits 0; a bad flag or a stray positional argument is a usage Failure.
cxxopts::ParseResult parse_flags(cxxopts::Options &options, int argc, char **argv, bool *help_shown);

// Tokenizes with the model's tokenizer (flags: COLIBRI_TOKENIZE_*).
std::vector<int32_t> tokenize(const colibri_model *model, const std::string &text, uint32_t flags);
std::string detokenize(const colibri_model *model, const std::vector<int32_t> &tokens, uint32_t flags);
// Renders (role, content) messages with the model's chat template, ending with the assistant's
// turn; tokenize the result with COLIBRI_TOKENIZE_PARSE_SPECIAL. A Failure when it cannot.
std::string render_chat(const colibri_model *model, const std::vector<std::pair<std::string, std::string>> &history);

// "1,2,3" -> token ids, each checked against the vocabulary.
std::vector<int32_t> parse_token_list(const std::string &flag, const std::string &text, uint64_t vocab_size);

double seconds_since(uint64_t start_ns);
uint64_t now_ns();

// This process's file mappings of `path` (/proc/self/smaps, matched by the real path): the bytes
// resident, and of those the bytes mapped with 2 MiB pages (FilePmdMapped). found is false when
// nothing maps the file (the weights were loaded into memory) or smaps cannot be read.
struct MappingPages {
  bool found = false;
  uint64_t resident_bytes = 0;
  uint64_t huge_page_bytes = 0;
};
MappingPages mapping_pages(const std::string &path);

}  // namespace colibri_cli

// modeltool/cli_support.h — shared pieces of the subcommands: option parsing with cxxopts
// that reports errors as usage errors, error printing, exit-code mapping, progress lines.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "util/error.h"

namespace colibri::modeltool {

// Parses argv with `options`; on error prints it with the command's help and returns nullopt
// with *exit_code set; on --help prints help and returns nullopt with *exit_code = 0. Before
// parsing, the spellings shared with `colibri` are made canonical (--align is --alignment,
// -t is --threads: docs/cli.md "Flag vocabulary").
std::optional<cxxopts::ParseResult> parse_or_report(cxxopts::Options &options, int argc, char **argv, int *exit_code);

// Prints "colibri-model <command>: <kind>: <message>" to stderr and returns the exit code.
int report_error(const char *command, const Error &error);

// How progress is shown on stderr (docs/cli.md "Progress"): on a terminal one line redrawn at
// most ~10×/s; otherwise (a pipe, a CI log, a Kubernetes Job) a plain line every
// `plain_interval_seconds`, and a last line at the end when any was printed (a job shorter
// than the interval prints nothing); `enabled = false` (--no-progress, --quiet) prints nothing.
inline constexpr double kPlainProgressIntervalSeconds = 5.0;
struct ProgressStyle {
  bool enabled = true;
  double plain_interval_seconds = kPlainProgressIntervalSeconds;
};

// Adds --no-progress and --progress-every SECONDS to `options` (every long-running command).
void add_progress_flags(cxxopts::Options &options);
// Reads them; a bad --progress-every is reported like a parse error (returns false, *exit_code set).
bool read_progress_flags(const cxxopts::Options &options, const cxxopts::ParseResult &args, ProgressStyle *style,
                         int *exit_code);

class Progress {
 public:
  Progress(const char *label, uint64_t total_bytes, const ProgressStyle &style = {});
  void update(uint64_t done_bytes, const std::string &detail = "");
  void finish();

 private:
  void plain_line(uint64_t done_bytes, const std::string &detail, double now);
  bool enabled_;
  bool terminal_;
  double interval_s_;
  std::string label_;
  uint64_t total_;
  double start_s_;
  double last_s_ = 0;
  bool printed_ = false;
  uint64_t last_done_ = 0;
  uint64_t printed_done_ = 0;
  std::string last_detail_;
};

double monotonic_seconds();

// "colibri-model COMMAND: note: removed the stale temporary file X (left by a writer that was
// killed)" on stderr, for each path (util::AtomicFile::removed_stale).
void note_removed_stale(const char *command, const std::vector<std::string> &paths);

// Called first by main: SIGXFSZ ignored, so that a write beyond the file-size limit (ulimit -f)
// fails with EFBIG, which the writers report (exit 4) and clean up after, instead of killing
// the process (exit 153) with its temporary file left behind. The library leaves signal
// dispositions to the program (util/atomic_file.h). And SIGBUS, which a read of a mapped
// image raises when the file was truncated or overwritten under the process: one line on
// stderr saying so, exit kExitMappingFault (135) instead of a silent death.
void install_process_signal_dispositions();

// Ctrl-C (SIGINT) and SIGTERM during a conversion or repack: the handler only sets a flag,
// which the copy loops poll (interrupted) between chunks; they return interrupted_error(), so
// the output's writer is destroyed uncommitted and removes its temporary file. Without this
// an interrupted convert left OUT.tmp.XXXXXX behind (tens of GB for a real model). The flag is
// the tool's only process-wide mutable state: a signal handler can reach nothing else.
// A second signal while stopping ends the process at once (the default action). Installed by
// convert and repack only: the other commands keep the default action (they have no loop that
// polls the flag, and `timeout` sends SIGTERM once).
void install_interrupt_handler();
bool interrupted();
Error interrupted_error();
void clear_interrupted();  // tests

}  // namespace colibri::modeltool

// modeltool/cli_support.cpp — option parsing, error reporting and progress for subcommands.
#include "modeltool/cli_support.h"

#include <cstdlib>
#include <vector>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>

#include "modeltool/commands.h"
#include "util/strings.h"

namespace colibri::modeltool {

int exit_code_for(const Error &error) {
  switch (error.kind) {
    case ErrorKind::None: return kExitOk;
    case ErrorKind::Corrupt: return kExitCorrupt;
    case ErrorKind::InvalidArgument: return kExitUsage;
    case ErrorKind::NotAnImage: return kExitNotAnImage;
    case ErrorKind::Io: return kExitIo;
    case ErrorKind::Unsupported: return kExitUnsupported;
    case ErrorKind::NonFinite: return kExitCorrupt;
    case ErrorKind::Cancelled: return kExitInterrupted;
    case ErrorKind::OutOfMemory: return kExitIo;  // the OS ran out of something: not a bug
    case ErrorKind::Busy:
    case ErrorKind::Internal: return kExitInternal;
  }
  return kExitInternal;
}

namespace {

// The model tool's spellings of the shared vocabulary (docs/cli.md "Flag vocabulary").
struct Alias {
  const char *spelling;
  const char *canonical;
};
constexpr Alias kAliases[] = {{"--align", "--alignment"}, {"-t", "--threads"}};

std::vector<std::string> canonical_arguments(int argc, char **argv) {
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    std::string token = argv[i];
    if (token == "--") {
      for (; i < argc; ++i) out.emplace_back(argv[i]);
      break;
    }
    const size_t equals = token.rfind("--", 0) == 0 ? token.find('=') : std::string::npos;
    const std::string name = token.substr(0, equals);
    for (const Alias &a : kAliases)
      if (i > 0 && name == a.spelling) token = a.canonical + (equals == std::string::npos ? std::string() : token.substr(equals));
    out.push_back(token);
  }
  return out;
}

}  // namespace

std::optional<cxxopts::ParseResult> parse_or_report(cxxopts::Options &options, int argc, char **argv, int *exit_code) {
  const std::vector<std::string> arguments = canonical_arguments(argc, argv);
  std::vector<const char *> pointers;
  for (const std::string &a : arguments) pointers.push_back(a.c_str());
  try {
    cxxopts::ParseResult result = options.parse(static_cast<int>(pointers.size()), pointers.data());
    if (result.count("help")) {
      std::fputs(options.help().c_str(), stdout);
      *exit_code = kExitOk;
      return std::nullopt;
    }
    // Positional arguments beyond the command's (`verify a.colibri b.colibri` used to check a
    // and report success without a word about b).
    if (!result.unmatched().empty()) {
      std::fprintf(stderr, "%s: unexpected argument '%s' (see %s --help)\n\n%s",
                   options.program().c_str(), result.unmatched().front().c_str(), options.program().c_str(),
                   options.help().c_str());
      *exit_code = kExitUsage;
      return std::nullopt;
    }
    return result;
  } catch (const cxxopts::exceptions::exception &e) {
    std::fprintf(stderr, "%s: %s\n\n%s", options.program().c_str(), e.what(), options.help().c_str());
    *exit_code = kExitUsage;
    return std::nullopt;
  }
}

int report_error(const char *command, const Error &error) {
  std::fprintf(stderr, "colibri-model %s: %s: %s\n", command, error_kind_name(error.kind), error.message.c_str());
  return exit_code_for(error);
}

namespace {
volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void on_interrupt(int signal_number) {
  if (g_interrupted) {
    std::signal(signal_number, SIG_DFL);
    std::raise(signal_number);
    return;
  }
  g_interrupted = 1;
}
}  // namespace

void install_interrupt_handler() {
  struct sigaction action{};
  action.sa_handler = on_interrupt;
  action.sa_flags = SA_RESTART;  // a read interrupted by the signal resumes; the loops then see the flag
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

bool interrupted() { return g_interrupted != 0; }

Error interrupted_error() {
  return make_error(ErrorKind::Cancelled, "stopped by a signal; the output was not written (no temporary file is left)");
}

void clear_interrupted() { g_interrupted = 0; }

void note_removed_stale(const char *command, const std::vector<std::string> &paths) {
  for (const std::string &path : paths)
    std::fprintf(stderr, "colibri-model %s: note: removed the stale temporary file '%s' (left by a writer that was "
                         "killed)\n", command, path.c_str());
}

namespace {
// SIGBUS: a read of a mapped image faulted because the file shrank under the mapping
// (truncate, or cp over the file in use) while a command was reading it. Async-signal-safe:
// write(2) and _exit only.
extern "C" void on_mapping_fault(int, siginfo_t *info, void *) {
  static const char kChanged[] =
      "colibri-model: fatal: SIGBUS reading a memory-mapped file: the image was truncated or overwritten while in use "
      "(cp over it, truncate). Replace an image in use by writing the new one elsewhere and renaming it over the old "
      "(docs/troubleshooting.md, \"The image changed while in use\")\n";
  static const char kOther[] = "colibri-model: fatal: SIGBUS (a bus error that is not a read past the end of a "
                               "mapped file: a hardware memory error?)\n";
  const bool past_end = info && info->si_code == BUS_ADRERR;
  const ssize_t ignored = ::write(2, past_end ? kChanged : kOther, past_end ? sizeof kChanged - 1 : sizeof kOther - 1);
  (void)ignored;
  ::_exit(kExitMappingFault);
}
}  // namespace

void install_process_signal_dispositions() {
  std::signal(SIGXFSZ, SIG_IGN);
  struct sigaction action{};
  action.sa_sigaction = on_mapping_fault;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, nullptr);
}

double monotonic_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

void add_progress_flags(cxxopts::Options &options) {
  options.add_options()("no-progress", "print no progress on standard error")(
      "progress-every", "when standard error is not a terminal, a plain progress line every SECONDS (0.01..3600; "
                        "default 5); on a terminal the line is redrawn in place",
      cxxopts::value<std::string>(), "SECONDS");
}

bool read_progress_flags(const cxxopts::Options &options, const cxxopts::ParseResult &args, ProgressStyle *style,
                         int *exit_code) {
  style->enabled = args.count("no-progress") == 0;
  if (!args.count("progress-every")) return true;
  const std::string text = args["progress-every"].as<std::string>();
  char *end = nullptr;
  const double seconds = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(seconds >= 0.01 && seconds <= 3600)) {
    std::fprintf(stderr, "%s: --progress-every must be a number of seconds from 0.01 to 3600, got '%s'\n",
                 options.program().c_str(), text.c_str());
    *exit_code = kExitUsage;
    return false;
  }
  style->plain_interval_seconds = seconds;
  return true;
}

Progress::Progress(const char *label, uint64_t total_bytes, const ProgressStyle &style)
    : enabled_(style.enabled),
      terminal_(isatty(2) != 0),
      interval_s_(style.plain_interval_seconds),
      label_(label),
      total_(total_bytes),
      start_s_(monotonic_seconds()),
      last_s_(start_s_) {}

void Progress::plain_line(uint64_t done_bytes, const std::string &detail, double now) {
  const double elapsed = now - start_s_;
  const double rate = elapsed > 0 ? static_cast<double>(done_bytes) / elapsed / 1e6 : 0.0;
  const double pct = total_ ? 100.0 * static_cast<double>(done_bytes) / static_cast<double>(total_) : 100.0;
  std::fprintf(stderr, "%s: %.1f%% %s / %s, %.0f MB/s, %.1f s%s%s\n", label_.c_str(), pct,
               util::human_bytes(done_bytes).c_str(), util::human_bytes(total_).c_str(), rate, elapsed,
               detail.empty() ? "" : ", ", detail.c_str());
  std::fflush(stderr);
  printed_ = true;
  printed_done_ = done_bytes;
}

void Progress::update(uint64_t done_bytes, const std::string &detail) {
  if (!enabled_) return;
  double now = monotonic_seconds();
  if (!terminal_) {
    last_done_ = done_bytes;
    last_detail_ = detail;
    if (now - last_s_ < interval_s_) return;
    last_s_ = now;
    plain_line(done_bytes, detail, now);
    return;
  }
  if (now - last_s_ < 0.1 && done_bytes < total_) return;
  last_s_ = now;
  double elapsed = now - start_s_;
  double rate = elapsed > 0 ? static_cast<double>(done_bytes) / elapsed / 1e6 : 0.0;
  double pct = total_ ? 100.0 * static_cast<double>(done_bytes) / static_cast<double>(total_) : 100.0;
  std::fprintf(stderr, "\r%s %5.1f%%  %s / %s  %.0f MB/s  %s\033[K", label_.c_str(), pct,
               util::human_bytes(done_bytes).c_str(), util::human_bytes(total_).c_str(), rate, detail.c_str());
  std::fflush(stderr);
}

void Progress::finish() {
  if (!enabled_) return;
  if (terminal_) {
    std::fprintf(stderr, "\n");
  } else if (printed_ && printed_done_ != last_done_) {
    plain_line(last_done_, last_detail_, monotonic_seconds());  // where it ended
  }
}

}  // namespace colibri::modeltool

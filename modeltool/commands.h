// modeltool/commands.h — the colibri-model subcommands. Each takes the arguments after
// the subcommand name (argv[0] is the subcommand) and returns the process exit code.
#pragma once

#include "util/error.h"

namespace colibri::modeltool {

// Exit codes, documented in docs/troubleshooting.md and `colibri-model --help`.
inline constexpr int kExitOk = 0;
inline constexpr int kExitCorrupt = 1;      // an image, but damaged (structure or checksums)
inline constexpr int kExitUsage = 2;        // bad command line
inline constexpr int kExitNotAnImage = 3;   // some other kind of file
inline constexpr int kExitIo = 4;           // missing file, permission, disk full, out of memory or threads
inline constexpr int kExitUnsupported = 5;  // valid input that this build cannot handle
inline constexpr int kExitInternal = 70;
inline constexpr int kExitInterrupted = 130;  // Ctrl-C or SIGTERM; no output left behind
inline constexpr int kExitMappingFault = 135;  // 128 + SIGBUS: the image changed while in use (message printed)

int exit_code_for(const Error &error);

int run_inspect(int argc, char **argv);
int run_verify(int argc, char **argv);
int run_repack(int argc, char **argv);
int run_convert(int argc, char **argv);

}  // namespace colibri::modeltool

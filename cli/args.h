// cli/args.h — the command line before cxxopts sees it: one flag vocabulary for every
// subcommand (docs/cli.md "Flag vocabulary"). It rewrites the spellings other tools taught
// users (llama.cpp's -c/--ctx-size, -s, --n-predict, -r/--reverse-prompt, --no-mmap, -ctk/-ctv,
// bench's -o json; the original Colibri's --max-seq-len, --numa-bind) into Colibri's own flags,
// and answers flags Colibri does not have (-ngl, -fa, --port, ...) with a usage error that names
// the flag and says what Colibri does instead, so that `-ngl 99` is not read as `-n gl 99`.
#pragma once

#include <string>
#include <vector>

#include <cxxopts.hpp>

namespace colibri_cli {

// `command` is the subcommand ("run", "bench", ...). Returns the rewritten arguments (argv[0]
// first); throws a usage Failure for a flag it explains.
std::vector<std::string> normalize_arguments(const std::string &command, const cxxopts::Options &options, int argc,
                                             char **argv);

}  // namespace colibri_cli

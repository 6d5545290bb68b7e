// cli/commands.h — the subcommands of `colibri`. Each takes the arguments after `colibri`
// (argv[0] is the subcommand's name), returns an exit code (common.h) or throws Failure.
#pragma once

namespace colibri_cli {

int run_command(int argc, char **argv);
int bench_command(int argc, char **argv);
int logits_command(int argc, char **argv);
int tokenize_command(int argc, char **argv);
int detokenize_command(int argc, char **argv);
int perplexity_command(int argc, char **argv);
int serve_command(int argc, char **argv);

}  // namespace colibri_cli

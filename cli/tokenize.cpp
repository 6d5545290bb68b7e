// cli/tokenize.cpp — `colibri tokenize` (text -> ids on one line) and `colibri detokenize`
// (ids -> text), with the model's own tokenizer through the C API.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "commands.h"
#include "common.h"

namespace colibri_cli {

int tokenize_command(int argc, char **argv) {
  cxxopts::Options options("colibri tokenize",
                           "Encodes text with the model's tokenizer and prints the token ids comma-separated on one line.");
  add_model_flags(options, FlagSet::ImageOnly);
  options.add_options("Input")
      ("p,prompt", "the text to encode", cxxopts::value<std::string>(), "TEXT")
      ("f,file", "encode this file's bytes ('-' = standard input)", cxxopts::value<std::string>(), "FILE")
      ("special", "add the special tokens the tokenizer's post-processor adds (e.g. BOS), as for a model input")
      ("parse-special", "special-token text in the input (e.g. '<|eos|>') becomes that token; default: plain text");
  bool help = false;
  cxxopts::ParseResult flags = parse_flags(options, argc, argv, &help);
  if (help) return kExitOk;
  if (flags.count("prompt") == flags.count("file"))
    fail_usage("give the text with exactly one of -p TEXT or -f FILE (see 'colibri tokenize --help')");
  ModelFlags model_flags = read_model_flags(flags, FlagSet::ImageOnly);
  std::string text = flags.count("prompt") ? flags["prompt"].as<std::string>()
                                           : read_text_file("-f", flags["file"].as<std::string>());
  ModelPtr model = open_model(model_flags);
  uint32_t tokenize_flags = (flags.count("special") ? COLIBRI_TOKENIZE_ADD_SPECIAL : 0u) |
                            (flags.count("parse-special") ? COLIBRI_TOKENIZE_PARSE_SPECIAL : 0u);
  std::vector<int32_t> tokens = tokenize(model.get(), text, tokenize_flags);
  std::string line;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i) line += ',';
    line += std::to_string(tokens[i]);
  }
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
  return kExitOk;
}

int detokenize_command(int argc, char **argv) {
  cxxopts::Options options("colibri detokenize",
                           "Decodes token ids into text and writes it to standard output exactly (no newline is added, "
                           "except on a terminal when the text does not end with one).");
  add_model_flags(options, FlagSet::ImageOnly);
  options.add_options("Input")
      ("tokens", "comma-separated token ids, e.g. 0,297,388", cxxopts::value<std::string>(), "IDS")
      ("skip-special", "leave special tokens (BOS, EOS, ...) out of the text");
  bool help = false;
  cxxopts::ParseResult flags = parse_flags(options, argc, argv, &help);
  if (help) return kExitOk;
  if (!flags.count("tokens")) fail_usage("--tokens IDS is required, e.g. --tokens 0,297,388 (see 'colibri detokenize --help')");
  ModelFlags model_flags = read_model_flags(flags, FlagSet::ImageOnly);
  std::string ids = flags["tokens"].as<std::string>();
  ModelPtr model = open_model(model_flags);
  colibri_model_info info = model_info(model.get());
  std::vector<int32_t> tokens = parse_token_list("--tokens", ids, info.vocab_size);
  std::string text = detokenize(model.get(), tokens, flags.count("skip-special") ? COLIBRI_DETOKENIZE_SKIP_SPECIAL : 0u);
  if (::isatty(STDOUT_FILENO) && (text.empty() || text.back() != '\n')) text += '\n';
  std::fwrite(text.data(), 1, text.size(), stdout);
  return kExitOk;
}

}  // namespace colibri_cli

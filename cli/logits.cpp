// cli/logits.cpp — `colibri logits`: runs token ids through the model from an empty cache
// (positions 0..n-1) and writes the float32 logits as .npy: shape (1, vocab) for the last
// position, or (n, vocab) with --all-positions. The oracle tests and outside checks use it.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "commands.h"
#include "common.h"
#include "npy.h"

namespace colibri_cli {

namespace {

// Tokens per forward call (and logit rows per call with --all-positions).
constexpr size_t kChunkTokens = 512;

}  // namespace

int logits_command(int argc, char **argv) {
  cxxopts::Options options("colibri logits",
                           "Runs token ids through the model (one sequence, positions 0..n-1, empty cache) and writes the "
                           "float32 logits as a NumPy .npy file (format 1.0, '<f4', C order): shape (1, vocab) for the "
                           "last position, or (n, vocab) with --all-positions. The file is written atomically.");
  add_model_flags(options, FlagSet::Full);
  options.add_options("Input and output")
      ("tokens", "comma-separated token ids, e.g. 0,297,388", cxxopts::value<std::string>(), "IDS")
      ("all-positions", "write the logits of every position, not only the last")
      ("o,output", "the .npy file to write", cxxopts::value<std::string>(), "OUT.npy")
      ("kv-f16", "store the KV cache as f16 (half the memory; keys and values are rounded)");
  bool help = false;
  cxxopts::ParseResult flags = parse_flags(options, argc, argv, &help);
  if (help) return kExitOk;
  if (!flags.count("tokens")) fail_usage("--tokens IDS is required, e.g. --tokens 1,2,3 (see 'colibri logits --help')");
  if (!flags.count("output")) fail_usage("-o OUT.npy is required (see 'colibri logits --help')");
  ModelFlags model_flags = read_model_flags(flags, FlagSet::Full);
  const std::string output = flags["output"].as<std::string>();
  if (output.empty()) fail_usage("-o is empty: give the path of the .npy file to write");
  const bool all_positions = flags.count("all-positions") > 0;
  // Syntax first (a usage error needs no model), then the vocabulary range.
  parse_integer_list("--tokens", flags["tokens"].as<std::string>(), 0, INT32_MAX);
  // The .npy replaces an existing regular file (atomically), never a device, a FIFO or the model.
  struct stat out_st{};
  if (::stat(output.c_str(), &out_st) == 0) {
    if (S_ISDIR(out_st.st_mode)) fail_usage("-o " + output + " is a directory: give the path of the .npy file to write");
    if (!S_ISREG(out_st.st_mode))
      fail_usage("-o " + output + " is not a regular file (a device, FIFO or socket): give the path of a .npy file");
    struct stat model_st{};
    const std::string image = resolve_model_path(model_flags);
    if (::stat(image.c_str(), &model_st) == 0 && model_st.st_dev == out_st.st_dev && model_st.st_ino == out_st.st_ino)
      fail_usage("-o " + output + " is the model image " + image + ": choose another output path");
  }

  ModelPtr model = open_model(model_flags);
  colibri_model_info info = model_info(model.get());
  std::vector<int32_t> tokens = parse_token_list("--tokens", flags["tokens"].as<std::string>(), info.vocab_size);
  if (tokens.size() > 16777216) fail_usage("--tokens: at most 16777216 tokens (the largest context), got " + std::to_string(tokens.size()));
  const size_t n = tokens.size(), vocab = info.vocab_size;
  const size_t chunk = std::min(n, kChunkTokens);

  colibri_session_options session_options;
  check_api(colibri_session_options_init(&session_options, sizeof session_options), "session options");
  session_options.context_length = static_cast<uint32_t>(n);
  session_options.max_batch_tokens = static_cast<uint32_t>(chunk);
  session_options.max_logit_rows = static_cast<uint32_t>(all_positions ? chunk : 1);
  session_options.kv_dtype = flags.count("kv-f16") ? COLIBRI_DTYPE_F16 : COLIBRI_DTYPE_F32;
  apply_session_flags(model_flags, &session_options);  // --isa, --device
  colibri_session *raw = nullptr;
  check_api(colibri_session_create(model.get(), &session_options, &raw), "session");
  SessionPtr session(raw);

  std::vector<float> logits;
  if (!all_positions) {
    check_api(colibri_session_prefill(session.get(), 0, tokens.data(), n), "forward pass");
    logits.resize(vocab);
    check_api(colibri_session_copy_logits(session.get(), 0, logits.data(), vocab), "logits");
  } else {
    logits.resize(n * vocab);
    std::vector<uint32_t> want(chunk, 1);
    for (size_t begin = 0; begin < n; begin += chunk) {
      size_t count = std::min(chunk, n - begin);
      check_api(colibri_session_batch(session.get(), nullptr, nullptr, tokens.data() + begin, want.data(), count),
                "forward pass");
      for (size_t r = 0; r < count; ++r)
        check_api(colibri_session_copy_logits(session.get(), r, logits.data() + (begin + r) * vocab, vocab), "logits");
    }
  }
  write_npy_atomically(output, {all_positions ? n : 1, vocab}, logits.data());
  return kExitOk;
}

}  // namespace colibri_cli

// cli/perplexity.cpp — `colibri perplexity`: the evaluation protocol of
// models/colibri-tiny-moe/reference.json, so the figure is comparable with transformers':
//   1. encode the whole file with the tokenizer's post-processor (special tokens: BOS first);
//   2. windows ids[s : s + window] for s = 0, stride, 2*stride, ... (the last may be shorter),
//      each run from an empty cache with positions 0..len-1;
//   3. in a window, token t (t >= 1) is scored from its prefix when no earlier window scored
//      it: with stride == window (the default) that is tokens 1..len-1 of every window;
//   4. NLL = logsumexp(logits) - logit[target] over float32 logits, in double, natural log;
//      perplexity = exp(sum NLL / tokens scored).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "common.h"

namespace colibri_cli {

namespace {

// -log softmax(logits)[target], in double.
double negative_log_likelihood(const float *logits, size_t vocab, int32_t target) {
  double max_logit = logits[0];
  for (size_t i = 1; i < vocab; ++i) max_logit = std::max(max_logit, static_cast<double>(logits[i]));
  double sum = 0;
  for (size_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max_logit);
  return max_logit + std::log(sum) - static_cast<double>(logits[target]);
}

}  // namespace

int perplexity_command(int argc, char **argv) {
  cxxopts::Options options("colibri perplexity",
                           "Perplexity of a text file: the whole file is encoded with special tokens (BOS first), cut "
                           "into windows evaluated from an empty cache, and each token after the first of its window is "
                           "scored once; perplexity = exp(mean negative log-likelihood). Prints the perplexity, the "
                           "tokens scored and the speed.");
  add_model_flags(options, FlagSet::Full);
  options.add_options("Evaluation")
      ("f,file", "the text file to evaluate ('-' = standard input)", cxxopts::value<std::string>(), "FILE")
      ("window", "tokens per window, 2..65536", cxxopts::value<std::string>()->default_value("256"), "N")
      ("stride", "tokens between window starts, 1..window (default: the window, non-overlapping windows; "
                 "smaller: overlapping windows, each scoring only the tokens the previous ones did not)",
       cxxopts::value<std::string>(), "N")
      ("kv-f16", "store the KV cache as f16")
      ("json", "print one JSON object instead of text");
  bool help = false;
  cxxopts::ParseResult flags = parse_flags(options, argc, argv, &help);
  if (help) return kExitOk;
  if (!flags.count("file")) fail_usage("-f FILE is required: the text to evaluate (see 'colibri perplexity --help')");
  ModelFlags model_flags = read_model_flags(flags, FlagSet::Full);
  const size_t window = static_cast<size_t>(parse_integer("--window", flags["window"].as<std::string>(), 2, 65536));
  const size_t stride = flags.count("stride")
                            ? static_cast<size_t>(parse_integer("--stride", flags["stride"].as<std::string>(), 1, 65536))
                            : window;
  if (stride > window)
    fail_usage("--stride " + std::to_string(stride) + " is larger than --window " + std::to_string(window) +
               ": tokens between windows would never be scored; use a stride <= the window");
  const std::string path = flags["file"].as<std::string>();
  const std::string text = read_text_file("-f", path);
  const bool json = flags.count("json") > 0;

  ModelPtr model = open_model(model_flags);
  colibri_model_info info = model_info(model.get());
  std::vector<int32_t> ids = tokenize(model.get(), text, COLIBRI_TOKENIZE_ADD_SPECIAL);
  if (ids.size() < 2) fail_runtime("-f " + path + ": the text has " + std::to_string(ids.size()) + " token(s); at least 2 are needed");
  if (window > info.max_position_embeddings && !json)
    std::fprintf(stderr, "colibri perplexity: note: --window %zu is longer than the model was trained for (%llu positions)\n",
                 window, static_cast<unsigned long long>(info.max_position_embeddings));

  const size_t batch = std::min(window, static_cast<size_t>(512));
  colibri_session_options session_options;
  check_api(colibri_session_options_init(&session_options, sizeof session_options), "session options");
  session_options.context_length = static_cast<uint32_t>(window);
  session_options.max_batch_tokens = static_cast<uint32_t>(batch);
  session_options.max_logit_rows = static_cast<uint32_t>(batch);
  session_options.kv_dtype = flags.count("kv-f16") ? COLIBRI_DTYPE_F16 : COLIBRI_DTYPE_F32;
  apply_session_flags(model_flags, &session_options);  // --isa, --device
  colibri_session *raw = nullptr;
  check_api(colibri_session_create(model.get(), &session_options, &raw), "session");
  SessionPtr session(raw);

  const size_t vocab = info.vocab_size;
  double nll_sum = 0;
  size_t scored = 0, windows = 0, evaluated = 0;
  size_t scored_until = 1;  // tokens [0, scored_until) are scored or unscorable (token 0 has no prefix)
  std::vector<uint32_t> want(batch);
  const uint64_t start = now_ns();
  for (size_t begin = 0; begin + 1 < ids.size(); begin += stride) {
    const size_t end = std::min(begin + window, ids.size());
    if (end <= scored_until) continue;  // nothing new to score (only possible at the tail)
    check_api(colibri_session_reset(session.get()), "reset");
    // Row r of a chunk predicts token (position + 1): compute logits only where that token is new.
    for (size_t chunk = begin; chunk < end; chunk += batch) {
      const size_t count = std::min(batch, end - chunk);
      size_t rows = 0;
      for (size_t i = 0; i < count; ++i) {
        const size_t target = chunk + i + 1;
        want[i] = target < end && target >= std::max(scored_until, begin + 1);
        rows += want[i];
      }
      check_api(colibri_session_batch(session.get(), nullptr, nullptr, ids.data() + chunk, want.data(), count),
                "forward pass (window at token " + std::to_string(begin) + ")");
      size_t row = 0;
      for (size_t i = 0; i < count && rows; ++i) {
        if (!want[i]) continue;
        const float *logits = nullptr;
        check_api(colibri_session_logits(session.get(), row++, &logits, nullptr, nullptr), "logits");
        nll_sum += negative_log_likelihood(logits, vocab, ids[chunk + i + 1]);
        ++scored;
      }
    }
    scored_until = end;
    evaluated += end - begin;
    ++windows;
    if (end == ids.size()) break;
  }
  const double seconds = seconds_since(start);
  const double mean_nll = nll_sum / static_cast<double>(scored);
  const double perplexity = std::exp(mean_nll);
  const double tokens_per_second = static_cast<double>(evaluated) / seconds;
  if (json) {
    nlohmann::json out = {{"file", path},         {"perplexity", perplexity},        {"mean_nll", mean_nll},
                          {"tokens_in_file", ids.size()}, {"tokens_scored", scored}, {"windows", windows},
                          {"window", window},     {"stride", stride},                {"seconds", seconds},
                          {"tokens_per_second", tokens_per_second}};
    print_json(out);
  } else {
    std::printf("perplexity %.4f (mean NLL %.6f) over %zu scored tokens of %zu; %zu windows of %zu, stride %zu\n",
                perplexity, mean_nll, scored, ids.size(), windows, window, stride);
    std::printf("speed: %zu tokens evaluated in %.2f s, %.1f tokens/s\n", evaluated, seconds, tokens_per_second);
  }
  return kExitOk;
}

}  // namespace colibri_cli

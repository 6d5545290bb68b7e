// cli/run.cpp — `colibri run`: generates text from a prompt (-p, -f) and streams it to
// standard output piece by piece, or holds an interactive chat (--chat) on standard input
// using the model's chat template with the whole conversation as context. A one-line
// summary goes to standard error at the end. Ctrl-C stops the current generation (in a chat:
// the current reply); a second Ctrl-C, or one at the chat prompt, ends the program.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "common.h"

namespace colibri_cli {

namespace {

// The only process-wide mutable state of the CLI, and necessarily so: a signal handler can
// reach nothing else. g_generating says whether Ctrl-C should stop a generation (1) or end
// the program (0); g_interrupted is what the piece callback reads.
volatile std::sig_atomic_t g_generating = 0;
volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void on_interrupt(int) {
  if (!g_generating || g_interrupted) _exit(kExitInterrupted);
  g_interrupted = 1;
}

void install_interrupt_handler() {
  struct sigaction action{};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
}

struct RunSettings {
  colibri_sampler_options sampler{};
  uint32_t max_tokens = 128;
  bool ignore_eos = false;
  std::vector<std::string> stop_strings;
  bool raw = false;
};

const char *finish_name(uint32_t finish_reason) {
  switch (finish_reason) {
    case COLIBRI_FINISH_LENGTH: return "length";
    case COLIBRI_FINISH_EOS: return "eos";
    case COLIBRI_FINISH_STOP: return "stop";
    case COLIBRI_FINISH_CANCELLED: return "cancelled";
    default: return "none";
  }
}

// What one generation produced (the text only when `keep_text`).
struct Outcome {
  colibri_generate_result result{};
  bool context_full = false;
  std::string text;
  bool ends_with_newline = false;
};

struct PieceSink {
  Outcome *outcome;
  bool keep_text;
  bool stream;  // write the pieces to standard output as they come (not under --json)
};

int32_t write_piece(void *user, const char *piece, size_t size) {
  auto *sink = static_cast<PieceSink *>(user);
  if (sink->stream) {
    std::fwrite(piece, 1, size, stdout);
    std::fflush(stdout);
  }
  if (sink->keep_text) sink->outcome->text.append(piece, size);
  if (size) sink->outcome->ends_with_newline = piece[size - 1] == '\n';
  return g_interrupted ? 1 : 0;
}

// Generates from `prompt` and streams the pieces. A context that fills up before max_tokens
// ends the generation like a length limit (finish reason "context"), not as an error.
Outcome generate(colibri_session *session, const std::vector<int32_t> &prompt, const RunSettings &settings,
                 uint64_t seed, bool keep_text, bool stream = true) {
  Outcome outcome;
  outcome.result.struct_size = sizeof outcome.result;
  colibri_sampler_options sampler = settings.sampler;
  sampler.seed = seed;
  std::vector<const char *> stops;
  for (const std::string &s : settings.stop_strings) stops.push_back(s.c_str());
  colibri_generate_options options;
  check_api(colibri_generate_options_init(&options, sizeof options), "generate options");
  options.max_tokens = settings.max_tokens;
  options.ignore_eos = settings.ignore_eos ? 1 : 0;
  options.sampler = &sampler;
  options.stop_strings = stops.empty() ? nullptr : stops.data();
  options.stop_string_count = stops.size();
  PieceSink sink{&outcome, keep_text, stream};
  g_interrupted = 0;
  g_generating = 1;
  int32_t status = colibri_generate(session, prompt.data(), prompt.size(), &options, write_piece, &sink, &outcome.result);
  g_generating = 0;
  if (status == COLIBRI_ERROR_CONTEXT_FULL && outcome.result.prompt_token_count > 0) {
    outcome.context_full = true;
  } else {
    check_api(status, "generation");
  }
  return outcome;
}

std::string summary(uint64_t prompt_tokens, uint64_t generated_tokens, uint64_t prefill_ns, uint64_t decode_ns,
                    const std::string &finish) {
  char line[512];
  double prefill_s = static_cast<double>(prefill_ns) / 1e9, decode_s = static_cast<double>(decode_ns) / 1e9;
  std::snprintf(line, sizeof line,
                "prompt %llu tokens (%.1f tokens/s), generated %llu tokens in %.2f s (%.1f tokens/s), finish: %s",
                static_cast<unsigned long long>(prompt_tokens), prefill_s > 0 ? static_cast<double>(prompt_tokens) / prefill_s : 0.0,
                static_cast<unsigned long long>(generated_tokens), decode_s,
                decode_s > 0 ? static_cast<double>(generated_tokens) / decode_s : 0.0, finish.c_str());
  return line;
}

std::string finish_of(const Outcome &o) { return o.context_full ? "context" : finish_name(o.result.finish_reason); }

// --json: the run as one object on standard output (the text included, nothing streamed).
nlohmann::json summary_json(const Outcome &o, uint64_t seed) {
  const double prefill_s = static_cast<double>(o.result.prefill_ns) / 1e9, decode_s = static_cast<double>(o.result.decode_ns) / 1e9;
  return {{"text", o.text},
          {"prompt_tokens", o.result.prompt_token_count},
          {"generated_tokens", o.result.generated_token_count},
          {"prefill_seconds", prefill_s},
          {"decode_seconds", decode_s},
          {"prefill_tokens_per_second", prefill_s > 0 ? static_cast<double>(o.result.prompt_token_count) / prefill_s : 0.0},
          {"decode_tokens_per_second", decode_s > 0 ? static_cast<double>(o.result.generated_token_count) / decode_s : 0.0},
          {"finish_reason", finish_of(o)},
          {"seed", seed}};
}

// --profile: the session's per-stage time (colibri_session_get_stats) on standard error.
void print_profile(const colibri_session *session) {
  colibri_stats stats{};
  stats.struct_size = sizeof stats;
  check_api(colibri_session_get_stats(session, &stats), "stats");
  uint64_t total = 0;
  for (uint32_t i = 0; i < stats.stage_count && i < COLIBRI_STATS_MAX_STAGES; ++i) total += stats.stage_ns[i];
  std::fprintf(stderr, "colibri run: profile over %llu tokens in %llu forward calls:",
               static_cast<unsigned long long>(stats.tokens), static_cast<unsigned long long>(stats.forward_calls));
  for (uint32_t i = 0; i < stats.stage_count && i < COLIBRI_STATS_MAX_STAGES; ++i) {
    const char *name = colibri_stage_name(i);
    if (!name) continue;
    std::fprintf(stderr, " %s %.1f ms (%.0f%%)", name, static_cast<double>(stats.stage_ns[i]) / 1e6,
                 total ? 100.0 * static_cast<double>(stats.stage_ns[i]) / static_cast<double>(total) : 0.0);
  }
  std::fprintf(stderr, "\n");
}

int chat_loop(const colibri_model *model, colibri_session *session, uint32_t context_length, const RunSettings &settings,
              uint64_t seed, const std::string &system_prompt) {
  const bool interactive = ::isatty(STDIN_FILENO);
  std::vector<std::pair<std::string, std::string>> history;
  if (!system_prompt.empty()) history.emplace_back("system", system_prompt);
  const size_t fixed = history.size();
  // Room kept for the reply when old turns must be dropped to fit the context.
  const size_t reply_room = std::min<size_t>(settings.max_tokens, context_length / 2);
  if (interactive)
    std::fprintf(stderr, "colibri chat: type a message and press Enter; /reset starts over, /exit or Ctrl-D ends.\n");
  uint64_t turns = 0, prompt_total = 0, generated_total = 0, prefill_ns = 0, decode_ns = 0;
  std::string last_finish = "none";
  std::string line;
  for (;;) {
    if (interactive) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      history.resize(fixed);
      std::fprintf(stderr, "colibri chat: conversation cleared\n");
      continue;
    }
    history.emplace_back("user", line);
    std::vector<int32_t> prompt = tokenize(model, render_chat(model, history), COLIBRI_TOKENIZE_PARSE_SPECIAL);
    // Drop the oldest exchanges (never the system prompt or this message) until it fits.
    while (prompt.size() + reply_room > context_length && history.size() > fixed + 1) {
      size_t drop = history.size() - fixed > 2 ? 2 : 1;
      history.erase(history.begin() + static_cast<std::ptrdiff_t>(fixed), history.begin() + static_cast<std::ptrdiff_t>(fixed + drop));
      std::fprintf(stderr, "colibri chat: dropped the oldest exchange to fit the context (%u tokens)\n", context_length);
      prompt = tokenize(model, render_chat(model, history), COLIBRI_TOKENIZE_PARSE_SPECIAL);
    }
    if (prompt.size() >= context_length) {
      std::fprintf(stderr, "colibri chat: this message needs %zu tokens but the context holds %u; send a shorter one or "
                   "restart with a larger --ctx\n", prompt.size(), context_length);
      history.pop_back();
      continue;
    }
    Outcome o = generate(session, prompt, settings, seed + turns, true);
    if (!o.ends_with_newline) std::fputc('\n', stdout);
    std::fflush(stdout);
    // A reply that ended before its first visible piece would otherwise be an empty line.
    if (o.text.find_first_not_of(" \t\r\n") == std::string::npos)
      std::fprintf(stderr, "colibri chat: the model ended this reply without any text (%llu tokens, finish: %s)\n",
                   static_cast<unsigned long long>(o.result.generated_token_count), finish_of(o).c_str());
    history.emplace_back("assistant", o.text);
    ++turns;
    prompt_total += o.result.prompt_token_count;
    generated_total += o.result.generated_token_count;
    prefill_ns += o.result.prefill_ns;
    decode_ns += o.result.decode_ns;
    last_finish = finish_of(o);
  }
  if (interactive) std::fputc('\n', stderr);
  std::fprintf(stderr, "colibri run: %llu turns, %s, seed %llu\n", static_cast<unsigned long long>(turns),
               summary(prompt_total, generated_total, prefill_ns, decode_ns, last_finish).c_str(),
               static_cast<unsigned long long>(seed));
  return kExitOk;
}

}  // namespace

int run_command(int argc, char **argv) {
  cxxopts::Options options("colibri run",
                           "Generates text from a prompt and streams it to standard output as it is produced (the prompt "
                           "is echoed first unless --raw), or holds an interactive chat with --chat. A one-line summary "
                           "(prompt tokens, generated tokens, tokens/s, finish reason) goes to standard error. Ctrl-C stops "
                           "the generation. Sampling applies, in order: penalties, temperature, top-k, top-p, min-p, "
                           "then a seeded draw.");
  add_model_flags(options, FlagSet::Full);
  options.add_options("Input")
      ("p,prompt", "the prompt text (BOS and other special tokens are added as the tokenizer says)",
       cxxopts::value<std::string>(), "TEXT")
      ("f,file", "read the prompt from FILE ('-' = standard input)", cxxopts::value<std::string>(), "FILE")
      ("chat", "interactive chat on standard input with the model's chat template; the conversation so far is the "
               "context of every reply (/reset clears it, /exit or end of input ends)")
      ("system", "with --chat: a system message that starts the conversation", cxxopts::value<std::string>(), "TEXT");
  options.add_options("Generation")
      ("n,max-tokens", "tokens to generate at most, 1..1000000 (generation also ends at EOS, a stop string or a "
                       "full context)",
       cxxopts::value<std::string>()->default_value("128"), "N")
      ("stop", "end generation when STR is generated (not printed); repeat the flag for several",
       cxxopts::value<std::string>(), "STR")
      ("ignore-eos", "keep generating after an end-of-sequence token")
      ("ctx", "context length in tokens, prompt + output, 1..16777216 (default: the model's maximum, at most 4096)",
       cxxopts::value<std::string>(), "N")
      ("kv-f16", "store the KV cache as f16 (half the memory; keys and values are rounded)")
      ("batch-size", "prompt tokens per forward call, 1..65536; a longer prompt is prefilled in calls of this size "
                     "(default: the library's)", cxxopts::value<std::string>(), "N")
      ("raw", "write only the generated text to standard output: no prompt echo, no final newline");
  options.add_options("Sampling")
      ("temp", "temperature, 0..100; 0 = greedy (argmax)", cxxopts::value<std::string>()->default_value("0.8"), "T")
      ("top-k", "keep the K most likely tokens, 0..100000000; 0 = off", cxxopts::value<std::string>()->default_value("40"), "K")
      ("top-p", "keep the smallest set with probability >= P, in (0, 1]; 1 = off",
       cxxopts::value<std::string>()->default_value("0.95"), "P")
      ("min-p", "drop tokens with probability < M x the top one's, 0..1; 0 = off",
       cxxopts::value<std::string>()->default_value("0.05"), "M")
      ("repeat-penalty", "divide a seen token's positive logit by R (multiply a negative one), 0.01..10; 1 = off",
       cxxopts::value<std::string>()->default_value("1"), "R")
      ("presence-penalty", "subtract from a seen token's logit once, -2..2",
       cxxopts::value<std::string>()->default_value("0"), "X")
      ("frequency-penalty", "subtract from a token's logit per occurrence, -2..2",
       cxxopts::value<std::string>()->default_value("0"), "X")
      ("repeat-last-n", "tokens of history the penalties see, 0..1000000",
       cxxopts::value<std::string>()->default_value("64"), "N")
      ("seed", "sampling seed, 0..9223372036854775807 (default: random, printed in the summary)",
       cxxopts::value<std::string>(), "S");
  options.add_options("Output")
      ("json", "print one JSON object on standard output at the end instead of streaming the text: text, "
               "prompt_tokens, generated_tokens, prefill/decode seconds and tokens/s, finish_reason, seed")
      ("profile", "after the summary, the per-stage time of the forward passes (attention, router, experts, ...)");
  bool help = false;
  cxxopts::ParseResult flags = parse_flags(options, argc, argv, &help);
  if (help) return kExitOk;

  const bool chat = flags.count("chat") > 0;
  const size_t inputs = flags.count("prompt") + flags.count("file");
  if (chat && inputs) fail_usage("--chat reads the conversation from standard input: drop -p/-f (use --system for a system message)");
  if (!chat && inputs != 1) fail_usage("give the prompt with exactly one of -p TEXT or -f FILE, or use --chat (see 'colibri run --help')");
  if (!chat && flags.count("system")) fail_usage("--system only applies to --chat");
  const bool json = flags.count("json") > 0, profile = flags.count("profile") > 0;
  if (chat && json) fail_usage("--json summarises one generation: use it with -p or -f, not --chat");
  ModelFlags model_flags = read_model_flags(flags, FlagSet::Full);

  RunSettings settings;
  check_api(colibri_sampler_options_init(&settings.sampler, sizeof settings.sampler), "sampler options");
  settings.max_tokens = static_cast<uint32_t>(parse_integer("-n/--max-tokens", flags["max-tokens"].as<std::string>(), 1, 1000000));
  settings.sampler.temperature = static_cast<float>(parse_real("--temp", flags["temp"].as<std::string>(), 0, 100));
  settings.sampler.top_k = static_cast<uint32_t>(parse_integer("--top-k", flags["top-k"].as<std::string>(), 0, 100000000));
  double top_p = parse_real("--top-p", flags["top-p"].as<std::string>(), 0, 1);
  // Checked as the float the sampler gets: 1e-300 is above 0 as a double and 0 as a float.
  if (!(static_cast<float>(top_p) > 0.0f))
    fail_usage("--top-p must be greater than 0 and at most 1 (1 = off), got " + flags["top-p"].as<std::string>());
  settings.sampler.top_p = static_cast<float>(top_p);
  settings.sampler.min_p = static_cast<float>(parse_real("--min-p", flags["min-p"].as<std::string>(), 0, 1));
  settings.sampler.repetition_penalty =
      static_cast<float>(parse_real("--repeat-penalty", flags["repeat-penalty"].as<std::string>(), 0.01, 10));
  settings.sampler.presence_penalty =
      static_cast<float>(parse_real("--presence-penalty", flags["presence-penalty"].as<std::string>(), -2, 2));
  settings.sampler.frequency_penalty =
      static_cast<float>(parse_real("--frequency-penalty", flags["frequency-penalty"].as<std::string>(), -2, 2));
  settings.sampler.penalty_last_n =
      static_cast<uint32_t>(parse_integer("--repeat-last-n", flags["repeat-last-n"].as<std::string>(), 0, 1000000));
  uint64_t seed = flags.count("seed") ? static_cast<uint64_t>(parse_integer("--seed", flags["seed"].as<std::string>(), 0, INT64_MAX))
                                      : (static_cast<uint64_t>(std::random_device{}()) << 31 ^ std::random_device{}()) & INT64_MAX;
  uint32_t context_length = flags.count("ctx") ? static_cast<uint32_t>(parse_integer("--ctx", flags["ctx"].as<std::string>(), 1, 16777216)) : 0;
  settings.ignore_eos = flags.count("ignore-eos") > 0;
  settings.raw = flags.count("raw") > 0;
  // --stop may be repeated: every occurrence, in order (cxxopts keeps only the last as the value).
  for (const cxxopts::KeyValue &kv : flags.arguments()) {
    if (kv.key() != "stop") continue;
    if (kv.value().empty()) fail_usage("--stop needs a non-empty string");
    settings.stop_strings.push_back(kv.value());
  }
  std::string prompt_text;
  if (!chat) prompt_text = flags.count("prompt") ? flags["prompt"].as<std::string>() : read_text_file("-f", flags["file"].as<std::string>());

  ModelPtr model = open_model(model_flags);
  colibri_model_info info = model_info(model.get());
  if (!info.has_tokenizer) {
    // The library says why in the error of any tokenizer call.
    size_t count = 0;
    const int32_t status = colibri_tokenize(model.get(), "", 0, 0, nullptr, 0, &count);
    fail_runtime(resolve_model_path(model_flags) + ": the image's tokenizer could not be loaded (" + last_api_error(status) +
                 "); `colibri run` needs one (use `colibri logits` with token ids instead)");
  }
  if (chat && !info.has_chat_template)
    fail_runtime(resolve_model_path(model_flags) + " has no chat template: use -p PROMPT instead of --chat");

  colibri_session_options session_options;
  check_api(colibri_session_options_init(&session_options, sizeof session_options), "session options");
  session_options.context_length = context_length;
  session_options.kv_dtype = flags.count("kv-f16") ? COLIBRI_DTYPE_F16 : COLIBRI_DTYPE_F32;
  session_options.seed = seed;
  apply_session_flags(model_flags, &session_options);  // --isa, --device
  if (flags.count("batch-size"))
    session_options.max_batch_tokens =
        static_cast<uint32_t>(parse_integer("--batch-size", flags["batch-size"].as<std::string>(), 1, 65536));
  colibri_session *raw_session = nullptr;
  check_api(colibri_session_create(model.get(), &session_options, &raw_session), "session");
  SessionPtr session(raw_session);
  colibri_session_info session_info{};
  session_info.struct_size = sizeof session_info;
  check_api(colibri_session_get_info(session.get(), &session_info), "session info");

  install_interrupt_handler();
  if (chat) {
    const int code = chat_loop(model.get(), session.get(), session_info.context_length, settings, seed,
                               flags.count("system") ? flags["system"].as<std::string>() : std::string());
    if (profile) print_profile(session.get());
    return code;
  }

  std::vector<int32_t> prompt = tokenize(model.get(), prompt_text, COLIBRI_TOKENIZE_ADD_SPECIAL);
  if (prompt.empty()) fail_usage("the prompt is empty: give some text with -p or -f");
  if (prompt.size() >= session_info.context_length)
    fail_runtime("the prompt has " + std::to_string(prompt.size()) + " tokens but the context holds " +
                 std::to_string(session_info.context_length) + " (one more is needed to generate): shorten the prompt" +
                 (session_info.context_length < info.max_position_embeddings ? " or raise --ctx" : "") + " (the model was trained on " +
                 std::to_string(info.max_position_embeddings) + " positions)");
  if (!settings.raw && !json) {
    std::fwrite(prompt_text.data(), 1, prompt_text.size(), stdout);
    std::fflush(stdout);
  }
  Outcome o = generate(session.get(), prompt, settings, seed, json, !json);
  if (json) {
    print_json(summary_json(o, seed));
  } else if (!settings.raw && !o.ends_with_newline) {
    std::fputc('\n', stdout);
  }
  std::fflush(stdout);
  std::fprintf(stderr, "colibri run: %s, seed %llu\n",
               summary(o.result.prompt_token_count, o.result.generated_token_count, o.result.prefill_ns, o.result.decode_ns,
                       finish_of(o)).c_str(),
               static_cast<unsigned long long>(seed));
  if (profile) print_profile(session.get());
  return o.result.finish_reason == COLIBRI_FINISH_CANCELLED ? kExitInterrupted : kExitOk;
}

}  // namespace colibri_cli

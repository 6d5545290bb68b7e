// cli/args.cpp — the flag vocabulary's rewriting and explaining layer (see args.h).
#include "args.h"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <set>

#include "common.h"

namespace colibri_cli {

namespace {

// Another tool's spelling of one of Colibri's flags. Applies only where `command` matches
// (nullptr: any) and the command has the target flag, so bench's own -r (repetitions) is
// never taken for run's -r (--stop).
struct Alias {
  const char *spelling;
  const char *target;  // the canonical long flag, with its dashes
  const char *command;
};

constexpr Alias kAliases[] = {
    {"-t", "--threads", nullptr},
    {"-c", "--window", "perplexity"},  // llama-perplexity's context is the window
    {"--ctx-size", "--window", "perplexity"},
    {"-c", "--ctx", nullptr},
    {"--ctx-size", "--ctx", nullptr},
    {"--max-seq-len", "--ctx", nullptr},
    {"-s", "--seed", nullptr},
    {"--n-predict", "--max-tokens", nullptr},
    {"-r", "--stop", "run"},
    {"--reverse-prompt", "--stop", nullptr},
    {"--no-mmap", "--load-into-memory", nullptr},
    {"--no-display-prompt", "--raw", nullptr},
    {"-i", "--chat", nullptr},
    {"--interactive", "--chat", nullptr},
    {"-cnv", "--chat", nullptr},
    {"--conversation", "--chat", nullptr},
    {"-sys", "--system", nullptr},
    {"--system-prompt", "--system", nullptr},
    {"--temperature", "--temp", nullptr},
    {"-np", "--parallel", "serve"},  // llama-server's
    {"--n-parallel", "--parallel", "serve"},
    {"-a", "--alias", "serve"},
    {"-b", "--batch-size", nullptr},
    {"-ub", "--batch-size", nullptr},
    {"--ubatch-size", "--batch-size", nullptr},
    {"-dev", "--device", nullptr},
    {"-mg", "--gpu-id", nullptr},  // llama.cpp's main GPU: the one the model runs on
    {"--main-gpu", "--gpu-id", nullptr},
};

// Flags that mean what Colibri does anyway: accepted and dropped.
constexpr const char *kAlreadySo[] = {"--mmap", "--no-warmup", "--no-flash-attn"};

// Flags Colibri does not have, with what it does instead.
struct Explained {
  const char *spelling;
  const char *why;
};

constexpr const char *kNoGpu =
    "Colibri runs the whole model on one device, never some layers on each: --device cuda (or cuda:N, or --gpu-id N) "
    "puts every layer on the GPU, the default --device cpu none";
constexpr const char *kNoServer =
    "this command does not serve HTTP: `colibri serve --host H --port N --parallel N` does (docs/server.md); or embed "
    "the serving engine in your service through the C API, Go or Rust bindings (docs/api.md)";
constexpr const char *kNotHere = "Colibri has no such option; see the command's --help for what it offers";

constexpr Explained kExplained[] = {
    {"-ngl", kNoGpu},
    {"--n-gpu-layers", kNoGpu},
    {"--gpu-layers", kNoGpu},
    {"-ts", kNoGpu},
    {"--tensor-split", kNoGpu},
    {"-sm", kNoGpu},
    {"--split-mode", kNoGpu},
    {"-fa", "attention always runs fused on the CPU (scores, softmax and values in one pass per token and KV head): there "
            "is no separate flash-attention mode to switch on"},
    {"--flash-attn", "attention always runs fused on the CPU (scores, softmax and values in one pass per token and KV "
                     "head): there is no separate flash-attention mode to switch on"},
    {"--port", kNoServer},
    {"--host", kNoServer},
    {"-np", kNoServer},
    {"--parallel", kNoServer},
    {"-cb", "batching across requests is always on in `colibri serve` (continuous batching in the engine)"},
    {"--cont-batching", "batching across requests is always on in `colibri serve` (continuous batching in the engine)"},
    {"--mirostat", "the sampler offers temperature, top-k, top-p, min-p and penalties, not mirostat"},
    {"--grammar", "constrained (grammar) sampling is not supported"},
    {"--grammar-file", "constrained (grammar) sampling is not supported"},
    {"--json-schema", "constrained (grammar) sampling is not supported"},
    {"--lora", "LoRA adapters are not supported: merge them into the checkpoint, then convert it"},
    {"--rope-scaling", "RoPE settings come from the image (the checkpoint's config.json); there is no override"},
    {"--rope-freq-base", "RoPE settings come from the image (the checkpoint's config.json); there is no override"},
    {"--rope-freq-scale", "RoPE settings come from the image (the checkpoint's config.json); there is no override"},
    {"--keep", kNotHere},
    {"--prompt-cache", kNotHere},
    {"-C", "thread placement follows the process's CPU set: run under taskset or numactl, or use --numa bind:N"},
    {"--cpu-mask", "thread placement follows the process's CPU set: run under taskset or numactl, or use --numa bind:N"},
    {"--cpu-range", "thread placement follows the process's CPU set: run under taskset or numactl, or use --numa bind:N"},
    {"--color", kNotHere},
    {"-e", "escapes in the prompt are not processed: the shell's $'...' quoting gives real newlines"},
    {"--escape", "escapes in the prompt are not processed: the shell's $'...' quoting gives real newlines"},
    {"-hf", "Colibri reads local .colibri images only: download the checkpoint, then `colibri-model convert HF_DIR -o X.colibri`"},
    {"--hf-repo", "Colibri reads local .colibri images only: download the checkpoint, then `colibri-model convert HF_DIR -o X.colibri`"},
};

bool is_number(const std::string &text) {
  if (text.empty()) return false;
  size_t i = text[0] == '-' || text[0] == '+' ? 1 : 0;
  if (i == text.size()) return false;
  bool digit = false;
  for (; i < text.size(); ++i) {
    const unsigned char ch = static_cast<unsigned char>(text[i]);
    if (std::isdigit(ch)) digit = true;
    else if (ch != '.' && ch != 'e' && ch != 'E' && ch != '-' && ch != '+' && ch != ',') return false;
  }
  return digit;
}

// The flags of `options`, with their dashes, split by whether they take a value.
struct Vocabulary {
  std::set<std::string> with_value, without_value;
  bool has(const std::string &flag) const { return with_value.count(flag) || without_value.count(flag); }
};

Vocabulary vocabulary_of(const cxxopts::Options &options) {
  Vocabulary v;
  for (const std::string &group : options.groups()) {
    for (const cxxopts::HelpOptionDetails &o : options.group_help(group).options) {
      std::set<std::string> &into = o.is_boolean ? v.without_value : v.with_value;
      if (!o.s.empty()) into.insert("-" + o.s);
      for (const std::string &l : o.l) into.insert("--" + l);
    }
  }
  return v;
}

// "0", "1", "0-0" or "1,1" (numactl's node-list syntax): the one node named, or a usage error
// when the list names several (Colibri binds to one node or interleaves).
std::string numa_bind_node(const std::string &list) {
  std::set<int64_t> nodes;
  size_t start = 0;
  for (;;) {
    const size_t comma = list.find(',', start);
    const std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t dash = item.find('-');
    const int64_t first = parse_integer("--numa-bind", dash == std::string::npos ? item : item.substr(0, dash), 0, 1023);
    const int64_t last = dash == std::string::npos ? first : parse_integer("--numa-bind", item.substr(dash + 1), 0, 1023);
    if (last < first) fail_usage("--numa-bind " + list + ": the range " + item + " is empty");
    for (int64_t n = first; n <= last; ++n) nodes.insert(n);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (nodes.size() != 1)
    fail_usage("--numa-bind " + list + " names " + std::to_string(nodes.size()) +
               " nodes: Colibri binds the weights and threads to one node (--numa-bind N, the same as --numa bind:N) or "
               "interleaves the weights over the nodes the process may use (--numa interleave; narrow them with "
               "`numactl --membind=" + list + "`)");
  return "bind:" + std::to_string(*nodes.begin());
}

}  // namespace

std::vector<std::string> normalize_arguments(const std::string &command, const cxxopts::Options &options, int argc,
                                             char **argv) {
  const Vocabulary vocabulary = vocabulary_of(options);
  std::vector<std::string> out;
  out.emplace_back(argc > 0 ? argv[0] : command);
  std::string kv_dtype;  // from -ctk / -ctv
  for (int i = 1; i < argc; ++i) {
    const std::string token = argv[i];
    if (token == "--") {  // everything after is positional
      for (; i < argc; ++i) out.emplace_back(argv[i]);
      break;
    }
    if (token.size() < 2 || token[0] != '-' || is_number(token)) {
      out.push_back(token);
      continue;
    }
    // --name=value: look the name up, keep the value attached.
    const size_t equals = token.rfind("--", 0) == 0 ? token.find('=') : std::string::npos;
    std::string name = equals == std::string::npos ? token : token.substr(0, equals);
    const std::string attached = equals == std::string::npos ? std::string() : token.substr(equals);
    // The value of a flag that takes one: the attached "=value" or the next argument.
    auto take_value = [&](const std::string &flag) -> std::string {
      if (!attached.empty()) return attached.substr(1);
      if (i + 1 >= argc) fail_usage(flag + " needs a value (see 'colibri " + command + " --help')");
      return argv[++i];
    };

    if (std::find_if(std::begin(kAlreadySo), std::end(kAlreadySo), [&](const char *s) { return name == s; }) !=
        std::end(kAlreadySo))
      continue;
    if ((name == "-ctk" || name == "-ctv" || name == "--cache-type-k" || name == "--cache-type-v") && vocabulary.has("--kv-f16")) {
      const std::string value = take_value(name);
      if (value != "f16" && value != "f32")
        fail_usage(name + " " + value + ": the KV cache is f32 (the default) or f16 (--kv-f16); " + value +
                   " is not supported");
      if (!kv_dtype.empty() && kv_dtype != value)
        fail_usage(name + " " + value + ": keys and values share one dtype in Colibri (got " + kv_dtype + " and " + value +
                   "); give f16 to both, or --kv-f16");
      if (value == "f16" && kv_dtype.empty()) out.emplace_back("--kv-f16");
      kv_dtype = value;
      continue;
    }
    if ((name == "-o" || name == "--output") && command == "bench") {
      const std::string value = take_value(name);
      if (value == "json") out.emplace_back("--json");
      else if (value != "md")
        fail_usage(name + " " + value + ": bench prints a markdown table (the default, -o md) or one JSON object (-o json, "
                   "the same as --json)");
      continue;
    }
    if (name == "--numa-bind" && vocabulary.has("--numa")) {
      out.emplace_back("--numa");
      out.push_back(numa_bind_node(take_value(name)));
      continue;
    }
    if (!vocabulary.has(name)) {
      for (const Alias &a : kAliases) {
        if (name == a.spelling && (!a.command || command == a.command) && vocabulary.has(a.target)) {
          name = a.target;
          break;
        }
      }
    }
    if (!vocabulary.has(name)) {
      for (const Explained &e : kExplained)
        if (name == e.spelling)
          fail_usage(name + " is not a Colibri flag: " + e.why + " (see 'colibri " + command + " --help')");
      // A single dash and several letters is an unknown flag, not a short flag and its value:
      // -ngl is not "-n gl". "-n64" (a short flag with a number attached) stays valid.
      if (name[1] != '-' && name.size() > 2) {
        const std::string short_flag = name.substr(0, 2);
        if (!(vocabulary.with_value.count(short_flag) && is_number(name.substr(2))))
          fail_usage("unknown flag '" + name + "': short flags are one letter (e.g. " +
                     (vocabulary.with_value.count(short_flag) ? short_flag + " VALUE" : std::string("-m IMAGE")) +
                     ") and long ones take two dashes (see 'colibri " + command + " --help')");
      }
    }
    out.push_back(name + attached);
    // The next argument is this flag's value: copy it as it is (it may start with '-').
    if (attached.empty() && vocabulary.with_value.count(name) && i + 1 < argc) out.emplace_back(argv[++i]);
  }
  return out;
}

}  // namespace colibri_cli

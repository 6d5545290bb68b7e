// cli/common.cpp — shared helpers of the colibri subcommands (see common.h).
#include "common.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "args.h"

namespace colibri_cli {

void fail_usage(const std::string &message) { throw Failure{kExitUsage, message}; }
void fail_runtime(const std::string &message) { throw Failure{kExitFailure, message}; }
void fail_io(const std::string &message) { throw Failure{kExitIo, message}; }

int exit_code_for_status(int32_t status) {
  switch (status) {
    case COLIBRI_ERROR_INVALID_ARGUMENT: return kExitUsage;
    case COLIBRI_ERROR_IO:
    case COLIBRI_ERROR_OUT_OF_MEMORY: return kExitIo;  // the OS ran out of something: not a bug
    case COLIBRI_ERROR_NOT_AN_IMAGE: return kExitNotAnImage;
    case COLIBRI_ERROR_UNSUPPORTED: return kExitUnsupported;
    case COLIBRI_ERROR_INTERNAL: return kExitInternal;
    default: return kExitFailure;  // corrupt, non-finite, context full, ...
  }
}

std::string last_api_error(int32_t status) {
  size_t size = 0;
  colibri_last_error(nullptr, 0, &size);
  std::string message(size + 1, '\0');
  colibri_last_error(message.data(), message.size(), &size);
  message.resize(std::strlen(message.c_str()));
  if (message.empty()) message = colibri_status_string(status);
  return message;
}

void check_api(int32_t status, const std::string &what) {
  if (status < 0)
    throw Failure{exit_code_for_status(status), what.empty() ? last_api_error(status) : what + ": " + last_api_error(status)};
}

// ---- flag values -------------------------------------------------------------------------------

int64_t parse_integer(const std::string &flag, const std::string &text, int64_t min, int64_t max) {
  const std::string range = "an integer from " + std::to_string(min) + " to " + std::to_string(max);
  const char *begin = text.c_str();
  while (*begin == ' ') ++begin;
  char *end = nullptr;
  errno = 0;
  long long value = std::strtoll(begin, &end, 10);
  while (end && *end == ' ') ++end;
  if (*begin == '\0' || end == begin || *end != '\0')
    fail_usage(flag + " must be " + range + ", got '" + text + "'");
  if (errno == ERANGE || value < min || value > max)
    fail_usage(flag + " must be " + range + ", got " + text);
  return value;
}

double parse_real(const std::string &flag, const std::string &text, double min, double max) {
  std::ostringstream range;
  range << "a number from " << min << " to " << max;
  const char *begin = text.c_str();
  char *end = nullptr;
  errno = 0;
  double value = std::strtod(begin, &end);
  if (*begin == '\0' || end == begin || *end != '\0')
    fail_usage(flag + " must be " + range.str() + ", got '" + text + "'");
  if (errno == ERANGE || !std::isfinite(value) || value < min || value > max)
    fail_usage(flag + " must be " + range.str() + ", got " + text);
  return value;
}

std::vector<int64_t> parse_integer_list(const std::string &flag, const std::string &text, int64_t min, int64_t max) {
  std::vector<int64_t> values;
  size_t start = 0;
  for (;;) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.find_first_not_of(' ') == std::string::npos)
      fail_usage(flag + " must be a comma-separated list of integers from " + std::to_string(min) + " to " +
                 std::to_string(max) + ", got '" + text + "'");
    values.push_back(parse_integer(flag, item, min, max));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return values;
}

uint32_t parse_threads(const std::string &flag, const std::string &text) {
  return static_cast<uint32_t>(parse_integer(flag, text, 1, 1024));
}

std::vector<int32_t> parse_token_list(const std::string &flag, const std::string &text, uint64_t vocab_size) {
  std::vector<int32_t> tokens;
  for (int64_t v : parse_integer_list(flag, text, 0, INT32_MAX)) {
    if (static_cast<uint64_t>(v) >= vocab_size)
      fail_usage(flag + ": token " + std::to_string(v) + " is outside the model's vocabulary (ids 0.." +
                 std::to_string(vocab_size - 1) + ")");
    tokens.push_back(static_cast<int32_t>(v));
  }
  return tokens;
}

// ---- model flags ------------------------------------------------------------------------------

void add_model_flags(cxxopts::Options &options, FlagSet set) {
  options.add_options("Model")
      ("m,model", "model image (.colibri); default: the bundled colibri-tiny-moe (see docs/cli.md for where it is looked for)",
       cxxopts::value<std::string>(), "IMAGE");
  if (set == FlagSet::ImageOnly) return;
  if (set == FlagSet::Full)
    options.add_options("Model")("t,threads", "worker threads, 1..1024 (default: every CPU this process may use: under "
                                 "taskset, numactl --cpunodebind or a cpuset, the CPUs it allows)",
                                 cxxopts::value<std::string>(), "N");
  options.add_options("Model")
      ("numa", "NUMA placement: off, bind:NODE (weights and threads on NODE) or interleave (weight pages over the nodes the "
       "process may use); both copy the weights into placed memory (docs/cli.md)",
       cxxopts::value<std::string>()->default_value("off"), "POLICY")
      ("mlock", "lock the whole image in memory (fails if RLIMIT_MEMLOCK is too small: see ulimit -l)")
      ("populate", "fault every weight page in at open (MAP_POPULATE)")
      ("load-into-memory", "copy the image into huge-page memory at open instead of serving the weights from the file "
                           "mapping: a few percent faster decode, costs a read of the file and its size in private memory")
      ("verify", "check every tensor's checksum at open (reads the whole file)")
      ("warmup", "read every weight page once at open, so the first tokens do not pay for page faults")
      ("route-deterministic", "accepted for compatibility and changes nothing: routing is always deterministic (fp32 "
                              "softmax, ties to the lower expert index; the same bits for any thread count or batch)")
      ("isa", "widest CPU kernels: auto (the best the CPU has), avx512, avx2 or scalar. One level gives the same bits "
              "on every CPU that has it; levels differ in the last bits of the logits",
       cxxopts::value<std::string>()->default_value("auto"), "ISA")
      ("device", "where the forward pass runs: cpu, or cuda / cuda:N for the whole model on NVIDIA GPU N (the CUDA "
                 "backend: a build with it, a driver and the device; docs/api.md \"Devices\" lists what it runs)",
       cxxopts::value<std::string>()->default_value("cpu"), "DEVICE")
      ("gpu-id", "the same as --device cuda:N", cxxopts::value<std::string>(), "N");
}

void apply_session_flags(const ModelFlags &flags, colibri_session_options *options) {
  options->max_isa = flags.max_isa;
  options->device_kind = flags.device_kind;
  options->device_index = flags.device_index;
}

ModelFlags read_model_flags(const cxxopts::ParseResult &result, FlagSet set) {
  ModelFlags flags;
  if (result.count("model")) {
    flags.image = result["model"].as<std::string>();
    if (flags.image.empty()) fail_usage("-m/--model is empty: give the path of a .colibri image");
  }
  if (set == FlagSet::ImageOnly) return flags;
  if (set == FlagSet::Full && result.count("threads")) flags.threads = parse_threads("--threads", result["threads"].as<std::string>());
  const std::string numa = result["numa"].as<std::string>();
  if (numa == "off") {
    flags.numa_policy = COLIBRI_NUMA_OFF;
  } else if (numa == "interleave") {
    flags.numa_policy = COLIBRI_NUMA_INTERLEAVE;
  } else if (numa.rfind("bind:", 0) == 0) {
    flags.numa_policy = COLIBRI_NUMA_BIND;
    flags.numa_node = static_cast<uint32_t>(parse_integer("--numa bind:NODE", numa.substr(5), 0, 1023));
  } else {
    fail_usage("--numa must be off, bind:NODE (e.g. bind:0) or interleave, got '" + numa + "'" +
               (numa == "distribute" || numa == "isolate" || numa == "numactl"
                    ? " (llama.cpp's " + numa + " is not a Colibri policy: run under `numactl` and Colibri keeps its CPU "
                      "and memory sets, or use bind:NODE / interleave)"
                    : std::string()));
  }
  flags.lock_memory = result.count("mlock") > 0;
  flags.populate = result.count("populate") > 0;
  flags.load_into_memory = result.count("load-into-memory") > 0;
  flags.verify = result.count("verify") > 0;
  flags.warm_up = result.count("warmup") > 0;
  const std::string isa = result["isa"].as<std::string>();
  if (isa == "auto") flags.max_isa = COLIBRI_ISA_AUTO;
  else if (isa == "avx512") flags.max_isa = COLIBRI_ISA_AVX512;
  else if (isa == "avx2") flags.max_isa = COLIBRI_ISA_AVX2;
  else if (isa == "scalar") flags.max_isa = COLIBRI_ISA_SCALAR;
  else fail_usage("--isa must be auto, avx512, avx2 or scalar, got '" + isa + "'");
  const std::string device = result["device"].as<std::string>();
  if (device == "cpu") {
    flags.device_kind = COLIBRI_DEVICE_CPU;
  } else if (device == "cuda" || device == "gpu") {
    flags.device_kind = COLIBRI_DEVICE_CUDA;
  } else if (device.rfind("cuda:", 0) == 0) {
    flags.device_kind = COLIBRI_DEVICE_CUDA;
    flags.device_index = static_cast<uint32_t>(parse_integer("--device cuda:N", device.substr(5), 0, 1023));
  } else {
    fail_usage("--device must be cpu, cuda or cuda:N (e.g. cuda:0), got '" + device + "'");
  }
  if (result.count("gpu-id")) {
    const uint32_t id = static_cast<uint32_t>(parse_integer("--gpu-id", result["gpu-id"].as<std::string>(), 0, 1023));
    if (result.count("device") && (flags.device_kind != COLIBRI_DEVICE_CUDA || flags.device_index != id))
      fail_usage("--gpu-id " + std::to_string(id) + " and --device " + device +
                 " name different devices: give one of them (--gpu-id N is --device cuda:N)");
    flags.device_kind = COLIBRI_DEVICE_CUDA;
    flags.device_index = id;
  }
  if (flags.device_kind == COLIBRI_DEVICE_CUDA && flags.numa_policy != COLIBRI_NUMA_OFF)
    fail_usage("--numa places CPU threads and weights; it does not apply with --device cuda (drop one of them)");
  return flags;
}

namespace {

bool is_regular_file(const std::string &path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string executable_dir() {
  char buffer[4096];
  ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  if (n <= 0) return {};
  std::string path(buffer, static_cast<size_t>(n));
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string{} : path.substr(0, slash);
}

}  // namespace

std::vector<std::string> default_model_candidates() {
  // Relative to the executable only: <prefix>/bin/colibri reads <prefix>/share/colibri/models,
  // and the build tree mirrors that layout (cli/CMakeLists.txt); no build path is compiled in.
  std::vector<std::string> candidates;
  std::string dir = executable_dir();
  if (!dir.empty()) candidates.push_back(dir + "/" COLIBRI_CLI_INSTALL_RELATIVE_MODEL);
  return candidates;
}

std::string resolve_model_path(const ModelFlags &flags) {
  if (!flags.image.empty()) return flags.image;
  std::vector<std::string> candidates = default_model_candidates();
  for (const std::string &c : candidates)
    if (is_regular_file(c)) return c;
  std::string looked;
  for (const std::string &c : candidates) looked += (looked.empty() ? "" : ", ") + c;
  fail_io("no -m IMAGE given and the bundled default model was not found (looked at: " + looked +
               "). Build it with `cmake --build BUILD_DIR` (it is part of the default target), or convert a Hugging "
               "Face checkpoint with `colibri-model convert HF_DIR -o X.colibri` and pass `-m X.colibri`");
}

ModelPtr open_model(const ModelFlags &flags) {
  std::string path = resolve_model_path(flags);
  colibri_model_options options;
  check_api(colibri_model_options_init(&options, sizeof options), "model options");
  options.threads = flags.threads;
  options.numa_policy = flags.numa_policy;
  options.numa_node = flags.numa_node;
  options.lock_memory = flags.lock_memory ? 1 : 0;
  options.populate = flags.populate ? 1 : 0;
  options.load_into_memory = flags.load_into_memory ? 1 : 0;
  options.warm_up = flags.warm_up ? 1 : 0;
  options.verify_checksums = flags.verify ? 1 : 0;
  colibri_model *model = nullptr;
  int32_t status = colibri_model_open(path.c_str(), &options, &model);
  if (status < 0) {
    std::string message = last_api_error(status);
    // The library's messages name the file already; add it when one does not.
    if (message.find(path) == std::string::npos) message = path + ": " + message;
    throw Failure{exit_code_for_status(status), message};
  }
  return ModelPtr(model);
}

colibri_model_info model_info(const colibri_model *model) {
  colibri_model_info info{};
  info.struct_size = sizeof info;
  check_api(colibri_model_get_info(model, &info), "model info");
  return info;
}

std::string read_text_file(const std::string &flag, const std::string &path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0)
    fail_io(flag + " " + path + ": " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail_io(flag + " " + path + ": is a directory, give a text file");
  // A device (/dev/zero, /dev/urandom, a disk) would be read until memory runs out; a pipe is
  // fine (it ends when its writer closes it), and "-" reads standard input.
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
    fail_io(flag + " " + path + ": is a device, give a text file (or - for standard input)");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_io(flag + " " + path + ": " + std::strerror(errno));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail_io(flag + " " + path + ": read error");
  return text;
}

void print_json(const nlohmann::json &value) {
  std::printf("%s\n", value.dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

namespace {

extern "C" void log_to_stderr(void *, int32_t level, const char *message) {
  const char *name = level >= COLIBRI_LOG_ERROR ? "error" : level == COLIBRI_LOG_WARNING ? "warning" : level == COLIBRI_LOG_INFO ? "info" : "debug";
  std::fprintf(stderr, "colibri: %s: %s\n", name, message);
}

void install_log_level(const std::string &level) {
  int32_t min_level = COLIBRI_LOG_OFF;
  if (level == "debug") min_level = COLIBRI_LOG_DEBUG;
  else if (level == "info") min_level = COLIBRI_LOG_INFO;
  else if (level == "warning" || level == "warn") min_level = COLIBRI_LOG_WARNING;
  else if (level == "error") min_level = COLIBRI_LOG_ERROR;
  else if (level != "off") fail_usage("--log-level must be off, error, warning, info or debug, got '" + level + "'");
  if (min_level != COLIBRI_LOG_OFF) check_api(colibri_set_log_callback(log_to_stderr, nullptr, min_level), "--log-level");
}

}  // namespace

cxxopts::ParseResult parse_flags(cxxopts::Options &options, int argc, char **argv, bool *help_shown) {
  options.add_options("Help")("h,help", "show this help");
  options.add_options("Output")("log-level", "the library's log messages on standard error at LEVEL and above: off, "
                                "error, warning, info (model open, session set-up) or debug",
                                cxxopts::value<std::string>()->default_value("off"), "LEVEL");
  options.set_width(100);
  *help_shown = false;
  const std::string program = options.program();
  const std::string command = program.substr(program.find(' ') == std::string::npos ? 0 : program.find(' ') + 1);
  std::vector<std::string> arguments = normalize_arguments(command, options, argc, argv);
  std::vector<const char *> pointers;
  for (const std::string &a : arguments) pointers.push_back(a.c_str());
  try {
    cxxopts::ParseResult result = options.parse(static_cast<int>(pointers.size()), pointers.data());
    if (result.count("help")) {
      // Groups in reading order (cxxopts would sort them by name).
      // groups() returns a copy: one copy for both iterators.
      const std::vector<std::string> present = options.groups();
      std::vector<std::string> groups;
      for (const char *g : {"Input", "Input and output", "Tests", "Evaluation", "Generation", "Sampling", "Server", "Model",
                            "Output", "Help"})
        if (std::find(present.begin(), present.end(), g) != present.end()) groups.emplace_back(g);
      std::cout << options.help(groups);
      *help_shown = true;
      return result;
    }
    if (!result.unmatched().empty())
      fail_usage("unexpected argument '" + result.unmatched().front() + "' (see '" + options.program() + " --help')");
    install_log_level(result["log-level"].as<std::string>());
    return result;
  } catch (const cxxopts::exceptions::exception &e) {
    fail_usage(std::string(e.what()) + " (see '" + options.program() + " --help')");
  }
}

std::vector<int32_t> tokenize(const colibri_model *model, const std::string &text, uint32_t flags) {
  size_t count = 0;
  check_api(colibri_tokenize(model, text.data(), text.size(), flags, nullptr, 0, &count), "tokenize");
  std::vector<int32_t> tokens(count);
  if (count == 0) return tokens;
  check_api(colibri_tokenize(model, text.data(), text.size(), flags, tokens.data(), tokens.size(), &count), "tokenize");
  tokens.resize(count);
  return tokens;
}

// Renders the conversation with the model's template (ending with the assistant's turn).
std::string render_chat(const colibri_model *model, const std::vector<std::pair<std::string, std::string>> &history) {
  std::vector<colibri_chat_message> messages;
  for (const auto &[role, content] : history) messages.push_back({role.c_str(), content.c_str()});
  size_t size = 0;
  check_api(colibri_chat_render(model, messages.data(), messages.size(), nullptr, nullptr, 0, &size), "chat template");
  std::string text(size + 1, '\0');
  check_api(colibri_chat_render(model, messages.data(), messages.size(), nullptr, text.data(), text.size(), &size),
            "chat template");
  text.resize(size);
  return text;
}

std::string detokenize(const colibri_model *model, const std::vector<int32_t> &tokens, uint32_t flags) {
  if (tokens.empty()) return {};
  size_t size = 0;
  check_api(colibri_detokenize(model, tokens.data(), tokens.size(), flags, nullptr, 0, &size), "detokenize");
  std::string text(size + 1, '\0');
  check_api(colibri_detokenize(model, tokens.data(), tokens.size(), flags, text.data(), text.size(), &size), "detokenize");
  text.resize(size);
  return text;
}

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

double seconds_since(uint64_t start_ns) { return static_cast<double>(now_ns() - start_ns) / 1e9; }

MappingPages mapping_pages(const std::string &path) {
  MappingPages pages;
  char resolved[PATH_MAX];
  if (!::realpath(path.c_str(), resolved)) return pages;
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  auto kilobytes = [](const std::string &l, const char *field) -> int64_t {
    const size_t n = std::strlen(field);
    if (l.compare(0, n, field) != 0) return -1;
    return std::strtoll(l.c_str() + n, nullptr, 10);
  };
  while (std::getline(smaps, line)) {
    // A mapping's first line: "start-end perms offset dev inode   pathname"; field lines are
    // "Name:   value kB", and no field name holds a '-' before its ':'.
    const size_t colon = line.find(':'), dash = line.find('-');
    if (dash != std::string::npos && (colon == std::string::npos || dash < colon) && std::isxdigit(static_cast<unsigned char>(line[0]))) {
      const size_t slash = line.find('/');
      inside = slash != std::string::npos && line.compare(slash, std::string::npos, resolved) == 0;
      if (inside) pages.found = true;
      continue;
    }
    if (!inside) continue;
    if (int64_t kb = kilobytes(line, "Rss:"); kb >= 0) pages.resident_bytes += static_cast<uint64_t>(kb) << 10;
    if (int64_t kb = kilobytes(line, "FilePmdMapped:"); kb >= 0) pages.huge_page_bytes += static_cast<uint64_t>(kb) << 10;
  }
  return pages;
}

}  // namespace colibri_cli

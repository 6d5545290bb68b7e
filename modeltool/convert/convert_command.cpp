// modeltool/convert/convert_command.cpp — `colibri-model convert`: the command line over
// convert_checkpoint(). Options are documented here (--help) and in docs/convert.md.
#include <charconv>
#include <cstdio>
#include <string>
#include <vector>

#include "modeltool/cli_support.h"
#include "modeltool/commands.h"
#include "modeltool/convert/converter.h"
#include "util/strings.h"

namespace colibri::modeltool {

namespace {

constexpr const char *kDescription =
    "Converts a Hugging Face safetensors checkpoint (MixtralForCausalLM, Qwen2MoeForCausalLM,\n"
    "Qwen3MoeForCausalLM, OlmoeForCausalLM) into a Colibri model image. MODEL_DIR holds\n"
    "config.json, tokenizer.json and model.safetensors (or model.safetensors.index.json and its\n"
    "shards). Norms, biases and routers are always stored as f32. See docs/convert.md.";

int usage_error(const std::string &message) {
  std::fprintf(stderr, "colibri-model convert: %s\nRun 'colibri-model convert --help' for usage.\n", message.c_str());
  return kExitUsage;
}

bool parse_u64(const std::string &text, uint64_t *out) {
  const char *end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && ptr == end && !text.empty();
}

}  // namespace

// More conversion threads than this is a typo, not a machine.
constexpr uint64_t kMaxConvertThreads = 1024;

int run_convert(int argc, char **argv) {
  cxxopts::Options options("colibri-model convert", kDescription);
  options.custom_help("MODEL_DIR -o OUT.colibri [OPTION...]");
  options.positional_help("");
  options.add_options()
      ("o,output", "image to write (may also be given as the second argument)", cxxopts::value<std::string>())
      ("dtype", "stored weight dtype: f32, f16, bf16, q8, q8f16, q4 or mxfp4 (default: the checkpoint's float "
                "type when all its weights share one, else f16); q4 and mxfp4 quantise the experts and store the "
                "other matrices as q8f16", cxxopts::value<std::string>())
      ("tensor-dtype", "CLASS=DTYPE: store one tensor class in another dtype (classes: embeddings, output, "
                       "attention, experts, shared_expert, dense_ffn; router and vectors stay f32); repeatable",
       cxxopts::value<std::vector<std::string>>())
      // Numbers are parsed here, not by cxxopts (its integer parser trips GCC 12's -Wrestrict).
      ("group-size", "group size of q8 (32 or 64) and q4 (32, 64 or 128)", cxxopts::value<std::string>()->default_value("32"))
      ("alignment", "tensor alignment in bytes: a power of two from 64 to 2097152",
       cxxopts::value<std::string>()->default_value("4096"))
      ("threads", "conversion threads (0 = all the CPUs this process may use)",
       cxxopts::value<std::string>()->default_value("0"))
      ("f,force", "overwrite OUT if it exists")
      ("q,quiet", "no progress and no summary line")
      ("no-progress", "no progress on standard error (the summary line stays)")
      ("h,help", "show this help")
      ("paths", "MODEL_DIR [OUT]", cxxopts::value<std::vector<std::string>>());
  options.parse_positional({"paths"});

  int exit_code = kExitOk;
  std::optional<cxxopts::ParseResult> args = parse_or_report(options, argc, argv, &exit_code);
  if (!args) return exit_code;

  convert::ConvertOptions request;
  bool quiet = false;
  try {  // as<T>() throws on values of the wrong type
    std::vector<std::string> paths;
    if (args->count("paths")) paths = (*args)["paths"].as<std::vector<std::string>>();
    if (args->count("output")) paths.push_back((*args)["output"].as<std::string>());
    if (paths.size() != 2) return usage_error("give the checkpoint directory and the output image: MODEL_DIR -o OUT");
    request.input = paths[0];
    request.output = paths[1];
    if (args->count("dtype")) {
      std::string name = (*args)["dtype"].as<std::string>();
      image::DType dtype;
      if (!image::dtype_from_name(name.c_str(), &dtype))
        return usage_error("unknown --dtype '" + name + "' (use f32, f16, bf16, q8, q8f16, q4 or mxfp4)");
      request.dtype = dtype;
    }
    if (args->count("tensor-dtype")) {
      for (const std::string &item : (*args)["tensor-dtype"].as<std::vector<std::string>>()) {
        const size_t eq = item.find('=');
        image::DType dtype;
        if (eq == std::string::npos || eq == 0)
          return usage_error("--tensor-dtype '" + item + "': expected CLASS=DTYPE, e.g. embeddings=q8f16");
        if (!image::dtype_from_name(item.substr(eq + 1).c_str(), &dtype))
          return usage_error("--tensor-dtype '" + item + "': unknown dtype (use f32, f16, bf16, q8, q8f16, q4 or mxfp4)");
        request.class_dtypes.emplace_back(item.substr(0, eq), dtype);
      }
    }
    std::string group = (*args)["group-size"].as<std::string>();
    if (group != "32" && group != "64" && group != "128")
      return usage_error("--group-size " + group + " is not supported (q8: 32 or 64; q4: 32, 64 or 128)");
    request.group_size = static_cast<uint32_t>(std::stoul(group));
    std::string alignment = (*args)["alignment"].as<std::string>();
    if (!parse_u64(alignment, &request.alignment))
      return usage_error("--alignment '" + alignment + "' is not a number of bytes");
    std::string threads = (*args)["threads"].as<std::string>();
    uint64_t thread_count = 0;
    if (!parse_u64(threads, &thread_count) || thread_count > kMaxConvertThreads)
      return usage_error("--threads '" + threads + "': give 0 (all CPUs) to " + std::to_string(kMaxConvertThreads));
    request.threads = static_cast<size_t>(thread_count);
    request.overwrite = args->count("force") > 0;
    quiet = args->count("quiet") > 0;
  } catch (const cxxopts::exceptions::exception &e) {
    return usage_error(e.what());
  }
  request.progress = !quiet && args->count("no-progress") == 0;

  convert::ConvertReport report;
  install_interrupt_handler();  // Ctrl-C: stop within a chunk, remove the temporary output
  if (Error e = convert::convert_checkpoint(request, &report)) {
    // Corrupt here means the checkpoint, not an image: say so (same exit code).
    const char *kind = e.kind == ErrorKind::Corrupt ? "invalid checkpoint" : error_kind_name(e.kind);
    std::fprintf(stderr, "colibri-model convert: %s: %s\n", kind, e.message.c_str());
    return exit_code_for(e);
  }
  // Warnings go to stderr even with -q: they describe the image that was written.
  for (const std::string &warning : report.warnings) std::fprintf(stderr, "colibri-model convert: warning: %s\n", warning.c_str());
  if (!quiet) {
    for (const std::string &name : report.ignored)
      std::printf("note: left out '%s' (the model does not use it)\n", name.c_str());
    double mb_per_s = report.seconds > 0 ? static_cast<double>(report.source_bytes) / 1e6 / report.seconds : 0.0;
    std::printf("wrote %s: %s, %zu tensors, %s weights%s, %s, in %.1f s (%.0f MB/s)\n", request.output.c_str(),
                report.architecture.c_str(), report.tensor_count, image::dtype_name(report.dtype),
                report.mxfp4_experts_kept ? " (experts mxfp4, as the checkpoint stores them)" : "",
                util::human_bytes(report.image_bytes).c_str(), report.seconds, mb_per_s);
  }
  return kExitOk;
}

}  // namespace colibri::modeltool

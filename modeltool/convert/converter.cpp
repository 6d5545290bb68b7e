// modeltool/convert/converter.cpp — the conversion, step by step: locate the checkpoint,
// read and check config.json, map the tensors, build the metadata, stream the weights.
#include "modeltool/convert/converter.h"

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "colibri_version.h"
#include "modeltool/convert/families.h"
#include "modeltool/convert/safetensors.h"
#include "modeltool/convert/source_files.h"
#include "modeltool/convert/tensor_plan.h"
#include "modeltool/convert/tensor_stream.h"
#include "modeltool/convert/tokenizer_metadata.h"
#include "image/writer.h"
#include "model/header_fields.h"
#include "model/tensor_names.h"
#include "modeltool/cli_support.h"
#include "util/atomic_file.h"
#include "util/strings.h"
#include "tokenizer/tokenizer.h"

namespace colibri::modeltool::convert {

using nlohmann::json;
using util::strprintf;

namespace {

// The checkpoint directory: `input` itself, or the directory of a file inside it
// (users often point at model.safetensors or config.json).
Error locate_checkpoint(const std::string &input, std::string *directory) {
  struct stat st;
  if (::stat(input.c_str(), &st) != 0) {
    int e = errno;
    return make_error(ErrorKind::Io, strprintf("checkpoint '%s': %s", input.c_str(), util::errno_text(e).c_str()));
  }
  if (S_ISDIR(st.st_mode)) {
    *directory = input;
  } else {
    std::string parent = std::filesystem::path(input).parent_path().string();
    *directory = parent.empty() ? "." : parent;
  }
  return {};
}

Error check_options(const ConvertOptions &options) {
  if (options.output.empty()) return make_error(ErrorKind::InvalidArgument, "no output path given");
  if (options.group_size != 32 && options.group_size != 64 && options.group_size != 128)
    return make_error(ErrorKind::InvalidArgument,
                      strprintf("group size %u is not supported (q8: 32 or 64; q4: 32, 64 or 128)", options.group_size));
  // Fail before the long part, not after it.
  std::string parent = std::filesystem::path(options.output).parent_path().string();
  struct stat st;
  if (!parent.empty() && (::stat(parent.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)))
    return make_error(ErrorKind::Io, strprintf("cannot write '%s': directory '%s' does not exist",
                                               options.output.c_str(), parent.c_str()));
  if (::stat(options.output.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      return make_error(ErrorKind::InvalidArgument,
                        strprintf("output '%s' is a directory; give a file path", options.output.c_str()));
    if (!options.overwrite)
      return make_error(ErrorKind::InvalidArgument,
                        strprintf("output '%s' already exists; pass --force to overwrite it", options.output.c_str()));
  }
  return {};
}

Error check_output_is_not_an_input(const std::string &output, const std::vector<std::string> &inputs) {
  for (const std::string &input : inputs)
    if (util::same_file(output, input))
      return make_error(ErrorKind::InvalidArgument,
                        strprintf("output '%s' is the same file as the input '%s'; choose another output path",
                                  output.c_str(), input.c_str()));
  return {};
}

// The original Colibri header fields, from the first MoE layer (model::header_fields: the
// definition every open checks the header against).
image::ModelHeaderFields header_fields(const model::ModelConfig &config, const TensorPlan &plan) {
  std::vector<image::TensorSpec> specs;
  for (const PlannedTensor &t : plan.tensors) specs.push_back(t.spec);
  return model::header_fields(config, specs);
}

// Every shard goes through XXH3 for the provenance before the image is written (its
// metadata precedes the weights); on a large checkpoint this takes a while, so it shows.
Error hash_shards(const SafetensorsCheckpoint &checkpoint, bool show_progress, SourceFiles *files) {
  uint64_t total = 0, done = 0;
  for (const auto &shard : checkpoint.shards()) total += shard->file_size();
  std::optional<Progress> progress;
  if (show_progress) progress.emplace("hash   ", total);
  for (size_t i = 0; i < checkpoint.shards().size(); ++i) {
    const std::string detail = strprintf("shard %zu/%zu", i + 1, checkpoint.shards().size());
    Error e = files->record(checkpoint.shards()[i]->name(), [&](uint64_t bytes) {
      if (progress) progress->update(done += bytes, detail);
    });
    if (e) return e;
  }
  if (progress) progress->finish();
  return {};
}

json provenance(const TensorPlan &plan, const SourceFiles &files) {
  return {{"converter", std::string("colibri-model ") + COLIBRI_PROJECT_VERSION_STRING},
          {"source_format", "huggingface-safetensors"},
          {"source_dtypes", plan.source_dtypes},
          {"sources", files.provenance()}};
}

Error write_image(const ConvertOptions &options, const image::ModelHeaderFields &fields, const TensorPlan &plan,
                  const SafetensorsCheckpoint &checkpoint, const std::string &metadata, ConvertReport *report) {
  std::vector<image::TensorSpec> specs;
  uint64_t total_bytes = 0;
  for (const PlannedTensor &t : plan.tensors) {
    specs.push_back(t.spec);
    total_bytes += t.source_bytes();
  }
  image::WriterOptions writer_options;
  writer_options.alignment = options.alignment;
  writer_options.overwrite = options.overwrite;
  image::ImageWriter writer;
  if (Error e = writer.begin(options.output, writer_options, fields, std::move(specs), metadata)) return e;
  note_removed_stale("convert", writer.removed_stale());

  // The bar draws only on a terminal (Progress checks isatty(2)).
  std::optional<Progress> progress;
  if (options.progress) progress.emplace("convert", total_bytes);
  const size_t count = plan.tensors.size();
  auto show = [&](size_t done_tensors, uint64_t done_bytes) {
    if (progress) progress->update(done_bytes, strprintf("%zu/%zu tensors", done_tensors, count));
  };
  util::ThreadPoolOptions pool_options;
  pool_options.thread_count = options.threads;  // 0: the CPUs this process may use
  Error pool_error;
  std::unique_ptr<util::ThreadPool> pool =
      util::ThreadPool::create(pool_options, "convert's conversion threads (--threads)", &pool_error);
  if (!pool) return pool_error;
  TensorStreamer streamer(*pool);
  uint64_t done_bytes = 0;
  for (size_t i = 0; i < count; ++i) {
    auto on_progress = [&](uint64_t bytes) { show(i, done_bytes += bytes); };
    if (Error e = streamer.write(checkpoint, plan.tensors[i], &writer, on_progress)) {
      if (progress) progress->finish();  // end the bar's line before the error message
      return e;
    }
  }
  show(count, done_bytes);
  if (progress) progress->finish();
  if (Error e = writer.finish()) return e;
  report->source_bytes = total_bytes;
  return {};
}

}  // namespace

Error convert_checkpoint(const ConvertOptions &options, ConvertReport *report) {
  const auto start = std::chrono::steady_clock::now();
  *report = ConvertReport{};
  if (Error e = check_options(options)) return e;
  std::string directory;
  if (Error e = locate_checkpoint(options.input, &directory)) return e;
  SourceFiles files(directory);

  // 1. Hyper-parameters.
  json config;
  bool present = false;
  if (Error e = files.read_json("config.json", &config, &present)) return e;
  if (!present)
    return make_error(ErrorKind::Io, strprintf("'%s' has no config.json: give the Hugging Face model directory "
                                               "(config.json, tokenizer.json and the *.safetensors files)",
                                               directory.c_str()));
  const FamilyInfo *family = nullptr;
  model::ModelConfig model_config;
  if (Error e = read_hf_config(config, &family, &model_config)) return e;

  // 2. Tensors: map and check them all before writing anything.
  SafetensorsCheckpoint checkpoint;
  if (Error e = SafetensorsCheckpoint::open(directory, &checkpoint)) return e;
  TensorPlan plan;
  Fp8Blocks fp8;
  if (Error e = read_fp8_blocks(config, &fp8)) return e;
  if (Error e = plan_tensors(*family, model_config, checkpoint, fp8, &plan)) return e;
  const image::DType dtype = options.dtype.value_or(default_dtype(plan));
  model::names::StoragePolicy policy;
  policy.requested = dtype;
  policy.group_size = options.group_size;
  for (const auto &[class_name, class_dtype] : options.class_dtypes) {
    model::names::TensorClass c;
    if (!model::names::tensor_class_from_name(class_name, &c))
      return make_error(ErrorKind::InvalidArgument,
                        strprintf("unknown tensor class '%s' (classes: embeddings, output, attention, experts, "
                                  "shared_expert, dense_ffn, router, vectors)", class_name.c_str()));
    policy.has_override[static_cast<size_t>(c)] = true;
    policy.override_dtype[static_cast<size_t>(c)] = class_dtype;
  }
  // An MXFP4 checkpoint's experts stay MXFP4 (block for block, no re-quantisation) unless
  // --dtype or an experts override says otherwise; the other classes take the float default.
  const size_t experts_class = static_cast<size_t>(model::names::TensorClass::Experts);
  if (!options.dtype && plan.mxfp4_experts() && !policy.has_override[experts_class]) {
    policy.has_override[experts_class] = true;
    policy.override_dtype[experts_class] = image::DType::MXFP4;
    report->mxfp4_experts_kept = true;
  }
  if (std::string why = model::names::policy_error(policy); !why.empty())
    return make_error(ErrorKind::InvalidArgument, why);
  assign_dtypes(&plan, policy);

  // 3. Tokenizer, then provenance of every file read (the shards are hashed last: slowest).
  json tokenizer;
  if (Error e = build_tokenizer_metadata(&files, config, &tokenizer)) return e;
  // Load it as the engine will: a broken tokenizer.json is refused here rather than found at
  // the first `colibri run`; one of a kind this build cannot run yet (not BPE) is converted
  // with a warning, since the layer-level API works without a tokenizer.
  {
    Error tokenizer_error;
    auto loaded = tokenizer::Tokenizer::from_json(tokenizer["json"].get_ref<const std::string &>(), &tokenizer_error);
    if (!loaded && (tokenizer_error.kind == ErrorKind::OutOfMemory || tokenizer_error.kind == ErrorKind::Internal))
      return tokenizer_error;
    if (!loaded && tokenizer_error.kind != ErrorKind::Unsupported)
      return make_error(ErrorKind::Corrupt, strprintf("'%s' cannot be used: %s. Copy it again from the model repository",
                                                      files.path("tokenizer.json").c_str(),
                                                      tokenizer_error.message.c_str()));
    if (!loaded)
      report->warnings.push_back("this build cannot run the tokenizer (" + tokenizer_error.message +
                                 "): the image converts, but its tokenizer calls (and `colibri run`) will fail");
    else if (loaded->vocab_size() > model_config.vocab_size)
      report->warnings.push_back(strprintf("tokenizer.json has token ids up to %zu but the model's vocabulary has %llu "
                                           "rows: text that produces the ids beyond it cannot run",
                                           loaded->vocab_size() - 1,
                                           static_cast<unsigned long long>(model_config.vocab_size)));
  }
  std::vector<std::string> inputs = files.paths();
  for (const auto &shard : checkpoint.shards()) inputs.push_back(shard->path());
  if (!checkpoint.index_file().empty()) inputs.push_back(files.path(checkpoint.index_file()));
  if (Error e = check_output_is_not_an_input(options.output, inputs)) return e;
  if (!checkpoint.index_file().empty())
    if (Error e = files.record(checkpoint.index_file())) return e;
  if (Error e = hash_shards(checkpoint, options.progress, &files)) return e;

  json metadata = {{"colibri_format", kMetadataFormat},
                   {"model", model_config.to_json()},
                   {"tokenizer", std::move(tokenizer)},
                   {"provenance", provenance(plan, files)}};
  std::string metadata_text = metadata.dump(-1, ' ', false, json::error_handler_t::replace);

  // 4. Weights.
  if (Error e = write_image(options, header_fields(model_config, plan), plan, checkpoint, metadata_text, report))
    return e;

  struct stat st;
  report->image_bytes = ::stat(options.output.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  report->architecture = model_config.hf_architecture;
  report->dtype = dtype;
  report->tensor_count = plan.tensors.size();
  report->ignored = plan.ignored;
  report->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {};
}

}  // namespace colibri::modeltool::convert

// modeltool/verify.h — what `colibri-model verify` checks, as a function (the command prints
// its result; the tests call it in-process to compare it with what opening and running a
// model refuses).
//
// verify_image runs, in order: the image reader's validation (every open), the model
// binding (every open: metadata → ModelConfig, every tensor the config implies with its exact
// shape and a dtype the kernels take, no unexplained tensor, the header's model fields equal
// to what the metadata implies), the tokenizer (opened with the model; an image whose
// tokenizer.json cannot be loaded refuses text prompts), and every tensor checksum. With
// `deep` it also scans every value for NaN/Inf and checks that the bytes no checksum covers
// (the padding before, between and after the tensors) are zero (docs/format.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "modeltool/cli_support.h"
#include "util/error.h"

namespace colibri::modeltool {

struct VerifyOptions {
  bool deep = false;
  unsigned threads = 0;  // checksum threads, 0 = the CPUs this process may use (sched_getaffinity)
  bool show_progress = false;  // progress of the checksums on stderr, drawn as `progress` says
  ProgressStyle progress;
};

struct VerifyReport {
  std::string path;
  std::string family;             // model family of the metadata
  size_t tensor_count = 0;
  uint64_t tensor_bytes = 0;      // checksummed bytes
  uint64_t padding_bytes = 0;     // bytes outside every region (checked to be zero with deep)
  double checksum_seconds = 0.0;
  std::vector<std::string> warnings;  // problems that do not stop plain completion (chat template)
};

Error verify_image(const std::string &path, const VerifyOptions &options, VerifyReport *report);

}  // namespace colibri::modeltool

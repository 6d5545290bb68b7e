// modeltool/convert/converter.h — Hugging Face safetensors checkpoint -> Colibri image.
//
// convert_checkpoint() reads config.json, checks the checkpoint against it (every tensor
// present, shaped and typed as expected, nothing left over), hashes the source files for
// provenance, then streams each tensor through the image writer in row chunks: decode to
// f32, encode to the stored dtype, append. Peak memory is one chunk plus the mapped pages
// of the chunk being read, whatever the checkpoint's size. The output appears atomically
// (temporary file + rename), so a failed conversion never leaves a partial image behind.
// Layout and metadata: docs/convert.md and docs/format.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "image/format.h"
#include "util/error.h"

namespace colibri::modeltool::convert {

// The "colibri_format" value of the metadata object this converter writes.
inline constexpr int kMetadataFormat = 1;

struct ConvertOptions {
  std::string input;                  // checkpoint directory (a file inside it also works)
  std::string output;                 // image path
  std::optional<image::DType> dtype;  // unset: the sources' float type if they share one, else f16
  uint32_t group_size = image::kQ8DefaultGroupSize;  // q8: 32 or 64; q4: 32, 64 or 128
  // --tensor-dtype CLASS=DTYPE choices, in the order given (model::names::StoragePolicy).
  std::vector<std::pair<std::string, image::DType>> class_dtypes;
  uint64_t alignment = image::kDefaultAlignment;
  bool overwrite = false;             // replace an existing output
  bool progress = false;              // progress bar on stderr (drawn only when it is a terminal)
  size_t threads = 0;                 // conversion threads; 0 = the CPUs this process may use
};

struct ConvertReport {
  std::string architecture;           // e.g. "MixtralForCausalLM"
  image::DType dtype = image::DType::F16;  // the requested (or default) dtype
  bool mxfp4_experts_kept = false;         // an MXFP4 checkpoint's experts were copied as MXFP4
  size_t tensor_count = 0;
  uint64_t source_bytes = 0;          // tensor bytes read from the checkpoint
  uint64_t image_bytes = 0;           // size of the written image
  double seconds = 0.0;               // wall time of the whole conversion
  std::vector<std::string> ignored;   // checkpoint tensors deliberately left out
  std::vector<std::string> warnings;  // converted anyway, but the user should know (tokenizer)
};

Error convert_checkpoint(const ConvertOptions &options, ConvertReport *report);

}  // namespace colibri::modeltool::convert

// modeltool/convert/tensor_plan.h — which checkpoint tensors become which image tensors.
//
// The plan lists the image's tensors in write order (token_embd, then each layer, then
// output_norm and output), each with its checkpoint source(s): one tensor, or one per
// expert for the stacked [experts, out, in] projections (expert-major: expert 0's rows,
// then expert 1's, ...). Building it checks the checkpoint against config.json before a
// byte is written: every expected tensor present with the expected shape and a supported
// dtype, and no tensor left over.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "modeltool/convert/families.h"
#include "modeltool/convert/safetensors.h"
#include "image/writer.h"
#include "model/config.h"
#include "model/tensor_names.h"

namespace colibri::modeltool::convert {

// How an image tensor's values come out of a single source whose layout differs (gpt-oss's fused
// experts, DeepSeek's kv_b_proj): the source is a stack of [A, C] matrices (its last two
// dimensions; a rank-2 source is one matrix, or, with row_block > 0, a stack of [row_block, C]
// matrices), and of each, rows [row_offset, row_offset + row_count) (row_count 0: all) and every
// column_stride-th column from column_offset are kept (the interleaved gate/up halves; one head's
// key or value rows), transposed or not. Identity: the source as stored.
struct SourceSlice {
  bool transpose = false;
  uint32_t column_stride = 1;
  uint32_t column_offset = 0;
  uint64_t row_block = 0;
  uint64_t row_offset = 0;
  uint64_t row_count = 0;
  bool identity() const { return !transpose && column_stride == 1 && row_block == 0; }
};

// OpenAI's MXFP4 experts (gpt-oss as shipped): the sources are `<p>_blocks` [E, R, G, 16] and
// `<p>_scales` [E, R, G], both U8. Row r of an expert holds G groups of 32 e2m1 codes (byte j of a
// group: element 2j in its low nibble, 2j + 1 in its high one) with one e8m0 scale each; the
// image's rows of that expert are source rows row_offset, row_offset + row_stride, ... (gate and up
// interleave: even rows gate, odd rows up). Already [out, in]: no transposition.
struct Mxfp4Source {
  bool used = false;
  uint32_t row_stride = 1;
  uint32_t row_offset = 0;
};

struct PlannedTensor {
  image::TensorSpec spec;                          // name, shape and (after assign_dtypes) dtype in the image
  std::vector<const SafetensorsTensor *> sources;  // in stacking order; each has shape spec.shape minus a
                                                   // leading expert dimension when there are several
                                                   // (MXFP4: {blocks, scales})
  SourceSlice slice;                               // non-identity: one source, re-laid out (see above)
  Mxfp4Source mxfp4;                               // used: the sources are MXFP4 blocks and scales
  // Block-scaled FP8 sources (Fp8Blocks): per source its `<name>_scale_inv` tensor, or null for a
  // float source; empty when no source is FP8.
  std::vector<const SafetensorsTensor *> fp8_scales;
  Fp8Blocks fp8;
  uint64_t source_bytes() const;
};

struct TensorPlan {
  std::vector<PlannedTensor> tensors;       // image order
  std::vector<std::string> ignored;         // checkpoint tensors left out on purpose (tied lm_head, inv_freq)
  std::vector<std::string> source_dtypes;   // sorted, unique dtypes of the sources, as image dtype names ("bf16",
                                            // "mxfp4" for MXFP4 experts)
  bool mxfp4_experts() const;               // some tensor has MXFP4 sources
};

// Maps `checkpoint` onto the image tensors `config` implies, using `family`'s names.
// Errors name the tensor: missing, wrong shape (expected vs found), unsupported dtype,
// unexpected extra tensors.
// F8_E4M3 sources need `fp8` (from config.json's quantization_config) and their scale tensors.
Error plan_tensors(const FamilyInfo &family, const model::ModelConfig &config, const SafetensorsCheckpoint &checkpoint,
                   const Fp8Blocks &fp8, TensorPlan *plan);

// The --dtype default: the float sources' type when they all share one, else f16 (MXFP4 experts
// are not float sources: the converter keeps them MXFP4 unless told otherwise).
image::DType default_dtype(const TensorPlan &plan);

// Sets every tensor's stored dtype and group size (model::names::storage_choice: norms,
// biases and routers stay f32; a block dtype falls back where the row length does not divide).
void assign_dtypes(TensorPlan *plan, const model::names::StoragePolicy &policy);

// The image dtype a supported safetensors float dtype decodes from (F32, F16, BF16); false otherwise.
bool source_float_dtype(const std::string &safetensors_dtype, image::DType *out);

}  // namespace colibri::modeltool::convert

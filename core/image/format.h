// core/image/format.h — the on-disk layout of a Colibri model image (.colibri).
//
// This header is the single source of truth for the byte layout; docs/format.md is its
// prose spec. Every on-disk struct is declared once here with a static_assert on every
// field offset. All integers are little-endian. Nothing in this file allocates or does I/O.
//
// File layout (all offsets absolute, from byte 0):
//
//   [ FileHeader            256 bytes                                   ]
//   [ TensorEntry × N       128 bytes each, at header.directory_offset  ]
//   [ name string table     directly after the entries (UTF-8, no NULs) ]
//   [ metadata JSON         at header.metadata_offset                   ]
//   [ padding to data_alignment                                         ]
//   [ tensor data           each tensor starts on a data_alignment boundary ]
//
// header_checksum = XXH3-64 of (header bytes with header_checksum zeroed) ‖ directory
// bytes (entries + string table) ‖ metadata bytes. It is checked at every open.
#pragma once

#include <cstddef>
#include <cstdint>

namespace colibri::image {

// "COLIBRI\0" read as a little-endian u64 is 0x00495242494C4F43; docs print the bytes in
// file order as 0x434F4C4942524900, which is what diagnostics show.
inline constexpr unsigned char kMagic[8] = {'C', 'O', 'L', 'I', 'B', 'R', 'I', '\0'};
inline constexpr uint64_t kMagicDisplay = 0x434F4C4942524900ull;  // bytes in file order

// Format versions. A reader opens every version in [kMinReadableVersion, kFormatVersion].
// Version 2 added the dtypes Q4, Q8F16 and MXFP4 and nothing else: the layout of the header,
// the directory and every version-1 dtype is unchanged. Version 3 added model semantics and
// no layout: the metadata keys and tensors of the families glm4_moe, minimax_m2, gpt_oss and
// deepseek_v3 (sigmoid group-limited routing, attention sinks and biases, clamped SwiGLU,
// multi-head latent attention, kept MTP layers). The writer stamps the lowest version that
// can hold the image's dtypes (min_version_for) and its model (ModelHeaderFields::min_version,
// which core/model/header_fields.cpp derives from the model metadata), so an image of
// f32/f16/bf16/q8 tensors of an older family is still a version-1 file that older builds
// open; a file whose version is lower than its dtypes or its model need is refused as damaged.
inline constexpr uint32_t kFormatVersion = 3;
inline constexpr uint32_t kMinReadableVersion = 1;
inline constexpr uint32_t kFirstVersionWithQ4 = 2;  // also Q8F16 and MXFP4
inline constexpr uint32_t kFirstVersionWithV3Families = 3;  // glm4_moe, minimax_m2, gpt_oss, deepseek_v3

inline constexpr uint64_t kHeaderSize = 256;
inline constexpr uint64_t kTensorEntrySize = 128;
inline constexpr uint32_t kMaxTensorRank = 4;
inline constexpr uint64_t kMinAlignment = 64;
inline constexpr uint64_t kDefaultAlignment = 4096;
inline constexpr uint64_t kMaxAlignment = 1ull << 21;  // 2 MiB (huge page)
inline constexpr uint64_t kMaxTensorCount = 1ull << 20;
inline constexpr uint64_t kMaxNameLength = 256;
inline constexpr uint64_t kMaxMetadataSize = 256ull << 20;  // tokenizer.json can be large

// Element types. Values are part of the format and never change meaning.
enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  BF16 = 2,
  Q8 = 3,     // int8 weights, one f32 scale per group along the last dimension (see Q8 below)
  Q4 = 4,     // version 2: symmetric int4, one f16 scale per group of 32, 64 or 128 (see Q4)
  Q8F16 = 5,  // version 2: int8, one f16 scale per group of 32 (llama.cpp's Q8_0 block)
  MXFP4 = 6,  // version 2: OCP MX FP4 (e2m1 values, one e8m0 scale per 32) (see MXFP4)
};

inline constexpr uint32_t kDTypeCount = 7;

// The lowest format version that can hold a tensor of this dtype.
inline constexpr uint32_t min_version_for(DType dtype) {
  return static_cast<uint32_t>(dtype) >= static_cast<uint32_t>(DType::Q4) ? kFirstVersionWithQ4 : 1u;
}

// Q8 block layout: a tensor of shape [..., cols] is stored row after row; each row is
// cols / group_size blocks, each block is { float scale; int8_t q[group_size]; } with no
// padding (so 36 bytes for group 32, 68 bytes for group 64). Value i of a block is
// scale * q8_value(q[i]). The quantiser uses scale = max|x| / 127 and q =
// round-half-away(x / scale) clamped to [-127, 127], so the rounding error of every element
// is at most scale / 2; a stored -128 (never written) reads as -127 everywhere.
inline constexpr uint32_t kQ8GroupSizes[2] = {32, 64};
inline constexpr uint32_t kQ8DefaultGroupSize = 32;

inline constexpr uint64_t q8_block_bytes(uint32_t group_size) { return 4u + group_size; }
inline constexpr int kQ8MinValue = -127;
inline constexpr int32_t q8_value(int8_t q) { return q < kQ8MinValue ? kQ8MinValue : q; }

// The version-2 block dtypes. Each is a sequence of blocks per row (cols % group == 0), packed
// with no padding; value = scale · integer. Within every 32 values ("a sub-block") the 4-bit
// codes are packed 16 bytes: byte j holds value j in its low nibble and value j + 16 in its
// high nibble (one 16-byte load, a shift and a mask give the 32 codes in order).
//   Q4     { f16 scale; u8 codes[G / 2]; }   2 + G/2 bytes (18 / 34 / 66 for G = 32 / 64 / 128);
//          value = scale · (code − 8), code in 0..15 (int4 −8..7).
//   Q8F16  { f16 scale; int8 q[32]; }        34 bytes; value = scale · q8_value(q).
//   MXFP4  { u8 e8m0; u8 codes[16]; }        17 bytes; value = 2^(e8m0 − 127) · e2m1(code),
//          e2m1 code s·eem: sign s, magnitude {0, 0.5, 1, 1.5, 2, 3, 4, 6}[eem]; e8m0 255 is NaN.
inline constexpr uint32_t kQ4GroupSizes[3] = {32, 64, 128};
inline constexpr uint32_t kQ4DefaultGroupSize = 32;
inline constexpr uint32_t kSubBlock = 32;          // values per 16 bytes of 4-bit codes
inline constexpr uint32_t kQ8F16GroupSize = 32;
inline constexpr uint32_t kMxfp4GroupSize = 32;
inline constexpr int kQ4CodeOffset = 8;            // int4 value = code - 8
inline constexpr uint32_t kE8m0Bias = 127;
inline constexpr uint32_t kE8m0Nan = 255;
inline constexpr uint64_t q4_block_bytes(uint32_t group_size) { return 2u + group_size / 2; }
inline constexpr uint64_t kQ8F16BlockBytes = 2 + kQ8F16GroupSize;
inline constexpr uint64_t kMxfp4BlockBytes = 1 + kMxfp4GroupSize / 2;
// Twice the e2m1 magnitudes (integers), indexed by the 3 low bits of a code.
inline constexpr int kE2m1Doubled[8] = {0, 1, 2, 3, 4, 6, 8, 12};

// Whether `group_size` is one `dtype` takes (Q8: 32/64; Q4: 32/64/128; Q8F16, MXFP4: 32;
// float dtypes: 0).
bool group_size_valid(DType dtype, uint32_t group_size);

struct FileHeader {
  unsigned char magic[8];       // "COLIBRI\0"
  uint32_t version;             // the lowest version holding its dtypes (min_version_for)
  uint32_t header_size;         // kHeaderSize; lets later versions grow the header
  uint64_t file_size;           // total bytes the image must have (truncation check)
  // The fields of the original Colibri container, widened to 64 bits:
  uint64_t expert_count;        // experts per MoE layer (0 for a dense model)
  uint64_t expert_size_bytes;   // bytes of one expert's gate+up+down weights in one layer
  uint64_t hidden_size;         // model width
  uint64_t ffn_hidden_size;     // expert intermediate size
  uint64_t top_k;               // experts chosen per token
  uint64_t weight_data_offset;  // first byte of tensor data (== first tensor's offset)
  uint64_t gate_weight_offset;  // offset of layer 0's router weight, 0 if none
  // Grown in version 1:
  uint64_t layer_count;
  uint64_t tensor_count;
  uint64_t directory_offset;    // == header_size
  uint64_t directory_size;      // tensor_count * kTensorEntrySize + string table bytes
  uint64_t metadata_offset;     // == directory_offset + directory_size
  uint64_t metadata_size;       // bytes of UTF-8 JSON, no terminator
  uint64_t data_alignment;      // power of two in [kMinAlignment, kMaxAlignment]
  uint64_t header_checksum;     // XXH3-64, see the top of this file
  unsigned char reserved[112];  // zero; readers ignore, writers write zeros
};

static_assert(sizeof(FileHeader) == kHeaderSize);
static_assert(offsetof(FileHeader, magic) == 0);
static_assert(offsetof(FileHeader, version) == 8);
static_assert(offsetof(FileHeader, header_size) == 12);
static_assert(offsetof(FileHeader, file_size) == 16);
static_assert(offsetof(FileHeader, expert_count) == 24);
static_assert(offsetof(FileHeader, expert_size_bytes) == 32);
static_assert(offsetof(FileHeader, hidden_size) == 40);
static_assert(offsetof(FileHeader, ffn_hidden_size) == 48);
static_assert(offsetof(FileHeader, top_k) == 56);
static_assert(offsetof(FileHeader, weight_data_offset) == 64);
static_assert(offsetof(FileHeader, gate_weight_offset) == 72);
static_assert(offsetof(FileHeader, layer_count) == 80);
static_assert(offsetof(FileHeader, tensor_count) == 88);
static_assert(offsetof(FileHeader, directory_offset) == 96);
static_assert(offsetof(FileHeader, directory_size) == 104);
static_assert(offsetof(FileHeader, metadata_offset) == 112);
static_assert(offsetof(FileHeader, metadata_size) == 120);
static_assert(offsetof(FileHeader, data_alignment) == 128);
static_assert(offsetof(FileHeader, header_checksum) == 136);
static_assert(offsetof(FileHeader, reserved) == 144);

struct TensorEntry {
  uint64_t name_offset;   // into the string table (relative to its start)
  uint32_t name_length;   // bytes, 1..kMaxNameLength
  uint32_t dtype;         // DType
  uint32_t rank;          // 1..kMaxTensorRank
  uint32_t group_size;    // Q8: 32/64; Q4: 32/64/128; Q8F16, MXFP4: 32; float dtypes: 0
  uint64_t shape[4];      // outermost first (row-major); unused dims are 0
  uint64_t data_offset;   // absolute, multiple of data_alignment
  uint64_t data_size;     // bytes, must equal what dtype and shape imply
  uint64_t checksum;      // XXH3-64 of the data bytes
  unsigned char reserved[48];
};

static_assert(sizeof(TensorEntry) == kTensorEntrySize);
static_assert(offsetof(TensorEntry, name_offset) == 0);
static_assert(offsetof(TensorEntry, name_length) == 8);
static_assert(offsetof(TensorEntry, dtype) == 12);
static_assert(offsetof(TensorEntry, rank) == 16);
static_assert(offsetof(TensorEntry, group_size) == 20);
static_assert(offsetof(TensorEntry, shape) == 24);
static_assert(offsetof(TensorEntry, data_offset) == 56);
static_assert(offsetof(TensorEntry, data_size) == 64);
static_assert(offsetof(TensorEntry, checksum) == 72);
static_assert(offsetof(TensorEntry, reserved) == 80);

const char *dtype_name(DType dtype);                 // "f32", "f16", "bf16", "q8", "q4", "q8f16", "mxfp4"
bool dtype_from_name(const char *name, DType *out);  // inverse; false if unknown
bool dtype_is_valid(uint32_t raw);

// Bytes a tensor of this dtype/shape occupies; false on overflow or a bad group size /
// a last dimension not divisible by the group size.
bool tensor_data_bytes(DType dtype, uint32_t group_size, uint32_t rank, const uint64_t *shape,
                       uint64_t *out_bytes);

}  // namespace colibri::image

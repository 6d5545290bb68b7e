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
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr uint32_t kMinReadableVersion = 1;

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
  Q8 = 3,  // int8 weights, one f32 scale per group along the last dimension (see Q8 below)
  // 4 is reserved for Q4 (int4 group-scaled), not implemented in format version 1.
};

inline constexpr uint32_t kDTypeCount = 4;

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

struct FileHeader {
  unsigned char magic[8];       // "COLIBRI\0"
  uint32_t version;             // kFormatVersion at write time
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
  uint32_t group_size;    // Q8: 32 or 64; 0 for other dtypes
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

const char *dtype_name(DType dtype);                 // "f32", "f16", "bf16", "q8"
bool dtype_from_name(const char *name, DType *out);  // inverse; false if unknown
bool dtype_is_valid(uint32_t raw);

// Bytes a tensor of this dtype/shape occupies; false on overflow or a bad group size /
// a last dimension not divisible by the group size.
bool tensor_data_bytes(DType dtype, uint32_t group_size, uint32_t rank, const uint64_t *shape,
                       uint64_t *out_bytes);

}  // namespace colibri::image

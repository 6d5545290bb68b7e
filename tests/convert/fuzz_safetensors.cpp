// tests/convert/fuzz_safetensors.cpp — libFuzzer target for the safetensors header parser:
// any input either parses into tensors whose byte ranges lie inside the data section and do
// not overlap, or fails with a message. Never a crash, never an out-of-range tensor.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "modeltool/convert/safetensors.h"

using namespace colibri;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::unique_ptr<unsigned char[]> copy(new unsigned char[size ? size : 1]);
  if (size) std::memcpy(copy.get(), data, size);
  std::vector<modeltool::convert::SafetensorsTensor> tensors;
  uint64_t data_offset = 0;
  Error e = modeltool::convert::parse_safetensors(copy.get(), size, "fuzz", &tensors, &data_offset);
  if (e) {
    if (e.message.empty()) __builtin_trap();  // every failure must explain itself
    return 0;
  }
  uint64_t previous_end = 0;
  for (const auto &t : tensors) {  // sorted by offset
    if (data_offset + t.data_end > size || t.data_begin > t.data_end) __builtin_trap();
    if (t.byte_size() && t.data_begin < previous_end) __builtin_trap();
    if (t.byte_size()) previous_end = t.data_end;
    (void)t.element_count();
  }
  return 0;
}

// tests/unit/probe_test.cpp — bench/probe's read_range: it reads exactly the bytes it is
// given, at any alignment and length, with every load width (ASan catches a read past either
// end), and its result depends on every one of them (so no byte is skipped by the split into
// an unaligned head, whole 512-byte chunks and a tail).
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "machine_probe.h"

TEST_CASE("read_range reads every byte it is given and nothing else, at any alignment", "[probe]") {
  const std::string widths[] = {"scalar", "avx2", ""};  // "" = the widest this CPU has
  // Lengths around the reader's 512-byte chunk and 64-byte alignment boundaries.
  const size_t lengths[] = {0, 1, 63, 64, 511, 512, 575, 576, 1023, 1600, 4096 + 37};
  for (const std::string &width : widths) {
    for (size_t offset : {size_t(0), size_t(1), size_t(31), size_t(63)}) {
      for (size_t n : lengths) {
        for (bool prefetch : {false, true}) {
          // Exactly offset + n bytes on the heap: ASan reports any load outside them.
          std::unique_ptr<unsigned char[]> buffer(new unsigned char[offset + n]);
          for (size_t i = 0; i < offset + n; ++i) buffer[i] = static_cast<unsigned char>(i * 7 + 3);
          const unsigned char *p = buffer.get() + offset;
          const uint64_t base = colibri_probe::read_range(p, n, width, prefetch);
          INFO("width '" << width << "', offset " << offset << ", " << n << " bytes, prefetch " << prefetch);
          for (size_t i = 0; i < n; i += (n > 700 ? 13 : 1)) {
            buffer[offset + i] ^= 0x10;  // +/-16 in that byte (and in the 64-bit word that holds it)
            const uint64_t changed = colibri_probe::read_range(p, n, width, prefetch);
            buffer[offset + i] ^= 0x10;
            INFO("byte " << i);
            REQUIRE(changed != base);
          }
        }
      }
    }
  }
}

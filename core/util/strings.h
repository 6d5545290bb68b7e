// core/util/strings.h — small formatting helpers shared by diagnostics and tools.
#pragma once

#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <string>

namespace colibri::util {

// printf into a std::string.
std::string strprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// "0x434F4C4942524900": the first n (≤ 8) bytes in file order as one hex number.
std::string hex_bytes_as_u64(const unsigned char *bytes, size_t n);

// "0x00000000DEADBEEF"
std::string hex64(uint64_t value);

// The first printable bytes of a buffer, quoted and escaped: "\"hello\\n wor\"".
std::string quote_printable(const unsigned char *bytes, size_t n, size_t max_chars);

// "1.50 GiB", "512 B".
std::string human_bytes(uint64_t bytes);

// The text of errno value e ("No such file or directory").
std::string errno_text(int e);

}  // namespace colibri::util

// core/util/strings.cpp — formatting helpers.
#include "util/strings.h"

#include <cstdio>
#include <cstring>
#include <vector>

namespace colibri::util {

std::string strprintf(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out;
  if (n > 0) {
    out.resize(static_cast<size_t>(n) + 1);
    std::vsnprintf(out.data(), out.size(), fmt, args);
    out.resize(static_cast<size_t>(n));
  }
  va_end(args);
  return out;
}

std::string hex_bytes_as_u64(const unsigned char *bytes, size_t n) {
  std::string out = "0x";
  static const char digits[] = "0123456789ABCDEF";
  for (size_t i = 0; i < n && i < 8; ++i) {
    out += digits[bytes[i] >> 4];
    out += digits[bytes[i] & 15];
  }
  return out;
}

std::string hex64(uint64_t value) { return strprintf("0x%016llX", static_cast<unsigned long long>(value)); }

std::string quote_printable(const unsigned char *bytes, size_t n, size_t max_chars) {
  std::string out = "\"";
  size_t shown = 0;
  for (size_t i = 0; i < n && shown < max_chars; ++i, ++shown) {
    unsigned char c = bytes[i];
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c >= 0x20 && c < 0x7F) out += static_cast<char>(c);
    else out += strprintf("\\x%02X", c);
  }
  out += "\"";
  if (n > max_chars) out += "...";
  return out;
}

std::string human_bytes(uint64_t bytes) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return strprintf("%llu B", static_cast<unsigned long long>(bytes));
  return strprintf("%.2f %s", v, units[u]);
}

std::string errno_text(int e) {
  char buf[256];
  // GNU strerror_r returns the message pointer (may not use buf).
  const char *msg = strerror_r(e, buf, sizeof buf);
  return msg ? std::string(msg) : strprintf("errno %d", e);
}

}  // namespace colibri::util

// core/image/diagnose.cpp — names what a file is when it is not a Colibri image.
//
// Users hand the loader the wrong file more often than a corrupt one: a GGUF from
// llama.cpp, a safetensors shard, a PyTorch zip, the compressed distribution form, an
// HTML error page saved by a failed download, or a sparse file from an interrupted copy.
// Each gets its own message with the bytes found and the command that fixes it.
#include <algorithm>
#include <cstring>
#include <vector>

#include "image/format.h"
#include "image/reader.h"
#include "util/strings.h"

namespace colibri::image {

using util::strprintf;

// Share of printable bytes (or, for UTF-16, of ASCII code units) that makes a file "text".
constexpr uint64_t kTextPercent = 95;
// Bytes of a file's start quoted in a message.
constexpr size_t kQuotedChars = 48;

static std::string found_bytes(const unsigned char *bytes, uint64_t available) {
  return strprintf("expected %s, got %s", util::hex64(kMagicDisplay).c_str(),
                   util::hex_bytes_as_u64(bytes, available < 8 ? static_cast<size_t>(available) : 8).c_str());
}

static bool looks_like_text(const unsigned char *bytes, uint64_t n) {
  if (n == 0) return false;
  uint64_t printable = 0;
  for (uint64_t i = 0; i < n; ++i) {
    unsigned char c = bytes[i];
    if (c == 0) return false;
    if (c == '\n' || c == '\r' || c == '\t' || (c >= 0x20 && c < 0x7F) || c >= 0x80) ++printable;
  }
  return printable * 100 >= n * kTextPercent;
}

// UTF-16 text: a byte-order mark, or ASCII with every other byte NUL (what a Windows editor or
// PowerShell's `>` writes). Sets *little_endian and *bom; needs 8 bytes.
static bool looks_like_utf16(const unsigned char *bytes, uint64_t n, bool *little_endian, bool *bom) {
  if (n < 8) return false;
  if ((bytes[0] == 0xFF && bytes[1] == 0xFE) || (bytes[0] == 0xFE && bytes[1] == 0xFF)) {
    *little_endian = bytes[0] == 0xFF;
    *bom = true;
    return true;
  }
  // NUL-interleaved: in most code-unit pairs one byte is printable ASCII and the other (the
  // same one of each pair throughout) is zero.
  uint64_t pairs = n / 2, le = 0, be = 0;
  auto text = [](unsigned char c) { return c == '\n' || c == '\r' || c == '\t' || (c >= 0x20 && c < 0x7F); };
  for (uint64_t i = 0; i < pairs; ++i) {
    const unsigned char a = bytes[2 * i], b = bytes[2 * i + 1];
    if (text(a) && b == 0) ++le;
    if (a == 0 && text(b)) ++be;
  }
  *bom = false;
  *little_endian = le >= be;
  return std::max(le, be) * 100 >= pairs * kTextPercent;
}

// The ASCII of UTF-16 code units (others shown as '?'), for quoting.
static std::vector<unsigned char> utf16_ascii(const unsigned char *bytes, uint64_t n, bool little_endian, bool bom) {
  std::vector<unsigned char> out;
  for (uint64_t i = bom ? 2 : 0; i + 1 < n; i += 2) {
    const unsigned unit = little_endian ? bytes[i] | (bytes[i + 1] << 8) : (bytes[i] << 8) | bytes[i + 1];
    out.push_back(unit < 0x80 ? static_cast<unsigned char>(unit) : static_cast<unsigned char>('?'));
  }
  return out;
}

static uint64_t read_u64_le(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

Error diagnose_foreign_file(const unsigned char *bytes, uint64_t available, uint64_t file_size,
                            const std::string &path) {
  const char *p = path.c_str();
  if (file_size == 0 && available > 0)
    return make_error(ErrorKind::NotAnImage,
                      strprintf("'%s' is not a Colibri image: its size is reported as 0 bytes, yet reading it gave %llu "
                                "bytes (%s, %s): a pseudo-file (/proc, /sys) or a file system that does not report "
                                "sizes. Images are regular files; check the path",
                                p, static_cast<unsigned long long>(available),
                                util::quote_printable(bytes, static_cast<size_t>(available), kQuotedChars).c_str(),
                                found_bytes(bytes, available).c_str()));
  if (file_size == 0)
    return make_error(ErrorKind::NotAnImage,
                      strprintf("'%s' is empty (0 bytes): an interrupted download or copy? Copy the image again "
                                "and check it with: colibri-model verify %s",
                                p, p));
  std::string got = found_bytes(bytes, available);
  if (available < 8)
    return make_error(ErrorKind::NotAnImage,
                      strprintf("'%s' is only %llu bytes, too small to be a Colibri image (%s); the copy is "
                                "truncated or this is the wrong file",
                                p, static_cast<unsigned long long>(file_size), got.c_str()));

  uint64_t zeros = 0;
  while (zeros < available && bytes[zeros] == 0) ++zeros;
  if (zeros >= 8)
    return make_error(ErrorKind::NotAnImage,
                      strprintf("'%s' starts with %s%llu zero bytes (%s): a sparse file or an interrupted copy. "
                                "Copy the image again and check it with: colibri-model verify %s",
                                p, zeros == available ? "at least " : "", static_cast<unsigned long long>(zeros),
                                got.c_str(), p));

  if (std::memcmp(bytes, "GGUF", 4) == 0) {
    uint32_t version = bytes[4] | (bytes[5] << 8) | (bytes[6] << 16) | (static_cast<uint32_t>(bytes[7]) << 24);
    return make_error(ErrorKind::NotAnImage,
                      strprintf("'%s' is a GGUF file (llama.cpp format, GGUF version %u), not a Colibri image (%s). "
                                "Colibri does not read GGUF: convert the original Hugging Face checkpoint with: "
                                "colibri-model convert HF_DIR -o OUT.colibri",
                                p, version, got.c_str()));
  }
  if (bytes[0] == 0x28 && bytes[1] == 0xB5 && bytes[2] == 0x2F && bytes[3] == 0xFD)
    return make_error(ErrorKind::NotAnImage,
                      strprintf("'%s' is zstd-compressed (the .colibri.zst distribution form?), not an image that "
                                "can be mapped (%s). Decompress it with: colibri-model repack %s OUT.colibri "
                                "--decompress",
                                p, got.c_str(), p));
  if (bytes[0] == 'P' && bytes[1] == 'K' && bytes[2] == 3 && bytes[3] == 4)
    return make_error(ErrorKind::NotAnImage,
                      strprintf("'%s' is a ZIP archive, probably a PyTorch checkpoint (pytorch_model.bin / .pt), not a "
                                "Colibri image (%s). Re-save the model as safetensors "
                                "(model.save_pretrained(dir, safe_serialization=True)), then run: "
                                "colibri-model convert DIR -o OUT.colibri",
                                p, got.c_str()));
  if (bytes[0] == 0x80 && bytes[1] >= 2 && bytes[1] <= 5)
    return make_error(ErrorKind::NotAnImage,
                      strprintf("'%s' is a Python pickle (a legacy PyTorch checkpoint?), not a Colibri image (%s). "
                                "Re-save the model as safetensors, then run: colibri-model convert DIR -o OUT.colibri",
                                p, got.c_str()));
  // safetensors: u64 little-endian JSON header length, then '{'.
  uint64_t st_len = read_u64_le(bytes);
  if (available > 8 && bytes[8] == '{' && st_len >= 2 && st_len <= file_size - 8)
    return make_error(ErrorKind::NotAnImage,
                      strprintf("'%s' is a safetensors file (JSON header of %llu bytes), not a Colibri image (%s). "
                                "Convert the checkpoint directory that holds it with: colibri-model convert DIR -o "
                                "OUT.colibri",
                                p, static_cast<unsigned long long>(st_len), got.c_str()));
  unsigned char swapped[8];
  for (int i = 0; i < 8; ++i) swapped[i] = kMagic[7 - i];
  if (std::memcmp(bytes, swapped, 8) == 0)
    return make_error(ErrorKind::NotAnImage,
                      strprintf("'%s' has a byte-swapped magic (%s): it was written big-endian or byte-swapped in "
                                "transit. Colibri images are little-endian; rewrite it with colibri-model convert",
                                p, got.c_str()));
  bool little_endian = true, bom = false;
  if (looks_like_utf16(bytes, available, &little_endian, &bom)) {
    const std::vector<unsigned char> ascii = utf16_ascii(bytes, available, little_endian, bom);
    return make_error(ErrorKind::NotAnImage,
                      strprintf("'%s' is a UTF-16 text file (%s-endian%s), not a Colibri image: it starts with %s (%s). "
                                "Text saved by a Windows editor or PowerShell redirection, a failed download that "
                                "saved an error page, or the wrong path?",
                                p, little_endian ? "little" : "big", bom ? ", with a byte-order mark" : "",
                                util::quote_printable(ascii.data(), ascii.size(), kQuotedChars).c_str(), got.c_str()));
  }
  if (looks_like_text(bytes, available))
    return make_error(ErrorKind::NotAnImage,
                      strprintf("'%s' is a text file, not a Colibri image: it starts with %s (%s). A failed download "
                                "that saved an error page, or the wrong path?",
                                p, util::quote_printable(bytes, static_cast<size_t>(available), kQuotedChars).c_str(),
                                got.c_str()));
  return make_error(ErrorKind::NotAnImage,
                    strprintf("'%s' is not a Colibri image: bad magic (%s). Check the path; images are made with "
                              "colibri-model convert",
                              p, got.c_str()));
}

}  // namespace colibri::image

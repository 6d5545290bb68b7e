// tests/image/test_diagnostics.cpp — every load failure names its cause and its fix
// (docs/troubleshooting.md lists the same messages).
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <functional>

#include "image/reader.h"
#include "util/strings.h"
#include "support/fifo_guard.h"
#include "support/in_child.h"
#include "support/synthetic_image.h"

using namespace colibri;
using Catch::Contains;

namespace {

struct Opened {
  bool ok;
  Error error;
};

Opened open_bytes(const std::vector<unsigned char> &bytes, const std::string &name = "file.bin") {
  std::string path = testing::temp_dir("diag") + "/" + name;
  testing::write_file(path, bytes);
  Error err;
  auto img = image::Image::open(path, {}, &err);
  return {img != nullptr, err};
}

std::vector<unsigned char> valid_image() {
  std::string path = testing::temp_dir("diag-valid") + "/m.colibri";
  REQUIRE_FALSE(testing::write_synthetic_image(path, {}));
  return testing::read_file(path);
}

std::vector<unsigned char> with_prefix(const char *prefix, size_t prefix_len, size_t total = 512) {
  std::vector<unsigned char> b(total, 0x41);
  std::memcpy(b.data(), prefix, prefix_len);
  return b;
}

}  // namespace

TEST_CASE("missing file: says so and names the path", "[diagnostics]") {
  Error err;
  CHECK_FALSE(image::Image::open("/nonexistent/dir/model.colibri", {}, &err));
  CHECK(err.kind == ErrorKind::Io);
  CHECK_THAT(err.message, Contains("/nonexistent/dir/model.colibri") && Contains("No such file") && Contains("check the path"));
}

TEST_CASE("directory: says it is a directory and how to convert a checkpoint", "[diagnostics]") {
  std::string dir = testing::temp_dir("diag-dir");
  Error err;
  CHECK_FALSE(image::Image::open(dir, {}, &err));
  CHECK_THAT(err.message, Contains("is a directory") && Contains("colibri-model convert"));
}

TEST_CASE("permission denied: names errno and the fix", "[diagnostics]") {
  std::string path = testing::temp_dir("diag-perm") + "/m.colibri";
  REQUIRE_FALSE(testing::write_synthetic_image(path, {}));
  chmod(path.c_str(), 0);
  // root ignores permission bits, so the open runs in a child that drops to 'nobody'.
  const std::string message = testing::in_child([&] {
    if (!testing::drop_root_privileges()) return std::string("(could not drop to nobody)");
    Error err;
    auto img = image::Image::open(path, {}, &err);
    return img ? std::string("(opened)") : err.message;
  });
  CHECK_THAT(message, Contains("Permission denied") && Contains("permissions"));
}

TEST_CASE("empty file", "[diagnostics]") {
  auto r = open_bytes({});
  CHECK_FALSE(r.ok);
  CHECK(r.error.kind == ErrorKind::NotAnImage);
  CHECK_THAT(r.error.message, Contains("is empty (0 bytes)") && Contains("verify"));
}

TEST_CASE("all-zero start: sparse or interrupted copy, with the bytes found", "[diagnostics]") {
  auto r = open_bytes(std::vector<unsigned char>(4096, 0));
  CHECK_THAT(r.error.message, Contains("zero bytes") && Contains("sparse file or an interrupted copy") &&
                                  Contains("expected 0x434F4C4942524900, got 0x0000000000000000"));
}

TEST_CASE("text file: quotes the first printable bytes", "[diagnostics]") {
  const char html[] = "<!DOCTYPE html>\n<html><body>404 Not Found</body></html>\n";
  std::vector<unsigned char> b(400, ' ');
  std::memcpy(b.data(), html, sizeof html - 1);
  auto r = open_bytes(b);
  CHECK_THAT(r.error.message, Contains("is a text file") && Contains("\"<!DOCTYPE html>\\n<html>") &&
                                  Contains("got 0x3C21444F43545950"));
}

TEST_CASE("GGUF: names llama.cpp's format and the convert command", "[diagnostics]") {
  auto r = open_bytes(with_prefix("GGUF\x03\x00\x00\x00", 8));
  CHECK_THAT(r.error.message, Contains("GGUF file") && Contains("GGUF version 3") &&
                                  Contains("colibri-model convert") && Contains("got 0x4747554603000000"));
}

TEST_CASE("safetensors: names the format and the convert command", "[diagnostics]") {
  std::string header = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
  uint64_t n = header.size();
  std::vector<unsigned char> b(8 + header.size() + 300, 0);
  std::memcpy(b.data(), &n, 8);
  std::memcpy(b.data() + 8, header.data(), header.size());
  auto r = open_bytes(b, "model.safetensors");
  CHECK_THAT(r.error.message, Contains("safetensors file") && Contains("colibri-model convert DIR"));
}

TEST_CASE("PyTorch zip: names the format and how to re-save", "[diagnostics]") {
  auto r = open_bytes(with_prefix("PK\x03\x04", 4));
  CHECK_THAT(r.error.message, Contains("ZIP archive") && Contains("PyTorch") && Contains("safe_serialization=True"));
}

TEST_CASE("zstd: names the distribution form and the decompress command", "[diagnostics]") {
  auto r = open_bytes(with_prefix("\x28\xB5\x2F\xFD", 4));
  CHECK_THAT(r.error.message, Contains("zstd-compressed") && Contains("repack") && Contains("--decompress"));
}

TEST_CASE("byte-swapped magic", "[diagnostics]") {
  auto r = open_bytes(with_prefix("\0IRBILOC", 8));
  CHECK_THAT(r.error.message, Contains("byte-swapped") && Contains("little-endian") && Contains("got 0x00495242494C4F43"));
}

TEST_CASE("version newer than supported", "[diagnostics]") {
  auto b = valid_image();
  uint32_t v = image::kFormatVersion + 1;
  std::memcpy(b.data() + 8, &v, 4);
  testing::refresh_header_checksum(b);
  auto r = open_bytes(b);
  CHECK(r.error.kind == ErrorKind::Unsupported);
  CHECK_THAT(r.error.message, Contains("image version " + std::to_string(image::kFormatVersion + 1) +
                                       " is newer than this build supports (max " +
                                       std::to_string(image::kFormatVersion) + ")"));
}

TEST_CASE("version older than supported", "[diagnostics]") {
  auto b = valid_image();
  uint32_t v = 0;
  std::memcpy(b.data() + 8, &v, 4);
  auto r = open_bytes(b);
  CHECK_THAT(r.error.message, Contains("image version 0 is older than this build supports (min 1)"));
}

TEST_CASE("truncated: expected vs actual size", "[diagnostics]") {
  auto b = valid_image();
  size_t full = b.size();
  b.resize(full - 100);
  auto r = open_bytes(b);
  CHECK(r.error.kind == ErrorKind::Corrupt);
  CHECK_THAT(r.error.message, Contains("truncated") && Contains(std::to_string(full)) &&
                                  Contains(std::to_string(full - 100)) && Contains("100 bytes missing"));
  b.resize(100);  // shorter than the header
  r = open_bytes(b);
  CHECK_THAT(r.error.message, Contains("truncated") && Contains("smaller than the 256-byte header"));
}

TEST_CASE("tensor beyond the end of the file", "[diagnostics]") {
  auto b = valid_image();
  testing::entry_at(b, 1)->data_offset += 1ull << 30;
  REQUIRE(testing::refresh_header_checksum(b));
  auto r = open_bytes(b);
  CHECK_THAT(r.error.message, Contains("blk.0.attn_norm") && Contains("extends beyond the end of the file"));
}

TEST_CASE("overlapping tensors", "[diagnostics]") {
  auto b = valid_image();
  testing::entry_at(b, 2)->data_offset = testing::entry_at(b, 1)->data_offset;
  REQUIRE(testing::refresh_header_checksum(b));
  auto r = open_bytes(b);
  CHECK_THAT(r.error.message, Contains("overlap") && Contains("blk.0.attn_norm") && Contains("blk.0.ffn_norm"));
}

TEST_CASE("misaligned tensor", "[diagnostics]") {
  auto b = valid_image();
  testing::entry_at(b, 3)->data_offset += 8;
  REQUIRE(testing::refresh_header_checksum(b));
  auto r = open_bytes(b);
  CHECK_THAT(r.error.message, Contains("blk.0.ffn_gate_inp") && Contains("misaligned") && Contains("64-byte alignment"));
}

TEST_CASE("header checksum mismatch", "[diagnostics]") {
  auto b = valid_image();
  image::FileHeader h;
  std::memcpy(&h, b.data(), sizeof h);
  b[h.metadata_offset + 2] ^= 0x20;  // damage the metadata without fixing the checksum
  auto r = open_bytes(b);
  CHECK(r.error.kind == ErrorKind::Corrupt);
  CHECK_THAT(r.error.message, Contains("header checksum mismatch: stored 0x") && Contains("computed 0x"));
}

TEST_CASE("tensor checksum mismatch names the tensor", "[diagnostics]") {
  auto b = valid_image();
  const image::TensorEntry *e = testing::entry_at(b, 4);
  b[e->data_offset + 5] ^= 0x01;
  std::string path = testing::temp_dir("diag-sum") + "/m.colibri";
  testing::write_file(path, b);
  Error err;
  auto img = image::Image::open(path, {}, &err);
  REQUIRE(img);
  Error v = img->verify_all(0);
  CHECK(v.kind == ErrorKind::Corrupt);
  CHECK_THAT(v.message, Contains("tensor 'blk.0.ffn_gate_exps' checksum mismatch"));
  image::OpenOptions verify_on_open;
  verify_on_open.verify_checksums = true;
  CHECK_FALSE(image::Image::open(path, verify_on_open, &err));
  CHECK_THAT(err.message, Contains("blk.0.ffn_gate_exps"));
}

TEST_CASE("unknown dtype, bad rank and wrong tensor size are named", "[diagnostics]") {
  auto b = valid_image();
  testing::entry_at(b, 0)->dtype = 9;
  REQUIRE(testing::refresh_header_checksum(b));
  CHECK_THAT(open_bytes(b).error.message, Contains("token_embd") && Contains("unknown dtype code 9"));
  b = valid_image();
  testing::entry_at(b, 0)->data_size -= 4;
  REQUIRE(testing::refresh_header_checksum(b));
  CHECK_THAT(open_bytes(b).error.message, Contains("token_embd") && Contains("needs"));
  b = valid_image();
  testing::entry_at(b, 0)->rank = 7;
  REQUIRE(testing::refresh_header_checksum(b));
  CHECK_THAT(open_bytes(b).error.message, Contains("rank 7"));
}

TEST_CASE("metadata that is not a JSON object is refused", "[diagnostics]") {
  auto b = valid_image();
  image::FileHeader h;
  std::memcpy(&h, b.data(), sizeof h);
  b[h.metadata_offset] = '[';
  REQUIRE(testing::refresh_header_checksum(b));
  // Not JSON at all now: util::parse_json names where it stops.
  CHECK_THAT(open_bytes(b).error.message, Contains("the metadata section is not valid JSON") && Contains("column 18"));
}

TEST_CASE("a FIFO given as the image is refused at once, not waited on", "[diagnostics]") {
  const std::string fifo = testing::temp_dir("fifo") + "/m.colibri";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const Error e = testing::call_refusing_fifo(fifo, [&] {
    Error error;
    auto img = image::Image::open(fifo, {}, &error);
    CHECK_FALSE(img);
    return error;
  });
  CHECK(e.kind == ErrorKind::Io);
  CHECK_THAT(e.message, Contains("not a regular file"));
}

// ---- issue 18, item 8 -------------------------------------------------------------------

namespace {

std::vector<unsigned char> utf16(const std::string &ascii, bool little_endian, bool bom) {
  std::vector<unsigned char> b;
  if (bom) {
    b.push_back(little_endian ? 0xFF : 0xFE);
    b.push_back(little_endian ? 0xFE : 0xFF);
  }
  for (char c : ascii) {
    b.push_back(little_endian ? static_cast<unsigned char>(c) : 0);
    b.push_back(little_endian ? 0 : static_cast<unsigned char>(c));
  }
  return b;
}

}  // namespace

TEST_CASE("magic followed by zeros: a failed sparse write, not an old version", "[diagnostics]") {
  std::vector<unsigned char> b(4096 + 8, 0);
  std::memcpy(b.data(), image::kMagic, 8);
  auto r = open_bytes(b);
  CHECK(r.error.kind == ErrorKind::Corrupt);  // exit 1 in colibri-model, not 5 (unsupported)
  CHECK_THAT(r.error.message, Contains("magic is followed by 4096 zero bytes") && Contains("never written") &&
                                  Contains("sparse write") && Contains("Copy the image again") &&
                                  Contains("colibri-model verify"));
  CHECK_THAT(r.error.message, !Contains("older than this build"));
  // Longer than the scan: "at least".
  b.assign(size_t{3} << 20, 0);
  std::memcpy(b.data(), image::kMagic, 8);
  r = open_bytes(b);
  CHECK_THAT(r.error.message, Contains("followed by at least 1048568 zero bytes"));
  // Version 0 with other fields written is still a version error (the test above, "version older").
  auto valid = valid_image();
  std::memset(valid.data() + 8, 0, 4);
  CHECK(open_bytes(valid).error.kind == ErrorKind::Unsupported);
}

TEST_CASE("a /proc file (size 0, with content) is not called empty", "[diagnostics]") {
  struct stat st;
  REQUIRE(::stat("/proc/self/status", &st) == 0);
  REQUIRE(st.st_size == 0);  // the premise: /proc reports 0 bytes
  Error err;
  CHECK_FALSE(image::Image::open("/proc/self/status", {}, &err));
  CHECK(err.kind == ErrorKind::NotAnImage);
  CHECK_THAT(err.message, Contains("size is reported as 0 bytes") && Contains("pseudo-file") &&
                              Contains("\"Name:") && !Contains("empty") && !Contains("interrupted download"));
  // A really empty file still is.
  CHECK_THAT(open_bytes({}).error.message, Contains("is empty (0 bytes)"));
}

TEST_CASE("UTF-16 text is recognised as text, with or without a byte-order mark", "[diagnostics]") {
  const std::string page = "<!DOCTYPE html>\r\n<html><body>404 Not Found</body></html>\r\n";
  auto r = open_bytes(utf16(page, true, true));
  CHECK(r.error.kind == ErrorKind::NotAnImage);
  CHECK_THAT(r.error.message, Contains("is a UTF-16 text file (little-endian, with a byte-order mark)") &&
                                  Contains("\"<!DOCTYPE html>\\r\\n<html>") && Contains("got 0xFFFE3C0021004400"));
  r = open_bytes(utf16(page, false, false));
  CHECK_THAT(r.error.message, Contains("is a UTF-16 text file (big-endian)") && Contains("\"<!DOCTYPE html>"));
  r = open_bytes(utf16("model weights, exported by PowerShell > out.colibri", true, false));
  CHECK_THAT(r.error.message, Contains("UTF-16 text file (little-endian)") && Contains("PowerShell redirection"));
}

TEST_CASE("mmap refused by the address-space limit names ulimit -v and its value", "[diagnostics]") {
  // A sparse 8 GiB file with the magic: open maps it before validating anything.
  std::string path = testing::temp_dir("diag-enomem") + "/big.colibri";
  {
    std::vector<unsigned char> head(image::kHeaderSize, 0);
    std::memcpy(head.data(), image::kMagic, 8);
    testing::write_file(path, head);
    REQUIRE(::truncate(path.c_str(), static_cast<off_t>(uint64_t{8} << 30)) == 0);
  }
  std::string message = testing::in_child([&] {
    // The current address space plus 256 MiB: the 8 GiB mapping cannot fit.
    long pages = 0;
    if (FILE *f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
      std::fclose(f);
    }
    const rlim_t limit = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (rlim_t{256} << 20);
    struct rlimit rl = {limit, limit};
    if (setrlimit(RLIMIT_AS, &rl) != 0) return std::string("setrlimit failed");
    Error err;
    auto img = image::Image::open(path, {}, &err);
    return img ? std::string("opened") : err.message + "|" + util::human_bytes(static_cast<uint64_t>(limit));
  });
  const std::string limit_text = message.substr(message.rfind('|') + 1);
  CHECK_THAT(message, Contains("cannot memory-map") && Contains("Cannot allocate memory") && Contains("ulimit -v") &&
                          Contains("here " + limit_text) && Contains("vm.max_map_count"));
}

TEST_CASE("header fields found wrong before the checksum name the field and the fix", "[diagnostics]") {
  struct Case {
    const char *field;
    size_t offset;
    uint64_t value;
    bool four_bytes;
  };
  const Case cases[] = {
      {"header_size", offsetof(image::FileHeader, header_size), 128, true},
      {"data_alignment", offsetof(image::FileHeader, data_alignment), 100, false},
      {"tensor_count", offsetof(image::FileHeader, tensor_count), uint64_t{1} << 40, false},
      {"directory_offset", offsetof(image::FileHeader, directory_offset), 512, false},
      {"directory_size", offsetof(image::FileHeader, directory_size), 1, false},
      {"metadata_offset", offsetof(image::FileHeader, metadata_offset), 7, false},
      {"metadata_size", offsetof(image::FileHeader, metadata_size), uint64_t{1} << 40, false},
  };
  for (const Case &c : cases) {
    auto b = valid_image();
    if (c.four_bytes) {
      const uint32_t v = static_cast<uint32_t>(c.value);
      std::memcpy(b.data() + c.offset, &v, 4);
    } else {
      std::memcpy(b.data() + c.offset, &c.value, 8);
    }
    auto r = open_bytes(b);
    INFO(c.field << ": " << r.error.message);
    CHECK(r.error.kind == ErrorKind::Corrupt);
    CHECK_THAT(r.error.message, Contains(std::string("header field ") + c.field + " is ") &&
                                    Contains("header is damaged") && Contains("Copy the image again") &&
                                    Contains("colibri-model verify"));
  }
}

TEST_CASE("checksums are checked when the OS refuses threads (a thread limit)", "[diagnostics]") {
  std::string path = testing::temp_dir("diag-nproc") + "/m.colibri";
  REQUIRE_FALSE(testing::write_synthetic_image(path, {}));
  std::string message = testing::in_child([&] {
    Error err;
    auto img = image::Image::open(path, {}, &err);
    if (!img) return "open: " + err.message;
    // RLIMIT_NPROC counts the user's processes and threads; root is exempt, so drop to nobody.
    if (!testing::drop_root_privileges()) return std::string("setuid failed");
    struct rlimit rl = {1, 1};
    if (setrlimit(RLIMIT_NPROC, &rl) != 0) return std::string("setrlimit failed");
    Error v = img->verify_all(8);  // 7 threads refused: the caller checks every tensor alone
    return v ? "verify: " + v.message : std::string("ok");
  });
  CHECK(message == "ok");
}

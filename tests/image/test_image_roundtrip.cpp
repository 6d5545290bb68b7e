// tests/image/test_image_roundtrip.cpp — what the writer writes, the reader reads back:
// layout rules of docs/format.md (alignment, offsets, checksums) and writer atomicity.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "image/reader.h"
#include "image/writer.h"
#include "support/synthetic_image.h"
#include "util/atomic_file.h"

using namespace colibri;

TEST_CASE("a written image opens, and its tensors are aligned, ordered and checksummed", "[image]") {
  std::string dir = testing::temp_dir("roundtrip");
  std::string path = dir + "/model.colibri";
  testing::SyntheticImageSpec spec;
  spec.alignment = 4096;
  REQUIRE_FALSE(testing::write_synthetic_image(path, spec));
  Error err;
  auto img = image::Image::open(path, {}, &err);
  REQUIRE(img);
  CHECK(err.ok());
  const auto &h = img->header();
  CHECK(h.version == 1);  // only version-1 dtypes: still a version-1 file (format.h, min_version_for)
  CHECK(h.expert_count == 4);
  CHECK(h.top_k == 2);
  CHECK(h.hidden_size == 64);
  CHECK(h.ffn_hidden_size == 32);
  CHECK(h.layer_count == 2);
  CHECK(h.expert_size_bytes == 3 * 32 * 64 * 4);
  CHECK(h.data_alignment == 4096);
  CHECK(h.file_size == img->file_size());
  const image::TensorInfo *router = img->find("blk.0.ffn_gate_inp");
  REQUIRE(router);
  CHECK(h.gate_weight_offset == router->offset);
  uint64_t previous_end = h.metadata_offset + h.metadata_size;
  for (const auto &t : img->tensors()) {
    CHECK(t.offset % 4096 == 0);
    CHECK(t.offset >= previous_end);
    previous_end = t.offset + t.size;
  }
  CHECK(h.weight_data_offset == img->tensors().front().offset);
  CHECK(img->verify_all(2).ok());
  CHECK(img->metadata()["colibri_format"] == 1);
  const image::TensorInfo *gate = img->find("blk.1.ffn_gate_exps");
  REQUIRE(gate);
  CHECK(gate->rank == 3);
  CHECK(gate->shape_string() == "[4, 32, 64]");
  CHECK(img->find("no.such.tensor") == nullptr);
}

TEST_CASE("open options populate, advice and verify-on-open work on a valid image", "[image]") {
  std::string path = testing::temp_dir("options") + "/m.colibri";
  REQUIRE_FALSE(testing::write_synthetic_image(path, {}));
  image::OpenOptions options;
  options.populate = true;
  options.advice = image::MapAdvice::WillNeed;
  options.verify_checksums = true;
  Error err;
  CHECK(image::Image::open(path, options, &err));
  options.advice = image::MapAdvice::HugePage;
  CHECK(image::Image::open(path, options, &err));
}

TEST_CASE("the writer refuses to overwrite without permission and leaves no partial file", "[image][atomic]") {
  std::string dir = testing::temp_dir("atomic");
  std::string path = dir + "/m.colibri";
  REQUIRE_FALSE(testing::write_synthetic_image(path, {}));
  auto before = testing::read_file(path);
  Error e = testing::write_synthetic_image(path, {}, /*overwrite=*/false);
  REQUIRE(e);
  CHECK_THAT(e.message, Catch::Contains("already exists") && Catch::Contains("--force"));
  CHECK(testing::read_file(path) == before);

  // An abandoned writer (error half-way) leaves neither the output nor its temporary file.
  std::string other = dir + "/partial.colibri";
  {
    image::ImageWriter writer;
    std::vector<image::TensorSpec> specs = {{"a", image::DType::F32, 0, {16}}, {"b", image::DType::F32, 0, {16}}};
    REQUIRE_FALSE(writer.begin(other, {}, {}, specs, "{}"));
    float zeros[16] = {};
    REQUIRE_FALSE(writer.append(zeros, sizeof zeros));
    Error incomplete = writer.finish();
    REQUIRE(incomplete);
    CHECK_THAT(incomplete.message, Catch::Contains("'b'"));
  }
  CHECK(access(other.c_str(), F_OK) != 0);
  CHECK(std::system(("test -z \"$(ls " + dir + " | grep tmp)\"").c_str()) == 0);
}

TEST_CASE("the writer rejects invalid declarations with a reason", "[image]") {
  std::string path = testing::temp_dir("invalid") + "/m.colibri";
  image::ImageWriter w1;
  Error e = w1.begin(path, {}, {}, {{"x", image::DType::Q8, 32, {4, 33}}}, "{}");
  REQUIRE(e);
  CHECK_THAT(e.message, Catch::Contains("multiple of the group size"));
  image::ImageWriter w2;
  e = w2.begin(path, {}, {}, {{"x", image::DType::F32, 0, {4}}, {"x", image::DType::F32, 0, {4}}}, "{}");
  REQUIRE(e);
  CHECK_THAT(e.message, Catch::Contains("appears twice"));
  image::WriterOptions bad_align;
  bad_align.alignment = 100;
  image::ImageWriter w3;
  e = w3.begin(path, bad_align, {}, {{"x", image::DType::F32, 0, {4}}}, "{}");
  REQUIRE(e);
  CHECK_THAT(e.message, Catch::Contains("power of two"));
  image::ImageWriter w4;
  REQUIRE_FALSE(w4.begin(path, {}, {}, {{"x", image::DType::F32, 0, {4}}}, "{}"));
  float too_much[8] = {};
  e = w4.append(too_much, sizeof too_much);
  REQUIRE(e);
  CHECK_THAT(e.message, Catch::Contains("more tensor bytes"));
}

TEST_CASE("opening reads no tensor bytes: a huge sparse tail does not slow the open", "[image]") {
  // A tensor region that is a hole in a sparse file reads as zeros; open must not checksum it.
  std::string path = testing::temp_dir("lazy") + "/m.colibri";
  image::ImageWriter w;
  REQUIRE_FALSE(w.begin(path, {}, {}, {{"big", image::DType::F32, 0, {1 << 20}}}, "{}"));
  std::vector<float> data(1 << 20, 0.0f);
  REQUIRE_FALSE(w.append(data.data(), data.size() * 4));
  REQUIRE_FALSE(w.finish());
  auto bytes = testing::read_file(path);
  bytes[bytes.size() - 1] ^= 0xFF;  // damage the tensor bytes only
  testing::write_file(path, bytes);
  Error err;
  auto img = image::Image::open(path, {}, &err);
  REQUIRE(img);  // structure fine: open does not read tensor bytes
  Error v = img->verify_all(1);
  REQUIRE(v);
  CHECK_THAT(v.message, Catch::Contains("'big'") && Catch::Contains("checksum mismatch"));
}

TEST_CASE("images with q4, q8f16 or mxfp4 tensors are version 2, and version 1 cannot name those dtypes", "[image][version]") {
  for (image::DType dtype : {image::DType::Q4, image::DType::Q8F16, image::DType::MXFP4}) {
    INFO(image::dtype_name(dtype));
    std::string path = testing::temp_dir("v2") + "/model.colibri";
    testing::SyntheticImageSpec spec;
    spec.dtype = dtype;
    REQUIRE_FALSE(testing::write_synthetic_image(path, spec));
    Error err;
    auto img = image::Image::open(path, {}, &err);
    REQUIRE(img);
    CHECK(img->header().version == 2);
    const image::TensorInfo *gate = img->find("blk.0.ffn_gate_exps");
    REQUIRE(gate);
    CHECK(gate->dtype == dtype);
    CHECK(gate->group_size == 32);
    // [4, 32, 64]: 4·32 rows of 2 blocks of 32 values.
    const uint64_t block = dtype == image::DType::Q4 ? 18 : dtype == image::DType::Q8F16 ? 34 : 17;
    CHECK(gate->size == 4 * 32 * 2 * block);
    // q4 and mxfp4 quantise the experts only; the other matrices are q8f16.
    const image::TensorInfo *embd = img->find("token_embd");
    REQUIRE(embd);
    CHECK(embd->dtype == image::DType::Q8F16);
    CHECK(img->verify_all(1).ok());

    // The same bytes stamped version 1: refused, naming the tensor and the version it needs.
    std::vector<unsigned char> bytes = testing::read_file(path);
    const uint32_t v1 = 1;
    std::memcpy(bytes.data() + 8, &v1, 4);
    REQUIRE(testing::refresh_header_checksum(bytes));
    const std::string v1_path = testing::temp_dir("v2-as-v1") + "/model.colibri";
    testing::write_file(v1_path, bytes);
    auto refused = image::Image::open(v1_path, {}, &err);
    CHECK_FALSE(refused);
    CHECK_THAT(err.message, Catch::Contains("needs format version 2, but the image is version 1"));
  }
}

namespace {

// The bytes of the mapping that starts at `address` that /proc/self/smaps counts as mapped with
// 2 MiB pages (FilePmdMapped); -1 when the mapping is not found.
int64_t huge_mapped_bytes(const void *address) {
  char start[32];
  std::snprintf(start, sizeof start, "%lx-", reinterpret_cast<unsigned long>(address));
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    if (line.rfind(start, 0) == 0) inside = true;
    else if (inside && line.rfind("FilePmdMapped:", 0) == 0) return std::strtoll(line.c_str() + 14, nullptr, 10) << 10;
  }
  return -1;
}

// Maps `path` with MADV_HUGEPAGE, reads every page, and returns huge_mapped_bytes of it.
int64_t huge_mapped_bytes_of_file(const std::string &path, size_t size) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  void *map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  REQUIRE(map != MAP_FAILED);
  ::madvise(map, size, MADV_HUGEPAGE);
  volatile unsigned char sink = 0;
  for (size_t i = 0; i < size; i += 4096) sink = sink + static_cast<const unsigned char *>(map)[i];
  const int64_t huge = huge_mapped_bytes(map);
  ::munmap(map, size);
  return huge;
}

}  // namespace

TEST_CASE("AtomicFile stages writes and the file holds every byte, pwrite included", "[image][atomic]") {
  const std::string dir = testing::temp_dir("atomic-staged");
  constexpr size_t kSpan = util::AtomicFile::kWriteSpan;
  std::vector<unsigned char> data(2 * kSpan + kSpan / 2 + 12345);
  std::mt19937 rng(7);
  for (unsigned char &b : data) b = static_cast<unsigned char>(rng());
  std::vector<unsigned char> expected = data;
  util::AtomicFile file;
  REQUIRE_FALSE(file.open(dir + "/out.bin", false));
  // Chunks that cross span boundaries, one exactly a span, one bigger than two (written
  // through once it is aligned), and a positioned write into bytes still staged.
  const size_t chunks[] = {1, 4095, kSpan - 4096, kSpan, 17, kSpan / 2 - 17 + 12345};
  size_t at = 0;
  for (size_t n : chunks) {
    REQUIRE_FALSE(file.write(data.data() + at, n));
    at += n;
    CHECK(file.position() == at);
    if (at == 1 + 4095) {
      const unsigned char header[8] = {'h', 'e', 'a', 'd', 'e', 'r', '!', '!'};
      REQUIRE_FALSE(file.pwrite(header, sizeof header, 2));
      std::memcpy(expected.data() + 2, header, sizeof header);
    }
  }
  REQUIRE(at == data.size());
  REQUIRE_FALSE(file.write_zeros(3));
  expected.insert(expected.end(), 3, 0);
  const unsigned char tail[4] = {1, 2, 3, 4};
  REQUIRE_FALSE(file.pwrite(tail, sizeof tail, kSpan + 5));  // into bytes already handed on
  std::memcpy(expected.data() + kSpan + 5, tail, sizeof tail);
  REQUIRE_FALSE(file.write(data.data(), 10));  // after a pwrite that handed on a partial span
  expected.insert(expected.end(), data.begin(), data.begin() + 10);
  REQUIRE_FALSE(file.commit());
  CHECK(testing::read_file(dir + "/out.bin") == expected);
}

// A file written in 2 MiB-aligned spans of at least 2 MiB is cached in 2 MiB folios by a file
// system with large folios (ext4, XFS on Linux 6.x), and a mapping of it gets 2 MiB pages; one
// written in 128 KiB writes (cp, cat) is not. Where this machine's /tmp does not do it for the
// reference writer either, there is nothing to check.
TEST_CASE("an image the writer wrote is mapped with 2 MiB pages where the file system caches large folios",
          "[image][atomic][hugepage]") {
  const std::string dir = testing::temp_dir("atomic-folio");
  constexpr size_t kSize = size_t{16} << 20, kFolio = size_t{2} << 20;
  std::vector<unsigned char> data(kSize, 0x5a);
  const std::string reference = dir + "/reference.bin";
  {
    const int fd = ::open(reference.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(fd >= 0);
    for (size_t off = 0; off < kSize; off += kFolio) REQUIRE(::pwrite(fd, data.data() + off, kFolio, static_cast<off_t>(off)) == static_cast<ssize_t>(kFolio));
    ::close(fd);
  }
  if (huge_mapped_bytes_of_file(reference, kSize) <= 0) {
    WARN("the file system under /tmp does not cache files in 2 MiB folios (or smaps has no FilePmdMapped): "
         "nothing to check here");
    return;
  }
  // The image writer's own pattern: many small appends (64 KiB) through AtomicFile.
  const std::string written = dir + "/written.bin";
  util::AtomicFile file;
  REQUIRE_FALSE(file.open(written, false));
  constexpr size_t kAppend = size_t{64} << 10;
  for (size_t off = 0; off < kSize; off += kAppend) REQUIRE_FALSE(file.write(data.data() + off, kAppend));
  REQUIRE_FALSE(file.commit());
  const int64_t huge = huge_mapped_bytes_of_file(written, kSize);
  INFO("FilePmdMapped of the written file: " << huge << " of " << kSize << " bytes");
  CHECK(huge >= static_cast<int64_t>(kSize - kFolio));
}

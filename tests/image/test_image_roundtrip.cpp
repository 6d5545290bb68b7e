// tests/image/test_image_roundtrip.cpp — what the writer writes, the reader reads back:
// layout rules of docs/format.md (alignment, offsets, checksums) and writer atomicity.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>

#include "image/reader.h"
#include "image/writer.h"
#include "support/synthetic_image.h"

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

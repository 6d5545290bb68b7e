// tests/convert/test_safetensors.cpp — the safetensors reader: header validation of one
// file (in memory), and checkpoint directories (single file, sharded, broken).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>

#include "convert/convert_test_support.h"
#include "convert/safetensors_writer.h"
#include "convert/synthetic_checkpoint.h"
#include "modeltool/convert/safetensors.h"

using namespace colibri;
using namespace colibri::modeltool::convert;
using Catch::Contains;

namespace {

// A safetensors file: length, `header` text, then `data_bytes` zero bytes.
std::vector<unsigned char> safetensors_bytes(const std::string &header, uint64_t data_bytes) {
  std::vector<unsigned char> bytes(8 + header.size() + data_bytes, 0);
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  std::memcpy(bytes.data() + 8, header.data(), header.size());
  return bytes;
}

Error parse(const std::vector<unsigned char> &bytes, std::vector<SafetensorsTensor> *tensors = nullptr) {
  std::vector<SafetensorsTensor> local;
  uint64_t data_offset = 0;
  return parse_safetensors(bytes.data(), bytes.size(), "x.safetensors", tensors ? tensors : &local, &data_offset);
}

Error parse_header(const std::string &header, uint64_t data_bytes) { return parse(safetensors_bytes(header, data_bytes)); }

}  // namespace

TEST_CASE("a valid header yields every tensor in data order and ignores __metadata__", "[safetensors]") {
  std::string header = R"({"__metadata__":{"format":"pt"},)"
                       R"("b":{"dtype":"BF16","shape":[2,3],"data_offsets":[12,24]},)"
                       R"("a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})";
  std::vector<SafetensorsTensor> tensors;
  REQUIRE_FALSE(parse(safetensors_bytes(header, 24), &tensors));
  REQUIRE(tensors.size() == 2);
  CHECK(tensors[0].name == "a");
  CHECK(tensors[0].dtype == "F32");
  CHECK(tensors[0].shape == std::vector<uint64_t>{3});
  CHECK(tensors[1].name == "b");
  CHECK(tensors[1].element_count() == 6);
  CHECK(tensors[1].byte_size() == 12);
}

TEST_CASE("sub-byte and scalar tensors are sized by bits", "[safetensors]") {
  CHECK_FALSE(parse_header(R"({"s":{"dtype":"F4","shape":[4],"data_offsets":[0,2]}})", 2));
  CHECK_FALSE(parse_header(R"({"s":{"dtype":"I64","shape":[],"data_offsets":[0,8]}})", 8));
  Error e = parse_header(R"({"s":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2);
  CHECK_THAT(e.message, Contains("does not fill whole bytes"));
}

TEST_CASE("an empty or tiny file is reported as such", "[safetensors]") {
  Error e = parse({});
  CHECK(e.kind == ErrorKind::Corrupt);
  CHECK_THAT(e.message, Contains("'x.safetensors' is empty"));
  e = parse({1, 2, 3});
  CHECK_THAT(e.message, Contains("truncated"));
}

TEST_CASE("a header length beyond the file is a truncated file", "[safetensors]") {
  std::vector<unsigned char> bytes = safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4);
  bytes.resize(20);
  Error e = parse(bytes);
  CHECK(e.kind == ErrorKind::Corrupt);
  CHECK_THAT(e.message, Contains("'x.safetensors' is truncated: its JSON header is"));
}

TEST_CASE("something that is not safetensors is named as such", "[safetensors]") {
  std::string text = "hello, this is a text file and not a checkpoint";
  Error e = parse(std::vector<unsigned char>(text.begin(), text.end()));
  CHECK_THAT(e.message, Contains("is not a safetensors file"));
  CHECK_THAT(e.message, Contains("hello"));
}

TEST_CASE("a header that is not a JSON object is refused", "[safetensors]") {
  CHECK_THAT(parse_header("{not json", 0).message, Contains("the safetensors header is not valid JSON"));
  CHECK_THAT(parse_header("{\"a\": 1}", 0).message, Contains("header entry is not an object"));
}

TEST_CASE("unknown dtypes are refused with the tensor's name", "[safetensors]") {
  Error e = parse_header(R"({"w":{"dtype":"Q3","shape":[1],"data_offsets":[0,1]}})", 1);
  CHECK(e.kind == ErrorKind::Corrupt);
  CHECK_THAT(e.message, Contains("tensor 'w'"));
  CHECK_THAT(e.message, Contains("unknown dtype 'Q3'"));
}

TEST_CASE("data_offsets must match dtype x shape", "[safetensors]") {
  Error e = parse_header(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8);
  CHECK_THAT(e.message, Contains("hold 8 bytes, but F32 [3] needs 12 bytes"));
  e = parse_header(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8);
  CHECK_THAT(e.message, Contains("end before they begin"));
  e = parse_header(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 8);
  CHECK_THAT(e.message, Contains("'data_offsets' is missing or not a [begin, end] pair"));
  e = parse_header(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 8);
  CHECK_THAT(e.message, Contains("not a non-negative integer"));
  e = parse_header(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8);
  CHECK_THAT(e.message, Contains("overflows"));
}

TEST_CASE("overlapping tensors are refused", "[safetensors]") {
  Error e = parse_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                         12);
  CHECK(e.kind == ErrorKind::Corrupt);
  CHECK_THAT(e.message, Contains("'a'"));
  CHECK_THAT(e.message, Contains("'b'"));
  CHECK_THAT(e.message, Contains("overlap"));
}

TEST_CASE("a tensor past the end of the data section is a truncated file", "[safetensors]") {
  Error e = parse_header(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 10);
  CHECK(e.kind == ErrorKind::Corrupt);
  CHECK_THAT(e.message, Contains("'x.safetensors' is truncated: tensor 'a' needs bytes up to 16"));
}

// ---- checkpoint directories ----------------------------------------------------------

TEST_CASE("a single-file checkpoint opens and finds tensors by name", "[safetensors]") {
  testing::ScopedTempDir dir("st-single");
  testing::SyntheticCheckpointSpec spec;
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir.path(), spec));
  SafetensorsCheckpoint checkpoint;
  REQUIRE_FALSE(SafetensorsCheckpoint::open(dir.path(), &checkpoint));
  CHECK(checkpoint.shards().size() == 1);
  CHECK(checkpoint.index_file().empty());
  const SafetensorsTensor *t = checkpoint.find("model.embed_tokens.weight");
  REQUIRE(t);
  CHECK(t->shape == std::vector<uint64_t>{spec.vocab, spec.hidden});
  float first;
  std::memcpy(&first, checkpoint.data(*t), 4);
  CHECK(first == testing::synthetic_value(t->name, 0, spec.seed));
  checkpoint.release(*t, checkpoint.data(*t), t->byte_size());  // dropping pages keeps the data readable
  std::memcpy(&first, checkpoint.data(*t), 4);
  CHECK(first == testing::synthetic_value(t->name, 0, spec.seed));
  CHECK(checkpoint.find("no.such.tensor") == nullptr);
}

TEST_CASE("a sharded checkpoint is read through its index", "[safetensors]") {
  testing::ScopedTempDir dir("st-sharded");
  testing::SyntheticCheckpointSpec spec;
  spec.shards = 3;
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir.path(), spec));
  SafetensorsCheckpoint checkpoint;
  REQUIRE_FALSE(SafetensorsCheckpoint::open(dir.path(), &checkpoint));
  CHECK(checkpoint.shards().size() == 3);
  CHECK(checkpoint.index_file() == "model.safetensors.index.json");
  CHECK(checkpoint.tensors().size() == testing::synthetic_tensors(spec).size());
}

TEST_CASE("a shard listed in the index but absent is named", "[safetensors]") {
  testing::ScopedTempDir dir("st-absent");
  testing::SyntheticCheckpointSpec spec;
  spec.shards = 2;
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir.path(), spec));
  std::filesystem::remove(dir / "model-00002-of-00002.safetensors");
  SafetensorsCheckpoint checkpoint;
  Error e = SafetensorsCheckpoint::open(dir.path(), &checkpoint);
  CHECK(e.kind == ErrorKind::Io);
  CHECK_THAT(e.message, Contains("shard 'model-00002-of-00002.safetensors' is listed in model.safetensors.index.json "
                                 "but is missing"));
}

TEST_CASE("a truncated shard is named with the tensor it cuts", "[safetensors]") {
  testing::ScopedTempDir dir("st-truncated");
  testing::SyntheticCheckpointSpec spec;
  spec.shards = 2;
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir.path(), spec));
  std::string shard = dir / "model-00001-of-00002.safetensors";
  REQUIRE(::truncate(shard.c_str(), static_cast<off_t>(std::filesystem::file_size(shard) - 100)) == 0);
  SafetensorsCheckpoint checkpoint;
  Error e = SafetensorsCheckpoint::open(dir.path(), &checkpoint);
  CHECK(e.kind == ErrorKind::Corrupt);
  CHECK_THAT(e.message, Contains("'model-00001-of-00002.safetensors' is truncated: tensor '"));
}

TEST_CASE("a tensor the index places in a shard that lacks it is named", "[safetensors]") {
  testing::ScopedTempDir dir("st-misplaced");
  testing::SyntheticCheckpointSpec spec;
  spec.shards = 2;
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir.path(), spec));
  nlohmann::json index = nlohmann::json::parse(testing::read_text(dir / "model.safetensors.index.json"));
  index["weight_map"]["model.layers.9.extra.weight"] = "model-00001-of-00002.safetensors";
  testing::write_text(dir / "model.safetensors.index.json", index.dump());
  SafetensorsCheckpoint checkpoint;
  Error e = SafetensorsCheckpoint::open(dir.path(), &checkpoint);
  CHECK(e.kind == ErrorKind::Corrupt);
  CHECK_THAT(e.message, Contains("places tensor 'model.layers.9.extra.weight' in 'model-00001-of-00002.safetensors', "
                                 "but 'model-00001-of-00002.safetensors' does not contain it"));
}

TEST_CASE("an index entry that leaves the directory is refused", "[safetensors]") {
  testing::ScopedTempDir dir("st-escape");
  testing::write_text(dir / "model.safetensors.index.json", R"({"weight_map": {"a": "../../etc/passwd"}})");
  SafetensorsCheckpoint checkpoint;
  CHECK_THAT(SafetensorsCheckpoint::open(dir.path(), &checkpoint).message, Contains("not a file name"));
}

TEST_CASE("the same tensor in two shards is refused", "[safetensors]") {
  testing::ScopedTempDir dir("st-duplicate");
  auto fill = [](size_t, uint64_t, unsigned char *out, size_t n) { std::memset(out, 0, n); };
  REQUIRE_FALSE(testing::write_safetensors(dir / "a.safetensors", {{"w", "F32", {2}}}, fill));
  REQUIRE_FALSE(testing::write_safetensors(dir / "b.safetensors", {{"w", "F32", {2}}, {"v", "F32", {1}}}, fill));
  testing::write_text(dir / "model.safetensors.index.json",
                      R"({"weight_map": {"w": "a.safetensors", "v": "b.safetensors"}})");
  SafetensorsCheckpoint checkpoint;
  CHECK_THAT(SafetensorsCheckpoint::open(dir.path(), &checkpoint).message,
             Contains("tensor 'w' appears in both 'a.safetensors' and 'b.safetensors'"));
}

TEST_CASE("a directory without a safetensors checkpoint says what it holds", "[safetensors]") {
  testing::ScopedTempDir dir("st-none");
  SafetensorsCheckpoint checkpoint;
  Error e = SafetensorsCheckpoint::open(dir.path(), &checkpoint);
  CHECK(e.kind == ErrorKind::Io);
  CHECK_THAT(e.message, Contains("has no model.safetensors or model.safetensors.index.json"));
  testing::write_text(dir / "pytorch_model.bin", "PK");
  e = SafetensorsCheckpoint::open(dir.path(), &checkpoint);
  CHECK(e.kind == ErrorKind::Unsupported);
  CHECK_THAT(e.message, Contains("PyTorch checkpoint ('pytorch_model.bin')"));
}

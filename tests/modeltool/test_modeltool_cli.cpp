// tests/modeltool/test_modeltool_cli.cpp — the colibri-model executable end to end:
// exit codes, inspect --json, verify, and the repack round trips of docs/format.md.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cmath>
#include <fstream>
#include <iterator>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "image/dtype_convert.h"
#include "image/reader.h"
#include "modeltool/cli_support.h"
#include "support/synthetic_image.h"
#include "support/synthetic_model.h"

using namespace colibri;
using Catch::Contains;

namespace {

struct Run {
  int exit_code;
  std::string out;  // stdout and stderr together
};

// Runs colibri-model with ARGS (shell text); out is stderr and stdout together, or stderr alone
// when stdout goes to `stdout_to`.
Run run_tool(const std::string &args, const std::string &stdout_to = "") {
  std::string cmd = std::string(COLIBRI_MODEL_EXE) + " " + args + " 2>&1" + (stdout_to.empty() ? "" : " >" + stdout_to);
  FILE *pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string make_image(const std::string &dir, image::DType dtype = image::DType::F32) {
  std::string path = dir + "/m.colibri";
  testing::SyntheticImageSpec spec;
  spec.dtype = dtype;
  REQUIRE_FALSE(testing::write_synthetic_image(path, spec));
  return path;
}

// A complete model image (verify binds the metadata to the tensors, as every open does).
std::string make_model_image(const std::string &dir, image::DType dtype = image::DType::F32) {
  std::string path = dir + "/model.colibri";
  REQUIRE_FALSE(testing::write_synthetic_model(path, testing::tiny_model_config(), dtype));
  return path;
}

std::vector<float> tensor_values(const image::Image &img, const image::TensorInfo &t) {
  std::vector<float> v(t.element_count());
  uint64_t cols = t.shape[t.rank - 1];
  uint64_t rows = v.size() / cols;
  uint64_t row = image::row_bytes(t.dtype, t.group_size, cols);
  for (uint64_t r = 0; r < rows; ++r) {
    if (t.dtype == image::DType::Q8) image::dequantize_row_q8(img.data(t) + r * row, cols, t.group_size, &v[r * cols]);
    else image::decode_floats(t.dtype, img.data(t) + r * row, cols, &v[r * cols]);
  }
  return v;
}

}  // namespace

TEST_CASE("usage errors exit 2 with help", "[cli]") {
  CHECK(run_tool("").exit_code == 2);
  Run r = run_tool("frobnicate");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.out, Contains("unknown command 'frobnicate'"));
  CHECK(run_tool("inspect").exit_code == 2);
  CHECK(run_tool("inspect --no-such-flag x").exit_code == 2);
  CHECK(run_tool("--help").exit_code == 0);
  CHECK(run_tool("verify --help").exit_code == 0);
  // One FILE per verify/inspect, IN OUT for repack: a stray argument is an error, never ignored
  // (`verify good.colibri broken.colibri` used to say OK about the first and nothing else).
  for (const char *args : {"verify a.colibri b.colibri", "verify --deep a b", "inspect a b", "repack a b c",
                           "convert a -o b c"}) {
    INFO(args);
    Run extra = run_tool(args);
    CHECK(extra.exit_code == 2);
    CHECK_THAT(extra.out, Contains("unexpected argument") || Contains("usage") || Contains("Usage"));
  }
}

TEST_CASE("output that cannot be written is an I/O error, not a silent exit 0", "[cli]") {
  if (::access("/dev/full", W_OK) != 0) {
    WARN("no writable /dev/full on this machine: not checked");
    return;
  }
  std::string dir = testing::temp_dir("cli-full");
  std::string path = make_model_image(dir);
  for (const std::string &args : {"inspect " + path, "inspect --json " + path, "verify " + path}) {
    INFO(args);
    Run r = run_tool(args, "/dev/full");
    CHECK(r.exit_code == 4);
    CHECK_THAT(r.out, Contains("writing to standard output failed"));
  }
}

TEST_CASE("inspect prints the header, tensor table and totals, --json is parseable", "[cli]") {
  std::string path = make_image(testing::temp_dir("cli-inspect"));
  Run text = run_tool("inspect " + path);
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.out, Contains("blk.1.ffn_down_exps") && Contains("[4, 64, 32]") && Contains("expert bytes per layer"));
  Run js = run_tool("inspect --json " + path);
  REQUIRE(js.exit_code == 0);
  auto j = nlohmann::json::parse(js.out);
  CHECK(j["header"]["expert_count"] == 4);
  CHECK(j["header"]["top_k"] == 2);
  CHECK(j["header"]["magic"] == "0x434F4C4942524900");
  CHECK(j["tensors"].size() == 15);
  CHECK(j["expert_bytes_per_layer"]["0"] == 3 * 4 * 32 * 64 * 4);
  CHECK(j["totals"]["per_dtype"]["f32"]["tensors"] == 15);
}

TEST_CASE("inspect reports the KV cache per token and the checkpoint's MTP layers (DeepSeek-V3's latent cache)", "[cli]") {
  const std::string dir = testing::temp_dir("cli-inspect-mla");
  const std::string path = dir + "/deepseek.colibri";
  REQUIRE(run_tool(std::string("convert ") + COLIBRI_SOURCE_DIR + "/tests/fixtures/oracle/deepseek_v3_mla -o " + path).exit_code ==
          0);
  Run text = run_tool("inspect " + path);
  REQUIRE(text.exit_code == 0);
  // 3 layers × (64 latent + 16 rope key) × 4 bytes; expanded: 4 heads × (32 + 16 + 32) values.
  CHECK_THAT(text.out, Contains("mla attention: 80 values per position and layer, 960 B per token in f32") &&
                           Contains("expanded keys and values would take 3.75 KiB") &&
                           Contains("1 multi-token-prediction layer: 0 tensors kept as mtp.<j>.*"));
  Run js = run_tool("inspect --json " + path);
  REQUIRE(js.exit_code == 0);
  auto j = nlohmann::json::parse(js.out);
  CHECK(j["kv_cache"]["attention"] == "mla");
  CHECK(j["kv_cache"]["bytes_per_token_f32"] == 3 * 80 * 4);
  CHECK(j["kv_cache"]["expanded_bytes_per_token_f32"] == 3 * 4 * 80 * 4);
  CHECK(j["kv_cache"]["mtp_layers"] == 1);
  CHECK(j["kv_cache"]["mtp_tensors"] == 0);  // transformers neither builds nor saves them
}

namespace {

std::string repeat(const std::string &s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

// A model image whose metadata carries `raw_member` ("\"key\": VALUE") as its last member.
std::string model_with_member(const std::string &dir, const std::string &name, const std::string &raw_member) {
  testing::ModelImageParts parts = testing::model_parts(testing::tiny_model_config());
  parts.metadata_text = testing::metadata_with_raw_member(parts.metadata, raw_member);
  const std::string path = dir + "/" + name;
  REQUIRE_FALSE(testing::write_model_parts(path, parts));
  return path;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("metadata nested a million (or 40000) levels deep: inspect says so at once, bounded", "[cli][limits]") {
  // Issue 18, item 3: a 1M-deep array crashed inspect; inspect --json at 40k wrote 3.2 GB.
  const std::string dir = testing::temp_dir("cli-deep");
  for (size_t depth : {size_t{1000000}, size_t{40000}, size_t{129}}) {
    INFO(depth);
    const std::string path =
        model_with_member(dir, "deep" + std::to_string(depth) + ".colibri", "\"extra\": {\"deep\": " + repeat("[", depth) + repeat("]", depth) + "}");
    for (const char *flags : {"inspect ", "inspect --json ", "verify "}) {
      const auto start = std::chrono::steady_clock::now();
      Run r = run_tool(flags + path);
      CHECK(seconds_since(start) < 20.0);
      CHECK(r.exit_code == 1);  // corrupt
      CHECK(r.out.size() < 2000);
      CHECK_THAT(r.out, Contains("the metadata section nests objects/arrays deeper than the limit of 128 levels "
                                 "(util::kMaxJsonDepth), under \"extra\" > \"deep\" > [] > []"));
    }
  }
}

TEST_CASE("inspect bounds what it prints of metadata: depth, items, string length, total", "[cli][limits]") {
  const std::string dir = testing::temp_dir("cli-bounded");
  // 100 deep (the library accepts it) and a million-item array, a 10 MB string, 5000 keys.
  std::string keys;
  for (int i = 0; i < 5000; ++i) keys += (i ? ", \"k" : "\"k") + std::to_string(i) + "\": " + std::to_string(i);
  const std::string member = "\"extra\": {\"deep\": " + repeat("[", 100) + repeat("]", 100) + ", \"long\": [" +
                             repeat("1, ", 999999) + "1], \"text\": \"" + repeat("x", 10000000) + "\", \"keys\": {" +
                             keys + "}}";
  const std::string path = model_with_member(dir, "bounded.colibri", member);
  const std::string marker = "\xE2\x80\xA6 truncated";
  Run js = run_tool("inspect --json " + path, dir + "/out.json");
  REQUIRE(js.exit_code == 0);
  std::ifstream in(dir + "/out.json", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text.size() < 3 * (1u << 20));  // the metadata bound (1 MiB) plus the tensor table
  const nlohmann::json j = nlohmann::json::parse(text);  // still valid JSON
  const nlohmann::json &extra = j["metadata"]["extra"];
  // Depth: 16 levels shown, then a marker.
  const nlohmann::json *level = &extra["deep"];
  int shown = 0;
  while (level->is_array()) level = &(*level)[0], ++shown;
  CHECK(shown == 14);  // metadata (0) > extra (1) > deep (2) ... 16 levels in all
  CHECK_THAT(level->get<std::string>(), Contains(marker + ": an array of 1 items nested deeper than 16 levels"));
  CHECK(extra["long"].size() == 1001);
  CHECK(extra["long"][1000] == marker + ": 999000 more items");
  CHECK(extra["text"].get<std::string>().size() < 4200);
  CHECK_THAT(extra["text"].get<std::string>(), Contains(marker + " (10000000 bytes in all)"));
  CHECK(extra["keys"].size() == 1001);
  CHECK(extra["keys"][marker] == marker + ": 4000 more keys");
  // The model and tokenizer sections are whole.
  CHECK(j["metadata"]["model"]["expert_count"] == 4);
  CHECK(j["metadata"]["tokenizer"].contains("json_bytes"));
  // The text form prints the model and tokenizer sections and stays small.
  Run t = run_tool("inspect " + path);
  REQUIRE(t.exit_code == 0);
  CHECK(t.out.size() < 20000);
  CHECK_THAT(t.out, Contains("expert_count") && Contains("json_bytes"));
}

TEST_CASE("verify exit codes: 0 valid, 1 corrupt, 3 not an image, 4 I/O", "[cli]") {
  std::string dir = testing::temp_dir("cli-verify");
  std::string path = make_model_image(dir);
  Run ok = run_tool("verify " + path);
  CHECK(ok.exit_code == 0);
  CHECK_THAT(ok.out, Contains("OK") && Contains("GB/s"));
  CHECK(run_tool("verify --deep " + path).exit_code == 0);

  auto bytes = testing::read_file(path);
  bytes[bytes.size() - 3] ^= 0x10;
  testing::write_file(dir + "/bad.colibri", bytes);
  Run corrupt = run_tool("verify " + dir + "/bad.colibri");
  CHECK(corrupt.exit_code == 1);
  CHECK_THAT(corrupt.out, Contains("tensor 'output' checksum mismatch"));

  testing::write_file(dir + "/text.txt", std::vector<unsigned char>(300, 'a'));
  CHECK(run_tool("verify " + dir + "/text.txt").exit_code == 3);
  CHECK(run_tool("verify " + dir + "/missing.colibri").exit_code == 4);
}

TEST_CASE("verify refuses an image of tensors without model metadata, as opening it as a model does", "[cli]") {
  std::string dir = testing::temp_dir("cli-tensors-only");
  Run r = run_tool("verify " + make_image(dir));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.out, Contains("no model metadata"));
}

TEST_CASE("verify names a header field that disagrees with the metadata, and repack rewrites it from the metadata",
          "[cli][repack]") {
  std::string dir = testing::temp_dir("cli-header");
  auto bytes = testing::read_file(make_model_image(dir));
  const uint64_t wrong = 4096;
  std::memcpy(bytes.data() + offsetof(image::FileHeader, ffn_hidden_size), &wrong, sizeof wrong);
  REQUIRE(testing::refresh_header_checksum(bytes));
  testing::write_file(dir + "/bad.colibri", bytes);
  Run bad = run_tool("verify " + dir + "/bad.colibri");
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.out, Contains("header field ffn_hidden_size is 4096") && Contains("gives 32") && Contains("repack"));
  REQUIRE(run_tool("repack " + dir + "/bad.colibri " + dir + "/fixed.colibri").exit_code == 0);
  Run fixed = run_tool("verify " + dir + "/fixed.colibri");
  CHECK(fixed.exit_code == 0);
  Error err;
  auto img = image::Image::open(dir + "/fixed.colibri", {}, &err);
  REQUIRE(img);
  CHECK(img->header().ffn_hidden_size == 32);
}

TEST_CASE("verify --deep names the first non-finite value", "[cli]") {
  std::string dir = testing::temp_dir("cli-deep");
  auto bytes = testing::read_file(make_model_image(dir));
  std::string path = dir + "/nan.colibri";
  {
    testing::write_file(path, bytes);
    Error err;
    auto img = image::Image::open(path, {}, &err);
    REQUIRE(img);
    const image::TensorInfo *t = img->find("blk.1.ffn_up_exps");
    REQUIRE(t);
    float nan = std::nanf("");
    std::memcpy(bytes.data() + t->offset + 4 * 77, &nan, 4);
    // Keep the checksum valid so only --deep can notice.
    for (size_t i = 0; i < img->tensors().size(); ++i)
      if (img->tensors()[i].name == t->name)
        testing::entry_at(bytes, i)->checksum = image::checksum_bytes(bytes.data() + t->offset, t->size);
    REQUIRE(testing::refresh_header_checksum(bytes));
  }
  testing::write_file(path, bytes);
  CHECK(run_tool("verify " + path).exit_code == 0);
  Run deep = run_tool("verify --deep " + path);
  CHECK(deep.exit_code == 1);
  CHECK_THAT(deep.out, Contains("blk.1.ffn_up_exps") && Contains("element 77"));
}

TEST_CASE("repack f32 -> f16 -> f32 stays within f16 rounding", "[cli][repack]") {
  std::string dir = testing::temp_dir("cli-f16");
  std::string f32 = make_image(dir);
  REQUIRE(run_tool("repack " + f32 + " " + dir + "/h.colibri --dtype f16").exit_code == 0);
  Run back = run_tool("repack " + dir + "/h.colibri " + dir + "/back.colibri --dtype f32");
  REQUIRE(back.exit_code == 0);
  Error err;
  auto a = image::Image::open(f32, {}, &err);
  auto h = image::Image::open(dir + "/h.colibri", {}, &err);
  auto b = image::Image::open(dir + "/back.colibri", {}, &err);
  REQUIRE((a && h && b));
  CHECK(h->find("blk.0.ffn_gate_exps")->dtype == image::DType::F16);
  CHECK(h->find("blk.0.ffn_gate_inp")->dtype == image::DType::F32);  // routers stay f32
  CHECK(h->find("blk.0.attn_norm")->dtype == image::DType::F32);      // vectors stay f32
  CHECK(h->file_size() < a->file_size());
  for (const auto &t : a->tensors()) {
    auto x = tensor_values(*a, t);
    auto y = tensor_values(*b, *b->find(t.name));
    REQUIRE(x.size() == y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      // f16 has 11 significant bits: relative error ≤ 2^-11 for normal values.
      REQUIRE(std::fabs(x[i] - y[i]) <= std::fabs(x[i]) * (1.0f / 2048.0f) + 6e-8f);
    }
  }
  CHECK(b->verify_all(1).ok());
}

TEST_CASE("repack --compress then --decompress gives a byte-identical file", "[cli][repack]") {
  std::string dir = testing::temp_dir("cli-zst");
  std::string path = make_image(dir, image::DType::F16);
  REQUIRE(run_tool("repack " + path + " " + dir + "/m.colibri.zst --compress").exit_code == 0);
  CHECK(run_tool("verify " + dir + "/m.colibri.zst").exit_code == 3);  // says: decompress first
  REQUIRE(run_tool("repack " + dir + "/m.colibri.zst " + dir + "/restored.colibri --decompress").exit_code == 0);
  CHECK(testing::read_file(path) == testing::read_file(dir + "/restored.colibri"));
  // A truncated .zst is refused and leaves no output behind.
  auto zst = testing::read_file(dir + "/m.colibri.zst");
  zst.resize(zst.size() / 2);
  testing::write_file(dir + "/cut.zst", zst);
  Run cut = run_tool("repack " + dir + "/cut.zst " + dir + "/cut.colibri --decompress");
  CHECK(cut.exit_code != 0);
  CHECK_THAT(cut.out, Contains("truncated") || Contains("damaged"));
  CHECK(testing::read_file(dir + "/cut.colibri").empty());
}

TEST_CASE("repack to q8 reports a rounding error bounded by scale/2", "[cli][repack]") {
  std::string dir = testing::temp_dir("cli-q8");
  std::string path = make_image(dir);
  Run r = run_tool("repack " + path + " " + dir + "/q.colibri --dtype q8");
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("max_abs_err") && Contains("blk.0.ffn_gate_exps"));
  Error err;
  auto a = image::Image::open(path, {}, &err);
  auto q = image::Image::open(dir + "/q.colibri", {}, &err);
  REQUIRE((a && q));
  const image::TensorInfo *t = q->find("blk.0.ffn_down_exps");
  CHECK(t->dtype == image::DType::Q8);
  CHECK(t->group_size == 32);
  auto x = tensor_values(*a, *a->find(t->name));
  auto y = tensor_values(*q, *t);
  uint64_t block = image::q8_block_bytes(32);
  for (size_t i = 0; i < x.size(); ++i) {
    float scale;
    std::memcpy(&scale, q->data(*t) + (i / 32) * block, 4);
    REQUIRE(std::fabs(x[i] - y[i]) <= scale / 2 * (1 + 1e-6f));
  }
  // Every reported error sits at or below its bound.
  size_t rows_checked = 0;
  for (size_t pos = r.out.find("-> q8"); pos != std::string::npos; pos = r.out.find("-> q8", pos + 1)) {
    double err_value = 0, bound = 0;
    REQUIRE(std::sscanf(r.out.c_str() + pos + 5, "%lf %lf", &err_value, &bound) == 2);
    CHECK(err_value <= bound * (1 + 1e-6));
    ++rows_checked;
  }
  CHECK(rows_checked > 0);
}

TEST_CASE("repack to q8 writes every row of tensors that take several output chunks", "[cli][repack][threads]") {
  // repack converts 8 MiB of output at a time and hands each chunk to the writer on another
  // thread while the next is converted (two buffers in turn): a 4 × 2048 × 1024 expert tensor
  // is 9.4 MB in q8, two chunks. Every row must be the quantiser's bytes of the input row.
  const std::string dir = testing::memory_temp_dir("cli-chunks");
  testing::SyntheticImageSpec spec;
  spec.layers = 1;
  spec.hidden = 1024;
  spec.ffn = 2048;
  spec.experts = 4;
  const std::string in = dir + "/big.colibri";
  REQUIRE_FALSE(testing::write_synthetic_image(in, spec));
  for (const char *threads : {"1", "2"}) {
    INFO("--threads " << threads);
    Run r = run_tool("repack " + in + " " + dir + "/q.colibri --force --no-progress --dtype q8 --threads " + threads);
    REQUIRE(r.exit_code == 0);
    Error err;
    auto a = image::Image::open(in, {}, &err);
    auto q = image::Image::open(dir + "/q.colibri", {}, &err);
    REQUIRE((a && q));
    size_t multi_chunk = 0;
    for (const char *name : {"blk.0.ffn_gate_exps", "blk.0.ffn_up_exps", "blk.0.ffn_down_exps"}) {
      INFO(name);
      const image::TensorInfo *t = q->find(name);
      REQUIRE(t != nullptr);
      REQUIRE(t->dtype == image::DType::Q8);
      const uint64_t cols = t->shape[t->rank - 1], rows = t->element_count() / cols;
      const uint64_t row = image::row_bytes(image::DType::Q8, 32, cols);
      if (rows * row > (8u << 20)) ++multi_chunk;
      const std::vector<float> x = tensor_values(*a, *a->find(name));
      std::vector<unsigned char> expected(row);
      uint64_t differing_rows = 0;
      for (uint64_t r0 = 0; r0 < rows; ++r0) {
        image::quantize_row_q8(&x[r0 * cols], cols, 32, expected.data(), nullptr);
        if (std::memcmp(expected.data(), q->data(*t) + r0 * row, row) != 0) ++differing_rows;
      }
      CHECK(differing_rows == 0);
    }
    CHECK(multi_chunk == 3);
  }
}

TEST_CASE("repack writes the same bytes and report for any --threads, and refuses absurd counts", "[cli][repack][threads]") {
  std::string dir = testing::temp_dir("cli-threads");
  std::string path = make_image(dir);
  for (const char *dtype : {"q8", "q4", "q8f16", "bf16"}) {
    INFO(dtype);
    Run one = run_tool("repack " + path + " " + dir + "/t1.colibri --force --no-progress --threads 1 --dtype " + dtype);
    Run three = run_tool("repack " + path + " " + dir + "/t3.colibri --force --no-progress --threads 3 --dtype " + dtype);
    REQUIRE(one.exit_code == 0);
    REQUIRE(three.exit_code == 0);
    CHECK(testing::read_file(dir + "/t1.colibri") == testing::read_file(dir + "/t3.colibri"));
    // The error table is the same too (the output name aside).
    CHECK(one.out.substr(0, one.out.find("wrote")) == three.out.substr(0, three.out.find("wrote")));
  }
  Run absurd = run_tool("repack " + path + " " + dir + "/x.colibri --dtype q8 --threads 100000");
  CHECK(absurd.exit_code == 2);
  CHECK_THAT(absurd.out, Contains("--threads 100000"));
}

TEST_CASE("repack refuses OUT == IN, existing OUT without --force, and bad options", "[cli][repack]") {
  std::string dir = testing::temp_dir("cli-refuse");
  std::string path = make_image(dir);
  auto before = testing::read_file(path);
  Run same = run_tool("repack " + path + " " + path + " --dtype f16 --force");
  CHECK(same.exit_code == 2);
  CHECK_THAT(same.out, Contains("same file"));
  Run link = run_tool("repack " + path + " " + dir + "/../" + dir.substr(dir.rfind('/') + 1) + "/m.colibri --dtype f16 --force");
  CHECK(link.exit_code == 2);
  CHECK(testing::read_file(path) == before);
  REQUIRE(run_tool("repack " + path + " " + dir + "/o.colibri --dtype f16").exit_code == 0);
  Run exists = run_tool("repack " + path + " " + dir + "/o.colibri --dtype f16");
  CHECK(exists.exit_code == 2);
  CHECK_THAT(exists.out, Contains("--force"));
  CHECK(run_tool("repack " + path + " " + dir + "/o.colibri --dtype f16 --force").exit_code == 0);
  // --force replaces a regular file, never a FIFO (or a device): the node stays what it was.
  REQUIRE(::mkfifo((dir + "/fifo").c_str(), 0600) == 0);
  Run fifo = run_tool("repack " + path + " " + dir + "/fifo --dtype f16 --force");
  CHECK(fifo.exit_code == 2);
  CHECK_THAT(fifo.out, Contains("not a regular file"));
  struct stat st{};
  REQUIRE(::stat((dir + "/fifo").c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  CHECK(run_tool("repack " + path + " " + dir + "/x.colibri --dtype f8").exit_code == 2);
  CHECK(run_tool("repack " + path + " " + dir + "/x.colibri --align 100").exit_code == 2);
  // Without options the image is rewritten as it is: a consistent image comes out byte-identical.
  CHECK(run_tool("repack " + path + " " + dir + "/x.colibri").exit_code == 0);
  CHECK(testing::read_file(dir + "/x.colibri") == before);
  Run aligned = run_tool("repack " + path + " " + dir + "/a.colibri --align 65536");
  REQUIRE(aligned.exit_code == 0);
  Error err;
  auto img = image::Image::open(dir + "/a.colibri", {}, &err);
  REQUIRE(img);
  CHECK(img->header().data_alignment == 65536);
  for (const auto &t : img->tensors()) CHECK(t.offset % 65536 == 0);
}

// ---- issue 18, item 5: interrupted writers --------------------------------------------------

namespace {

// Runs colibri-model under `ulimit -f BLOCKS` (1 KiB blocks), through bash as a user would.
Run run_tool_file_limited(int blocks, const std::string &args) {
  std::string cmd = "bash -c 'ulimit -f " + std::to_string(blocks) + "; exec " + COLIBRI_MODEL_EXE + " " + args + "' 2>&1";
  FILE *pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  int status = pclose(pipe);
  // Killed by SIGXFSZ, bash's exec leaves the signal in the status (sh would say 153).
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

// The names in `dir` that start with `prefix`.
std::vector<std::string> names_starting(const std::string &dir, const std::string &prefix) {
  std::vector<std::string> names;
  for (const auto &entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// A child process that creates `path`, takes an flock on it and signals readiness; it holds
// the lock until killed. Returns its pid.
pid_t lock_holder(const std::string &path) {
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(ready[0]);
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0644);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0 || ::write(fd, "partial", 7) != 7) _exit(1);
    if (::write(ready[1], "r", 1) != 1) _exit(1);
    for (;;) ::pause();
  }
  close(ready[1]);
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  close(ready[0]);
  return pid;
}

}  // namespace

TEST_CASE("under ulimit -f, repack, --decompress and convert fail with the I/O error and leave no temporary file",
          "[cli][repack][reliability]") {
  const std::string dir = testing::temp_dir("cli-fsize");
  const std::string in = make_image(dir);  // ~260 KiB
  REQUIRE(run_tool("repack " + in + " " + dir + "/m.colibri.zst --compress").exit_code == 0);
  constexpr int kLimitBlocks = 64;  // 64 KiB: smaller than each output
  struct Case {
    const char *what;
    std::string args;
  };
  const Case cases[] = {
      {"repack", "repack " + in + " " + dir + "/out.colibri --dtype f16"},
      {"repack --decompress", "repack " + dir + "/m.colibri.zst " + dir + "/out.colibri --decompress"},
      {"convert", std::string("convert ") + COLIBRI_SOURCE_DIR + "/tests/fixtures/oracle/mixtral_gqa -o " + dir +
                      "/out.colibri"},
  };
  for (const Case &c : cases) {
    Run r = run_tool_file_limited(kLimitBlocks, c.args);
    INFO(c.what << ": " << r.out);
    CHECK(r.exit_code == 4);  // I/O error; was 153 (killed by SIGXFSZ)
    CHECK_THAT(r.out, Contains("I/O error: writing '") && Contains("File too large") &&
                          Contains("the file-size limit (ulimit -f, RLIMIT_FSIZE) is 64.00 KiB") &&
                          Contains("The temporary file was removed"));
    CHECK(names_starting(dir, "out.colibri").empty());  // neither OUT nor OUT.tmp.*
  }
}

TEST_CASE("a killed writer's temporary file is removed by the next run for the same output while a live one is kept",
          "[cli][repack][reliability]") {
  const std::string dir = testing::temp_dir("cli-stale");
  const std::string in = make_image(dir);
  const std::string out = dir + "/out.colibri";
  // A writer killed with SIGKILL while it held its temporary file (the kernel drops its lock).
  const pid_t killed = lock_holder(out + ".tmp.Ab12Cd");
  REQUIRE(::kill(killed, SIGKILL) == 0);
  REQUIRE(::waitpid(killed, nullptr, 0) == killed);
  // A writer still running, and names that are not this output's temporary files.
  const pid_t live = lock_holder(out + ".tmp.Live01");
  testing::write_file(out + ".tmp.toolong7", {1});
  testing::write_file(dir + "/other.colibri.tmp.Xy98Zw", {1});
  Run r = run_tool("repack " + in + " " + out);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("note: removed the stale temporary file '" + out + ".tmp.Ab12Cd'"));
  CHECK_THAT(r.out, !Contains("Live01"));
  CHECK(names_starting(dir, "out.colibri") ==
        std::vector<std::string>{"out.colibri", "out.colibri.tmp.Live01", "out.colibri.tmp.toolong7"});
  CHECK(names_starting(dir, "other.colibri").size() == 1);
  // The live writer gone, the next run removes its file too.
  REQUIRE(::kill(live, SIGKILL) == 0);
  REQUIRE(::waitpid(live, nullptr, 0) == live);
  r = run_tool("repack " + in + " " + out + " --force");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("removed the stale temporary file '" + out + ".tmp.Live01'"));
  CHECK(names_starting(dir, "out.colibri") == std::vector<std::string>{"out.colibri", "out.colibri.tmp.toolong7"});
}

TEST_CASE("q4, q8f16 and mxfp4 model images: verify passes, inspect shows each class's dtypes and bits per weight, "
          "repack converts to and from them", "[cli][q4]") {
  std::string dir = testing::temp_dir("cli-q4");
  const std::string f32 = make_model_image(dir);
  for (const char *dtype : {"q4", "q8f16", "mxfp4"}) {
    INFO(dtype);
    const std::string out = dir + "/" + dtype + ".colibri";
    Run repacked = run_tool("repack " + f32 + " " + out + " --dtype " + dtype + " --force");
    INFO(repacked.out);
    REQUIRE(repacked.exit_code == 0);
    Run verify = run_tool("verify --deep " + out);
    CHECK(verify.exit_code == 0);
    Run js = run_tool("inspect --json " + out);
    REQUIRE(js.exit_code == 0);
    auto j = nlohmann::json::parse(js.out);
    CHECK(j["header"]["version"] == 2);
    const std::string experts = std::string(dtype) + "/32";
    CHECK(j["classes"]["experts"]["dtypes"].contains(experts));
    CHECK(j["classes"]["attention"]["dtypes"].contains("q8f16/32"));
    CHECK(j["classes"]["router"]["dtypes"].contains("f32"));
    CHECK(j["classes"]["router"]["bits_per_weight"] == 32.0);
    const double expected_bits = std::string(dtype) == "q4" ? 4.5 : std::string(dtype) == "mxfp4" ? 4.25 : 8.5;
    CHECK(j["classes"]["experts"]["bits_per_weight"] == expected_bits);
    CHECK(j["totals"]["bits_per_weight"].get<double>() < 32.0);
    Run text = run_tool("inspect " + out);
    CHECK_THAT(text.out, Contains("tensor classes") && Contains(experts) && Contains("bits per weight"));
    // Back to a float type (dequantised), which verifies too.
    const std::string back = dir + "/" + dtype + "-f16.colibri";
    REQUIRE(run_tool("repack " + out + " " + back + " --dtype f16 --force").exit_code == 0);
    CHECK(run_tool("verify " + back).exit_code == 0);
  }
  // A block tensor is only re-quantised from a float type.
  Run refused = run_tool("repack " + dir + "/q4.colibri " + dir + "/x.colibri --dtype q8 --force");
  CHECK(refused.exit_code != 0);
  CHECK_THAT(refused.out, Contains("is only made from float types"));
}

// ---- issue 24: the shared vocabulary, progress off a terminal, verify --json -----------------

TEST_CASE("repack --alignment is the spelling convert uses, --align stays an alias", "[cli][vocabulary]") {
  std::string dir = testing::temp_dir("cli-alignment");
  std::string path = make_image(dir);
  for (const std::string flag : {"--alignment 8192", "--alignment=8192", "--align 8192"}) {
    INFO(flag);
    REQUIRE(run_tool("repack " + path + " " + dir + "/a.colibri --force " + flag).exit_code == 0);
    Error err;
    auto img = image::Image::open(dir + "/a.colibri", {}, &err);
    REQUIRE(img);
    CHECK(img->header().data_alignment == 8192);
  }
  Run bad = run_tool("repack " + path + " " + dir + "/b.colibri --alignment 100");
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.out, Contains("--alignment 100"));
  CHECK_THAT(run_tool("repack --help").out, Contains("--alignment"));
  // -t is --threads, as in colibri.
  CHECK(run_tool("verify -t 1 " + make_model_image(dir)).exit_code == 0);
}

TEST_CASE("verify prints plain progress lines when stderr is not a terminal, --no-progress silences them",
          "[cli][progress]") {
  std::string path = make_model_image(testing::temp_dir("cli-progress"));
  Run lines = run_tool("verify --threads 1 --progress-every 0.01 " + path, "/dev/null");
  REQUIRE(lines.exit_code == 0);
  // Plain lines, never the terminal's carriage returns or escape codes.
  CHECK(lines.out.find('\r') == std::string::npos);
  CHECK(lines.out.find('\033') == std::string::npos);
  // A job shorter than the interval prints nothing; this one is: the default interval is 5 s.
  Run quiet_default = run_tool("verify " + path, "/dev/null");
  CHECK_THAT(quiet_default.out, !Contains("MB/s"));
  Run silenced = run_tool("verify --no-progress --progress-every 0.01 " + path, "/dev/null");
  CHECK_THAT(silenced.out, !Contains("MB/s"));
  CHECK(run_tool("verify --progress-every 0 " + path).exit_code == 2);
  CHECK(run_tool("verify --progress-every soon " + path).exit_code == 2);
}

TEST_CASE("Progress off a terminal: a plain line per interval and a last line at the end", "[cli][progress]") {
  const std::string file = testing::temp_dir("cli-progress-unit") + "/stderr.txt";
  std::fflush(stderr);
  const int saved = ::dup(2);
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(fd >= 0);
  ::dup2(fd, 2);
  {
    modeltool::ProgressStyle style;
    style.plain_interval_seconds = 0.2;
    modeltool::Progress progress("verify", 3000000, style);
    progress.update(1000000, "a");  // before the first interval: nothing
    ::usleep(250000);
    progress.update(2000000, "b");  // an interval later: a line
    progress.update(2500000, "c");  // within the interval: nothing
    progress.finish();               // where it ended: a last line
    modeltool::ProgressStyle off;
    off.enabled = false;
    modeltool::Progress silent("repack", 10, off);
    ::usleep(30000);
    silent.update(5);
    silent.finish();
  }
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  ::close(fd);
  auto bytes = testing::read_file(file);
  const std::string out(bytes.begin(), bytes.end());
  INFO(out);
  CHECK(std::count(out.begin(), out.end(), '\n') == 2);
  CHECK_THAT(out, Contains("verify: 66.7% ") && Contains(", b\n"));
  CHECK_THAT(out, Contains("verify: 83.3% ") && Contains(", c\n"));
  CHECK(out.find('\r') == std::string::npos);
  CHECK(out.find("repack") == std::string::npos);
}

TEST_CASE("verify --json: one object, also for a damaged image", "[cli][json]") {
  std::string dir = testing::temp_dir("cli-verify-json");
  std::string path = make_model_image(dir);
  Run ok = run_tool("verify --json " + path + " 2>/dev/null");
  REQUIRE(ok.exit_code == 0);
  auto j = nlohmann::json::parse(ok.out);
  CHECK(j["ok"] == true);
  CHECK(j["file"] == path);
  CHECK(j["tensors"].get<int>() > 0);
  CHECK(j["tensor_bytes"].get<int64_t>() > 0);
  CHECK(j.contains("checksum_seconds"));
  auto bytes = testing::read_file(path);
  bytes[bytes.size() - 3] ^= 0x10;
  testing::write_file(dir + "/bad.colibri", bytes);
  Run bad = run_tool("verify --json " + dir + "/bad.colibri 2>/dev/null");
  CHECK(bad.exit_code == 1);
  auto jb = nlohmann::json::parse(bad.out);
  CHECK(jb["ok"] == false);
  CHECK(jb["error"]["exit_code"] == 1);
  CHECK_THAT(jb["error"]["message"].get<std::string>(), Contains("checksum mismatch"));
}

// tests/convert/test_convert_cli.cpp — `colibri-model convert` argument handling and exit
// codes (run in-process through run_convert; argv[0] is "convert").
#include <catch2/catch.hpp>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

#include "convert/convert_test_support.h"
#include "convert/synthetic_checkpoint.h"
#include "modeltool/commands.h"

using namespace colibri;
using namespace colibri::modeltool;

namespace {

int run(std::initializer_list<std::string> args) {
  std::vector<std::string> storage = {"convert"};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char *> argv;
  for (std::string &s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  return run_convert(static_cast<int>(storage.size()), argv.data());
}

}  // namespace

TEST_CASE("convert: --help succeeds, bad command lines are usage errors", "[convert][cli]") {
  CHECK(run({"--help"}) == kExitOk);
  CHECK(run({}) == kExitUsage);
  CHECK(run({"only-one-path"}) == kExitUsage);
  CHECK(run({"a", "b", "c"}) == kExitUsage);
  CHECK(run({"a", "-o", "b", "--dtype", "f8"}) == kExitUsage);
  CHECK(run({"a", "-o", "b", "--group-size", "48"}) == kExitUsage);
  CHECK(run({"a", "-o", "b", "--alignment", "lots"}) == kExitUsage);
  CHECK(run({"a", "-o", "b", "--no-such-option"}) == kExitUsage);
}

TEST_CASE("convert: success, and each failure class maps to its exit code", "[convert][cli]") {
  testing::ScopedTempDir dir("cli");
  testing::SyntheticCheckpointSpec spec;
  spec.hidden = 64;  // attn_q rows: 64 columns, one q8 group of 64
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "hf", spec));

  CHECK(run({dir / "hf", "-o", dir / "m.colibri", "--dtype", "q8", "--group-size", "64", "-q"}) == kExitOk);
  auto img = testing::open_image(dir / "m.colibri");
  CHECK(img->find("blk.0.attn_q")->dtype == image::DType::Q8);
  CHECK(img->find("blk.0.attn_q")->group_size == 64);

  CHECK(run({dir / "hf", dir / "m.colibri", "-q"}) == kExitUsage);                   // exists, no --force
  CHECK(run({dir / "hf", dir / "m.colibri", "--force", "--alignment", "64", "-q"}) == kExitOk);
  CHECK(testing::open_image(dir / "m.colibri")->header().data_alignment == 64);

  CHECK(run({dir / "nowhere", "-o", dir / "x.colibri"}) == kExitIo);      // no such checkpoint
  CHECK(run({dir / "hf", "-o", dir / "nowhere/x.colibri"}) == kExitIo);   // no such output directory

  testing::SyntheticCheckpointSpec llama = spec;
  llama.config_overrides = {{"architectures", {"LlamaForCausalLM"}}};
  REQUIRE_FALSE(testing::write_synthetic_checkpoint(dir / "llama", llama));
  CHECK(run({dir / "llama", "-o", dir / "x.colibri"}) == kExitUnsupported);

  std::filesystem::resize_file(dir / "hf/model.safetensors", 100);
  CHECK(run({dir / "hf", "-o", dir / "x.colibri"}) == kExitCorrupt);
  CHECK_FALSE(std::filesystem::exists(dir / "x.colibri"));
}

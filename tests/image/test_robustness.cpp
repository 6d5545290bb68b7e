// tests/image/test_robustness.cpp — a damaged image never crashes the reader.
// For a small valid image: every single-byte change in the header, directory and metadata
// (with the header checksum left stale, and refreshed so validation goes deeper), and every
// truncation length, either opens and verifies or fails with a clean, non-empty error.
// Buffers are allocated at their exact size so ASan catches any read past the end.
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>

#include "image/reader.h"
#include "support/synthetic_image.h"

using namespace colibri;

namespace {

std::vector<unsigned char> small_image() {
  testing::SyntheticImageSpec spec;
  spec.layers = 1;
  spec.hidden = 32;
  spec.ffn = 32;
  spec.experts = 2;
  spec.top_k = 1;
  spec.vocab = 16;
  std::string path = testing::temp_dir("robust") + "/m.colibri";
  REQUIRE_FALSE(testing::write_synthetic_image(path, spec));
  return testing::read_file(path);
}

// Opens an exact-size copy; returns 1 if it opened and verified, 0 if it failed cleanly.
int open_exact(const std::vector<unsigned char> &bytes, size_t size) {
  std::unique_ptr<unsigned char[]> copy(new unsigned char[size ? size : 1]);
  if (size) std::memcpy(copy.get(), bytes.data(), size);
  Error err;
  auto img = image::Image::from_memory(copy.get(), size, "mutant", &err);
  if (!img) {
    REQUIRE(!err.ok());
    REQUIRE(!err.message.empty());
    return 0;
  }
  Error v = img->verify_all(1);
  if (v) REQUIRE(!v.message.empty());
  return v ? 0 : 1;
}

}  // namespace

TEST_CASE("every single-byte change in header, directory and metadata fails cleanly or verifies", "[robustness]") {
  const auto original = small_image();
  image::FileHeader h;
  std::memcpy(&h, original.data(), sizeof h);
  const size_t structure_end = h.metadata_offset + h.metadata_size;
  const unsigned char deltas[] = {0x01, 0x80, 0xFF};
  size_t opened_stale = 0, opened_refreshed = 0, mutants = 0;
  for (size_t pos = 0; pos < structure_end; ++pos) {
    for (unsigned char delta : deltas) {
      auto mutant = original;
      mutant[pos] ^= delta;
      ++mutants;
      opened_stale += static_cast<size_t>(open_exact(mutant, mutant.size()));
      if (testing::refresh_header_checksum(mutant)) opened_refreshed += static_cast<size_t>(open_exact(mutant, mutant.size()));
    }
  }
  INFO("mutants " << mutants << ", opened with stale checksum " << opened_stale << ", with refreshed "
                  << opened_refreshed);
  // Without a refreshed checksum, no byte change may pass: the checksum covers every byte.
  CHECK(opened_stale == 0);
  // With a refreshed checksum some changes are legitimately harmless (reserved bytes, header
  // model fields, metadata string contents); most are caught by the structural checks.
  CHECK(opened_refreshed < mutants);
}

TEST_CASE("every truncation length fails cleanly", "[robustness]") {
  const auto original = small_image();
  for (size_t size = 0; size < original.size(); ++size) REQUIRE(open_exact(original, size) == 0);
  CHECK(open_exact(original, original.size()) == 1);
}

TEST_CASE("a truncated file on disk reports expected vs actual size through mmap", "[robustness]") {
  auto bytes = small_image();
  std::string dir = testing::temp_dir("robust-disk");
  for (size_t cut : {size_t{1}, size_t{7}, size_t{255}, size_t{256}, bytes.size() / 2, bytes.size() - 1}) {
    std::vector<unsigned char> part(bytes.begin(), bytes.begin() + static_cast<long>(cut));
    std::string path = dir + "/cut" + std::to_string(cut);
    testing::write_file(path, part);
    Error err;
    CHECK_FALSE(image::Image::open(path, {}, &err));
    CHECK(!err.message.empty());
  }
}

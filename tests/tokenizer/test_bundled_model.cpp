// tests/tokenizer/test_bundled_model.cpp — the bundled model's tokenizer loads and round-trips.
//
// models/colibri-tiny-moe/tokenizer.json is a byte-level BPE (ByteLevel pre-tokenizer with the
// GPT-2 regex, TemplateProcessing with <|bos|>). Byte-level BPE is lossless, so every line of
// the held-out text must come back unchanged, streamed or not. Skipped when the model folder
// is absent (it is produced by tools/train_tiny).
#include <sstream>
#include <string>

#include "tokenizer_test_support.h"

using namespace tokenizer_test;

TEST_CASE("the bundled model's tokenizer round-trips its held-out text", "[bundled]") {
  const std::string tokenizer_path = "models/colibri-tiny-moe/tokenizer.json";
  const std::string heldout_path = "models/colibri-tiny-moe/heldout.txt";
  if (!file_exists(source_path(tokenizer_path)) || !file_exists(source_path(heldout_path))) {
    WARN("models/colibri-tiny-moe is absent: skipped");
    return;
  }
  auto tok = load_tokenizer(tokenizer_path);
  std::istringstream lines(read_file(source_path(heldout_path)));
  size_t checked = 0;
  for (std::string line; std::getline(lines, line) && checked < 200;) {
    INFO("line " << checked << ": " << line);
    const std::vector<int32_t> ids = encode(*tok, line, true, false);
    CHECK(decode_all(*tok, ids, true) == line);
    colibri::tokenizer::StreamDecoder stream(*tok, true);
    std::string piece, streamed;
    for (int32_t id : ids) {
      REQUIRE(stream.push(id, &piece).ok());
      streamed += piece;
    }
    REQUIRE(stream.flush(&piece).ok());
    CHECK(streamed + piece == line);
    ++checked;
  }
  CHECK(checked > 0);
  // The whole file as one text, too (newlines and all).
  const std::string all = read_file(source_path(heldout_path));
  CHECK(decode_all(*tok, encode(*tok, all, false, false), false) == all);
}

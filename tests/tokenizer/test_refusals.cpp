// tests/tokenizer/test_refusals.cpp — what the loader refuses, and how it says so.
//
// Each test edits a copy of a fixture tokenizer.json so that exactly one component is
// something this build does not implement, and checks the error names that component.
#include <functional>
#include <string>

#include "tokenizer_test_support.h"

using namespace tokenizer_test;

namespace {

colibri::Error load_edited(const char *path, const std::function<void(json &)> &edit) {
  json j = json::parse(read_file(source_path(path)));
  edit(j);
  colibri::Error error;
  auto tok = Tokenizer::from_json(j.dump(), &error);
  CHECK(tok == nullptr);
  CHECK_FALSE(error.ok());
  return error;
}

const char *const kByteLevel = "tests/fixtures/oracle/qwen2_moe_shared/tokenizer.json";
const char *const kLlama = "tests/fixtures/oracle/mixtral_gqa/tokenizer.json";

}  // namespace

TEST_CASE("an unsupported pre-tokenizer is refused with its name and the supported list", "[refuse]") {
  colibri::Error e = load_edited(kByteLevel, [](json &j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; });
  CHECK(e.kind == colibri::ErrorKind::Unsupported);
  CHECK(e.message ==
        "tokenizer.json: pre_tokenizer type \"Whitespace\" is not supported (supported: Sequence, ByteLevel, Split, "
        "Metaspace)");
}

TEST_CASE("an unsupported step inside a Sequence is refused with its path", "[refuse]") {
  colibri::Error e = load_edited(kByteLevel, [](json &j) {
    j["pre_tokenizer"]["pretokenizers"][1] = {{"type", "Digits"}, {"individual_digits", true}};
  });
  CHECK(e.kind == colibri::ErrorKind::Unsupported);
  CHECK_THAT(e.message, Catch::Contains("pre_tokenizer.pretokenizers[1] type \"Digits\" is not supported"));
}

TEST_CASE("an unsupported normalizer, model, decoder or post-processor is refused by name", "[refuse]") {
  CHECK_THAT(load_edited(kLlama, [](json &j) { j["normalizer"]["normalizers"][0] = {{"type", "Lowercase"}}; }).message,
             Catch::Contains("normalizer.normalizers[0] type \"Lowercase\" is not supported"));
  CHECK_THAT(load_edited(kLlama, [](json &j) { j["model"]["type"] = "Unigram"; }).message,
             Catch::Contains("model type \"Unigram\" is not supported (supported: BPE)"));
  CHECK_THAT(load_edited(kLlama, [](json &j) { j["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}}; }).message,
             Catch::Contains("decoder type \"WordPiece\" is not supported"));
  CHECK_THAT(load_edited(kByteLevel, [](json &j) { j["post_processor"] = {{"type", "Mystery"}}; }).message,
             Catch::Contains("post_processor type \"Mystery\" is not supported"));
}

TEST_CASE("BPE dropout is refused: it would make encoding random", "[refuse]") {
  colibri::Error e = load_edited(kByteLevel, [](json &j) { j["model"]["dropout"] = 0.1; });
  CHECK(e.kind == colibri::ErrorKind::Unsupported);
  CHECK_THAT(e.message, Catch::Contains("model.dropout is 0.1"));
}

TEST_CASE("a merge whose token is missing from the vocabulary is refused with the merge", "[refuse]") {
  colibri::Error e = load_edited(kByteLevel, [](json &j) { j["model"]["merges"][2] = json::array({"h", "zz"}); });
  CHECK(e.kind == colibri::ErrorKind::Corrupt);
  CHECK_THAT(e.message, Catch::Contains("merge 2 (\"h\" \"zz\") uses \"zz\""));
  e = load_edited(kLlama, [](json &j) { j["model"]["merges"][0] = "a b c"; });
  CHECK_THAT(e.message, Catch::Contains("model.merges[0] \"a b c\" is not two tokens separated by one space"));
}

TEST_CASE("a Split regex PCRE2 cannot compile is refused with the pattern", "[refuse]") {
  colibri::Error e = load_edited(kByteLevel, [](json &j) {
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  });
  CHECK(e.kind == colibri::ErrorKind::Unsupported);
  CHECK_THAT(e.message, Catch::Contains("pre_tokenizer.pretokenizers[0] pattern /(unclosed/ does not compile"));
}

TEST_CASE("a bad Metaspace replacement or Split behaviour is refused", "[refuse]") {
  CHECK_THAT(load_edited(kLlama,
                         [](json &j) {
                           j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "__"}, {"prepend_scheme", "first"}};
                         })
                 .message,
             Catch::Contains("pre_tokenizer.replacement must be exactly one character"));
  CHECK_THAT(load_edited(kByteLevel, [](json &j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; })
                 .message,
             Catch::Contains("behavior \"Sideways\" is not a Split behaviour"));
  CHECK_THAT(load_edited(kLlama,
                         [](json &j) {
                           j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "sometimes"}};
                         })
                 .message,
             Catch::Contains("prepend_scheme \"sometimes\" is not one of first, always, never"));
}

TEST_CASE("text that is not JSON, or JSON that is not a tokenizer, is refused as corrupt", "[refuse]") {
  colibri::Error error;
  CHECK(Tokenizer::from_json("not json at all", &error) == nullptr);
  CHECK(error.kind == colibri::ErrorKind::Corrupt);
  CHECK_THAT(error.message, Catch::Contains("not valid JSON"));
  CHECK(Tokenizer::from_json("[1, 2]", &error) == nullptr);
  CHECK_THAT(error.message, Catch::Contains("top level must be an object"));
  CHECK(Tokenizer::from_json("{}", &error) == nullptr);
  CHECK_THAT(error.message, Catch::Contains("\"model\" is missing"));
  CHECK(Tokenizer::from_json(R"({"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}})", &error) == nullptr);
  CHECK_THAT(error.message, Catch::Contains("model.vocab[\"a\"] must be a token id"));
  CHECK(Tokenizer::from_json(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "added_tokens": [{"id": "x"}]})",
                             &error) == nullptr);
  CHECK_THAT(error.message, Catch::Contains("added_tokens[0]"));
}

TEST_CASE("a template special token the vocabulary lacks is refused", "[refuse]") {
  colibri::Error e = load_edited(kLlama, [](json &j) { j["post_processor"]["special_tokens"]["<s>"]["ids"][0] = 9999; });
  CHECK(e.kind == colibri::ErrorKind::Corrupt);
  CHECK_THAT(e.message, Catch::Contains("post_processor uses token id 9999"));
}

TEST_CASE("truncation and padding settings are accepted and do not change ids", "[api]") {
  json j = json::parse(read_file(source_path(kByteLevel)));
  j["truncation"] = {{"max_length", 2}, {"strategy", "LongestFirst"}, {"stride", 0}, {"direction", "Right"}};
  colibri::Error error;
  auto tok = Tokenizer::from_json(j.dump(), &error);
  REQUIRE(tok != nullptr);
  CHECK(encode(*tok, "hello world", false, false).size() == 5);
}

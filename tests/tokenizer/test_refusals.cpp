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

namespace {

// A tokenizer.json whose normalizer is `levels` Sequences, each holding the next, around one
// NFC step. Built as text: a json value this deep is what the loader must never be asked to build.
std::string nested_normalizer(size_t levels) {
  std::string text = R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "normalizer": )";
  text.reserve(text.size() + levels * 48);
  for (size_t i = 0; i < levels; ++i) text += R"({"type": "Sequence", "normalizers": [)";
  text += R"({"type": "NFC"})";
  for (size_t i = 0; i < levels; ++i) text += "]}";
  text += "}";
  return text;
}

}  // namespace

TEST_CASE("a normalizer Sequence nested 10k or 100k deep is refused before anything is built", "[refuse][depth]") {
  for (size_t levels : {size_t{10000}, size_t{100000}}) {
    INFO(levels << " levels");
    colibri::Error error;
    CHECK(Tokenizer::from_json(nested_normalizer(levels), &error) == nullptr);
    CHECK(error.kind == colibri::ErrorKind::Corrupt);
    // The limit, where it was hit, and the start of the path to it.
    CHECK_THAT(error.message, Catch::Contains("objects and arrays nest more than 128 deep at byte "));
    CHECK_THAT(error.message, Catch::StartsWith("tokenizer.json: ") &&
                                  Catch::Contains("in normalizer.normalizers[0].normalizers[0].normalizers ...(") &&
                                  Catch::Contains(" more)... [0].normalizers (the limit"));
  }
}

TEST_CASE("JSON nesting is counted outside strings only, and at the limit a file still loads", "[refuse][depth]") {
  // Brackets inside a string (escaped quotes included) are text, not nesting.
  json j = json::parse(read_file(source_path(kLlama)));
  j["unused"] = std::string(1000, '[') + "\\\"" + std::string(1000, '{');
  colibri::Error error;
  CHECK(Tokenizer::from_json(j.dump(), &error) != nullptr);
  INFO(error.message);
  // An unused member 127 arrays deep under the top-level object: depth 128, accepted.
  j = json::parse(read_file(source_path(kLlama)));
  json deep = json::array();
  for (int i = 0; i < 126; ++i) deep = json::array({deep});
  j["unused"] = deep;
  CHECK(Tokenizer::from_json(j.dump(), &error) != nullptr);
  j["unused"] = json::array({deep});  // 129
  CHECK(Tokenizer::from_json(j.dump(), &error) == nullptr);
  CHECK_THAT(error.message, Catch::Contains("nest more than 128 deep") && Catch::Contains("in unused[0][0][0][0][0] ...("));
}

TEST_CASE("Sequence components nest at most 32 deep, and the error names the path", "[refuse][depth]") {
  colibri::Error error;
  CHECK(Tokenizer::from_json(nested_normalizer(32), &error) != nullptr);
  INFO(error.message);
  CHECK(Tokenizer::from_json(nested_normalizer(33), &error) == nullptr);
  CHECK(error.kind == colibri::ErrorKind::Corrupt);
  CHECK(error.message ==
        "tokenizer.json: normalizer.normalizers[0].normalizers[0].normalizers[0].normalizers[0].normalizers[0] "
        "...(25 more)... .normalizers[0].normalizers[0] nests Sequence components more than 32 deep (the "
        "limit; real files nest one or two)");
  // The same limit holds for the decoder (and the pre-tokenizer and post-processor, same code).
  json j = json::parse(read_file(source_path(kLlama)));
  json decoder = {{"type", "Fuse"}};
  for (int i = 0; i < 40; ++i) decoder = {{"type", "Sequence"}, {"decoders", json::array({decoder})}};
  j["decoder"] = decoder;
  CHECK(Tokenizer::from_json(j.dump(), &error) == nullptr);
  CHECK_THAT(error.message, Catch::StartsWith("tokenizer.json: decoder.decoders[0]") &&
                                Catch::Contains("nests Sequence components more than 32 deep"));
}

// tests/tokenizer/test_units.cpp — single behaviours of the tokenizer parts and its API.
#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/components.h"
#include "tokenizer_test_support.h"

using namespace tokenizer_test;
using colibri::tokenizer::SplitBehavior;
using colibri::tokenizer::StreamDecoder;
using colibri::tokenizer::utf8_is_valid;
using colibri::tokenizer::utf8_replace_invalid;

namespace {
const char *const kByteLevel = "tests/fixtures/oracle/qwen2_moe_shared/tokenizer.json";
const char *const kLlama = "tests/fixtures/oracle/mixtral_gqa/tokenizer.json";
}  // namespace

TEST_CASE("invalid UTF-8 is repaired with one U+FFFD per maximal subpart, like Python's errors='replace'", "[utf8]") {
  const std::string r = "\xEF\xBF\xBD";
  CHECK(utf8_replace_invalid("bad \xFF byte") == "bad " + r + " byte");
  CHECK(utf8_replace_invalid("truncated \xE4\xBD") == "truncated " + r);
  CHECK(utf8_replace_invalid("\xC3\x28 x") == r + "( x");
  CHECK(utf8_replace_invalid("\xC0\xAF") == r + r);              // overlong: two subparts
  CHECK(utf8_replace_invalid("\xED\xA0\x80") == r + r + r);      // surrogate: three subparts
  CHECK(utf8_replace_invalid("\xF4\x90\x80\x80") == r + r + r + r);  // above U+10FFFF
  CHECK(utf8_replace_invalid("\xF0\x9F\x99") == r);               // truncated 4-byte sequence
  CHECK(utf8_replace_invalid("ok \xF0\x9F\x99\x82") == "ok \xF0\x9F\x99\x82");
  CHECK(utf8_is_valid("caf\xC3\xA9"));
  CHECK_FALSE(utf8_is_valid("caf\xC3"));
}

TEST_CASE("Split behaviours cut text the way tokenizers' NormalizedString::split does", "[pre_tokenizer]") {
  // "aaxyaaazaa" split at /a+/ (expected values printed by tokenizers 0.23.3).
  const std::vector<std::pair<size_t, size_t>> matches = {{0, 2}, {4, 7}, {8, 10}};
  auto pieces = [&](SplitBehavior behavior, bool invert) {
    std::vector<std::string> out;
    for (auto [s, e] : colibri::tokenizer::split_ranges(10, matches, behavior, invert))
      out.push_back(std::string("aaxyaaazaa").substr(s, e - s));
    return out;
  };
  using V = std::vector<std::string>;
  CHECK(pieces(SplitBehavior::Removed, false) == V{"xy", "z"});
  CHECK(pieces(SplitBehavior::Removed, true) == V{"aa", "aaa", "aa"});
  CHECK(pieces(SplitBehavior::Isolated, false) == V{"aa", "xy", "aaa", "z", "aa"});
  CHECK(pieces(SplitBehavior::MergedWithPrevious, false) == V{"aa", "xyaaa", "zaa"});
  CHECK(pieces(SplitBehavior::MergedWithPrevious, true) == V{"aaxy", "aaaz", "aa"});
  CHECK(pieces(SplitBehavior::MergedWithNext, false) == V{"aaxy", "aaaz", "aa"});
  CHECK(pieces(SplitBehavior::MergedWithNext, true) == V{"aa", "xyaaa", "zaa"});
  CHECK(pieces(SplitBehavior::Contiguous, false) == V{"aa", "xy", "aaa", "z", "aa"});
}

TEST_CASE("special tokens in user text are plain text by default and tokens on request", "[added_tokens]") {
  auto tok = load_tokenizer(kByteLevel);
  const int32_t im_end = tok->token_id("<|im_end|>");
  REQUIRE(im_end == 511);
  colibri::tokenizer::EncodeOptions defaults;
  std::vector<int32_t> ids;
  REQUIRE(tok->encode("a<|im_end|>b", defaults, &ids).ok());
  CHECK(std::find(ids.begin(), ids.end(), im_end) == ids.end());
  CHECK(decode_all(*tok, ids, false) == "a<|im_end|>b");
  CHECK(encode(*tok, "a<|im_end|>b", false, true) == std::vector<int32_t>{64, im_end, 65});
}

TEST_CASE("the vocabulary queries agree with the file", "[api]") {
  auto llama = load_tokenizer(kLlama);
  CHECK(llama->vocab_size() == 512);
  CHECK(llama->token_id("<s>") == 1);
  CHECK(llama->token_id("<0x0A>") == 13);
  CHECK(llama->token_id("no such token") == -1);
  CHECK(llama->token_text(1) == "<s>");
  CHECK(llama->token_text(-1).empty());
  CHECK(llama->token_text(100000).empty());
  CHECK(llama->is_special(1));
  CHECK_FALSE(llama->is_special(13));
  CHECK_FALSE(llama->is_special(-5));
  auto bytelevel = load_tokenizer(kByteLevel);
  CHECK(bytelevel->vocab_size() == 512);
  CHECK(bytelevel->token_text(220) == "\xC4\xA0");  // "Ġ"
}

TEST_CASE("an id the tokenizer lacks decodes to no text, as in tokenizers, and a negative id is an error", "[api]") {
  // Checkpoints pad the model's vocabulary past the tokenizer's (Qwen2: 151936 rows, 151665
  // tokens); tokenizers' decode drops such ids (decode filter_maps id_to_token).
  auto tok = load_tokenizer(kByteLevel);
  REQUIRE(tok->vocab_size() == 512);
  const std::vector<int32_t> with_padding = {64, 512, 65, 100000, 66};
  const std::vector<int32_t> without = {64, 65, 66};
  CHECK(decode_all(*tok, with_padding, false) == decode_all(*tok, without, false));
  CHECK(decode_all(*tok, {512}, false).empty());
  CHECK(decode_all(*tok, {512}, true).empty());

  const std::vector<int32_t> negative = {64, -3};
  std::string text = "stale";
  colibri::Error error = tok->decode(negative.data(), negative.size(), false, &text);
  CHECK(error.kind == colibri::ErrorKind::InvalidArgument);
  CHECK_THAT(error.message, Catch::Contains("token id -3 (position 1) is negative"));
  CHECK(text.empty());

  // Streaming (what generation uses): a padding id is an empty piece, and the stream goes on.
  StreamDecoder stream(*tok);
  std::string piece, all;
  for (int32_t id : with_padding) {
    REQUIRE(stream.push(id, &piece).ok());
    all += piece;
  }
  REQUIRE(stream.flush(&piece).ok());
  CHECK(all + piece == decode_all(*tok, without, false));
  CHECK(stream.push(-3, &piece).kind == colibri::ErrorKind::InvalidArgument);
}

TEST_CASE("a streamed emoji split over byte tokens comes out whole, never as broken bytes", "[stream]") {
  for (const char *path : {kByteLevel, kLlama}) {
    INFO(path);
    auto tok = load_tokenizer(path);
    const std::string text = "ok \xF0\x9F\x99\x82 \xE4\xBD\xA0\xE5\xA5\xBD!";  // "ok 🙂 你好!"
    const std::vector<int32_t> ids = encode(*tok, text, false, true);
    StreamDecoder stream(*tok);
    std::vector<std::string> pieces;
    std::string piece, all;
    for (int32_t id : ids) {
      REQUIRE(stream.push(id, &piece).ok());
      CHECK(utf8_is_valid(piece));
      if (!piece.empty()) pieces.push_back(piece);
      all += piece;
    }
    REQUIRE(stream.flush(&piece).ok());
    all += piece;
    CHECK(all == text);
    // The emoji arrived in more than one token but in exactly one piece.
    size_t holding = 0;
    for (const std::string &p : pieces) holding += p.find("\xF0\x9F\x99\x82") != std::string::npos;
    CHECK(holding == 1);
  }
}

TEST_CASE("a stream starts without the leading space the Llama decoder strips, and keeps later spaces", "[stream]") {
  auto tok = load_tokenizer(kLlama);
  const std::vector<int32_t> ids = encode(*tok, "Hello world", true, true);  // <s> ▁ H el lo ▁w or ld
  for (bool skip : {true, false}) {
    StreamDecoder stream(*tok, skip);
    std::string piece, all;
    for (int32_t id : ids) {
      REQUIRE(stream.push(id, &piece).ok());
      all += piece;
    }
    REQUIRE(stream.flush(&piece).ok());
    all += piece;
    CHECK(all == (skip ? "Hello world" : "<s> Hello world"));
  }
}

TEST_CASE("a text ending in U+FFFD is held until flush, then emitted", "[stream]") {
  auto tok = load_tokenizer(kByteLevel);
  const std::vector<int32_t> ids = encode(*tok, "x \xEF\xBF\xBD", false, true);
  StreamDecoder stream(*tok);
  std::string piece, all;
  for (int32_t id : ids) {
    REQUIRE(stream.push(id, &piece).ok());
    all += piece;
  }
  CHECK(all == "x ");
  REQUIRE(stream.flush(&piece).ok());
  CHECK(piece == "\xEF\xBF\xBD");
  // flush() resets: the decoder can start a new stream.
  REQUIRE(stream.push(ids[0], &piece).ok());
  CHECK(piece == "x");
}

TEST_CASE("encoding is the same from many threads sharing one tokenizer", "[api]") {
  auto tok = load_tokenizer(kByteLevel);
  const std::string text = read_file(source_path("tests/fixtures/tokenizer/train_corpus.txt"));
  const std::vector<int32_t> expected = encode(*tok, text, true, false);
  std::vector<std::vector<int32_t>> results(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] {
      colibri::tokenizer::EncodeOptions options;
      for (int round = 0; round < 3; ++round) (void)tok->encode(text, options, &results[t]);
    });
  }
  for (std::thread &th : threads) th.join();
  for (const auto &r : results) CHECK(r == expected);
}

TEST_CASE("a byte-fallback run cut short after a whole character streams the character, then U+FFFD", "[stream]") {
  // decode() of "▁ <0xE4><0xBD><0xA0><0xE5>" is four U+FFFD (ByteFallback judges the run as a
  // whole), but "你" was complete and already streamed when <0xE5> arrived; flush() then
  // gives U+FFFD for the incomplete byte alone.
  auto tok = load_tokenizer(kLlama);
  const std::vector<int32_t> ids = {342, 231, 192, 163, 232};
  StreamDecoder stream(*tok);
  std::string piece, all;
  for (int32_t id : ids) {
    REQUIRE(stream.push(id, &piece).ok());
    all += piece;
  }
  CHECK(all == "\xE4\xBD\xA0");
  REQUIRE(stream.flush(&piece).ok());
  CHECK(piece == "\xEF\xBF\xBD");
}

TEST_CASE("a byte run that turns invalid after a whole character keeps streaming, never errors", "[stream]") {
  // <0xE8><0x8D><0x8D> is "荍"; a following <0x8D> makes the run invalid, and decode() of the
  // whole run becomes U+FFFDs. The stream keeps what it emitted and continues with the rest
  // (the case a random model produced in the bindings' tests).
  auto tok = load_tokenizer(kLlama);
  const int32_t byte0 = 3;  // <0x00> is id 3 in the fixture tokenizer
  const int32_t h = tok->token_id("h");  // an ordinary piece ends the byte run
  REQUIRE(h >= 0);
  const std::vector<int32_t> ids = {342, byte0 + 0xE8, byte0 + 0x8D, byte0 + 0x8D, byte0 + 0x8D, h,
                                    byte0 + 0xE8, byte0 + 0x8D, byte0 + 0x8D};
  StreamDecoder stream(*tok);
  std::string piece, all;
  for (int32_t id : ids) {
    REQUIRE(stream.push(id, &piece).ok());
    all += piece;
  }
  REQUIRE(stream.flush(&piece).ok());
  all += piece;
  CHECK(all.rfind("\xE8\x8D\x8D", 0) == 0);  // the first character came out whole
  CHECK(all.find('h') != std::string::npos);  // and the stream went on after the bad byte
  CHECK(all.size() >= 3 + 3 + 1 + 3);
  CHECK(all.find("\xEF\xBF\xBD") != std::string::npos);  // the stray byte became U+FFFD
}

TEST_CASE("an added token with normalized=true decodes in its normalized form, as in tokenizers", "[api]") {
  // The Llama normalizer is Prepend("▁") + Replace(" ", "▁"): "my token" is matched as
  // "▁my▁token", and tokenizers 0.23.3 gives and decodes that form (its id_to_token), so the
  // space before "my" survives. Values from tokenizers (make_extra_fixtures.py, added_normalized).
  json j = json::parse(read_file(source_path(kLlama)));
  const int32_t id = 512;
  REQUIRE(j["model"]["vocab"].size() == 512);
  j["added_tokens"].push_back({{"id", id}, {"content", "my token"}, {"single_word", false}, {"lstrip", false},
                               {"rstrip", false}, {"normalized", true}, {"special", false}});
  j["added_tokens"].push_back({{"id", id + 1}, {"content", "<x y>"}, {"single_word", false}, {"lstrip", false},
                               {"rstrip", false}, {"normalized", true}, {"special", true}});
  colibri::Error error;
  auto tok = Tokenizer::from_json(j.dump(), &error);
  REQUIRE(tok);
  const std::vector<int32_t> ids = encode(*tok, "this is my token ok", false, false);
  CHECK(std::count(ids.begin(), ids.end(), id) == 1);
  CHECK(decode_all(*tok, ids, false) == "this is my token ok");
  CHECK(tok->token_text(id) == "\xE2\x96\x81my\xE2\x96\x81token");  // "▁my▁token"
  CHECK(tok->token_id("my token") == id);                              // by content, as token_to_id
  CHECK(decode_all(*tok, {id}, false) == "my token");                   // Strip drops the leading space
  // tokenizers skips a special token by its string, which for this one is "▁<x▁y>", not its
  // content: skip_special keeps it.
  CHECK_FALSE(tok->is_special(id + 1));
  CHECK(decode_all(*tok, {5, id + 1, 5}, true) == decode_all(*tok, {5, id + 1, 5}, false));
}

TEST_CASE("Oniguruma's nested classes and class intersections match what Oniguruma means", "[regex]") {
  using colibri::tokenizer::Regex;
  auto matches = [](const std::string &pattern, const std::string &text) {
    colibri::Error error;
    auto regex = Regex::compile(pattern, "test pattern", &error);
    INFO(pattern << ": " << error.message);
    REQUIRE(regex != nullptr);
    std::vector<std::pair<size_t, size_t>> found;
    REQUIRE(regex->find_all(text, &found).ok());
    std::vector<std::string> out;
    for (auto [s, e] : found) out.push_back(text.substr(s, e - s));
    return out;
  };
  auto translated = [](const std::string &pattern) {
    colibri::Error error;
    std::string out = colibri::tokenizer::translate_oniguruma_classes(pattern, &error);
    INFO(error.message);
    CHECK(error.ok());
    return out;
  };
  // Plain classes are copied as written (every pattern of the other supported families).
  for (const char *plain : {"[^\\r\\n\\p{L}\\p{N}]?\\p{L}+", "[]a]", "[\\[\\]&]", "[[:alpha:]-]", "(?i:'s|'t)"}) {
    CHECK(translated(plain) == plain);
  }
  // Union: [a-c[x-z]] is a-c or x-z (PCRE2 alone would read "[a-c[x-z]" then a literal ']').
  CHECK(matches("[a-c[x-z]]+", "abxz-cy]") == std::vector<std::string>{"abxz", "cy"});
  // Intersection: letters that are not Han (Kimi-K2's split).
  CHECK(matches("[\\p{L}&&[^\\p{Han}]]+", "abc\xe6\xbc\xa2\xe5\xad\x97" "def&") ==
        std::vector<std::string>{"abc", "def"});
  CHECK(matches("[\\p{Han}]+|[\\p{Lu}\\p{Ll}&&[^\\p{Han}]]+", "Ab\xe6\xbc\xa2x") ==
        std::vector<std::string>{"Ab", "\xe6\xbc\xa2", "x"});
  // Negation applies to the whole class: not (a-d and b-f) = not b-d.
  CHECK(matches("[^a-d&&b-f]+", "abcdefa") == std::vector<std::string>{"a", "efa"});
  // An empty operand is an empty set; a ']' first in a nested class is a literal.
  CHECK(matches("[a&&]", "aa").empty());
  CHECK(matches("[x[]y]]+", "x]y]z") == std::vector<std::string>{"x]y]"});
  // Escapes inside a class are not operators: "\\&&" is a literal '&' then an intersection.
  CHECK(matches("[a\\&&&[&b]]+", "a&&b") == std::vector<std::string>{"&&"});
  // Nesting has a limit (a parser over untrusted input), reported by name.
  std::string deep;
  for (int k = 0; k < 40; ++k) deep += "[a";
  for (int k = 0; k < 40; ++k) deep += "]";
  colibri::Error error;
  CHECK(Regex::compile(deep, "test pattern", &error) == nullptr);
  CHECK(error.message.find("nested more than 16 deep") != std::string::npos);
}

// tests/runtime/test_generation.cpp — the generation loop on the bundled model: greedy text
// equals the transformers reference, seeded sampling is reproducible on any thread count,
// EOS lists and stop strings (spanning tokens) end generation with the stop text excluded,
// streaming pieces concatenate to the whole text and can cancel, and context overflow is an
// error.
#include <catch2/catch.hpp>
#include <algorithm>
#include <fstream>

#include "runtime/generation.h"
#include "runtime/oracle_support.h"
#include "support/synthetic_model.h"

using namespace colibri;

namespace {

struct Bundled {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  nlohmann::json reference;
};

Bundled &bundled() {
  static Bundled b = [] {
    Bundled out;
    const std::string dir = std::string(COLIBRI_SOURCE_DIR) + "/models/colibri-tiny-moe";
    std::ifstream in(dir + "/reference.json");
    out.reference = nlohmann::json::parse(in);
    std::string image = testing::temp_dir("generation") + "/tiny.colibri";
    std::string cmd = std::string(COLIBRI_MODEL_EXE) + " convert " + dir + " -o " + image + " > /dev/null";
    if (std::system(cmd.c_str()) == 0) out.model = testing::load_model(image);
    if (out.model) {
      Error err;
      out.tokenizer = tokenizer::Tokenizer::from_json(out.model->tokenizer().json, &err);
    }
    return out;
  }();
  return b;
}

std::unique_ptr<runtime::Session> session(size_t threads = 2, uint32_t context = 256) {
  runtime::SessionOptions so;
  so.context_length = context;
  so.max_batch_tokens = 64;
  so.threads = threads;
  Error err;
  auto s = runtime::Session::create(*bundled().model, so, &err);
  REQUIRE(s);
  return s;
}

std::vector<int32_t> encode(const std::string &text) {
  std::vector<int32_t> ids;
  REQUIRE(bundled().tokenizer->encode(text, {}, &ids).ok());
  return ids;
}

runtime::GenerateOptions greedy(uint32_t n) {
  runtime::GenerateOptions o;
  o.max_tokens = n;
  o.sampling.temperature = 0.0f;
  o.ignore_eos = true;
  return o;
}

}  // namespace

TEST_CASE("greedy generation reproduces the transformers text of the bundled model", "[generation]") {
  REQUIRE(bundled().model);
  REQUIRE(bundled().tokenizer);
  auto s = session();
  auto prompt = encode(bundled().reference["greedy"]["prompt"].get<std::string>());
  CHECK(prompt == bundled().reference["greedy"]["prompt_ids"].get<std::vector<int32_t>>());
  std::string text, streamed;
  runtime::FinishReason reason;
  Error e = runtime::generate(*s, *bundled().tokenizer, prompt, greedy(32),
                              [&](std::string_view piece) {
                                streamed += piece;
                                return true;
                              },
                              &text, &reason);
  REQUIRE(e.ok());
  CHECK(text == bundled().reference["greedy"]["generated_text"].get<std::string>());
  CHECK(streamed == text);
  CHECK(reason == runtime::FinishReason::Length);
}

TEST_CASE("seeded sampling is reproducible across runs and thread counts", "[generation]") {
  auto prompt = encode("In the beginning");
  runtime::GenerateOptions o;
  o.max_tokens = 24;
  o.sampling.seed = 1234;
  o.sampling.temperature = 0.9f;
  std::string a, b, c;
  auto s1 = session(1), s2 = session(2), s3 = session(3);
  REQUIRE(runtime::generate(*s1, *bundled().tokenizer, prompt, o, nullptr, &a, nullptr).ok());
  REQUIRE(runtime::generate(*s2, *bundled().tokenizer, prompt, o, nullptr, &b, nullptr).ok());
  REQUIRE(runtime::generate(*s3, *bundled().tokenizer, prompt, o, nullptr, &c, nullptr).ok());
  CHECK(a == b);
  CHECK(a == c);
  o.sampling.seed = 99;
  std::string d;
  REQUIRE(runtime::generate(*s1, *bundled().tokenizer, prompt, o, nullptr, &d, nullptr).ok());
  CHECK(d != a);
}

TEST_CASE("a stop string spanning tokens ends generation and is excluded", "[generation]") {
  // The greedy reference continues " I will not be my God, ..."; stop at "not be" which
  // spans several tokens.
  auto s = session();
  auto prompt = encode("And God said,");
  runtime::GenerateOptions o = greedy(32);
  o.stop_strings = {"not be"};
  std::string text, streamed;
  runtime::FinishReason reason;
  REQUIRE(runtime::generate(*s, *bundled().tokenizer, prompt, o,
                            [&](std::string_view p) {
                              streamed += p;
                              return true;
                            },
                            &text, &reason)
              .ok());
  CHECK(text == " I will ");
  CHECK(streamed == text);
  CHECK(reason == runtime::FinishReason::StopString);
}

TEST_CASE("any id of an EOS list ends generation", "[generation]") {
  auto s = session();
  auto prompt = encode("And God said,");
  auto want = bundled().reference["greedy"]["generated_ids"].get<std::vector<int32_t>>();
  runtime::GenerateOptions o = greedy(32);
  o.ignore_eos = false;
  o.eos_token_ids = {4095, want[3]};  // the 4th greedy token acts as an end of sequence
  runtime::Generation *raw = nullptr;
  Error err;
  auto g = runtime::Generation::start(*s, *bundled().tokenizer, prompt, o, &err);
  REQUIRE(g);
  raw = g.get();
  std::string piece;
  bool done = false;
  while (!done) REQUIRE(raw->next(&piece, &done).ok());
  CHECK(raw->finish_reason() == runtime::FinishReason::EndOfSequence);
  CHECK(raw->generated_tokens().size() == 4);
}

TEST_CASE("the callback cancels generation", "[generation]") {
  auto s = session();
  auto prompt = encode("And God said,");
  int pieces = 0;
  std::string text;
  runtime::FinishReason reason;
  REQUIRE(runtime::generate(*s, *bundled().tokenizer, prompt, greedy(32),
                            [&](std::string_view) { return ++pieces < 3; }, &text, &reason)
              .ok());
  CHECK(pieces == 3);
  CHECK(reason == runtime::FinishReason::Cancelled);
}

TEST_CASE("running out of context is an error, not a truncation", "[generation]") {
  auto s = session(2, 16);
  auto prompt = encode("And God said,");
  std::string text;
  Error e = runtime::generate(*s, *bundled().tokenizer, prompt, greedy(64), nullptr, &text, nullptr);
  CHECK(e.kind == ErrorKind::InvalidArgument);
  CHECK_THAT(e.message, Catch::Contains("context is full"));
  std::vector<int32_t> long_prompt(20, 297);
  e = runtime::generate(*s, *bundled().tokenizer, long_prompt, greedy(4), nullptr, &text, nullptr);
  CHECK_THAT(e.message, Catch::Contains("prompt has 20 tokens but the context holds 16"));
}

TEST_CASE("when the context fills up, the text of every generated token was delivered", "[generation]") {
  // The last token sampled cannot be fed back, but it was generated: its text (and any text
  // held back for a character or a stop-string prefix) comes out before the error.
  auto s = session(2, 16);
  auto prompt = encode("And God said,");
  runtime::GenerateOptions o = greedy(64);
  o.stop_strings = {"zzzz-never"};
  Error err;
  auto g = runtime::Generation::start(*s, *bundled().tokenizer, prompt, o, &err);
  REQUIRE(g);
  std::string text, piece;
  bool done = false;
  Error e;
  while (!done && !(e = g->next(&piece, &done))) text += piece;
  CHECK_FALSE(done);
  CHECK_THAT(e.message, Catch::Contains("context is full"));
  const std::vector<int32_t> &ids = g->generated_tokens();
  CHECK(ids.size() == 16 - prompt.size() + 1);  // every position filled, plus the one not fed back
  std::string expected;
  REQUIRE(bundled().tokenizer->decode(ids.data(), ids.size(), false, &expected).ok());
  CHECK(text == expected);
  // Finished: a further call does not sample again.
  CHECK(g->next(&piece, &done).ok());
  CHECK(done);
  CHECK(piece.empty());
  CHECK(g->generated_tokens().size() == ids.size());
}

TEST_CASE("a generated id the tokenizer lacks is empty text, not the end of generation", "[generation]") {
  // Qwen and OLMoE checkpoints have more embedding rows than tokenizer ids; a sampled padding
  // id decodes to nothing in Hugging Face, and generation goes on. Here the bundled model
  // runs with a tokenizer that has only its first 20 ids.
  Error err;
  auto small = tokenizer::Tokenizer::from_json(testing::tiny_tokenizer_json(20), &err);
  REQUIRE(small);
  REQUIRE(small->vocab_size() == 20);
  auto s = session();
  const auto prompt = encode("And God said,");
  std::string text;
  runtime::FinishReason reason;
  Error e = runtime::generate(*s, *small, prompt, greedy(24), nullptr, &text, &reason);
  INFO(e.message);
  REQUIRE(e.ok());
  CHECK(reason == runtime::FinishReason::Length);
  // The pull interface, to see the ids: some are past the small tokenizer, and the text is
  // what decoding all of them gives.
  auto g = runtime::Generation::start(*s, *small, prompt, greedy(24), &err);
  REQUIRE(g);
  std::string streamed, piece;
  bool done = false;
  while (!done) {
    REQUIRE(g->next(&piece, &done).ok());
    streamed += piece;
  }
  const std::vector<int32_t> &ids = g->generated_tokens();
  CHECK(ids.size() == 24);
  CHECK(std::any_of(ids.begin(), ids.end(), [](int32_t id) { return id >= 20; }));
  std::string expected;
  REQUIRE(small->decode(ids.data(), ids.size(), false, &expected).ok());
  CHECK(streamed == expected);
  CHECK(text == expected);
}

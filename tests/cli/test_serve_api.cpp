// tests/cli/test_serve_api.cpp — `colibri serve`'s request parsing and Prometheus rendering as
// units (cli/serve_api.h, cli/serve_metrics.h): defaults, every field's type and range, the
// limits, and the histogram's cumulative buckets.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#include <string>

#include "serve_api.h"
#include "serve_metrics.h"

using Catch::Contains;
using colibri_cli::serve::ApiError;
using colibri_cli::serve::Endpoint;
using colibri_cli::serve::GenerationRequest;
using colibri_cli::serve::parse_request;
using colibri_cli::serve::RequestLimits;

namespace {

RequestLimits limits() {
  RequestLimits l;
  l.vocab_size = 100;
  return l;
}

GenerationRequest completion(const std::string &body) { return parse_request(body, Endpoint::Completions, limits()); }
GenerationRequest chat(const std::string &body) { return parse_request(body, Endpoint::ChatCompletions, limits()); }

// The ApiError a body gives (FAILs when it parses).
ApiError error_of(const std::string &body, Endpoint endpoint = Endpoint::Completions) {
  try {
    parse_request(body, endpoint, limits());
  } catch (const ApiError &e) {
    return e;
  }
  FAIL("accepted: " << body);
  return {};
}

}  // namespace

TEST_CASE("serve api: OpenAI's defaults when fields are absent or null", "[serve]") {
  const GenerationRequest r = completion(R"({"prompt": "hi", "temperature": null, "stop": null})");
  CHECK(r.prompt_text == "hi");
  CHECK(!r.prompt_is_tokens);
  CHECK(!r.max_tokens);
  CHECK(r.temperature == 1.0f);
  CHECK(r.top_p == 1.0f);
  CHECK(r.top_k == 0);
  CHECK(r.min_p == 0.0f);
  CHECK(!r.seed);
  CHECK(r.stop.empty());
  CHECK(!r.stream);
  CHECK(!r.logprobs);
}

TEST_CASE("serve api: every field is read", "[serve]") {
  const GenerationRequest r = completion(
      R"({"prompt": [[1, 2, 99]], "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.1,
          "presence_penalty": -1.5, "frequency_penalty": 2, "repetition_penalty": 1.1, "seed": 9007199254740993,
          "stop": ["a", "bc"], "stream": true, "stream_options": {"include_usage": true}, "ignore_eos": true,
          "echo": true, "logprobs": 3, "user": "me", "n": 1, "best_of": 1, "model": "x"})");
  CHECK(r.prompt_is_tokens);
  CHECK(r.prompt_tokens == std::vector<int32_t>{1, 2, 99});
  CHECK(*r.max_tokens == 7);
  CHECK(r.temperature == 0.5f);
  CHECK(r.top_p == 0.9f);
  CHECK(r.top_k == 40);
  CHECK(r.min_p == 0.1f);
  CHECK(r.presence_penalty == -1.5f);
  CHECK(r.frequency_penalty == 2.0f);
  CHECK(r.repetition_penalty == 1.1f);
  CHECK(*r.seed == 9007199254740993ull);  // beyond a double's exact integers: read as an integer
  CHECK(r.stop == std::vector<std::string>{"a", "bc"});
  CHECK(r.stream);
  CHECK(r.include_usage);
  CHECK(r.ignore_eos);
  CHECK(r.echo);
  CHECK(r.logprobs);
  CHECK(r.top_logprobs == 3);
  CHECK(r.user == "me");

  const GenerationRequest c = chat(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
      {"type": "text", "text": "b"}]}, {"role": "assistant", "content": null}], "max_tokens": 3,
      "max_completion_tokens": 5, "logprobs": true, "top_logprobs": 2})");
  REQUIRE(c.messages.size() == 2);
  CHECK(c.messages[0].content == "ab");
  CHECK(c.messages[1].content.empty());
  CHECK(*c.max_tokens == 5);  // the newer name wins
  CHECK(c.top_logprobs == 2);
}

TEST_CASE("serve api: wrong types and ranges name the field", "[serve][limits]") {
  struct Case {
    const char *body;
    const char *param;
    const char *words;
  };
  const Case cases[] = {
      {R"({"prompt": "a", "temperature": 2.5})", "temperature", "at most 2"},
      {R"({"prompt": "a", "temperature": true})", "temperature", "must be a number, got a boolean"},
      {R"({"prompt": "a", "top_p": 0})", "top_p", "greater than 0"},
      {R"({"prompt": "a", "top_p": 1e-60})", "top_p", "greater than 0"},
      {R"({"prompt": "a", "min_p": -0.1})", "min_p", "at least 0"},
      {R"({"prompt": "a", "top_k": -1})", "top_k", "from 0"},
      {R"({"prompt": "a", "max_tokens": 0})", "max_tokens", "from 1"},
      {R"({"prompt": "a", "max_tokens": "5"})", "max_tokens", "must be an integer, got a string"},
      {R"({"prompt": "a", "seed": 1e3})", "seed", "must be an integer"},
      {R"({"prompt": "a", "seed": 18446744073709551615})", "seed", "from 0 to 9223372036854775807"},
      {R"({"prompt": "a", "presence_penalty": 3})", "presence_penalty", "at most 2"},
      {R"({"prompt": "a", "repetition_penalty": 0})", "repetition_penalty", "greater than 0"},
      {R"({"prompt": "a", "stop": 5})", "stop", "a string or a list"},
      {R"({"prompt": "a", "stop": ["x", 1]})", "stop[1]", "must be a string"},
      {R"({"prompt": "a", "stop": ["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"]})", "stop",
       "more than the limit of 16"},
      {R"({"prompt": "a", "stream": "yes"})", "stream", "must be a boolean"},
      {R"({"prompt": "a", "n": 3})", "n", "must be 1"},
      {R"({"prompt": "a", "best_of": 2})", "best_of", "must be 1"},
      {R"({"prompt": "a", "suffix": "b"})", "suffix", "not supported"},
      {R"({"prompt": "a", "logprobs": 21})", "logprobs", "from 0 to 20"},
      {R"({"prompt": "a", "model": 1})", "model", "must be a string"},
      {R"({"prompt": ["a", "b"]})", "prompt", "one prompt per request"},
      {R"({"prompt": [1, -1]})", "prompt[1]", "not a token id"},
      {R"({"prompt": [1, 100]})", "prompt[1]", "0 to 99"},
      {R"({"prompt": [1, 18446744073709551615]})", "prompt[1]", "not a token id"},
      {R"({"prompt": [1, 2.5]})", "prompt[1]", "must be a token id"},
      {R"({"prompt": []})", "prompt", "empty list"},
      {R"({"prompt": {}})", "prompt", "a string or a list"},
  };
  for (const Case &c : cases) {
    INFO(c.body);
    const ApiError e = error_of(c.body);
    CHECK(e.status == 400);
    CHECK(e.param == c.param);
    CHECK_THAT(e.message, Contains(c.words));
  }
  const Case chat_cases[] = {
      {R"({"messages": "hi"})", "messages", "must be a list"},
      {R"({"messages": [1]})", "messages[0]", "must be an object"},
      {R"({"messages": [{"role": "", "content": "x"}]})", "messages[0].role", "non-empty string"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content", "string or a list"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages[0].content[0].type",
       "text parts only"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs", "needs 'logprobs'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})", "response_format",
       "not supported"},
      {R"({"prompt": "x"})", "messages", "is required"},
  };
  for (const Case &c : chat_cases) {
    INFO(c.body);
    const ApiError e = error_of(c.body, Endpoint::ChatCompletions);
    CHECK(e.param == c.param);
    CHECK_THAT(e.message, Contains(c.words));
  }
}

TEST_CASE("serve api: bodies that are not JSON objects, or nest too deep, are refused without recursion", "[serve][limits]") {
  CHECK_THAT(error_of("").message, Contains("not valid JSON"));
  CHECK_THAT(error_of("{\"prompt\": \"a\"").message, Contains("not valid JSON"));
  CHECK_THAT(error_of("\"text\"").message, Contains("must be a JSON object, got a string"));
  // A million levels: the depth scan stops at the limit, the parser never sees it.
  const std::string deep = "{\"prompt\": " + std::string(1000000, '[') + std::string(1000000, ']') + "}";
  CHECK_THAT(error_of(deep).message, Contains("deeper than the limit of 32 levels"));
  // Brackets inside strings do not count.
  CHECK(completion("{\"prompt\": \"" + std::string(100, '[') + "\"}").prompt_text == std::string(100, '['));
  CHECK(colibri_cli::serve::json_depth(R"({"a": [[1], {"b": "]]]"}]})", 100) == 3);
}

TEST_CASE("serve api: error bodies and ids", "[serve]") {
  ApiError e;
  e.message = "bad";
  e.param = "top_p";
  const nlohmann::json body = colibri_cli::serve::error_body(e);
  CHECK(body["error"]["message"] == "bad");
  CHECK(body["error"]["param"] == "top_p");
  CHECK(body["error"]["type"] == "invalid_request_error");
  CHECK(body["error"]["code"].is_null());
  CHECK(colibri_cli::serve::response_id(Endpoint::Completions, 1, 2) == "cmpl-000000010000000000000002");
  CHECK(colibri_cli::serve::response_id(Endpoint::ChatCompletions, 1, 2).rfind("chatcmpl-", 0) == 0);
}

TEST_CASE("serve metrics: histograms are cumulative with +Inf equal to the count", "[serve][metrics]") {
  colibri_cli::serve::Histogram h({0.1, 1.0});
  for (double v : {0.05, 0.1, 0.5, 2.0, 3.0}) h.observe(v);
  h.observe(std::numeric_limits<double>::quiet_NaN());  // ignored
  std::string out;
  h.render(out, "x_seconds", "help text");
  CHECK(out ==
        "# HELP x_seconds help text\n# TYPE x_seconds histogram\n"
        "x_seconds_bucket{le=\"0.1\"} 2\nx_seconds_bucket{le=\"1\"} 3\nx_seconds_bucket{le=\"+Inf\"} 5\n"
        "x_seconds_sum 5.65\nx_seconds_count 5\n");
  CHECK(colibri_cli::serve::metrics_route("/v1/completions") == "/v1/completions");
  CHECK(colibri_cli::serve::metrics_route("/wp-admin") == "other");
}

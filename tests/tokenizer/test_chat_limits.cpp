// tests/tokenizer/test_chat_limits.cpp — hostile chat templates (issue 18, item 1): every
// nesting and every render budget of ChatTemplateLimits ends in a clean error naming the
// template and the limit, quickly, instead of a stack overflow, a hang or gigabytes.
#include <chrono>
#include <string>
#include <vector>

#include "tokenizer/chat_template.h"
#include "tokenizer_test_support.h"

using namespace tokenizer_test;
using colibri::ErrorKind;
using colibri::tokenizer::ChatMessage;
using colibri::tokenizer::ChatTemplate;
using colibri::tokenizer::ChatTemplateLimits;
using colibri::tokenizer::ChatVariable;
using Catch::Contains;

namespace {

std::string repeat(const std::string &s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

// Every hostile case must end well within this: a guard against a hang, not a speed test (the
// budgets bound a render to about a second on one core; an ASan+UBSan build runs the 10M-step
// default budget in ~6 s alone and took 44 s in CI next to a parallel ctest job).
#if defined(__SANITIZE_ADDRESS__)
constexpr double kQuickSeconds = 240.0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr double kQuickSeconds = 240.0;
#else
constexpr double kQuickSeconds = 30.0;
#endif
#else
constexpr double kQuickSeconds = 30.0;
#endif

struct Timed {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
};

colibri::Error parse_failure(const std::string &source, const ChatTemplateLimits &limits = {}) {
  colibri::Error error;
  Timed t;
  auto tpl = ChatTemplate::parse(source, limits, "chat template of 'hostile.colibri'", &error);
  CHECK(t.seconds() < kQuickSeconds);
  CHECK(tpl == nullptr);
  return error;
}

colibri::Error render_failure(const std::string &source, const ChatTemplateLimits &limits = {},
                              const std::vector<ChatVariable> &extra = {}) {
  colibri::Error error;
  auto tpl = ChatTemplate::parse(source, limits, "chat template of 'hostile.colibri'", &error);
  INFO(error.message);
  REQUIRE(tpl != nullptr);
  std::string out = "stale";
  Timed t;
  error = tpl->render({ChatMessage{"user", "hi"}}, true, "<s>", "</s>", extra, &out);
  CHECK(t.seconds() < kQuickSeconds);
  CHECK(!error.ok());
  CHECK(out.empty());
  return error;
}

// render_failure(source[, limits]) whose message contains `message`.
void expect_render_failure(const std::string &source, const ChatTemplateLimits &limits, const std::string &message) {
  INFO(source.substr(0, 80));
  const colibri::Error e = render_failure(source, limits);
  CHECK_THAT(e.message, Contains(message));
}
void expect_render_failure(const std::string &source, const std::string &message) {
  expect_render_failure(source, ChatTemplateLimits{}, message);
}

// Parses and renders `source` (no messages), which must succeed; returns the text.
std::string render_ok(const std::string &source) {
  colibri::Error error;
  auto tpl = ChatTemplate::parse(source, &error);
  INFO(error.message);
  REQUIRE(tpl);
  std::string out;
  REQUIRE(tpl->render({}, false, "", "", &out).ok());
  return out;
}

const std::string kDepthLimit = "nest deeper than the limit of 64 levels (ChatTemplateLimits::max_nesting_depth)";

}  // namespace

TEST_CASE("5000 nested parentheses are refused by the parser, not a stack overflow", "[chat][limits]") {
  // The template: '{{ ' + '('*5000 + '1' + ')'*5000 + ' }}' (10 KB).
  colibri::Error e = parse_failure("{{ " + repeat("(", 5000) + "1" + repeat(")", 5000) + " }}");
  CHECK(e.kind == ErrorKind::Unsupported);
  CHECK_THAT(e.message, Contains("chat template of 'hostile.colibri': line 1: expressions " + kDepthLimit));
  // Up to the limit is fine.
  CHECK(render_ok("{{ " + repeat("(", 60) + "1" + repeat(")", 60) + " }}") == "1");
}

TEST_CASE("5000 nested {% if %} (and for, set blocks) are refused by the parser", "[chat][limits]") {
  colibri::Error e = parse_failure(repeat("{% if true %}", 5000) + "x" + repeat("{% endif %}", 5000));
  CHECK(e.kind == ErrorKind::Unsupported);
  CHECK_THAT(e.message, Contains("line 1: blocks ({% if %}, {% for %}, {% set %}) " + kDepthLimit));
  e = parse_failure(repeat("{% for x in [1] %}\n", 1000) + repeat("{% endfor %}", 1000));
  CHECK_THAT(e.message, Contains("line 65: blocks"));
  e = parse_failure(repeat("{% set x %}", 1000) + repeat("{% endset %}", 1000));
  CHECK_THAT(e.message, Contains(kDepthLimit));
  // An unclosed deep nest is refused as deep before it is found unclosed.
  e = parse_failure(repeat("{% if true %}", 50000));
  CHECK_THAT(e.message, Contains(kDepthLimit));
}

TEST_CASE("every way of nesting an expression is bounded: brackets, operators, chains", "[chat][limits]") {
  const size_t n = 50000;  // under max_source_bytes (1 MiB)
  const std::vector<std::string> sources = {
      "{{ " + repeat("not ", n) + "x }}",                                   // prefix recursion
      "{{ " + repeat("- ", n) + "1 }}",                                     // unary recursion
      "{{ 1" + repeat(" + 1", n) + " }}",                                   // left-deep loop, no recursion
      "{{ 'a'" + repeat(" ~ 'a'", n) + " }}",
      "{{ x" + repeat(".a", n) + " }}",                                     // postfix chain
      "{{ x" + repeat("[0]", n) + " }}",
      "{{ x" + repeat(" | upper", n) + " }}",                               // filter chain
      "{{ " + repeat("[", 5000) + repeat("]", 5000) + " }}",                // literals
      "{{ " + repeat("{'a': ", 5000) + "1" + repeat("}", 5000) + " }}",
      "{{ 1" + repeat(" if x else 1", n) + " }}",                           // conditional chain
      "{{ " + repeat("x.get(", 5000) + "1" + repeat(")", 5000) + " }}",     // call arguments
      "{% set y = " + repeat("(", 5000) + "1" + repeat(")", 5000) + " %}",  // inside a statement
      "{% for a in " + repeat("[", 5000) + repeat("]", 5000) + " %}{% endfor %}",
  };
  for (const std::string &source : sources) {
    INFO(source.substr(0, 60));
    colibri::Error e = parse_failure(source);
    CHECK(e.kind == ErrorKind::Unsupported);
    CHECK_THAT(e.message, Contains("expressions " + kDepthLimit));
  }
}

TEST_CASE("a template over the source size limit is refused before it is lexed", "[chat][limits]") {
  ChatTemplateLimits limits;
  limits.max_source_bytes = 1000;
  colibri::Error e = parse_failure(std::string(1001, 'x'), limits);
  CHECK(e.kind == ErrorKind::Unsupported);
  CHECK_THAT(e.message, Contains("1001 bytes, over the limit of 1000 (ChatTemplateLimits::max_source_bytes)"));
}

TEST_CASE("'x' * 100000000000 is refused before anything is made", "[chat][limits]") {
  colibri::Error e = render_failure("{{ 'x' * 100000000000 }}");
  CHECK(e.kind == ErrorKind::Unsupported);
  CHECK_THAT(e.message, Contains("chat template of 'hostile.colibri': line 1: a value of 1 x 100000000000 bytes "
                                 "exceeds the limit of 67108864 (ChatTemplateLimits::max_value_bytes)"));
  expect_render_failure("{{ [1, 2] * 100000000000 }}", "(ChatTemplateLimits::max_value_bytes)");
}

TEST_CASE("an empty string or list times a huge count is empty at once, not a spin", "[chat][limits]") {
  // Found by fuzz_chat_template (a libFuzzer timeout): the byte check passes for zero bytes.
  CHECK(render_ok("{{ '' * 770000000000000000 }}|{{ ([] * 770000000000000000) | length }}|{{ 'ab' * 0 }}|{{ 'ab' * -3 }}") ==
        "|0||");
}

TEST_CASE("nested for loops over range(100000) stop at the loop budget", "[chat][limits]") {
  colibri::Error e = render_failure("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  CHECK(e.kind == ErrorKind::Unsupported);
  CHECK_THAT(e.message, Contains("line 1: the render's for-loop iterations exceeds the limit of 1000000 "
                                 "(ChatTemplateLimits::max_loop_iterations)"));
}

TEST_CASE("string doubling stops at the value size limit", "[chat][limits]") {
  colibri::Error e = render_failure(
      "{% set ns = namespace(s='x') %}\n{% for i in range(100) %}\n{% set ns.s = ns.s + ns.s %}\n{% endfor %}{{ ns.s }}");
  CHECK(e.kind == ErrorKind::Unsupported);
  CHECK_THAT(e.message, Contains("line 3: a value of 134217728 bytes exceeds the limit of 67108864 "
                                 "(ChatTemplateLimits::max_value_bytes)"));
  // The same through ~ and a {% set %} block.
  expect_render_failure("{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                        "(ChatTemplateLimits::max_value_bytes)");
  expect_render_failure("{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(100) %}{% set t %}{{ ns.s }}{{ ns.s }}"
                        "{% endset %}{% set ns.s = t %}{% endfor %}",
                        "exceeds the limit of 67108864");
}

TEST_CASE("the rendered text stops at the output limit", "[chat][limits]") {
  colibri::Error e = render_failure("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}");
  CHECK(e.kind == ErrorKind::Unsupported);
  CHECK_THAT(e.message, Contains("the rendered text exceeds the limit of 67108864 (ChatTemplateLimits::max_output_bytes)"));
  ChatTemplateLimits limits;
  limits.max_output_bytes = 10;
  expect_render_failure("{{ messages[0].content }}{% for m in messages %}{{ m.role }} said {{ m.content }}{% endfor %}",
                        limits, "the rendered text exceeds the limit of 10 (ChatTemplateLimits::max_output_bytes)");
}

TEST_CASE("work without output or loops stops at the step and byte budgets", "[chat][limits]") {
  // 810000 loop iterations (under the loop budget) of 17 steps each.
  colibri::Error e = render_failure("{% for i in range(90000) %}{% for j in range(9) %}{% if i + j + i + j + i + j + i + j %}"
                                    "{% endif %}{% endfor %}{% endfor %}");
  CHECK(e.kind == ErrorKind::Unsupported);
  CHECK_THAT(e.message, Contains("the render's evaluation steps exceeds the limit of 10000000 (ChatTemplateLimits::max_steps)"));
  ChatTemplateLimits limits;
  limits.max_steps = 100;
  expect_render_failure("{% for i in range(50) %}{{ i }}{% endfor %}", limits,
                        "exceeds the limit of 100 (ChatTemplateLimits::max_steps)");
  // `in` walks a 100000-item list (14 MB) a thousand times: 14 GB of memory traffic; so does
  // comparing two 60 MB strings a thousand times.
  expect_render_failure("{% set l = range(100000) %}{% for i in range(1000) %}{% if -1 in l %}{% endif %}{% endfor %}",
                        "(ChatTemplateLimits::max_bytes_processed)");
  expect_render_failure("{% set a = 'x' * 60000000 %}{% set b = 'x' * 60000000 %}{% for i in range(1000) %}"
                        "{% if a == b %}{% endif %}{% endfor %}",
                        "the bytes the render makes, copies or compares exceeds the limit of 1073741824 "
                        "(ChatTemplateLimits::max_bytes_processed)");
}

TEST_CASE("values nested past the limit, and namespaces inside values, are refused", "[chat][limits]") {
  colibri::Error e = render_failure(
      "{% set ns = namespace(x=none) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}");
  CHECK(e.kind == ErrorKind::Unsupported);
  CHECK_THAT(e.message, Contains("nested 65 levels deep exceeds the limit of 64 (ChatTemplateLimits::max_nesting_depth)"));
  // No value can contain itself: a namespace stays out of lists, dicts and namespaces.
  expect_render_failure("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}",
                        "a namespace() cannot be put inside a namespace");
  expect_render_failure("{% set ns = namespace(a=1) %}{% set l = [ns] %}",
                        "a namespace() cannot be put inside a list or dict");
  expect_render_failure("{% set ns = namespace(a=1) %}{% set d = namespace(inner=ns) %}",
                        "a namespace() cannot be put inside a list or dict");
  // An extra variable's JSON nests no deeper either.
  e = render_failure("{{ x }}", {}, {ChatVariable{"x", repeat("[", 100000) + repeat("]", 100000)}});
  CHECK(e.kind == ErrorKind::InvalidArgument);
  CHECK_THAT(e.message, Contains("variable \"x\" nests objects/arrays deeper than the limit of 64 levels"));
}

TEST_CASE("filters and methods that multiply sizes are bounded before they allocate", "[chat][limits]") {
  colibri::Error e = render_failure("{{ [[1]] | tojson(indent=1000000000000) }}");
  CHECK(e.kind == ErrorKind::Unsupported);
  CHECK_THAT(e.message, Contains("tojson's text exceeds the limit of 67108864"));
  expect_render_failure("{{ ('x' * 10000).replace('', 'y' * 10000) }}",
                        "replace()'s result exceeds the limit of 67108864");
  expect_render_failure("{{ ('x' * 10000) | replace('x', 'y' * 10000) }}",
                        "replace's result exceeds the limit of 67108864");
  expect_render_failure("{{ ('a ' * 1000000).split() | length }}",
                        "split()'s list of parts exceeds the limit of 67108864");
  expect_render_failure("{{ (['x' * 1000000] * 60) | join('y' * 1000000) }}",
                        "join's result exceeds the limit of 67108864");
  expect_render_failure("{% set s = 'ab' * 30000000 %}{% for c in s %}{% endfor %}",
                        "(ChatTemplateLimits::max_value_bytes)");
}

TEST_CASE("quadratic walks are charged: a dict literal's duplicate keys, strip() with many chars", "[chat][limits]") {
  // 40000 distinct keys: the duplicate search would be 8e8 comparisons.
  std::string keys;
  for (int i = 0; i < 40000; ++i) keys += "'k" + std::to_string(i) + "': 1, ";
  colibri::Error e = render_failure("{{ {" + keys + "} }}");
  CHECK_THAT(e.message, Contains("(ChatTemplateLimits::max_steps)"));
  // strip() with a million characters to strip, over a million characters: sorted, not 1e12.
  Timed t;
  CHECK(render_ok("{{ (('y' * 1000000) ~ 'x' ~ ('y' * 1000000)).strip('z' * 1000000 ~ 'y') }}") == "x");
  CHECK(t.seconds() < kQuickSeconds);
}

TEST_CASE("integer arithmetic that leaves 64 bits is an error, not undefined behaviour", "[chat][limits]") {
  for (const char *source : {"{{ 9223372036854775807 + 1 }}", "{{ -9223372036854775807 - 2 }}",
                             "{{ 4611686018427387904 * 2 }}", "{{ 3 ** 62 }}", "{{ -(-9223372036854775807 - 1) }}",
                             "{{ (-9223372036854775807 - 1) // -1 }}", "{{ (-9223372036854775807 - 1) | abs }}",
                             "{{ 1e300 | int }}"}) {
    INFO(source);
    colibri::Error e = render_failure(source);
    CHECK(e.kind == ErrorKind::Unsupported);
    CHECK_THAT(e.message, Contains("integer overflow"));
  }
  // range() with bounds at the ends of int64 counts in 128 bits.
  colibri::Error e = render_failure("{{ range(-9223372036854775807 - 1, 9223372036854775807) }}");
  CHECK_THAT(e.message, Contains("range() longer than 100000 items"));
}

TEST_CASE("a raise_exception message stays exact, other errors carry the template's name", "[chat][limits]") {
  colibri::Error error;
  auto tpl = ChatTemplate::parse("{{ raise_exception('no system role') }}", ChatTemplateLimits{}, "chat template of 'm'",
                                 &error);
  REQUIRE(tpl);
  std::string out;
  error = tpl->render({}, false, "", "", &out);
  CHECK(error.message == "no system role");
  tpl = ChatTemplate::parse("\n{{ nothing.here }}", ChatTemplateLimits{}, "chat template of 'm'", &error);
  REQUIRE(tpl);
  error = tpl->render({}, false, "", "", &out);
  CHECK(error.message == "chat template of 'm': line 2: 'nothing' is undefined");
}

TEST_CASE("the supported families' templates fit limits far below the defaults", "[chat][limits]") {
  // The defaults leave a margin of 8x or more on every bound for each real template.
  ChatTemplateLimits tight;
  tight.max_source_bytes = 16 << 10;
  tight.max_nesting_depth = 8;
  tight.max_output_bytes = 16 << 10;
  tight.max_value_bytes = 16 << 10;
  tight.max_bytes_processed = 1 << 20;
  tight.max_loop_iterations = 100;
  tight.max_steps = 20000;
  for (const char *name : {"mixtral_gqa", "mixtral_tied_top3", "qwen2_moe_shared", "qwen3_moe_qknorm", "olmoe_clip",
                           "glm4_moe_groups", "minimax_m2_sigmoid", "qwen3_moe_yarn", "gpt_oss_sinks"}) {
    INFO(name);
    const json fixture = json::parse(read_file(source_path(std::string("tests/fixtures/tokenizer/chat_") + name + ".json")));
    const json config = json::parse(read_file(source_path(fixture["tokenizer_config"].get<std::string>())));
    colibri::Error error;
    auto tpl = ChatTemplate::parse(config["chat_template"].get<std::string>(), tight, "", &error);
    INFO(error.message);
    REQUIRE(tpl);
    for (const json &conversation : fixture["conversations"]) {
      std::vector<ChatMessage> messages;
      for (const json &m : conversation["messages"]) messages.push_back({m["role"], m["content"]});
      std::string out;
      const std::string bos = fixture["bos_token"].is_string() ? fixture["bos_token"].get<std::string>() : "";
      const std::string eos = fixture["eos_token"].is_string() ? fixture["eos_token"].get<std::string>() : "";
      error = tpl->render(messages, true, bos, eos, &out);
      INFO(error.message);
      CHECK(error.ok());
      CHECK(out == conversation["add_generation_prompt_true"].get<std::string>());
    }
  }
}

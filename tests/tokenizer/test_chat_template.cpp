// tests/tokenizer/test_chat_template.cpp — chat templates render exactly as transformers does.
//
// tests/fixtures/tokenizer/chat_<case>.json (tools/oracle/make_fixtures.py) hold each oracle
// case's conversations rendered by apply_chat_template(tokenize=False) and the ids tokenizers
// gives the rendering. tests/tokenizer/fixtures/chat_extra.json (make_extra_fixtures.py) holds
// templates written to exercise the rest of the supported Jinja subset, rendered by the same
// transformers code.
#include <ctime>
#include <string>
#include <vector>

#include "tokenizer/chat_template.h"
#include "tokenizer_test_support.h"

using namespace tokenizer_test;
using colibri::tokenizer::ChatMessage;
using colibri::tokenizer::ChatTemplate;
using colibri::tokenizer::ChatVariable;

namespace {

const char *const kCases[] = {"mixtral_gqa",      "mixtral_tied_top3", "qwen2_moe_shared",  "qwen3_moe_qknorm",
                              "olmoe_clip",       "glm4_moe_groups",   "minimax_m2_sigmoid", "qwen3_moe_yarn",
                              "gpt_oss_sinks",    "gpt_oss_mxfp4",     "deepseek_v3_mla",    "deepseek_v3_direct_q"};

std::vector<ChatMessage> messages_of(const json &array) {
  std::vector<ChatMessage> out;
  for (const json &m : array) out.push_back(ChatMessage{m["role"].get<std::string>(), m["content"].get<std::string>()});
  return out;
}

std::string token_or_empty(const json &value) { return value.is_string() ? value.get<std::string>() : std::string(); }

std::unique_ptr<ChatTemplate> parse_ok(const std::string &source) {
  colibri::Error error;
  auto tpl = ChatTemplate::parse(source, &error);
  INFO(error.message);
  REQUIRE(tpl != nullptr);
  return tpl;
}

std::string render_ok(const ChatTemplate &tpl, const std::vector<ChatMessage> &messages, bool add_generation_prompt,
                      const std::string &bos, const std::string &eos, const std::vector<ChatVariable> &extra = {}) {
  std::string out;
  colibri::Error error = tpl.render(messages, add_generation_prompt, bos, eos, extra, &out);
  INFO(error.message);
  REQUIRE(error.ok());
  return out;
}

colibri::Error parse_error(const std::string &source) {
  colibri::Error error;
  CHECK(ChatTemplate::parse(source, &error) == nullptr);
  return error;
}

}  // namespace

TEST_CASE("each oracle case's chat template renders every conversation as apply_chat_template does", "[chat]") {
  for (const char *name : kCases) {
    const json fixture = json::parse(read_file(source_path(std::string("tests/fixtures/tokenizer/chat_") + name + ".json")));
    const json config = json::parse(read_file(source_path(fixture["tokenizer_config"].get<std::string>())));
    auto tpl = parse_ok(config["chat_template"].get<std::string>());
    const std::string bos = token_or_empty(fixture["bos_token"]);
    const std::string eos = token_or_empty(fixture["eos_token"]);
    auto tok = load_tokenizer(std::string("tests/fixtures/oracle/") + name + "/tokenizer.json");
    REQUIRE(fixture["conversations"].size() == 3);
    for (const json &conversation : fixture["conversations"]) {
      INFO(name << ": " << conversation["messages"].dump());
      const auto messages = messages_of(conversation["messages"]);
      for (bool generation_prompt : {false, true}) {
        const std::string key = generation_prompt ? "add_generation_prompt_true" : "add_generation_prompt_false";
        const std::string rendered = render_ok(*tpl, messages, generation_prompt, bos, eos);
        CHECK(rendered == conversation[key].get<std::string>());
        // The rendering's ids: special tokens in a rendered template are tokens.
        CHECK(encode(*tok, rendered, false, true) == ids_of(conversation[key + "_ids"]));
      }
      if (conversation.contains("add_generation_prompt_true_enable_thinking_false")) {
        CHECK(render_ok(*tpl, messages, true, bos, eos, {ChatVariable{"enable_thinking", "false"}}) ==
              conversation["add_generation_prompt_true_enable_thinking_false"].get<std::string>());
      }
    }
  }
}

TEST_CASE("raise_exception in a template returns an error carrying exactly its message", "[chat]") {
  const json fixture = json::parse(read_file(source_path("tests/fixtures/tokenizer/chat_mixtral_gqa.json")));
  const json config = json::parse(read_file(source_path(fixture["tokenizer_config"].get<std::string>())));
  auto tpl = parse_ok(config["chat_template"].get<std::string>());
  REQUIRE(!fixture["error_conversations"].empty());
  for (const json &conversation : fixture["error_conversations"]) {
    std::string out = "stale";
    colibri::Error error = tpl->render(messages_of(conversation["messages"]), false, "<s>", "</s>", &out);
    CHECK(error.kind == colibri::ErrorKind::InvalidArgument);
    CHECK(error.message == conversation["error"].get<std::string>());
    CHECK(out.empty());
  }
}

TEST_CASE("extra templates covering the supported Jinja subset render as transformers does", "[chat]") {
  const json fixture = json::parse(read_file(source_path("tests/tokenizer/fixtures/chat_extra.json")));
  REQUIRE(fixture["cases"].size() >= 10);
  for (const json &c : fixture["cases"]) {
    INFO(c["name"].get<std::string>() << "\n" << c["template"].get<std::string>());
    auto tpl = parse_ok(c["template"].get<std::string>());
    std::vector<ChatVariable> extra;
    for (auto it = c["variables"].begin(); it != c["variables"].end(); ++it) extra.push_back({it.key(), it.value().dump()});
    for (const json &render : c["renders"]) {
      INFO(render["messages"].dump() << " add_generation_prompt=" << render["add_generation_prompt"]);
      std::string out;
      colibri::Error error = tpl->render(messages_of(render["messages"]), render["add_generation_prompt"].get<bool>(),
                                         token_or_empty(c["bos_token"]), token_or_empty(c["eos_token"]), extra, &out);
      if (render.contains("error")) {
        CHECK(error.message == render["error"].get<std::string>());
      } else {
        INFO(error.message);
        CHECK(error.ok());
        CHECK(out == render["output"].get<std::string>());
      }
    }
  }
}

TEST_CASE("a template needing more than the subset is refused, naming the construct and line", "[chat]") {
  colibri::Error e = parse_error("{% for m in messages %}\n{% macro greet(name) %}hi {{ name }}{% endmacro %}{% endfor %}");
  CHECK(e.kind == colibri::ErrorKind::Unsupported);
  CHECK_THAT(e.message, Catch::Contains("line 2: {% macro %} inside a for loop, a block set or a macro is not supported"));
  e = parse_error("{% macro greet(name) %}hi{% endmacro %}{% call greet('x') %}body{% endcall %}");
  CHECK_THAT(e.message, Catch::Contains("{% call %} is not supported"));
  e = parse_error("a\n{{ utcnow('%Y') }}");
  CHECK(e.kind == colibri::ErrorKind::Unsupported);
  CHECK_THAT(e.message, Catch::Contains("line 2: function \"utcnow\" is not supported"));
  e = parse_error("{{ messages | map(attribute='role') | join(',') }}");
  CHECK_THAT(e.message, Catch::Contains("filter \"map\" is not supported"));
  e = parse_error("{% include 'other.jinja' %}");
  CHECK_THAT(e.message, Catch::Contains("{% include %} is not supported"));
  e = parse_error("{% generation %}x{% endgeneration %}");
  CHECK_THAT(e.message, Catch::Contains("{% generation %} is not supported"));
  e = parse_error("{{ x is divisible_by_three }}");
  CHECK_THAT(e.message, Catch::Contains("test \"divisible_by_three\" is not supported"));
  e = parse_error("{{ 'a'.format(1) }}");
  CHECK_THAT(e.message, Catch::Contains("method \".format()\" is not supported"));
}

TEST_CASE("macro calls are checked as Jinja checks them, and cannot recurse without end", "[chat]") {
  auto render_error = [](const std::string &source) {
    auto tpl = parse_ok(source);
    std::string out;
    colibri::Error e = tpl->render({}, false, "", "", &out);
    CHECK(out.empty());
    return e;
  };
  colibri::Error e = render_error("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}");
  CHECK(e.message == "chat template: line 1: macro 'm' takes not more than 1 argument(s)");
  e = render_error("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(z=2) }}");
  CHECK(e.message == "chat template: line 1: macro 'm' takes no keyword argument 'z'");
  e = render_error("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, a=2) }}");
  CHECK(e.message == "chat template: line 1: macro 'm' takes no keyword argument 'a'");
  // Called before its definition ran: undefined, as in Jinja.
  e = render_error("{{ m(1) }}\n{% macro m(a) %}{{ a }}{% endmacro %}");
  CHECK(e.message == "chat template: line 1: 'm' is undefined");
  // A macro that calls itself stops at the call-depth limit instead of exhausting the stack;
  // so does mutual recursion.
  e = render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  CHECK(e.kind == colibri::ErrorKind::Unsupported);
  CHECK_THAT(e.message, Catch::Contains("macro 'f': macro calls nested more than 32 deep"));
  e = render_error("{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}");
  CHECK_THAT(e.message, Catch::Contains("macro calls nested more than 32 deep"));
  // 32 levels are fine.
  auto tpl = parse_ok("{% macro f(n) %}{% if n < 32 %}{{ n }},{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(1) }}");
  std::string out;
  REQUIRE(tpl->render({}, false, "", "", &out).ok());
  CHECK(out.rfind("30,31,") == out.size() - 6);
  // What bounds the stack is the depth of everything being evaluated: macros whose bodies nest
  // deep stop there, well before 32 calls (each level here is about 52 deep).
  std::string nested_body;
  for (int k = 0; k < 50; ++k) nested_body += "{% if true %}";
  nested_body += "{{ f(n + 1) }}";
  for (int k = 0; k < 50; ++k) nested_body += "{% endif %}";
  e = render_error("{% macro f(n) %}" + nested_body + "{% endmacro %}{{ f(0) }}");
  CHECK(e.kind == colibri::ErrorKind::Unsupported);
  CHECK_THAT(e.message, Catch::Contains("nested more than 256 deep while rendering"));
  // The same with expressions: 60 `not` around each recursive call (the deepest frames).
  std::string nots;
  for (int k = 0; k < 60; ++k) nots += "not ";
  e = render_error("{% macro f(n) %}{{ " + nots + "f(n + 1) }}{% endmacro %}{{ f(0) }}");
  CHECK_THAT(e.message, Catch::Contains("nested more than 256 deep while rendering"));
  // Errors inside a macro leave the caller's scopes intact for the next render.
  e = render_error("{% macro m() %}{{ nothing.here }}{% endmacro %}{% for x in [1] %}{{ m() }}{% endfor %}");
  CHECK(e.message == "chat template: line 1: 'nothing' is undefined");
  // Syntax: defaults after a default, duplicate parameters, a missing endmacro.
  CHECK_THAT(parse_error("{% macro m(a=1, b) %}{% endmacro %}").message,
             Catch::Contains("a parameter without a default follows one with a default"));
  CHECK_THAT(parse_error("{% macro m(a, a) %}{% endmacro %}").message, Catch::Contains("duplicate parameter 'a'"));
  CHECK_THAT(parse_error("{% macro m() %}x").message, Catch::Contains("missing {% endmacro %}"));
  CHECK_THAT(parse_error("{% endmacro %}").message, Catch::Contains("{% endmacro %} without its opening tag"));
  CHECK(parse_ok("{% macro m() %}x{% endmacro m %}{{ m() }}") != nullptr);
}

TEST_CASE("strftime_now gives the local time as transformers' does (gpt-oss's template prints the date)", "[chat]") {
  auto today = [] {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char text[32];
    return std::string(text, std::strftime(text, sizeof text, "%Y-%m-%d", &local));
  };
  auto tpl = parse_ok("Current date: {{ strftime_now('%Y-%m-%d') }}|{{ strftime_now('') }}|{{ strftime_now('%%') }}");
  const std::string before = today();
  std::string out;
  REQUIRE(tpl->render({}, false, "", "", &out).ok());
  const std::string after = today();  // a render across midnight may print either day
  CHECK((out == "Current date: " + before + "||%" || out == "Current date: " + after + "||%"));
  tpl = parse_ok("{{ strftime_now(1) }}");
  CHECK(tpl->render({}, false, "", "", &out).message == "chat template: line 1: strftime_now() takes one string, the format");
  tpl = parse_ok("{{ strftime_now('%Y' * 200) }}");
  CHECK_THAT(tpl->render({}, false, "", "", &out).message, Catch::Contains("the format must be at most 256 bytes"));
}

TEST_CASE("extra variables keep their objects' key order, as a Python dict from json.loads does", "[chat]") {
  // GLM-4.5's, MiniMax-M2's and Kimi-K2's templates print the caller's tools with tojson:
  // transformers prints the keys in the order given, so the prompt must too (sorted keys
  // are a different prompt).
  auto tpl = parse_ok("{{ tools | tojson }}|{% for k, v in tools[0].function.items() %}{{ k }},{% endfor %}");
  std::string out;
  const std::string tools = R"([{"type": "function", "function": {"name": "f", "description": "d", "arguments": {"z": 1, "a": 2}}}])";
  REQUIRE(tpl->render({}, false, "", "", {ChatVariable{"tools", tools}}, &out).ok());
  CHECK(out == R"([{"type": "function", "function": {"name": "f", "description": "d", "arguments": {"z": 1, "a": 2}}}]|name,description,arguments,)");
  // A duplicate key keeps its first place and takes the last value (json.loads does the same).
  REQUIRE(tpl->render({}, false, "", "", {ChatVariable{"tools", R"([{"function": {"b": 1, "a": 2, "b": 3}}])"}}, &out).ok());
  CHECK(out == R"([{"function": {"b": 3, "a": 2}}]|b,a,)");
  // Keys are found by a linear search in an ordered object: one object's keys are bounded.
  std::string many = "{";
  for (int k = 0; k < 5000; ++k) many += (k ? ",\"k" : "\"k") + std::to_string(k) + "\": 0";
  many += "}";
  colibri::Error e = tpl->render({}, false, "", "", {ChatVariable{"tools", many}}, &out);
  CHECK(e.kind == colibri::ErrorKind::InvalidArgument);
  CHECK_THAT(e.message, Catch::Contains("variable \"tools\" has an object of more than 4096 keys"));
}

TEST_CASE("template syntax errors name the line", "[chat]") {
  colibri::Error e = parse_error("line one\n{% if x %}unclosed");
  CHECK(e.kind == colibri::ErrorKind::InvalidArgument);
  CHECK_THAT(e.message, Catch::Contains("line 2: missing {% elif %} or {% else %} or {% endif %}"));
  e = parse_error("{{ 'unterminated }}");
  CHECK_THAT(e.message, Catch::Contains("unterminated string"));
  e = parse_error("\n\n{% endfor %}");
  CHECK_THAT(e.message, Catch::Contains("line 3: {% endfor %} without its opening tag"));
  e = parse_error("{{ (1 + 2 }}");
  CHECK_THAT(e.message, Catch::Contains("line 1: unbalanced '}'"));
  e = parse_error("{% if true %}x");
  CHECK_THAT(e.message, Catch::Contains("missing"));
  e = parse_error("{{ 1 + }}");
  CHECK_THAT(e.message, Catch::Contains("unexpected end of tag"));
}

TEST_CASE("runtime errors name the line: undefined attribute access, bad operands", "[chat]") {
  auto tpl = parse_ok("ok\n{{ nothing.here }}");
  std::string out;
  colibri::Error e = tpl->render({}, false, "", "", &out);
  CHECK(e.kind == colibri::ErrorKind::InvalidArgument);
  CHECK(e.message == "chat template: line 2: 'nothing' is undefined");
  tpl = parse_ok("{{ 'a' + 1 }}");
  e = tpl->render({}, false, "", "", &out);
  CHECK(e.message == "chat template: line 1: can only concatenate str (not \"int\") to str");
  tpl = parse_ok("{{ x }}");
  e = tpl->render({}, false, "", "", {ChatVariable{"x", "{not json"}}, &out);
  CHECK_THAT(e.message, Catch::Contains("variable \"x\" is not valid JSON"));
}

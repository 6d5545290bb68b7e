// tests/capi/test_hostile_metadata.cpp — images with hostile metadata through the C API
// (issue 18, items 1 and 3): a chat template that cannot be parsed, or that would run away,
// leaves the model usable for plain completion and fails colibri_chat_render with the reason;
// metadata nested past the JSON depth limit fails colibri_model_open cleanly.
#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "colibri.h"
#include "support/synthetic_image.h"
#include "support/synthetic_model.h"

using Catch::Contains;

namespace {

std::string last_error() {
  size_t size = 0;
  colibri_last_error(nullptr, 0, &size);
  std::string message(size + 1, '\0');
  colibri_last_error(message.data(), message.size(), &size);
  message.resize(size);
  return message;
}

std::string repeat(const std::string &s, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

std::string model_with_template(const std::string &dir, const std::string &name, const std::string &chat_template) {
  colibri::testing::ModelImageParts parts = colibri::testing::model_parts(colibri::testing::tiny_model_config());
  parts.metadata["tokenizer"]["chat_template"] = chat_template;
  const std::string path = dir + "/" + name;
  REQUIRE_FALSE(colibri::testing::write_model_parts(path, parts));
  return path;
}

struct Run {
  int exit_code;
  std::string err;
};

// Runs the `colibri` executable (COLIBRI_CLI_EXE) with ARGS, stdin from `input`; stdout is dropped.
Run colibri_cli(const std::string &dir, const std::string &args, const std::string &input) {
  const std::string in_path = dir + "/stdin.txt", err_path = dir + "/stderr.txt";
  std::ofstream(in_path, std::ios::binary) << input;
  const int status = std::system((std::string(COLIBRI_CLI_EXE) + " " + args + " <" + in_path + " >/dev/null 2>" + err_path).c_str());
  std::ifstream err(err_path, std::ios::binary);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1,
          std::string((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>())};
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("a hostile chat template: open succeeds, completion works, chat_render names the limit", "[capi][limits]") {
  const std::string dir = colibri::testing::temp_dir("capi-hostile");
  struct Case {
    const char *name;
    std::string source;
    const char *expected;
  };
  const std::vector<Case> cases = {
      {"parens", "{{ " + repeat("(", 5000) + "1" + repeat(")", 5000) + " }}",
       "line 1: expressions nest deeper than the limit of 64 levels (ChatTemplateLimits::max_nesting_depth)"},
      {"ifs", repeat("{% if true %}", 5000) + "x" + repeat("{% endif %}", 5000),
       "line 1: blocks ({% if %}, {% for %}, {% set %}) nest deeper than the limit of 64 levels"},
      {"repeat", "{{ 'x' * 100000000000 }}", "(ChatTemplateLimits::max_value_bytes)"},
      {"loops", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
       "(ChatTemplateLimits::max_loop_iterations)"},
      {"doubling", "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
       "(ChatTemplateLimits::max_value_bytes)"},
  };
  for (const Case &c : cases) {
    INFO(c.name);
    const std::string path = model_with_template(dir, std::string(c.name) + ".colibri", c.source);
    colibri_model *model = nullptr;
    REQUIRE(colibri_model_open(path.c_str(), nullptr, &model) == COLIBRI_OK);
    colibri_model_info info{};
    info.struct_size = sizeof info;
    REQUIRE(colibri_model_get_info(model, &info) == COLIBRI_OK);
    CHECK(info.has_chat_template == 1);
    CHECK(info.has_tokenizer == 1);

    // Plain completion: tokenize, generate a few tokens.
    int32_t tokens[64];
    size_t count = 0;
    REQUIRE(colibri_tokenize(model, "ab", 2, 0, tokens, 64, &count) == COLIBRI_OK);
    REQUIRE(count > 0);
    colibri_session *session = nullptr;
    REQUIRE(colibri_session_create(model, nullptr, &session) == COLIBRI_OK);
    colibri_generate_options options;
    REQUIRE(colibri_generate_options_init(&options, sizeof options) == COLIBRI_OK);
    options.max_tokens = 3;
    options.ignore_eos = 1;
    colibri_generate_result result{};
    result.struct_size = sizeof result;
    CHECK(colibri_generate(session, tokens, count, &options, nullptr, nullptr, &result) == COLIBRI_OK);
    CHECK(result.generated_token_count == 3);
    colibri_session_free(session);

    // The chat template fails with the reason, quickly.
    const colibri_chat_message messages[] = {{"user", "hi"}};
    char text[256];
    size_t size = 0;
    const auto start = std::chrono::steady_clock::now();
    const int32_t status = colibri_chat_render(model, messages, 1, nullptr, text, sizeof text, &size);
    CHECK(seconds_since(start) < 30.0);
    CHECK(status == COLIBRI_ERROR_UNSUPPORTED);
    const std::string message = last_error();
    CHECK_THAT(message, Contains("chat template of '" + path + "'"));
    CHECK_THAT(message, Contains(c.expected));
    // A template given with the call still works.
    colibri_chat_options chat;
    REQUIRE(colibri_chat_options_init(&chat, sizeof chat) == COLIBRI_OK);
    chat.template_text = "{{ messages[0].content }}";
    CHECK(colibri_chat_render(model, messages, 1, &chat, text, sizeof text, &size) == COLIBRI_OK);
    CHECK(std::string(text, size) == "hi");
    colibri_model_close(model);
  }
}

TEST_CASE("metadata nested a million levels deep fails colibri_model_open with the limit", "[capi][limits]") {
  const std::string dir = colibri::testing::temp_dir("capi-deep");
  colibri::testing::ModelImageParts parts = colibri::testing::model_parts(colibri::testing::tiny_model_config());
  parts.metadata_text =
      colibri::testing::metadata_with_raw_member(parts.metadata, "\"extra\": " + repeat("[", 1000000) + repeat("]", 1000000));
  const std::string path = dir + "/deep.colibri";
  REQUIRE_FALSE(colibri::testing::write_model_parts(path, parts));
  colibri_model *model = nullptr;
  const auto start = std::chrono::steady_clock::now();
  CHECK(colibri_model_open(path.c_str(), nullptr, &model) == COLIBRI_ERROR_CORRUPT);
  CHECK(seconds_since(start) < 20.0);
  CHECK(model == nullptr);
  CHECK_THAT(last_error(), Contains("the metadata section nests objects/arrays deeper than the limit of 128 levels "
                                    "(util::kMaxJsonDepth), under \"extra\" > []"));
}

TEST_CASE("a chat template that cannot be parsed: colibri run -p works, run --chat exits 5 (unsupported) naming the limit",
          "[capi][cli][limits]") {
  // 5000 nested {% if %} crashed `colibri run --chat` (and the open) with SIGSEGV.
  const std::string dir = colibri::testing::temp_dir("cli-hostile");
  const std::string path =
      model_with_template(dir, "ifs.colibri", repeat("{% if true %}", 5000) + "x" + repeat("{% endif %}", 5000));
  Run plain = colibri_cli(dir, "run -m " + path + " -p ab -n 3 --temp 0 --ignore-eos", "");
  INFO(plain.err);
  CHECK(plain.exit_code == 0);
  Run chat = colibri_cli(dir, "run -m " + path + " --chat -n 3 --temp 0", "hi\n");
  CHECK(chat.exit_code == 5);  // COLIBRI_ERROR_UNSUPPORTED: docs/cli.md "Exit status"
  CHECK_THAT(chat.err, Contains("plain completion still works") && Contains("chat template of '" + path + "'") &&
                           Contains("nest deeper than the limit of 64 levels (ChatTemplateLimits::max_nesting_depth)"));
  CHECK(std::count(chat.err.begin(), chat.err.end(), '\n') <= 2);  // one message, no crash report
}

TEST_CASE("every model and tokenizer metadata key given a value of the wrong type is a named error, never internal",
          "[capi][limits]") {
  // The fuzzer found one (tokenizer.add_bos_token as a string escaped nlohmann's type_error out
  // of the open); this sweeps the class: each key in turn replaced by a value of every other type.
  const std::string dir = colibri::testing::temp_dir("capi-types");
  const colibri::testing::ModelImageParts base = colibri::testing::model_parts(colibri::testing::tiny_model_config());
  const nlohmann::json replacements[] = {"text", 12345, -1, 1.5, true, nullptr, nlohmann::json::array({1, 2}),
                                         nlohmann::json::object({{"a", 1}})};
  size_t opened = 0, refused = 0;
  for (const char *section : {"model", "tokenizer"}) {
    REQUIRE(base.metadata.contains(section));
    for (const auto &item : base.metadata[section].items()) {
      for (const nlohmann::json &value : replacements) {
        if (value.type() == item.value().type()) continue;
        colibri::testing::ModelImageParts parts = base;
        parts.metadata[section][item.key()] = value;
        const std::string path = dir + "/t.colibri";
        REQUIRE_FALSE(colibri::testing::write_model_parts(path, parts));
        colibri_model *model = nullptr;
        const int32_t status = colibri_model_open(path.c_str(), nullptr, &model);
        INFO(section << "." << item.key() << " = " << value.dump() << ": " << last_error());
        CHECK(status != COLIBRI_ERROR_INTERNAL);
        if (status == COLIBRI_OK) {
          ++opened;
          colibri_model_close(model);
        } else {
          ++refused;
          CHECK(model == nullptr);
        }
      }
    }
  }
  CHECK(refused > 0);
  WARN("wrong-typed metadata values: " << opened << " opened (ignored or accepted), " << refused << " refused");
}

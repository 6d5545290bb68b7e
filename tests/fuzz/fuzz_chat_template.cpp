// tests/fuzz/fuzz_chat_template.cpp — libFuzzer target for the chat-template (Jinja) parser and
// renderer under ChatTemplateLimits. The input is a template; it is parsed with the default
// limits and, when it parses, rendered with budgets small enough that each input ends in
// milliseconds (the budgets' own boundaries are what the fuzzer explores, not their sizes).
// Every failure must explain itself; a render's text must respect max_output_bytes.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_template.h"

using namespace colibri;
using tokenizer::ChatMessage;
using tokenizer::ChatTemplate;
using tokenizer::ChatTemplateLimits;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string_view source(reinterpret_cast<const char *>(data), size);
  ChatTemplateLimits limits;
  limits.max_output_bytes = 1 << 16;
  limits.max_value_bytes = 1 << 16;
  limits.max_bytes_processed = 1 << 22;
  limits.max_loop_iterations = 1000;
  limits.max_steps = 20000;
  Error error;
  auto tpl = ChatTemplate::parse(source, limits, "fuzz", &error);
  if (!tpl) {
    if (error.message.empty()) __builtin_trap();
    return 0;
  }
  const std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Hello <b>"}, {"assistant", "Hi!"},
                                             {"user", "A\nB"}};
  const std::vector<tokenizer::ChatVariable> variables = {
      {"enable_thinking", "false"}, {"tools", R"([{"type": "function", "function": {"name": "f", "parameters": {}}}])"}};
  for (bool generation_prompt : {false, true}) {
    std::string out;
    Error e = tpl->render(messages, generation_prompt, "<s>", "</s>", variables, &out);
    if (e && !out.empty()) __builtin_trap();  // a failed render leaves no text
    if (out.size() > limits.max_output_bytes) __builtin_trap();
  }
  return 0;
}

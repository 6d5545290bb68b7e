// core/tokenizer/chat_template.h — renders a checkpoint's chat template (Jinja) to a prompt.
//
// Owns: parsing the `chat_template` string of tokenizer_config.json (the image stores it) and
// rendering a conversation with it, with the same output as transformers'
// apply_chat_template(tokenize=False), which renders in a jinja2 ImmutableSandboxedEnvironment
// with trim_blocks=True and lstrip_blocks=True (transformers/utils/chat_template_utils.py).
// tests/tokenizer/test_chat_template.cpp compares against committed transformers output.
//
// The Jinja subset (what the supported families' templates use, and a little more):
//   statements   {% if %}/{% elif %}/{% else %}, {% for x in xs [if cond] %} with {% else %},
//                tuple targets (`for k, v in d.items()`), loop.index/index0/revindex/
//                revindex0/first/last/length/previtem/nextitem, {% break %}/{% continue %},
//                {% set x = ... %}, {% set ns.attr = ... %}, {% set x %}...{% endset %},
//                {% macro name(a, b=default) %}...{% endmacro %} at the top level or in an
//                {% if %} there (GLM-4.5's and MiniMax-M2's templates), called as name(...):
//                its own scope, the template's top-level variables as they are at the call,
//                not the caller's loop variables; the call's value is what the body renders;
//                calls nest at most 32 deep,
//                comments, whitespace control ({%- -%} {{- -}} {#- -#} {%+ +%})
//   expressions  literals (strings, ints, floats, true/false/none, lists, tuples, dicts),
//                . and [] access, slices [a:b:c], if/else, or/and/not, == != < <= > >=,
//                in / not in, + - * / // % **, ~, filters, `is` tests
//   filters      abs capitalize count d default first float int items join last length list
//                lower replace reverse safe string title tojson trim upper
//   tests        defined undefined none string number integer float boolean true false
//                mapping sequence iterable even odd divisibleby eq equalto ne lower upper
//   functions    raise_exception(msg), range(), namespace(...), dict(...), strftime_now(format)
//                (the local time, as transformers gives it), the template's macros
//   methods      str: strip lstrip rstrip split startswith endswith upper lower title
//                capitalize replace; dict: items keys values get
// Anything else ({% call %}, a macro inside a loop, {% include %}, {% generation %}, unknown
// filters, ...) is refused by parse() with a message naming it and its line. A macro's
// varargs / kwargs / caller are not provided (they are undefined).
//
// Known differences from Python (none matter for the supported families' templates): tuples
// print as lists ("[1, 2]" not "(1, 2)"); upper/lower/title use single-code-point case
// mappings ("ß".upper() stays "ß"); repr() of a string escapes only C0 controls and DEL.
//
// Limits (ChatTemplateLimits below): a template is untrusted input (it comes with the image),
// so parsing and rendering are bounded. The parser refuses nesting deeper than
// max_nesting_depth (brackets, operators and {% if %}/{% for %}/{% set %} blocks) instead of
// recursing without end; a render stops at the first exceeded budget (output bytes, the size
// of one value, all bytes processed, loop iterations, evaluation steps) with ErrorKind::Unsupported
// and a message naming the template, the line and the limit ("... exceeds the limit of N
// (ChatTemplateLimits::max_output_bytes)"). The defaults are far above what the supported
// families' templates need (tests/tokenizer/test_chat_template.cpp measures them) and bound a
// hostile template to about a second and a few hundred MiB.
//
// Thread safety: a parsed ChatTemplate is immutable; render() may run on many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.h"

namespace colibri::tokenizer {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant", ...
  std::string content;  // the text of the message
};

// An extra template variable (e.g. Qwen3's enable_thinking), given as JSON text: "false",
// "\"text\"", "[{\"type\": \"function\", ...}]".
struct ChatVariable {
  std::string name;
  std::string json_value;
};

// The bounds on parsing and rendering one template. Every exceeded limit is an error
// (ErrorKind::Unsupported) that names the template, the line and the limit.
struct ChatTemplateLimits {
  static constexpr uint64_t kDefaultMaxSourceBytes = 1ull << 20;      // real templates: 0.3-12 KB
  static constexpr uint32_t kDefaultMaxNestingDepth = 64;            // real templates: < 10
  static constexpr uint64_t kDefaultMaxOutputBytes = 64ull << 20;    // a long-context prompt: ~4 MB
  static constexpr uint64_t kDefaultMaxValueBytes = 64ull << 20;
  static constexpr uint64_t kDefaultMaxBytesProcessed = 1ull << 30;
  static constexpr uint64_t kDefaultMaxLoopIterations = 1000000;
  static constexpr uint64_t kDefaultMaxSteps = 10000000;

  uint64_t max_source_bytes = kDefaultMaxSourceBytes;  // the template text
  // Parser: brackets, operators and blocks inside each other. Renderer: lists and dicts
  // inside each other (including the JSON of extra variables).
  uint32_t max_nesting_depth = kDefaultMaxNestingDepth;
  uint64_t max_output_bytes = kDefaultMaxOutputBytes;  // the rendered text ({% set %} blocks too)
  uint64_t max_value_bytes = kDefaultMaxValueBytes;    // one value: a string, or a list/dict's
                                                       // strings plus sizeof(Value) per item
  // All bytes one render makes, copies or compares (its memory traffic: bounds time and memory).
  uint64_t max_bytes_processed = kDefaultMaxBytesProcessed;
  uint64_t max_loop_iterations = kDefaultMaxLoopIterations;  // all for-loop iterations of a render
  uint64_t max_steps = kDefaultMaxSteps;  // statements and expressions evaluated + items walked
};

class ChatTemplate {
 public:
  // Parses a template. Returns null and sets *error (ErrorKind::Unsupported for a construct
  // outside the subset or past a limit, InvalidArgument for a syntax error), naming the line.
  // `name` starts every message of this template's parse and render errors (default
  // "chat template"; the C API passes "chat template of 'PATH'").
  static std::unique_ptr<ChatTemplate> parse(std::string_view source, Error *error);
  static std::unique_ptr<ChatTemplate> parse(std::string_view source, const ChatTemplateLimits &limits,
                                             std::string_view name, Error *error);
  ~ChatTemplate();
  ChatTemplate(const ChatTemplate &) = delete;
  ChatTemplate &operator=(const ChatTemplate &) = delete;

  // Renders `messages` into *out. The template sees `messages` (a list of {role, content}),
  // `add_generation_prompt`, `bos_token` and `eos_token` (left undefined when empty, as
  // transformers leaves a token the tokenizer does not have), `tools` and `documents`
  // (none), and each extra variable. A raise_exception(msg) in the template returns
  // ErrorKind::InvalidArgument with message exactly msg; other failures name the template and
  // the line; an exceeded ChatTemplateLimits budget is ErrorKind::Unsupported.
  Error render(const std::vector<ChatMessage> &messages, bool add_generation_prompt, std::string_view bos_token,
               std::string_view eos_token, std::string *out) const;
  Error render(const std::vector<ChatMessage> &messages, bool add_generation_prompt, std::string_view bos_token,
               std::string_view eos_token, const std::vector<ChatVariable> &extra_variables, std::string *out) const;

 private:
  struct Impl;
  explicit ChatTemplate(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace colibri::tokenizer

// core/tokenizer/jinja_parse.h — template source -> statement tree (jinja_ast.h).
#pragma once

#include <string_view>

#include "tokenizer/chat_template.h"
#include "tokenizer/jinja_ast.h"
#include "util/error.h"

namespace colibri::tokenizer::jinja {

// Parses with transformers' environment settings: trim_blocks=True, lstrip_blocks=True,
// keep_trailing_newline=False (one final newline of the source is dropped), newlines
// normalised to "\n". Refuses (ErrorKind::Unsupported) a construct outside the subset,
// naming it and its line; syntax errors are ErrorKind::InvalidArgument. Nesting deeper than
// limits.max_nesting_depth, or a source over limits.max_source_bytes, is Unsupported. Messages
// start with "line N: " (ChatTemplate::parse puts the template's name before them).
Error parse_template(std::string_view source, const ChatTemplateLimits &limits, Body *out);

// What the evaluator implements (the parser refuses anything else at parse time).
bool is_known_filter(const std::string &name);
bool is_known_test(const std::string &name);
bool is_known_global_function(const std::string &name);
bool is_known_method(const std::string &name);

}  // namespace colibri::tokenizer::jinja

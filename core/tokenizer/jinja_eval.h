// core/tokenizer/jinja_eval.h — renders a parsed chat template (jinja_ast.h).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/chat_template.h"
#include "tokenizer/jinja_ast.h"
#include "util/error.h"

namespace colibri::tokenizer::jinja {

// Renders `body` with the given top-level variables into *out. A raise_exception(msg) call
// in the template returns ErrorKind::InvalidArgument whose message is exactly msg; other
// failures (undefined variable access, type errors) are "NAME: line N: problem"; a budget of
// `limits` exceeded is ErrorKind::Unsupported naming the limit.
Error render(const Body &body, const std::vector<std::pair<std::string, Value>> &globals,
             const ChatTemplateLimits &limits, std::string_view name, std::string *out);

}  // namespace colibri::tokenizer::jinja

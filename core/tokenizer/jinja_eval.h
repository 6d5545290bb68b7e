// core/tokenizer/jinja_eval.h — renders a parsed chat template (jinja_ast.h).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_ast.h"
#include "util/error.h"

namespace colibri::tokenizer::jinja {

// Renders `body` with the given top-level variables into *out. A raise_exception(msg) call
// in the template returns ErrorKind::InvalidArgument whose message is exactly msg; other
// failures (undefined variable access, type errors) name the line and the problem.
Error render(const Body &body, const std::vector<std::pair<std::string, Value>> &globals, std::string *out);

}  // namespace colibri::tokenizer::jinja

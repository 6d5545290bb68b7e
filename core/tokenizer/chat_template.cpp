// core/tokenizer/chat_template.cpp — the ChatTemplate API over jinja_parse / jinja_eval.
#include "tokenizer/chat_template.h"

#include <new>

#include <nlohmann/json.hpp>

#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_parse.h"
#include "util/json.h"
#include "util/strings.h"

namespace colibri::tokenizer {

struct ChatTemplate::Impl {
  jinja::Body body;
  ChatTemplateLimits limits;
  std::string name;
};

namespace {
constexpr std::string_view kDefaultName = "chat template";
}  // namespace

ChatTemplate::ChatTemplate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChatTemplate::~ChatTemplate() = default;

std::unique_ptr<ChatTemplate> ChatTemplate::parse(std::string_view source, Error *error) {
  return parse(source, ChatTemplateLimits{}, kDefaultName, error);
}

std::unique_ptr<ChatTemplate> ChatTemplate::parse(std::string_view source, const ChatTemplateLimits &limits,
                                                  std::string_view name, Error *error) {
  const std::string label = name.empty() ? std::string(kDefaultName) : std::string(name);
  try {
    auto impl = std::make_unique<Impl>();
    impl->limits = limits;
    impl->name = label;
    if (Error e = jinja::parse_template(source, limits, &impl->body)) {
      e.message = label + ": " + e.message;
      *error = std::move(e);
      return nullptr;
    }
    *error = Error();
    return std::unique_ptr<ChatTemplate>(new ChatTemplate(std::move(impl)));
  } catch (const std::bad_alloc &) {
    *error = make_error(ErrorKind::OutOfMemory, label + ": out of memory while parsing");
  }
  return nullptr;
}

namespace {

// Objects keep the order of their keys in the text, as a Python dict from json.loads does:
// tojson prints them in that order (a tools list reaches the prompt as the caller wrote it).
jinja::Value from_json(const nlohmann::ordered_json &j) {
  using jinja::Value;
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::from_bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return Value::from_int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float: return Value::from_float(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::from_string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      jinja::ListItems items;
      for (const auto &item : j) items.push_back(from_json(item));
      return Value::from_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      jinja::DictItems items;
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(it.key(), from_json(it.value()));
      return Value::from_dict(std::move(items));
    }
    default: return Value::none();
  }
}

}  // namespace

Error ChatTemplate::render(const std::vector<ChatMessage> &messages, bool add_generation_prompt,
                           std::string_view bos_token, std::string_view eos_token, std::string *out) const {
  return render(messages, add_generation_prompt, bos_token, eos_token, {}, out);
}

Error ChatTemplate::render(const std::vector<ChatMessage> &messages, bool add_generation_prompt,
                           std::string_view bos_token, std::string_view eos_token,
                           const std::vector<ChatVariable> &extra_variables, std::string *out) const {
  out->clear();
  try {
    using jinja::Value;
    jinja::ListItems message_values;
    for (const ChatMessage &m : messages) {
      message_values.push_back(
          Value::from_dict({{"role", Value::from_string(m.role)}, {"content", Value::from_string(m.content)}}));
    }
    std::vector<std::pair<std::string, Value>> globals = {
        {"messages", Value::from_list(std::move(message_values))},
        {"add_generation_prompt", Value::from_bool(add_generation_prompt)},
        {"tools", Value::none()},
        {"documents", Value::none()},
    };
    if (!bos_token.empty()) globals.emplace_back("bos_token", Value::from_string(std::string(bos_token)));
    if (!eos_token.empty()) globals.emplace_back("eos_token", Value::from_string(std::string(eos_token)));
    for (const ChatVariable &variable : extra_variables) {
      // Values nest no deeper than the renderer allows (from_json recurses once per level).
      nlohmann::ordered_json parsed;
      const std::string what = impl_->name + ": variable \"" + variable.name + "\"";
      if (Error e = util::parse_json(variable.json_value, what, &parsed, impl_->limits.max_nesting_depth))
        return make_error(ErrorKind::InvalidArgument, e.message);
      globals.emplace_back(variable.name, from_json(parsed));
    }
    return jinja::render(impl_->body, globals, impl_->limits, impl_->name, out);
  } catch (const std::bad_alloc &) {
    out->clear();
    return make_error(ErrorKind::OutOfMemory, impl_->name + ": out of memory while rendering");
  }
}

}  // namespace colibri::tokenizer

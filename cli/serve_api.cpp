// cli/serve_api.cpp — parsing and checking OpenAI request bodies (serve_api.h).
#include "serve_api.h"

#include <colibri.h>

#include <cmath>
#include <cstdio>
#include <limits>

namespace colibri_cli::serve {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string &param, const std::string &message) {
  ApiError e;
  e.status = 400;
  e.param = param;
  e.message = message;
  throw e;
}

[[noreturn]] void unsupported(const std::string &param, const std::string &message) {
  ApiError e;
  e.status = 400;
  e.param = param;
  e.message = message;
  e.code = "unsupported";
  throw e;
}

const char *type_name(const json &v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    default: return "an unknown value";
  }
}

// The field `name` of `body`, or nullptr when it is absent or null (clients send null for "not set").
const json *field(const json &body, const char *name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string number_text(double v) {
  char text[64];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

std::optional<double> real_field(const json &body, const char *name, double min, double max, bool min_open = false) {
  const json *v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad(name, std::string("'") + name + "' must be a number, got " + type_name(*v));
  const double x = v->get<double>();
  const bool low = min_open ? !(x > min) : !(x >= min);
  if (!std::isfinite(x) || low || x > max)
    bad(name, std::string("'") + name + "' must be " + (min_open ? "greater than " : "at least ") + number_text(min) +
                  " and at most " + number_text(max) + ", got " + number_text(x));
  return x;
}

std::optional<int64_t> integer_field(const json &body, const std::string &name, int64_t min, int64_t max) {
  const json *v = field(body, name.c_str());
  if (!v) return std::nullopt;
  if (!v->is_number_integer())
    bad(name, "'" + name + "' must be an integer, got " + (v->is_number() ? number_text(v->get<double>()) : type_name(*v)));
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(max) || (min > 0 && u < static_cast<uint64_t>(min)))
      bad(name, "'" + name + "' must be from " + std::to_string(min) + " to " + std::to_string(max) + ", got " + std::to_string(u));
    return static_cast<int64_t>(u);
  }
  const int64_t x = v->get<int64_t>();
  if (x < min || x > max)
    bad(name, "'" + name + "' must be from " + std::to_string(min) + " to " + std::to_string(max) + ", got " + std::to_string(x));
  return x;
}

std::optional<bool> bool_field(const json &body, const char *name) {
  const json *v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad(name, std::string("'") + name + "' must be a boolean, got " + type_name(*v));
  return v->get<bool>();
}

std::optional<std::string> string_field(const json &body, const char *name) {
  const json *v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad(name, std::string("'") + name + "' must be a string, got " + type_name(*v));
  return v->get<std::string>();
}

std::vector<int32_t> token_list(const json &list, const std::string &param, const RequestLimits &limits) {
  if (list.size() > limits.max_prompt_tokens)
    bad(param, "the token prompt has " + std::to_string(list.size()) + " ids, more than the limit of " +
                   std::to_string(limits.max_prompt_tokens));
  std::vector<int32_t> tokens;
  tokens.reserve(list.size());
  const int64_t top = limits.vocab_size > 0 ? limits.vocab_size - 1 : std::numeric_limits<int32_t>::max();
  for (size_t i = 0; i < list.size(); ++i) {
    const json &t = list[i];
    const std::string where = param + "[" + std::to_string(i) + "]";
    if (!t.is_number_integer()) bad(where, "'" + where + "' must be a token id (an integer), got " + type_name(t));
    const int64_t id = t.is_number_unsigned() ? (t.get<uint64_t>() > static_cast<uint64_t>(top) ? top + 1 : t.get<int64_t>())
                                              : t.get<int64_t>();
    if (id < 0 || id > top)
      bad(where, "'" + where + "' is not a token id of this model (0 to " + std::to_string(top) + "): " + t.dump());
    tokens.push_back(static_cast<int32_t>(id));
  }
  return tokens;
}

void parse_prompt(const json &body, GenerationRequest &r, const RequestLimits &limits) {
  const json *p = field(body, "prompt");
  if (!p) bad("prompt", "'prompt' is required (a string, or a list of token ids)");
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
    return;
  }
  if (!p->is_array()) bad("prompt", std::string("'prompt' must be a string or a list of token ids, got ") + type_name(*p));
  if (p->empty()) bad("prompt", "'prompt' is an empty list");
  const json &first = (*p)[0];
  if (first.is_string() || first.is_array()) {
    // A batch of prompts: OpenAI answers one choice per prompt; this server runs one per request.
    if (p->size() != 1)
      unsupported("prompt", "'prompt' holds " + std::to_string(p->size()) +
                                " prompts; this server answers one prompt per request (send them as separate requests: "
                                "they are batched together by the engine)");
    if (first.is_string()) {
      r.prompt_text = first.get<std::string>();
      return;
    }
    r.prompt_tokens = token_list(first, "prompt[0]", limits);
    r.prompt_is_tokens = true;
    return;
  }
  r.prompt_tokens = token_list(*p, "prompt", limits);
  r.prompt_is_tokens = true;
}

void parse_messages(const json &body, GenerationRequest &r, const RequestLimits &limits) {
  const json *m = field(body, "messages");
  if (!m) bad("messages", "'messages' is required (a list of {\"role\", \"content\"} objects)");
  if (!m->is_array()) bad("messages", std::string("'messages' must be a list, got ") + type_name(*m));
  if (m->empty()) bad("messages", "'messages' is an empty list");
  if (m->size() > limits.max_messages)
    bad("messages", "'messages' has " + std::to_string(m->size()) + " entries, more than the limit of " +
                        std::to_string(limits.max_messages));
  for (size_t i = 0; i < m->size(); ++i) {
    const json &msg = (*m)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) bad(where, "'" + where + "' must be an object, got " + type_name(msg));
    ChatMessage out;
    const json *role = field(msg, "role");
    if (!role || !role->is_string() || role->get_ref<const std::string &>().empty())
      bad(where + ".role", "'" + where + ".role' must be a non-empty string" + (role ? std::string(", got ") + type_name(*role) : ""));
    out.role = role->get<std::string>();
    const json *content = field(msg, "content");
    if (content && content->is_string()) {
      out.content = content->get<std::string>();
    } else if (content && content->is_array()) {
      // Content parts: the text parts, concatenated (as transformers' templates see a string).
      for (size_t j = 0; j < content->size(); ++j) {
        const json &part = (*content)[j];
        const std::string pw = where + ".content[" + std::to_string(j) + "]";
        if (!part.is_object()) bad(pw, "'" + pw + "' must be an object, got " + type_name(part));
        const json *type = field(part, "type");
        if (!type || !type->is_string()) bad(pw + ".type", "'" + pw + ".type' must be a string");
        if (type->get_ref<const std::string &>() != "text")
          unsupported(pw + ".type", "content parts of type '" + type->get<std::string>() +
                                        "' are not supported: this server takes text parts only");
        const json *text = field(part, "text");
        if (!text || !text->is_string()) bad(pw + ".text", "'" + pw + ".text' must be a string");
        out.content += text->get_ref<const std::string &>();
      }
    } else if (content) {
      bad(where + ".content", "'" + where + ".content' must be a string or a list of content parts, got " + type_name(*content));
    }
    if (field(msg, "tool_calls")) unsupported(where + ".tool_calls", "tool calls are not supported by this server");
    r.messages.push_back(std::move(out));
  }
}

void parse_stop(const json &body, GenerationRequest &r, const RequestLimits &limits) {
  const json *s = field(body, "stop");
  if (!s) return;
  auto add = [&](const json &v, const std::string &where) {
    if (!v.is_string()) bad(where, "'" + where + "' must be a string, got " + type_name(v));
    const std::string &text = v.get_ref<const std::string &>();
    if (text.empty()) bad(where, "'" + where + "' is an empty string");
    if (text.size() > limits.max_stop_bytes)
      bad(where, "'" + where + "' is " + std::to_string(text.size()) + " bytes, more than the limit of " +
                     std::to_string(limits.max_stop_bytes));
    r.stop.push_back(text);
  };
  if (s->is_string()) {
    add(*s, "stop");
    return;
  }
  if (!s->is_array()) bad("stop", std::string("'stop' must be a string or a list of strings, got ") + type_name(*s));
  if (s->size() > limits.max_stop_strings)
    bad("stop", "'stop' has " + std::to_string(s->size()) + " strings, more than the limit of " +
                    std::to_string(limits.max_stop_strings));
  for (size_t i = 0; i < s->size(); ++i) add((*s)[i], "stop[" + std::to_string(i) + "]");
}

}  // namespace

json error_body(const ApiError &error) {
  json e = {{"message", error.message}, {"type", error.type}, {"param", nullptr}, {"code", nullptr}};
  if (!error.param.empty()) e["param"] = error.param;
  if (!error.code.empty()) e["code"] = error.code;
  return json{{"error", std::move(e)}};
}

size_t json_depth(std::string_view text, size_t limit) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

GenerationRequest parse_request(std::string_view body_text, Endpoint endpoint, const RequestLimits &limits) {
  if (json_depth(body_text, limits.max_depth) > limits.max_depth)
    bad("", "the request body nests arrays/objects deeper than the limit of " + std::to_string(limits.max_depth) + " levels");
  json body;
  try {
    body = json::parse(body_text);
  } catch (const json::exception &e) {
    bad("", std::string("the request body is not valid JSON: ") + e.what());
  }
  if (!body.is_object()) bad("", std::string("the request body must be a JSON object, got ") + type_name(body));

  GenerationRequest r;
  r.endpoint = endpoint;
  if (const json *model = field(body, "model"); model && !model->is_string())
    bad("model", std::string("'model' must be a string, got ") + type_name(*model));
  if (endpoint == Endpoint::Completions) {
    parse_prompt(body, r, limits);
    r.echo = bool_field(body, "echo").value_or(false);
    if (auto suffix = string_field(body, "suffix"); suffix && !suffix->empty())
      unsupported("suffix", "'suffix' (insertion) is not supported by this server");
    if (auto best_of = integer_field(body, "best_of", 1, 1 << 20); best_of && *best_of != 1)
      unsupported("best_of", "'best_of' must be 1: this server returns one sampled completion per request");
    if (auto lp = integer_field(body, "logprobs", 0, limits.max_top_logprobs)) {
      r.logprobs = true;
      r.top_logprobs = static_cast<uint32_t>(*lp);
    }
  } else {
    parse_messages(body, r, limits);
    r.logprobs = bool_field(body, "logprobs").value_or(false);
    if (auto top = integer_field(body, "top_logprobs", 0, limits.max_top_logprobs)) {
      if (!r.logprobs && *top > 0) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
      r.top_logprobs = static_cast<uint32_t>(*top);
    }
    if (const json *tools = field(body, "tools"); tools && !(tools->is_array() && tools->empty()))
      unsupported("tools", "tool calling is not supported by this server");
    if (const json *functions = field(body, "functions"); functions && !(functions->is_array() && functions->empty()))
      unsupported("functions", "function calling is not supported by this server");
    if (const json *format = field(body, "response_format")) {
      const json *type = format->is_object() ? field(*format, "type") : nullptr;
      if (!type || !type->is_string() || type->get_ref<const std::string &>() != "text")
        unsupported("response_format", "'response_format' other than {\"type\": \"text\"} (JSON mode, schemas) is not supported");
    }
  }

  constexpr int64_t kMaxTokens = 16777216;  // the engine's largest context
  std::optional<int64_t> max_tokens = integer_field(body, "max_tokens", 1, kMaxTokens);
  if (endpoint == Endpoint::ChatCompletions) {
    // The newer name wins when a client sends both.
    if (auto mct = integer_field(body, "max_completion_tokens", 1, kMaxTokens)) max_tokens = mct;
  }
  if (max_tokens) r.max_tokens = static_cast<uint32_t>(*max_tokens);

  if (auto v = real_field(body, "temperature", 0, 2)) r.temperature = static_cast<float>(*v);
  if (auto v = real_field(body, "top_p", 0, 1, /*min_open=*/true)) {
    r.top_p = static_cast<float>(*v);
    if (!(r.top_p > 0.0f)) bad("top_p", "'top_p' must be greater than 0 and at most 1, got " + number_text(*v));
  }
  if (auto v = integer_field(body, "top_k", 0, 1 << 30)) r.top_k = static_cast<uint32_t>(*v);
  if (auto v = real_field(body, "min_p", 0, 1)) r.min_p = static_cast<float>(*v);
  if (auto v = real_field(body, "presence_penalty", -2, 2)) r.presence_penalty = static_cast<float>(*v);
  if (auto v = real_field(body, "frequency_penalty", -2, 2)) r.frequency_penalty = static_cast<float>(*v);
  if (auto v = real_field(body, "repetition_penalty", 0, 10, /*min_open=*/true)) {
    r.repetition_penalty = static_cast<float>(*v);
    if (!(r.repetition_penalty > 0.0f)) bad("repetition_penalty", "'repetition_penalty' must be greater than 0");
  }
  if (auto v = integer_field(body, "seed", 0, std::numeric_limits<int64_t>::max())) r.seed = static_cast<uint64_t>(*v);
  parse_stop(body, r, limits);
  if (auto n = integer_field(body, "n", 1, 1 << 20); n && *n != 1)
    unsupported("n", "'n' must be 1: this server returns one choice per request");
  r.stream = bool_field(body, "stream").value_or(false);
  if (const json *so = field(body, "stream_options")) {
    if (!so->is_object()) bad("stream_options", std::string("'stream_options' must be an object, got ") + type_name(*so));
    if (const json *iu = field(*so, "include_usage")) {
      if (!iu->is_boolean()) bad("stream_options.include_usage", "'stream_options.include_usage' must be a boolean");
      r.include_usage = iu->get<bool>();
    }
  }
  r.ignore_eos = bool_field(body, "ignore_eos").value_or(false);
  if (auto user = string_field(body, "user")) r.user = *user;
  return r;
}

const char *finish_reason_name(uint32_t finish_reason) {
  switch (finish_reason) {
    case COLIBRI_FINISH_LENGTH: return "length";
    case COLIBRI_FINISH_EOS:
    case COLIBRI_FINISH_STOP: return "stop";
    case COLIBRI_FINISH_DEADLINE: return "timeout";
    case COLIBRI_FINISH_CANCELLED: return "cancelled";
    case COLIBRI_FINISH_ERROR: return "error";
    default: return "none";
  }
}

std::string response_id(Endpoint endpoint, uint64_t serial, uint64_t random) {
  char text[48];
  std::snprintf(text, sizeof text, "%s%08llx%016llx", endpoint == Endpoint::Completions ? "cmpl-" : "chatcmpl-",
                static_cast<unsigned long long>(serial & 0xffffffffu), static_cast<unsigned long long>(random));
  return text;
}

}  // namespace colibri_cli::serve

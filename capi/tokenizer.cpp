// capi/tokenizer.cpp — colibri_tokenize / _detokenize / _token_text / _chat_render: the
// model's own tokenizer (core/tokenizer, loaded at open) and chat template.
#include "capi/internal.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

using namespace colibri;

namespace {

constexpr size_t kChatOptionsAbi1 = sizeof(colibri_chat_options);

colibri_chat_options default_chat_options() {
  colibri_chat_options o{};
  o.struct_size = sizeof o;
  o.add_generation_prompt = 1;
  o.template_text = nullptr;
  o.variable_names = nullptr;
  o.variable_values = nullptr;
  o.variable_count = 0;
  return o;
}

}  // namespace

namespace colibri::capi {

void load_tokenizer(ModelState &state) {
  const model::TokenizerInfo &info = state.model->tokenizer();
  if (info.chat_template.empty())
    state.chat_template_error = make_error(ErrorKind::Unsupported, "the image '" + state.path +
                                                                       "' carries no chat template; give one in "
                                                                       "colibri_chat_options.template_text");
  else
    // A template that does not parse (or passes a ChatTemplateLimits bound) leaves the model
    // usable: open succeeds, plain completion works, colibri_chat_render returns this error.
    state.chat_template = tokenizer::ChatTemplate::parse(info.chat_template, tokenizer::ChatTemplateLimits{},
                                                         "chat template of '" + state.path + "'",
                                                         &state.chat_template_error);
  if (info.json.empty()) {
    state.tokenizer_error = make_error(ErrorKind::Unsupported, "the image '" + state.path + "' carries no tokenizer.json; "
                                                               "token ids can still be used directly");
    return;
  }
  state.tokenizer = tokenizer::Tokenizer::from_json(info.json, &state.tokenizer_error);
}

int32_t require_tokenizer(const ModelState &state, const tokenizer::Tokenizer **out) {
  if (!state.tokenizer) {
    return fail(COLIBRI_ERROR_UNSUPPORTED, "this model's tokenizer cannot be used: " + state.tokenizer_error.message);
  }
  *out = state.tokenizer.get();
  return COLIBRI_OK;
}

int32_t render_chat(const ModelState &state, const colibri_chat_message *messages, size_t message_count,
                    const colibri_chat_options *options, std::string *out) {
  COLIBRI_REQUIRE_ARG(messages || message_count == 0, "messages is NULL but message_count is not 0");
  colibri_chat_options o = default_chat_options();
  if (int32_t s = read_options(options, &o, kChatOptionsAbi1, "colibri_chat_options")) return s;
  COLIBRI_REQUIRE_ARG(o.add_generation_prompt <= 1, "colibri_chat_options.add_generation_prompt must be 0 or 1");
  for (size_t i = 0; i < message_count; ++i)
    COLIBRI_REQUIRE_ARG(messages[i].role && messages[i].content,
                        "message " + std::to_string(i) + " has a NULL role or content");
  COLIBRI_REQUIRE_ARG((o.variable_names && o.variable_values) || o.variable_count == 0,
                      "colibri_chat_options: variable_names and variable_values must be given with variable_count");
  std::vector<tokenizer::ChatVariable> variables;
  for (size_t i = 0; i < o.variable_count; ++i) {
    COLIBRI_REQUIRE_ARG(o.variable_names[i] && o.variable_values[i],
                        "colibri_chat_options: variable " + std::to_string(i) + " has a NULL name or value");
    variables.push_back({o.variable_names[i], o.variable_values[i]});
  }
  const tokenizer::ChatTemplate *chat = state.chat_template.get();
  std::unique_ptr<tokenizer::ChatTemplate> custom;
  if (o.template_text) {
    Error error;
    custom = tokenizer::ChatTemplate::parse(o.template_text, &error);
    if (!custom) return fail(error);
    chat = custom.get();
  } else if (!chat) {
    return fail(COLIBRI_ERROR_UNSUPPORTED,
                "the model's chat template cannot be used (plain completion still works): " +
                    state.chat_template_error.message);
  }
  std::vector<tokenizer::ChatMessage> conversation;
  conversation.reserve(message_count);
  for (size_t i = 0; i < message_count; ++i) conversation.push_back({messages[i].role, messages[i].content});
  const model::TokenizerInfo &info = state.model->tokenizer();
  if (Error e = chat->render(conversation, o.add_generation_prompt != 0, info.bos_token, info.eos_token, variables, out))
    return fail(e);
  return COLIBRI_OK;
}

int32_t tokenize_chat(const ModelState &state, const std::string &text, std::vector<int32_t> *ids) {
  const tokenizer::Tokenizer *tok = nullptr;
  if (int32_t s = require_tokenizer(state, &tok)) return s;
  tokenizer::EncodeOptions eo;
  eo.add_special_tokens = false;  // the template wrote the BOS text it wants
  eo.parse_special = true;        // its special-token text becomes the special tokens
  if (Error e = tok->encode(text, eo, ids)) return fail(e);
  return COLIBRI_OK;
}

}  // namespace colibri::capi

extern "C" {

COLIBRI_API int32_t colibri_tokenize(const colibri_model *model, const char *text, size_t text_size, uint32_t flags,
                                     int32_t *tokens, size_t capacity, size_t *count) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_HANDLE(model, "model");
    COLIBRI_REQUIRE_ARG(text || text_size == 0, "text is NULL but text_size is not 0");
    COLIBRI_REQUIRE_ARG((flags & ~(COLIBRI_TOKENIZE_ADD_SPECIAL | COLIBRI_TOKENIZE_PARSE_SPECIAL)) == 0,
                        "unknown colibri_tokenize flags " + std::to_string(flags));
    const tokenizer::Tokenizer *tok = nullptr;
    if (int32_t s = capi::require_tokenizer(*capi::impl(model)->state, &tok)) return s;
    tokenizer::EncodeOptions eo;
    eo.add_special_tokens = (flags & COLIBRI_TOKENIZE_ADD_SPECIAL) != 0;
    eo.parse_special = (flags & COLIBRI_TOKENIZE_PARSE_SPECIAL) != 0;
    std::vector<int32_t> ids;
    if (Error e = tok->encode(std::string_view(text ? text : "", text_size), eo, &ids)) return capi::fail(e);
    return capi::copy_tokens(ids.data(), ids.size(), tokens, capacity, count);
  });
}

COLIBRI_API int32_t colibri_detokenize(const colibri_model *model, const int32_t *tokens, size_t token_count,
                                       uint32_t flags, char *text, size_t capacity, size_t *text_size) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_HANDLE(model, "model");
    COLIBRI_REQUIRE_ARG(tokens || token_count == 0, "tokens is NULL but token_count is not 0");
    COLIBRI_REQUIRE_ARG((flags & ~COLIBRI_DETOKENIZE_SKIP_SPECIAL) == 0, "unknown colibri_detokenize flags " + std::to_string(flags));
    const capi::ModelState &state = *capi::impl(model)->state;
    const tokenizer::Tokenizer *tok = nullptr;
    if (int32_t s = capi::require_tokenizer(state, &tok)) return s;
    // An id of the model that the tokenizer lacks (the padding past the tokenizer's vocabulary
    // that Qwen and OLMoE checkpoints have) decodes to no text, as in Hugging Face; an id that
    // is not the model's at all is the caller's mistake.
    const size_t model_vocab = state.model->config().vocab_size;
    for (size_t i = 0; i < token_count; ++i)
      COLIBRI_REQUIRE_ARG(tokens[i] >= 0 && static_cast<size_t>(tokens[i]) < model_vocab,
                          "token " + std::to_string(tokens[i]) + " (position " + std::to_string(i) +
                              ") is outside the model's vocabulary (0.." + std::to_string(model_vocab - 1) + ")");
    std::string out;
    if (Error e = tok->decode(tokens, token_count, (flags & COLIBRI_DETOKENIZE_SKIP_SPECIAL) != 0, &out)) return capi::fail(e);
    return capi::copy_text(out, text, capacity, text_size);
  });
}

COLIBRI_API int32_t colibri_token_text(const colibri_model *model, int32_t token, char *text, size_t capacity,
                                       size_t *text_size) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_HANDLE(model, "model");
    const tokenizer::Tokenizer *tok = nullptr;
    if (int32_t s = capi::require_tokenizer(*capi::impl(model)->state, &tok)) return s;
    COLIBRI_REQUIRE_ARG(token >= 0 && static_cast<size_t>(token) < tok->vocab_size(),
                        "token " + std::to_string(token) + " is outside the vocabulary (0.." +
                            std::to_string(tok->vocab_size() - 1) + ")");
    std::string_view piece = tok->token_text(token);
    COLIBRI_REQUIRE_ARG(!piece.empty(), "token " + std::to_string(token) + " has no vocabulary entry");
    return capi::copy_text(std::string(piece), text, capacity, text_size);
  });
}

COLIBRI_API int32_t colibri_chat_options_init(colibri_chat_options *options, size_t struct_size) {
  return capi::options_init(__func__, options, struct_size, default_chat_options, kChatOptionsAbi1, "colibri_chat_options");
}

COLIBRI_API int32_t colibri_chat_render(const colibri_model *model, const colibri_chat_message *messages,
                                        size_t message_count, const colibri_chat_options *options, char *text,
                                        size_t capacity, size_t *text_size) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_HANDLE(model, "model");
    std::string out;
    if (int32_t s = capi::render_chat(*capi::impl(model)->state, messages, message_count, options, &out)) return s;
    return capi::copy_text(out, text, capacity, text_size);
  });
}

}  // extern "C"

// modeltool/convert/tokenizer_metadata.cpp — tokenizer files -> the "tokenizer" metadata.
#include "modeltool/convert/tokenizer_metadata.h"

#include <optional>
#include <string>
#include <vector>

#include "util/json.h"
#include "util/strings.h"

namespace colibri::modeltool::convert {

using util::strprintf;
using nlohmann::json;

namespace {

std::optional<int64_t> as_id(const json &v) {
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return v.get<int64_t>();
  return std::nullopt;
}

// Token ids held at `key` of `object`: an int, or a list of ints (generation_config.json
// eos_token_id may be either). Empty when absent or null.
std::vector<int64_t> ids_at(const json &object, const char *key) {
  std::vector<int64_t> ids;
  auto it = object.find(key);
  if (it == object.end()) return ids;
  if (auto id = as_id(*it)) ids.push_back(*id);
  if (it->is_array())
    for (const json &v : *it)
      if (auto id = as_id(v)) ids.push_back(*id);
  return ids;
}

// A special token as tokenizer_config.json writes it: "</s>" or {"content": "</s>", ...}.
std::optional<std::string> token_at(const json &object, const char *key) {
  auto it = object.find(key);
  if (it == object.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  return std::nullopt;
}

// Token <-> id through tokenizer.json: added_tokens first, then the model vocabulary
// (an object for BPE/WordPiece/WordLevel, a list of [piece, score] for Unigram).
class Vocabulary {
 public:
  explicit Vocabulary(const json &tokenizer) : tokenizer_(tokenizer) {}

  std::optional<int64_t> id_of(const std::string &token) const {
    for (const json &added : list("added_tokens"))
      if (added.is_object() && added.value("content", json()) == token) return as_id(added.value("id", json()));
    const json &vocab = model_vocab();
    if (vocab.is_object()) {
      auto it = vocab.find(token);
      if (it != vocab.end()) return as_id(*it);
    } else if (vocab.is_array()) {
      for (size_t i = 0; i < vocab.size(); ++i)
        if (vocab[i].is_array() && !vocab[i].empty() && vocab[i][0] == token) return static_cast<int64_t>(i);
    }
    return std::nullopt;
  }

  std::optional<std::string> token_of(int64_t id) const {
    for (const json &added : list("added_tokens"))
      if (added.is_object() && as_id(added.value("id", json())) == id && added.value("content", json()).is_string())
        return added["content"].get<std::string>();
    const json &vocab = model_vocab();
    if (vocab.is_object()) {
      for (const auto &[token, value] : vocab.items())
        if (as_id(value) == id) return token;
    } else if (vocab.is_array() && id < static_cast<int64_t>(vocab.size())) {
      const json &entry = vocab[static_cast<size_t>(id)];
      if (entry.is_array() && !entry.empty() && entry[0].is_string()) return entry[0].get<std::string>();
    }
    return std::nullopt;
  }

 private:
  const json &list(const char *key) const {
    static const json kEmpty = json::array();
    auto it = tokenizer_.find(key);
    return it != tokenizer_.end() && it->is_array() ? *it : kEmpty;
  }
  const json &model_vocab() const {
    static const json kNull;
    auto model = tokenizer_.find("model");
    if (model == tokenizer_.end() || !model->is_object()) return kNull;
    auto vocab = model->find("vocab");
    return vocab == model->end() ? kNull : *vocab;
  }
  const json &tokenizer_;
};

Error read_chat_template(SourceFiles *files, const json &tokenizer_config, json *out) {
  *out = nullptr;
  auto it = tokenizer_config.find("chat_template");
  if (it != tokenizer_config.end() && !it->is_null()) {
    if (it->is_string()) *out = *it;
    else if (it->is_array())  // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
      for (const json &named : *it)
        if (named.is_object() && named.value("name", json()) == "default" && named.value("template", json()).is_string())
          *out = named["template"];
    return {};
  }
  // transformers >= 4.43 may save the template beside tokenizer_config.json instead.
  std::string text;
  bool present = false;
  if (Error e = files->read_text("chat_template.jinja", &text, &present)) return e;
  if (present) {
    *out = text;
    return {};
  }
  json wrapper;
  if (Error e = files->read_json("chat_template.json", &wrapper, &present)) return e;
  if (present && wrapper.is_object() && wrapper.value("chat_template", json()).is_string())
    *out = wrapper["chat_template"];
  return {};
}

// First non-empty of: generation_config ids, the tokenizer_config token resolved, config.json ids.
std::vector<int64_t> special_ids(const char *id_key, const char *token_key, const json &generation_config,
                                 const json &tokenizer_config, const json &config, const Vocabulary &vocabulary) {
  std::vector<int64_t> ids = ids_at(generation_config, id_key);
  if (ids.empty())
    if (auto token = token_at(tokenizer_config, token_key))
      if (auto id = vocabulary.id_of(*token)) ids.push_back(*id);
  if (ids.empty()) ids = ids_at(config, id_key);
  return ids;
}

json first_or_null(const std::vector<int64_t> &ids) { return ids.empty() ? json(nullptr) : json(ids.front()); }

json token_string(const json &tokenizer_config, const char *key, const std::vector<int64_t> &ids,
                  const Vocabulary &vocabulary) {
  if (auto token = token_at(tokenizer_config, key)) return *token;
  if (!ids.empty())
    if (auto token = vocabulary.token_of(ids.front())) return *token;
  return nullptr;
}

bool flag(const json &object, const char *key) {
  auto it = object.find(key);
  return it != object.end() && it->is_boolean() && it->get<bool>();
}

}  // namespace

Error build_tokenizer_metadata(SourceFiles *files, const json &config, json *out) {
  std::string tokenizer_text;
  bool present = false;
  if (Error e = files->read_text("tokenizer.json", &tokenizer_text, &present)) return e;
  if (!present)
    return make_error(ErrorKind::Io,
                      strprintf("'%s' is missing: the image carries the tokenizer, so copy tokenizer.json from the "
                                "model repository (a model with only a slow tokenizer can write one with "
                                "transformers: AutoTokenizer.from_pretrained(dir).save_pretrained(dir))",
                                files->path("tokenizer.json").c_str()));
  json tokenizer;
  if (Error e = util::parse_json(tokenizer_text, strprintf("'%s'", files->path("tokenizer.json").c_str()), &tokenizer)) return e;
  if (!tokenizer.is_object())
    return make_error(ErrorKind::Corrupt, strprintf("'%s' is not a valid JSON object", files->path("tokenizer.json").c_str()));

  json tokenizer_config = json::object(), generation_config = json::object();
  if (Error e = files->read_json("tokenizer_config.json", &tokenizer_config, &present)) return e;
  if (!tokenizer_config.is_object()) tokenizer_config = json::object();
  if (Error e = files->read_json("generation_config.json", &generation_config, &present)) return e;
  if (!generation_config.is_object()) generation_config = json::object();

  json chat_template;
  if (Error e = read_chat_template(files, tokenizer_config, &chat_template)) return e;

  Vocabulary vocabulary(tokenizer);
  std::vector<int64_t> bos = special_ids("bos_token_id", "bos_token", generation_config, tokenizer_config, config, vocabulary);
  std::vector<int64_t> eos = special_ids("eos_token_id", "eos_token", generation_config, tokenizer_config, config, vocabulary);
  std::vector<int64_t> pad = special_ids("pad_token_id", "pad_token", generation_config, tokenizer_config, config, vocabulary);

  json result = json::object();
  result["json"] = std::move(tokenizer_text);
  result["chat_template"] = std::move(chat_template);
  result["bos_token_id"] = first_or_null(bos);
  result["eos_token_ids"] = eos;
  result["pad_token_id"] = first_or_null(pad);
  result["bos_token"] = token_string(tokenizer_config, "bos_token", bos, vocabulary);
  result["eos_token"] = token_string(tokenizer_config, "eos_token", eos, vocabulary);
  result["add_bos_token"] = flag(tokenizer_config, "add_bos_token");
  result["add_eos_token"] = flag(tokenizer_config, "add_eos_token");
  *out = std::move(result);
  return {};
}

}  // namespace colibri::modeltool::convert

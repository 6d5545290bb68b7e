// core/tokenizer/tokenizer_json.cpp — reads a tokenizer.json into the pipeline structs.
//
// The JSON layout is tokenizers' serde form (tokenizers/src/tokenizer/serialization.rs and
// each component's serialization). Every "type" we do not implement is refused with the
// list of those we do; every field that changes ids is read, and a value we cannot honour
// is refused rather than ignored.
//
// Hostile nesting: the text is scanned for its nesting depth before it is parsed (a file
// deeper than kMaxJsonDepth is refused without building anything), and Sequence components
// may nest kMaxSequenceNesting deep. The location an error names is kept as a stack of path
// segments and joined only when an error is reported, so walking N levels costs O(N).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"
#include "util/strings.h"

namespace colibri::tokenizer {

namespace {

using json = nlohmann::json;

// Deepest nesting of JSON objects and arrays accepted. Real tokenizer.json files nest about
// six deep; a normalizer Sequence costs two levels (the object and its array), so this leaves
// room for kMaxSequenceNesting.
constexpr size_t kMaxJsonDepth = 128;
// Deepest nesting of Sequence components (a Sequence inside a Sequence ...) in the
// normalizer, pre-tokenizer, post-processor and decoder. Real files use one or two.
constexpr size_t kMaxSequenceNesting = 32;
// An error naming a deeper path shows its first and last segments around an ellipsis.
constexpr size_t kPathHeadSegments = 6;
constexpr size_t kPathTailSegments = 2;

// Joins path segments ("normalizer", ".normalizers[0]", ...), eliding the middle of a long
// path: "normalizer.normalizers[0].normalizers[0].normalizers[0] ... .normalizers[0]".
std::string join_path(const std::vector<std::string> &segments) {
  std::string out;
  const size_t n = segments.size();
  for (size_t i = 0; i < n; ++i) {
    if (n > kPathHeadSegments + kPathTailSegments && i == kPathHeadSegments) {
      out += util::strprintf(" ...(%zu more)... ", n - kPathHeadSegments - kPathTailSegments);
      i = n - kPathTailSegments;
    }
    out += segments[i];
  }
  return out;
}

// Where a value sits in the file, as a stack of segments. str() builds the text; only error
// paths call it.
class JsonPath {
 public:
  explicit JsonPath(std::string root) { segments_.push_back(std::move(root)); }
  std::string str() const { return join_path(segments_); }
  std::string operator+(const char *suffix) const { return str() + suffix; }
  std::string operator+(const std::string &suffix) const { return str() + suffix; }

  // Appends a segment for the lifetime of the Step.
  class Step {
   public:
    Step(JsonPath &path, std::string segment) : path_(path) { path_.segments_.push_back(std::move(segment)); }
    ~Step() { path_.segments_.pop_back(); }
    Step(const Step &) = delete;
    Step &operator=(const Step &) = delete;

   private:
    JsonPath &path_;
  };

 private:
  std::vector<std::string> segments_;
};

std::string element(const char *array_key, size_t index) {
  return util::strprintf(".%s[%zu]", array_key, index);
}

// The GPT-2 split that ByteLevel applies when use_regex is true (byte_level.rs).
constexpr const char *kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

Error unsupported(const std::string &message) {
  return make_error(ErrorKind::Unsupported, "tokenizer.json: " + message);
}
Error corrupt(const std::string &message) { return make_error(ErrorKind::Corrupt, "tokenizer.json: " + message); }

std::string type_of(const json &j) {
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

Error refuse_type(const JsonPath &where, const std::string &type, const char *supported) {
  if (type.empty()) return corrupt(where + " has no \"type\"");
  return unsupported(util::strprintf("%s type \"%s\" is not supported (supported: %s)", where.str().c_str(),
                                     type.c_str(), supported));
}

// Checked before a Sequence reads its steps: a deeper one is refused, not recursed into.
Error check_nesting(const JsonPath &where, size_t depth) {
  if (depth < kMaxSequenceNesting) return {};
  return corrupt(util::strprintf("%s nests Sequence components more than %zu deep (the limit; real files nest one "
                                 "or two)",
                                 where.str().c_str(), kMaxSequenceNesting));
}

// Optional fields: absent or null gives the default; a wrong JSON type is an error.
Error read_bool(const json &j, const char *key, bool fallback, const JsonPath &where, bool *out) {
  *out = fallback;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_boolean()) return corrupt(where + "." + key + " must be true or false");
  *out = it->get<bool>();
  return {};
}

Error read_string(const json &j, const char *key, const JsonPath &where, std::string *out, bool *present) {
  out->clear();
  if (present) *present = false;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_string()) return corrupt(where + "." + key + " must be a string");
  *out = it->get<std::string>();
  if (present) *present = true;
  return {};
}

Error read_size(const json &j, const char *key, const JsonPath &where, size_t *out) {
  *out = 0;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_number_unsigned()) return corrupt(where + "." + key + " must be a non-negative integer");
  *out = it->get<size_t>();
  return {};
}

bool is_token_id(const json &value, int32_t *out) {
  if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > INT32_MAX) return false;
  *out = static_cast<int32_t>(value.get<int64_t>());
  return true;
}
Error not_a_token_id(const std::string &where) {
  return corrupt(where + " must be a token id (an integer in 0..2147483647)");
}
Error read_id(const json &value, const std::string &where, int32_t *out) {
  return is_token_id(value, out) ? Error() : not_a_token_id(where);
}

// A {"String": "..."} or {"Regex": "..."} pattern.
Error read_pattern(const json &j, const JsonPath &where, std::string *literal,
                   std::shared_ptr<const Regex> *regex) {
  auto it = j.find("pattern");
  if (it == j.end() || !it->is_object() || it->size() != 1)
    return corrupt(where + ".pattern must be {\"String\": ...} or {\"Regex\": ...}");
  if (auto s = it->find("String"); s != it->end() && s->is_string()) {
    *literal = s->get<std::string>();
    if (literal->empty()) return unsupported(where + ".pattern is an empty String, which matches nowhere useful");
    return {};
  }
  if (auto r = it->find("Regex"); r != it->end() && r->is_string()) {
    Error error;
    std::unique_ptr<Regex> compiled = Regex::compile(r->get<std::string>(), where + " pattern", &error);
    if (!compiled) return error;
    *regex = std::move(compiled);
    return {};
  }
  return corrupt(where + ".pattern must be {\"String\": ...} or {\"Regex\": ...}");
}

Error read_single_char(const json &j, const char *key, const JsonPath &where, std::string *text, uint32_t *cp) {
  bool present = false;
  if (Error e = read_string(j, key, where, text, &present)) return e;
  if (!present) return corrupt(where + "." + key + " is missing");
  size_t n = 0;
  if (text->empty() || !utf8_is_valid(*text) || (utf8_decode(*text, 0, &n), n) != text->size())
    return unsupported(where + "." + key + " must be exactly one character, got \"" + *text + "\"");
  *cp = utf8_decode(*text, 0, &n);
  return {};
}

Error read_prepend_scheme(const json &j, const JsonPath &where, PrependScheme *out) {
  std::string scheme;
  bool present = false;
  if (Error e = read_string(j, "prepend_scheme", where, &scheme, &present)) return e;
  if (!present) {
    // Files written before tokenizers 0.15 have add_prefix_space instead.
    bool add_prefix_space = true;
    if (Error e = read_bool(j, "add_prefix_space", true, where, &add_prefix_space)) return e;
    *out = add_prefix_space ? PrependScheme::Always : PrependScheme::Never;
    return {};
  }
  if (scheme == "first") *out = PrependScheme::First;
  else if (scheme == "always") *out = PrependScheme::Always;
  else if (scheme == "never") *out = PrependScheme::Never;
  else return unsupported(where + ".prepend_scheme \"" + scheme + "\" is not one of first, always, never");
  return {};
}

// ---- normalizer ----

Error read_normalizer(const json &j, JsonPath &where, size_t depth, Normalizer *out) {
  if (j.is_null()) return {};
  if (!j.is_object()) return corrupt(where + " must be an object or null");
  const std::string type = type_of(j);
  NormalizerStep step;
  if (type == "Sequence") {
    if (Error e = check_nesting(where, depth)) return e;
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) return corrupt(where + ".normalizers must be an array");
    for (size_t i = 0; i < it->size(); ++i) {
      const JsonPath::Step step_in(where, element("normalizers", i));
      if (Error e = read_normalizer((*it)[i], where, depth + 1, out)) return e;
    }
    return {};
  }
  if (type == "Prepend") {
    step.kind = NormalizerStep::Kind::Prepend;
    bool present = false;
    if (Error e = read_string(j, "prepend", where, &step.content, &present)) return e;
    if (!present) return corrupt(where + ".prepend is missing");
  } else if (type == "Replace") {
    if (Error e = read_pattern(j, where, &step.pattern, &step.regex)) return e;
    step.kind = step.regex ? NormalizerStep::Kind::ReplaceRegex : NormalizerStep::Kind::ReplaceString;
    if (Error e = read_string(j, "content", where, &step.content, nullptr)) return e;
  } else if (type == "NFC") {
    step.kind = NormalizerStep::Kind::Nfc;
  } else if (type == "NFD") {
    step.kind = NormalizerStep::Kind::Nfd;
  } else if (type == "NFKC") {
    step.kind = NormalizerStep::Kind::Nfkc;
  } else if (type == "NFKD") {
    step.kind = NormalizerStep::Kind::Nfkd;
  } else {
    return refuse_type(where, type, "Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD");
  }
  out->steps.push_back(std::move(step));
  return {};
}

// ---- pre-tokenizer ----

Error read_pre_tokenizer(const json &j, JsonPath &where, size_t depth, PreTokenizer *out) {
  if (j.is_null()) return {};
  if (!j.is_object()) return corrupt(where + " must be an object or null");
  const std::string type = type_of(j);
  PreTokenizerStep step;
  if (type == "Sequence") {
    if (Error e = check_nesting(where, depth)) return e;
    auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) return corrupt(where + ".pretokenizers must be an array");
    for (size_t i = 0; i < it->size(); ++i) {
      const JsonPath::Step step_in(where, element("pretokenizers", i));
      if (Error e = read_pre_tokenizer((*it)[i], where, depth + 1, out)) return e;
    }
    return {};
  }
  if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::Kind::ByteLevel;
    bool use_regex = true;
    if (Error e = read_bool(j, "add_prefix_space", true, where, &step.add_prefix_space)) return e;
    if (Error e = read_bool(j, "use_regex", true, where, &use_regex)) return e;
    if (use_regex) {
      Error error;
      std::unique_ptr<Regex> regex = Regex::compile(kGpt2Pattern, where + " ByteLevel split", &error);
      if (!regex) return error;
      step.regex = std::move(regex);
    }
  } else if (type == "Split") {
    step.kind = PreTokenizerStep::Kind::Split;
    if (Error e = read_pattern(j, where, &step.literal, &step.regex)) return e;
    std::string behavior;
    bool present = false;
    if (Error e = read_string(j, "behavior", where, &behavior, &present)) return e;
    if (behavior == "Removed") step.behavior = SplitBehavior::Removed;
    else if (behavior == "Isolated") step.behavior = SplitBehavior::Isolated;
    else if (behavior == "MergedWithPrevious") step.behavior = SplitBehavior::MergedWithPrevious;
    else if (behavior == "MergedWithNext") step.behavior = SplitBehavior::MergedWithNext;
    else if (behavior == "Contiguous") step.behavior = SplitBehavior::Contiguous;
    else return unsupported(where + ".behavior \"" + behavior + "\" is not a Split behaviour");
    if (Error e = read_bool(j, "invert", false, where, &step.invert)) return e;
  } else if (type == "Metaspace") {
    step.kind = PreTokenizerStep::Kind::Metaspace;
    uint32_t cp = 0;
    if (Error e = read_single_char(j, "replacement", where, &step.replacement, &cp)) return e;
    if (Error e = read_prepend_scheme(j, where, &step.prepend_scheme)) return e;
    if (Error e = read_bool(j, "split", true, where, &step.split)) return e;
  } else {
    return refuse_type(where, type, "Sequence, ByteLevel, Split, Metaspace");
  }
  out->steps.push_back(std::move(step));
  return {};
}

// ---- post-processor ----

Error read_cls_sep(const json &j, const char *key, const JsonPath &where, int32_t *id) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array() || it->size() != 2 || !(*it)[0].is_string())
    return corrupt(where + "." + key + " must be [\"token\", id]");
  return read_id((*it)[1], where + "." + key + "[1]", id);
}

Error read_post_processor(const json &j, JsonPath &where, size_t depth, PostProcessor *out) {
  if (j.is_null()) return {};
  if (!j.is_object()) return corrupt(where + " must be an object or null");
  const std::string type = type_of(j);
  PostProcessorStep step;
  if (type == "Sequence") {
    if (Error e = check_nesting(where, depth)) return e;
    auto it = j.find("processors");
    if (it == j.end() || !it->is_array()) return corrupt(where + ".processors must be an array");
    for (size_t i = 0; i < it->size(); ++i) {
      const JsonPath::Step step_in(where, element("processors", i));
      if (Error e = read_post_processor((*it)[i], where, depth + 1, out)) return e;
    }
    return {};
  }
  if (type == "ByteLevel") {
    step.kind = PostProcessorStep::Kind::ByteLevel;
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    step.kind = PostProcessorStep::Kind::ClsSep;
    if (Error e = read_cls_sep(j, "cls", where, &step.cls_id)) return e;
    if (Error e = read_cls_sep(j, "sep", where, &step.sep_id)) return e;
  } else if (type == "TemplateProcessing") {
    step.kind = PostProcessorStep::Kind::Template;
    auto single = j.find("single");
    auto specials = j.find("special_tokens");
    if (single == j.end() || !single->is_array()) return corrupt(where + ".single must be an array");
    for (size_t i = 0; i < single->size(); ++i) {
      const json &item = (*single)[i];
      auto item_where = [&] { return where + element("single", i); };
      PostProcessorStep::Item parsed;
      if (auto seq = item.find("Sequence"); item.is_object() && seq != item.end()) {
        auto id = seq->find("id");
        if (id == seq->end() || !id->is_string() || id->get<std::string>() != "A")
          return corrupt(item_where() + " refers to a sequence other than \"A\"");
        parsed.is_sequence = true;
      } else if (auto special = item.find("SpecialToken"); item.is_object() && special != item.end()) {
        auto name = special->find("id");
        if (name == special->end() || !name->is_string()) return corrupt(item_where() + ".SpecialToken.id must be a string");
        if (specials == j.end() || !specials->is_object() || !specials->contains(name->get<std::string>()))
          return corrupt(item_where() + " names \"" + name->get<std::string>() + "\", which special_tokens lacks");
        const json &entry = (*specials)[name->get<std::string>()];
        auto ids = entry.find("ids");
        if (ids == entry.end() || !ids->is_array())
          return corrupt(where + ".special_tokens[\"" + name->get<std::string>() + "\"].ids must be an array");
        for (const json &id : *ids) {
          int32_t value = -1;
          if (!is_token_id(id, &value)) return not_a_token_id(where + ".special_tokens ids");
          parsed.ids.push_back(value);
        }
      } else {
        return corrupt(item_where() + " must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
      step.single.push_back(std::move(parsed));
    }
  } else {
    return refuse_type(where, type, "Sequence, TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing");
  }
  out->steps.push_back(std::move(step));
  return {};
}

// ---- decoder ----

Error read_decoder(const json &j, JsonPath &where, size_t depth, Decoder *out) {
  if (j.is_null()) return {};
  if (!j.is_object()) return corrupt(where + " must be an object or null");
  out->present = true;
  const std::string type = type_of(j);
  DecoderStep step;
  if (type == "Sequence") {
    if (Error e = check_nesting(where, depth)) return e;
    auto it = j.find("decoders");
    if (it == j.end() || !it->is_array()) return corrupt(where + ".decoders must be an array");
    for (size_t i = 0; i < it->size(); ++i) {
      const JsonPath::Step step_in(where, element("decoders", i));
      if (Error e = read_decoder((*it)[i], where, depth + 1, out)) return e;
    }
    return {};
  }
  if (type == "ByteLevel") {
    step.kind = DecoderStep::Kind::ByteLevel;
  } else if (type == "Replace") {
    if (Error e = read_pattern(j, where, &step.pattern, &step.regex)) return e;
    step.kind = step.regex ? DecoderStep::Kind::ReplaceRegex : DecoderStep::Kind::ReplaceString;
    if (Error e = read_string(j, "content", where, &step.content, nullptr)) return e;
  } else if (type == "ByteFallback") {
    step.kind = DecoderStep::Kind::ByteFallback;
  } else if (type == "Fuse") {
    step.kind = DecoderStep::Kind::Fuse;
  } else if (type == "Strip") {
    step.kind = DecoderStep::Kind::Strip;
    std::string text;
    if (Error e = read_single_char(j, "content", where, &text, &step.strip_char)) return e;
    if (Error e = read_size(j, "start", where, &step.strip_start)) return e;
    if (Error e = read_size(j, "stop", where, &step.strip_stop)) return e;
  } else if (type == "Metaspace") {
    step.kind = DecoderStep::Kind::Metaspace;
    std::string text;
    if (Error e = read_single_char(j, "replacement", where, &text, &step.replacement)) return e;
    if (Error e = read_prepend_scheme(j, where, &step.prepend_scheme)) return e;
  } else {
    return refuse_type(where, type, "Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace");
  }
  out->steps.push_back(std::move(step));
  return {};
}

// ---- model ----

Error read_model(const json &j, BpeConfig *config) {
  const JsonPath where("model");
  if (!j.is_object()) return corrupt("model must be an object");
  std::string type = type_of(j);
  if (type.empty() && j.contains("merges")) type = "BPE";  // old files leave BPE untagged
  if (type != "BPE") {
    if (type.empty()) return corrupt("model has no \"type\"");
    return unsupported("model type \"" + type + "\" is not supported (supported: BPE)");
  }
  if (auto dropout = j.find("dropout"); dropout != j.end() && !dropout->is_null()) {
    if (!dropout->is_number()) return corrupt("model.dropout must be a number or null");
    if (dropout->get<double>() > 0.0)
      return unsupported(util::strprintf("model.dropout is %g: BPE dropout makes encoding random, which inference "
                                         "does not do (set it to null)",
                                         dropout->get<double>()));
  }
  auto vocab = j.find("vocab");
  if (vocab == j.end() || !vocab->is_object()) return corrupt("model.vocab must be an object of token -> id");
  config->vocab.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    int32_t id = -1;
    if (!is_token_id(it.value(), &id)) return not_a_token_id("model.vocab[\"" + it.key() + "\"]");
    config->vocab.emplace(it.key(), id);
  }
  auto merges = j.find("merges");
  if (merges != j.end() && !merges->is_null()) {
    if (!merges->is_array()) return corrupt("model.merges must be an array");
    config->merges.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
      const json &m = (*merges)[i];
      if (m.is_string()) {
        // The older form: "left right", exactly one space (model.rs convert_merges_to_hashmap).
        const std::string &s = m.get_ref<const std::string &>();
        const size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
          return corrupt(util::strprintf("model.merges[%zu] \"%s\" is not two tokens separated by one space", i,
                                         s.c_str()));
        config->merges.emplace_back(s.substr(0, space), s.substr(space + 1));
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        config->merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        return corrupt(util::strprintf("model.merges[%zu] must be \"a b\" or [\"a\", \"b\"]", i));
      }
    }
  }
  if (Error e = read_string(j, "unk_token", where, &config->unk_token, &config->has_unk_token)) return e;
  if (Error e = read_bool(j, "fuse_unk", false, where, &config->fuse_unk)) return e;
  if (Error e = read_bool(j, "byte_fallback", false, where, &config->byte_fallback)) return e;
  if (Error e = read_bool(j, "ignore_merges", false, where, &config->ignore_merges)) return e;
  if (Error e = read_string(j, "continuing_subword_prefix", where, &config->continuing_subword_prefix, nullptr))
    return e;
  if (Error e = read_string(j, "end_of_word_suffix", where, &config->end_of_word_suffix, nullptr)) return e;
  return {};
}

Error read_added_tokens(const json &root, std::vector<AddedToken> *out) {
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return {};
  if (!it->is_array()) return corrupt("added_tokens must be an array");
  for (size_t i = 0; i < it->size(); ++i) {
    const json &t = (*it)[i];
    const JsonPath where("added_tokens[" + std::to_string(i) + "]");
    if (!t.is_object() || !t.contains("id") || !t.contains("content"))
      return corrupt(where + " must be an object with \"id\" and \"content\"");
    AddedToken token;
    if (Error e = read_id(t["id"], where + ".id", &token.id)) return e;
    bool present = false;
    if (Error e = read_string(t, "content", where, &token.content, &present)) return e;
    if (Error e = read_bool(t, "special", false, where, &token.special)) return e;
    if (Error e = read_bool(t, "single_word", false, where, &token.single_word)) return e;
    if (Error e = read_bool(t, "lstrip", false, where, &token.lstrip)) return e;
    if (Error e = read_bool(t, "rstrip", false, where, &token.rstrip)) return e;
    // tokenizers' default: special tokens are not normalized, the others are.
    if (Error e = read_bool(t, "normalized", !token.special, where, &token.normalized)) return e;
    out->push_back(std::move(token));
  }
  return {};
}

Error build_impl(const json &root, Tokenizer::Impl *impl) {
  if (!root.is_object()) return corrupt("the top level must be an object");
  auto model = root.find("model");
  if (model == root.end()) return corrupt("\"model\" is missing");
  BpeConfig config;
  if (Error e = read_model(*model, &config)) return e;
  if (Error e = BpeModel::build(std::move(config), &impl->model)) return e;
  if (Error e = read_added_tokens(root, &impl->added_tokens)) return e;
  // An added token whose content the model vocabulary (or an earlier added token) already
  // has takes that id, whatever the file says: tokenizers' AddedVocabulary::add_tokens does
  // this when it loads the file.
  {
    TokenIndex seen;
    for (AddedToken &t : impl->added_tokens) {
      if (auto it = impl->model.vocab().find(t.content); it != impl->model.vocab().end()) t.id = it->second;
      else if (auto prev = seen.find(t.content); prev != seen.end()) t.id = prev->second;
      seen.emplace(t.content, t.id);
    }
  }
  static const json kNull;
  auto field = [&](const char *key) -> const json & {
    auto it = root.find(key);
    return it == root.end() ? kNull : *it;
  };
  {
    JsonPath normalizer("normalizer"), pre_tokenizer("pre_tokenizer"), post_processor("post_processor"),
        decoder("decoder");
    if (Error e = read_normalizer(field("normalizer"), normalizer, 0, &impl->normalizer)) return e;
    if (Error e = read_pre_tokenizer(field("pre_tokenizer"), pre_tokenizer, 0, &impl->pre_tokenizer)) return e;
    if (Error e = read_post_processor(field("post_processor"), post_processor, 0, &impl->post_processor)) return e;
    if (Error e = read_decoder(field("decoder"), decoder, 0, &impl->decoder)) return e;
  }

  // An added token with normalized=true is matched in normalized text, so its pattern is its
  // content normalized (added_vocabulary.rs refresh_added_tokens). tokenizers 0.23 also gives
  // that normalized form as the token's string (id_to_token) and decodes it: with a
  // Prepend("▁") + Replace(" ", "▁") normalizer, "my token" decodes as "▁my▁token", so
  // "this is my token ok" round-trips instead of losing the space before "my".
  std::vector<std::string> token_text(impl->added_tokens.size());
  for (size_t i = 0; i < impl->added_tokens.size(); ++i) {
    const AddedToken &t = impl->added_tokens[i];
    token_text[i] = t.content;
    if (t.normalized)
      if (Error e = impl->normalizer.apply(&token_text[i])) return e;
  }

  // The id tables: the model's vocabulary, then added tokens (which win, as in tokenizers'
  // id_to_token).
  int64_t max_id = -1;
  for (const auto &[text, id] : impl->model.vocab()) max_id = std::max<int64_t>(max_id, id);
  for (const AddedToken &t : impl->added_tokens) max_id = std::max<int64_t>(max_id, t.id);
  const auto count = static_cast<size_t>(max_id + 1);
  impl->id_text.assign(count, std::string());
  impl->id_known.assign(count, 0);
  impl->id_special.assign(count, 0);
  for (const auto &[text, id] : impl->model.vocab()) {
    impl->id_text[static_cast<size_t>(id)] = text;
    impl->id_known[static_cast<size_t>(id)] = 1;
  }
  TokenIndex special_contents;
  for (size_t i = 0; i < impl->added_tokens.size(); ++i) {
    const AddedToken &t = impl->added_tokens[i];
    impl->id_text[static_cast<size_t>(t.id)] = token_text[i];
    impl->id_known[static_cast<size_t>(t.id)] = 1;
    impl->added_index[t.content] = t.id;
    if (t.special) special_contents.emplace(t.content, t.id);
  }
  // decode(skip_special) drops a token whose string is the content of a special token
  // (tokenizers tests the string, is_special_token(&token)): a special token with
  // normalized=true whose normalized form differs is therefore kept, as there.
  for (const AddedToken &t : impl->added_tokens)
    if (special_contents.count(impl->id_text[static_cast<size_t>(t.id)])) impl->id_special[static_cast<size_t>(t.id)] = 1;
  for (const auto &[content, added_id] : special_contents)
    if (auto it = impl->model.vocab().find(content);
        it != impl->model.vocab().end() && impl->id_text[static_cast<size_t>(it->second)] == content)
      impl->id_special[static_cast<size_t>(it->second)] = 1;
  for (const PostProcessorStep &step : impl->post_processor.steps) {
    auto check = [&](int32_t id) -> Error {
      if (id < 0 || static_cast<size_t>(id) >= count || !impl->id_known[static_cast<size_t>(id)])
        return corrupt(util::strprintf("post_processor uses token id %d, which is not in the vocabulary", id));
      return {};
    };
    for (const auto &item : step.single)
      for (int32_t id : item.ids)
        if (Error e = check(id)) return e;
    if (step.kind == PostProcessorStep::Kind::ClsSep) {
      if (Error e = check(step.cls_id)) return e;
      if (Error e = check(step.sep_id)) return e;
    }
  }

  // Matchers: non-normalized tokens look at the raw text; normalized ones at normalized
  // text, so their own content is normalized first (added_vocabulary.rs refresh_added_tokens).
  std::vector<const AddedToken *> raw_tokens, normalized_tokens;
  std::vector<std::string> raw_patterns, normalized_patterns;
  bool any_single_word = false;
  for (size_t i = 0; i < impl->added_tokens.size(); ++i) {
    const AddedToken &t = impl->added_tokens[i];
    any_single_word = any_single_word || t.single_word;
    if (t.normalized) {
      normalized_tokens.push_back(&t);
      normalized_patterns.push_back(token_text[i]);
    } else {
      raw_tokens.push_back(&t);
      raw_patterns.push_back(t.content);
    }
  }
  std::shared_ptr<const Regex> word_regex;
  if (any_single_word) {
    Error error;
    std::unique_ptr<Regex> regex = Regex::compile("\\w", "single_word test", &error);
    if (!regex) return error;
    word_regex = std::move(regex);
  }
  impl->raw_matcher.build(std::move(raw_tokens), std::move(raw_patterns), word_regex);
  impl->normalized_matcher.build(std::move(normalized_tokens), std::move(normalized_patterns), word_regex);
  return {};
}

// ---- nesting depth of the text ----

// The offset of the bracket that opens the first container nested deeper than kMaxJsonDepth,
// or npos. One pass over the bytes, nothing allocated; exact for valid JSON (brackets inside
// strings are skipped), and invalid JSON is refused by the parser whatever this returns.
size_t find_too_deep(std::string_view text) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::string_view::npos;
}

// Reads the text with nlohmann's SAX interface up to the container that is too deep and keeps
// the path of the containers open there, for the error message. Runs only on that error path;
// it stops at the limit, so it holds at most kMaxJsonDepth frames.
class NestingPathFinder : public nlohmann::json_sax<json> {
 public:
  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t &) override { return value(); }
  bool string(string_t &) override { return value(); }
  bool binary(binary_t &) override { return value(); }
  bool start_object(std::size_t) override { return open(false); }
  bool start_array(std::size_t) override { return open(true); }
  bool key(string_t &key) override {
    frames_.back().key = key;
    return true;
  }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string &, const nlohmann::detail::exception &) override { return false; }

  bool reached_limit() const { return reached_limit_; }
  // "normalizer.normalizers[0].normalizers[0]...": where the too-deep container sits.
  std::string path() const {
    std::vector<std::string> segments;
    for (const Frame &f : frames_) {
      if (f.array) segments.push_back(util::strprintf("[%zu]", f.index));
      else segments.push_back(segments.empty() ? f.key : "." + f.key);
    }
    return segments.empty() ? std::string("the top level") : join_path(segments);
  }

 private:
  struct Frame {
    bool array = false;
    size_t index = 0;  // arrays: the element being read
    std::string key;   // objects: the member being read
  };
  bool value() {  // an element of the innermost container is complete
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
    return true;
  }
  bool open(bool array) {
    if (frames_.size() >= kMaxJsonDepth) {
      reached_limit_ = true;
      return false;
    }
    frames_.push_back(Frame{array, 0, {}});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return value();
  }
  std::vector<Frame> frames_;
  bool reached_limit_ = false;
};

Error too_deep_error(std::string_view text, size_t offset) {
  NestingPathFinder finder;
  json::sax_parse(text.begin(), text.end(), &finder);
  if (!finder.reached_limit()) return corrupt("not valid JSON (is this a tokenizer.json? it should start with '{')");
  return corrupt(util::strprintf("objects and arrays nest more than %zu deep at byte %zu, in %s (the limit; real "
                                 "files nest about six deep)",
                                 kMaxJsonDepth, offset, finder.path().c_str()));
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_json(std::string_view text, Error *error) {
  try {
    if (const size_t at = find_too_deep(text); at != std::string_view::npos) {
      *error = too_deep_error(text, at);
      return nullptr;
    }
    const json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (root.is_discarded()) {
      *error = corrupt("not valid JSON (is this a tokenizer.json? it should start with '{')");
      return nullptr;
    }
    auto impl = std::make_unique<Impl>();
    if (Error e = build_impl(root, impl.get())) {
      *error = std::move(e);
      return nullptr;
    }
    *error = Error();
    return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
  } catch (const std::bad_alloc &) {
    *error = make_error(ErrorKind::OutOfMemory, "tokenizer.json: out of memory while loading");
  } catch (const std::exception &e) {
    *error = corrupt(std::string("unexpected structure: ") + e.what());
  }
  return nullptr;
}

}  // namespace colibri::tokenizer

// core/util/json.cpp — parse_json: nlohmann's DOM parser behind a SAX filter that counts depth.
#include "util/json.h"

#include <type_traits>
#include <vector>

#include "util/strings.h"

namespace colibri::util {

namespace {

// Forwards every event to the DOM builder; refuses an object or array past max_depth. The
// path (keys and "[]" for arrays) is kept only as deep as the limit, so memory stays bounded.
template <typename json>
class DepthLimitedSax {
  using DomParser = nlohmann::detail::json_sax_dom_parser<json>;

 public:
  DepthLimitedSax(json *out, uint32_t max_depth) : dom_(*out, /*allow_exceptions=*/false), max_depth_(max_depth) {}

  bool null() { return value_done(dom_.null()); }
  bool boolean(bool v) { return value_done(dom_.boolean(v)); }
  bool number_integer(typename json::number_integer_t v) { return value_done(dom_.number_integer(v)); }
  bool number_unsigned(typename json::number_unsigned_t v) { return value_done(dom_.number_unsigned(v)); }
  bool number_float(typename json::number_float_t v, const typename json::string_t &s) { return value_done(dom_.number_float(v, s)); }
  bool string(typename json::string_t &v) { return value_done(dom_.string(v)); }
  bool binary(typename json::binary_t &v) { return value_done(dom_.binary(v)); }
  bool start_object(std::size_t n) { return open('{') && dom_.start_object(n); }
  bool end_object() { return close() && dom_.end_object(); }
  bool start_array(std::size_t n) { return open('[') && dom_.start_array(n); }
  bool end_array() { return close() && dom_.end_array(); }
  bool key(typename json::string_t &k) {
    if (!path_.empty()) {
      path_.back().key = k;
      // An ordered object finds each key by a linear search: bound the keys so that a
      // hostile object cannot make parsing quadratic.
      if (kOrdered && ++path_.back().keys > kMaxOrderedObjectKeys) {
        too_many_keys_ = true;
        return false;
      }
    }
    return dom_.key(k);
  }
  bool parse_error(std::size_t position, const std::string &, const nlohmann::detail::exception &ex) {
    syntax_position_ = position;
    syntax_message_ = ex.what();
    return false;
  }

  bool too_deep() const { return too_deep_; }
  bool too_many_keys() const { return too_many_keys_; }
  const std::string &syntax_message() const { return syntax_message_; }
  std::size_t syntax_position() const { return syntax_position_; }
  std::string path() const {
    std::string out;
    for (const Level &level : path_) {
      if (!out.empty()) out += " > ";
      out += level.kind == '{' ? (level.key.empty() ? std::string("{}") : "\"" + level.key + "\"") : std::string("[]");
      if (out.size() > kMaxPathBytes) return out.substr(0, kMaxPathBytes) + " ...";
    }
    return out;
  }

 private:
  static constexpr size_t kMaxPathBytes = 200;
  static constexpr bool kOrdered = std::is_same_v<json, nlohmann::ordered_json>;
  struct Level {
    char kind;
    std::string key;  // the current key of an object level
    size_t keys = 0;  // keys seen at an object level
  };
  bool open(char kind) {
    if (depth_ >= max_depth_) {
      too_deep_ = true;
      return false;
    }
    ++depth_;
    path_.push_back({kind, {}, 0});
    return true;
  }
  bool close() {
    --depth_;
    path_.pop_back();
    return true;
  }
  static bool value_done(bool ok) { return ok; }

  DomParser dom_;
  uint32_t max_depth_;
  uint32_t depth_ = 0;
  std::vector<Level> path_;
  bool too_deep_ = false;
  bool too_many_keys_ = false;
  std::string syntax_message_;
  std::size_t syntax_position_ = 0;
};

template <typename json>
Error parse_json_into(std::string_view text, std::string_view what, json *out, uint32_t max_depth) {
  *out = json();
  DepthLimitedSax<json> sax(out, max_depth);
  const bool ok = json::sax_parse(text.begin(), text.end(), &sax, json::input_format_t::json, /*strict=*/true);
  if (ok) return {};
  *out = json();  // a partial tree is never handed out
  if (sax.too_deep())
    return make_error(ErrorKind::Corrupt,
                      strprintf("%.*s nests objects/arrays deeper than the limit of %u levels%s, under %s",
                                static_cast<int>(what.size()), what.data(), max_depth,
                                max_depth == kMaxJsonDepth ? " (util::kMaxJsonDepth)" : "", sax.path().c_str()));
  if (sax.too_many_keys())
    return make_error(ErrorKind::Corrupt,
                      strprintf("%.*s has an object of more than %zu keys (util::kMaxOrderedObjectKeys), under %s",
                                static_cast<int>(what.size()), what.data(), kMaxOrderedObjectKeys, sax.path().c_str()));
  return make_error(ErrorKind::Corrupt, strprintf("%.*s is not valid JSON: %s", static_cast<int>(what.size()), what.data(),
                                                  sax.syntax_message().empty() ? "parse error" : sax.syntax_message().c_str()));
}

}  // namespace

Error parse_json(std::string_view text, std::string_view what, nlohmann::json *out, uint32_t max_depth) {
  return parse_json_into(text, what, out, max_depth);
}

Error parse_json(std::string_view text, std::string_view what, nlohmann::ordered_json *out, uint32_t max_depth) {
  return parse_json_into(text, what, out, max_depth);
}

}  // namespace colibri::util

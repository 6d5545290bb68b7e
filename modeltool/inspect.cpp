// modeltool/inspect.cpp — `colibri-model inspect FILE [--json]`: header fields, metadata
// summary, tensor table, totals per dtype and expert bytes per layer. The --json form is a
// stable interface for scripts (keys are only ever added).
#include <cstdio>
#include <map>

#include "modeltool/inspect.h"

#include "image/reader.h"
#include "model/config.h"
#include "model/tensor_names.h"
#include "modeltool/cli_support.h"
#include "modeltool/commands.h"
#include "util/strings.h"

namespace colibri::modeltool {

namespace {

using json = nlohmann::json;

// A copy of metadata values within InspectBounds. Iterative over items, recursive over depth
// (at most max_depth + 1 levels, however deep the input).
class BoundedCopy {
 public:
  explicit BoundedCopy(const InspectBounds &bounds) : bounds_(bounds) {}

  // `tokenizer`: v is metadata.tokenizer, whose texts (tokenizer.json, chat_template) are
  // shown as their sizes ("json_bytes", "chat_template_bytes").
  json copy(const json &v, uint32_t depth, bool tokenizer = false) {
    if (used_ > bounds_.max_total_bytes) return marker("inspect shows at most " + std::to_string(bounds_.max_total_bytes) +
                                                       " bytes of metadata");
    if (v.is_string()) {
      const std::string &s = v.get_ref<const std::string &>();
      if (s.size() <= bounds_.max_string_bytes) {
        used_ += s.size() + kPerValueBytes;
        return v;
      }
      size_t cut = static_cast<size_t>(bounds_.max_string_bytes);
      while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // a whole UTF-8 character
      used_ += cut + kPerValueBytes;
      return s.substr(0, cut) + kTruncatedMarker + " (" + std::to_string(s.size()) + " bytes in all)";
    }
    if (!v.is_structured() || v.empty()) {
      used_ += kPerValueBytes;
      return v;
    }
    if (depth >= bounds_.max_depth)
      return marker(std::string(v.is_array() ? "an array" : "an object") + " of " + std::to_string(v.size()) +
                    " items nested deeper than " + std::to_string(bounds_.max_depth) + " levels");
    json out = v.is_array() ? json::array() : json::object();
    uint64_t shown = 0;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (shown == bounds_.max_items || used_ > bounds_.max_total_bytes) {
        const std::string rest = std::to_string(v.size() - shown) + (v.is_array() ? " more items" : " more keys");
        if (v.is_array()) out.push_back(marker(rest));
        else out[kTruncatedMarker] = marker(rest);
        break;
      }
      ++shown;
      used_ += kPerValueBytes;
      if (v.is_array()) {
        out.push_back(copy(*it, depth + 1));
      } else if (tokenizer && (it.key() == "json" || it.key() == "chat_template") && it.value().is_string()) {
        out[it.key() + "_bytes"] = it.value().get_ref<const std::string &>().size();
      } else {
        used_ += it.key().size();
        out[key(it.key())] = copy(it.value(), depth + 1, depth == 0 && it.key() == "tokenizer" && it.value().is_object());
      }
    }
    return out;
  }

  std::string key(const std::string &k) const {
    if (k.size() <= bounds_.max_string_bytes) return k;
    size_t cut = static_cast<size_t>(bounds_.max_string_bytes);
    while (cut > 0 && (static_cast<unsigned char>(k[cut]) & 0xC0) == 0x80) --cut;
    return k.substr(0, cut) + kTruncatedMarker;
  }

  bool over() const { return used_ > bounds_.max_total_bytes; }

 private:
  static constexpr uint64_t kPerValueBytes = 8;  // punctuation, a number, true/false/null: about
  static json marker(const std::string &what) { return std::string(kTruncatedMarker) + ": " + what; }

  const InspectBounds &bounds_;
  uint64_t used_ = 0;
};

// dtype as shown: the block dtypes with their group size ("q4/32").
std::string dtype_label(const image::TensorInfo &t) {
  std::string dtype = image::dtype_name(t.dtype);
  if (t.group_size != 0) dtype += "/" + std::to_string(t.group_size);
  return dtype;
}

struct ClassSummary {
  std::map<std::string, uint64_t> dtypes;  // dtype label -> tensors
  uint64_t tensors = 0, bytes = 0, elements = 0;
};

double bits_per_weight(uint64_t bytes, uint64_t elements) {
  return elements ? 8.0 * static_cast<double>(bytes) / static_cast<double>(elements) : 0.0;
}

struct Summary {
  std::map<std::string, std::pair<uint64_t, uint64_t>> per_dtype;  // dtype -> (tensors, bytes)
  std::map<std::string, ClassSummary> per_class;                   // model::names::tensor_class_name
  std::map<uint64_t, uint64_t> expert_bytes_per_layer;
  uint64_t total_bytes = 0;
  uint64_t total_elements = 0;
  // From the model metadata (when it parses): the attention kind and what one position takes in
  // the KV cache, over all layers, in f32; the checkpoint's multi-token-prediction layers.
  bool has_model = false;
  std::string attention;
  uint64_t kv_values_per_position = 0, expanded_kv_values_per_position = 0, layers = 0, mtp_layers = 0;
  uint64_t mtp_tensors = 0, mtp_bytes = 0;  // tensors named mtp.<j>.* and their bytes
};

Summary summarize(const image::Image &img) {
  Summary s;
  model::ModelConfig config;
  if (img.metadata().contains("model") && !model::ModelConfig::from_json(img.metadata()["model"], &config)) {
    s.has_model = true;
    s.attention = config.attention;
    s.kv_values_per_position = config.kv_values_per_position();
    s.expanded_kv_values_per_position = config.expanded_kv_values_per_position();
    s.layers = config.layer_count;
    s.mtp_layers = config.mtp_layer_count;
  }
  for (const image::TensorInfo &t : img.tensors()) {
    auto &d = s.per_dtype[image::dtype_name(t.dtype)];
    d.first += 1;
    d.second += t.size;
    s.total_bytes += t.size;
    s.total_elements += t.element_count();
    ClassSummary &c = s.per_class[model::names::tensor_class_name(model::names::tensor_class(t.name, t.rank))];
    c.dtypes[dtype_label(t)] += 1;
    c.tensors += 1;
    c.bytes += t.size;
    c.elements += t.element_count();
    uint64_t layer;
    std::string role;
    if (model::names::parse_mtp_tensor(t.name, &layer, &role)) {
      s.mtp_tensors += 1;
      s.mtp_bytes += t.size;
    }
    if (model::names::parse_layer_tensor(t.name, &layer, &role) &&
        (role == model::names::kExpertsGate || role == model::names::kExpertsUp || role == model::names::kExpertsDown))
      s.expert_bytes_per_layer[layer] += t.size;
  }
  return s;
}

nlohmann::json header_json(const image::FileHeader &h) {
  return {{"magic", util::hex64(image::kMagicDisplay)},
          {"version", h.version},
          {"header_size", h.header_size},
          {"file_size", h.file_size},
          {"expert_count", h.expert_count},
          {"expert_size_bytes", h.expert_size_bytes},
          {"hidden_size", h.hidden_size},
          {"ffn_hidden_size", h.ffn_hidden_size},
          {"top_k", h.top_k},
          {"weight_data_offset", h.weight_data_offset},
          {"gate_weight_offset", h.gate_weight_offset},
          {"layer_count", h.layer_count},
          {"tensor_count", h.tensor_count},
          {"directory_offset", h.directory_offset},
          {"directory_size", h.directory_size},
          {"metadata_offset", h.metadata_offset},
          {"metadata_size", h.metadata_size},
          {"data_alignment", h.data_alignment},
          {"header_checksum", util::hex64(h.header_checksum)}};
}

void print_text(const image::Image &img, const Summary &s) {
  const image::FileHeader &h = img.header();
  std::printf("file            %s\n", img.path().c_str());
  std::printf("format          Colibri image version %u, %s, alignment %llu\n", h.version,
              util::human_bytes(h.file_size).c_str(), static_cast<unsigned long long>(h.data_alignment));
  std::printf("experts         %llu per MoE layer, top-%llu, %s each\n", static_cast<unsigned long long>(h.expert_count),
              static_cast<unsigned long long>(h.top_k), util::human_bytes(h.expert_size_bytes).c_str());
  std::printf("sizes           hidden %llu, expert ffn %llu, layers %llu\n", static_cast<unsigned long long>(h.hidden_size),
              static_cast<unsigned long long>(h.ffn_hidden_size), static_cast<unsigned long long>(h.layer_count));
  std::printf("offsets         directory %llu (+%llu), metadata %llu (+%llu), weights %llu, gate %llu\n",
              static_cast<unsigned long long>(h.directory_offset), static_cast<unsigned long long>(h.directory_size),
              static_cast<unsigned long long>(h.metadata_offset), static_cast<unsigned long long>(h.metadata_size),
              static_cast<unsigned long long>(h.weight_data_offset), static_cast<unsigned long long>(h.gate_weight_offset));
  std::printf("header sum      %s\n", util::hex64(h.header_checksum).c_str());
  if (s.has_model) {
    std::printf("kv cache        %s attention: %llu values per position and layer, %s per token in f32 (%s in f16)",
                s.attention.c_str(), static_cast<unsigned long long>(s.kv_values_per_position),
                util::human_bytes(s.layers * s.kv_values_per_position * 4).c_str(),
                util::human_bytes(s.layers * s.kv_values_per_position * 2).c_str());
    if (s.expanded_kv_values_per_position != s.kv_values_per_position)
      std::printf("; expanded keys and values would take %s", util::human_bytes(s.layers * s.expanded_kv_values_per_position * 4).c_str());
    std::printf("\n");
    if (s.mtp_layers)
      std::printf("mtp layers      %llu multi-token-prediction layer%s: %llu tensor%s kept as mtp.<j>.* (%s), never run "
                  "by the forward pass\n",
                  static_cast<unsigned long long>(s.mtp_layers), s.mtp_layers == 1 ? "" : "s",
                  static_cast<unsigned long long>(s.mtp_tensors), s.mtp_tensors == 1 ? "" : "s",
                  util::human_bytes(s.mtp_bytes).c_str());
  }

  const std::string meta_text = metadata_text(img.metadata());
  std::fwrite(meta_text.data(), 1, meta_text.size(), stdout);

  std::printf("\n%-40s %-9s %-24s %14s %14s\n", "tensor", "dtype", "shape", "offset", "bytes");
  for (const image::TensorInfo &t : img.tensors()) {
    const std::string dtype = dtype_label(t);
    std::printf("%-40s %-9s %-24s %14llu %14llu\n", t.name.c_str(), dtype.c_str(), t.shape_string().c_str(),
                static_cast<unsigned long long>(t.offset), static_cast<unsigned long long>(t.size));
  }
  std::printf("\ntotals\n");
  for (const auto &[dtype, v] : s.per_dtype)
    std::printf("  %-5s %6llu tensors %12s\n", dtype.c_str(), static_cast<unsigned long long>(v.first),
                util::human_bytes(v.second).c_str());
  std::printf("  all   %6zu tensors %12s, %llu parameters, %.3f bits per weight\n", img.tensors().size(),
              util::human_bytes(s.total_bytes).c_str(), static_cast<unsigned long long>(s.total_elements),
              bits_per_weight(s.total_bytes, s.total_elements));
  std::printf("\ntensor classes\n");
  for (const auto &[name, c] : s.per_class) {
    std::string dtypes;
    for (const auto &[label, count] : c.dtypes) dtypes += (dtypes.empty() ? "" : ", ") + label + " ×" + std::to_string(count);
    std::printf("  %-14s %-28s %12s %7.3f bits per weight\n", name.c_str(), dtypes.c_str(),
                util::human_bytes(c.bytes).c_str(), bits_per_weight(c.bytes, c.elements));
  }
  if (!s.expert_bytes_per_layer.empty()) {
    std::printf("\nexpert bytes per layer\n");
    for (const auto &[layer, bytes] : s.expert_bytes_per_layer)
      std::printf("  blk.%-4llu %12s\n", static_cast<unsigned long long>(layer), util::human_bytes(bytes).c_str());
  }
}

nlohmann::json to_json(const image::Image &img, const Summary &s) {
  nlohmann::json j;
  j["file"] = img.path();
  j["header"] = header_json(img.header());
  j["metadata"] = printable_metadata(img.metadata());
  nlohmann::json tensors = nlohmann::json::array();
  for (const image::TensorInfo &t : img.tensors()) {
    nlohmann::json shape = nlohmann::json::array();
    for (uint32_t i = 0; i < t.rank; ++i) shape.push_back(t.shape[i]);
    tensors.push_back({{"name", t.name},
                       {"dtype", image::dtype_name(t.dtype)},
                       {"group_size", t.group_size},
                       {"shape", shape},
                       {"offset", t.offset},
                       {"size", t.size},
                       {"checksum", util::hex64(t.checksum)}});
  }
  j["tensors"] = tensors;
  nlohmann::json totals = nlohmann::json::object();
  for (const auto &[dtype, v] : s.per_dtype) totals[dtype] = {{"tensors", v.first}, {"bytes", v.second}};
  j["totals"] = {{"per_dtype", totals},
                 {"bytes", s.total_bytes},
                 {"parameters", s.total_elements},
                 {"bits_per_weight", bits_per_weight(s.total_bytes, s.total_elements)}};
  nlohmann::json classes = nlohmann::json::object();
  for (const auto &[name, c] : s.per_class)
    classes[name] = {{"dtypes", c.dtypes},
                     {"tensors", c.tensors},
                     {"bytes", c.bytes},
                     {"parameters", c.elements},
                     {"bits_per_weight", bits_per_weight(c.bytes, c.elements)}};
  j["classes"] = classes;
  nlohmann::json experts = nlohmann::json::object();
  for (const auto &[layer, bytes] : s.expert_bytes_per_layer) experts[std::to_string(layer)] = bytes;
  j["expert_bytes_per_layer"] = experts;
  if (s.has_model)
    j["kv_cache"] = {{"attention", s.attention},
                     {"values_per_position_and_layer", s.kv_values_per_position},
                     {"bytes_per_token_f32", s.layers * s.kv_values_per_position * 4},
                     {"expanded_bytes_per_token_f32", s.layers * s.expanded_kv_values_per_position * 4},
                     {"mtp_layers", s.mtp_layers},
                     {"mtp_tensors", s.mtp_tensors},
                     {"mtp_bytes", s.mtp_bytes}};
  return j;
}

}  // namespace

json printable_metadata(const json &metadata, const InspectBounds &bounds) {
  BoundedCopy copier(bounds);
  return copier.copy(metadata, 0);
}

std::string metadata_text(const json &metadata, const InspectBounds &bounds) {
  // One bounded copy, so the text is bounded as the JSON is; dump() replaces invalid UTF-8.
  const json meta = printable_metadata(metadata, bounds);
  auto line = [](std::string *out, const std::string &key, const std::string &value) {
    *out += util::strprintf("  %-24s %s\n", key.c_str(), value.c_str());
  };
  auto dump = [](const json &v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); };
  std::string out;
  if (!meta.is_object()) return out;
  auto model = meta.find("model");
  if (model != meta.end() && model->is_object()) {
    out += "\nmodel\n";
    for (auto it = model->begin(); it != model->end(); ++it)
      if (it.key() != "layer_is_moe") line(&out, it.key(), dump(it.value()));
    auto moe = model->find("layer_is_moe");
    if (moe != model->end() && moe->is_array()) {
      std::string layers;
      for (const auto &v : *moe) {
        if (v.is_string()) layers += " " + v.get<std::string>();  // a truncation marker
        else layers += (v.is_number() && v != 0) || (v.is_boolean() && v.get<bool>()) ? 'M' : 'D';
      }
      line(&out, "layers", layers + " (M = MoE, D = dense)");
    }
  }
  auto tok = meta.find("tokenizer");
  if (tok != meta.end() && tok->is_object()) {
    out += "\ntokenizer\n";
    for (auto it = tok->begin(); it != tok->end(); ++it) line(&out, it.key(), dump(it.value()));
  }
  return out;
}

int run_inspect(int argc, char **argv) {
  cxxopts::Options options("colibri-model inspect", "Show an image's header, metadata and tensor table.");
  options.add_options()("json", "machine-readable JSON output (stable keys)")("h,help", "show this help")(
      "file", "image file", cxxopts::value<std::string>());
  options.parse_positional({"file"});
  options.positional_help("FILE");
  int code = kExitOk;
  auto args = parse_or_report(options, argc, argv, &code);
  if (!args) return code;
  if (!args->count("file")) {
    std::fprintf(stderr, "colibri-model inspect: missing FILE\n\n%s", options.help().c_str());
    return kExitUsage;
  }
  Error error;
  auto img = image::Image::open((*args)["file"].as<std::string>(), {}, &error);
  if (!img) return report_error("inspect", error);
  Summary s = summarize(*img);
  if (args->count("json"))
    std::printf("%s\n", to_json(*img, s).dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  else print_text(*img, s);
  return kExitOk;
}

}  // namespace colibri::modeltool

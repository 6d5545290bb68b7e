// modeltool/inspect.h — what `colibri-model inspect` prints of an image's metadata, bounded.
//
// The metadata is whatever JSON the image carries (up to 256 MiB, nested up to
// util::kMaxJsonDepth), so inspect never prints it whole: nesting past max_depth, containers
// past max_items, strings past max_string_bytes and everything after max_total_bytes are
// replaced by a "… truncated" marker (a JSON string, so --json stays valid JSON). The
// tokenizer's bulky texts (tokenizer.json, chat_template) are replaced by their sizes.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace colibri::modeltool {

struct InspectBounds {
  static constexpr uint32_t kDefaultMaxDepth = 16;
  static constexpr uint64_t kDefaultMaxItems = 1000;
  static constexpr uint64_t kDefaultMaxStringBytes = 4096;
  static constexpr uint64_t kDefaultMaxTotalBytes = 1ull << 20;

  uint32_t max_depth = kDefaultMaxDepth;                   // objects/arrays inside each other
  uint64_t max_items = kDefaultMaxItems;                   // items (or keys) shown per object/array
  uint64_t max_string_bytes = kDefaultMaxStringBytes;      // bytes shown of one string
  uint64_t max_total_bytes = kDefaultMaxTotalBytes;        // bytes of metadata text, about, in all
};

// Every marker starts with this (UTF-8 "…").
inline constexpr const char *kTruncatedMarker = "\xE2\x80\xA6 truncated";

// The metadata as `inspect --json` shows it under "metadata".
nlohmann::json printable_metadata(const nlohmann::json &metadata, const InspectBounds &bounds = {});

// The "model" and "tokenizer" sections of `inspect`'s text form.
std::string metadata_text(const nlohmann::json &metadata, const InspectBounds &bounds = {});

}  // namespace colibri::modeltool

// tests/fuzz/fuzz_inspect.cpp — libFuzzer target for what `colibri-model inspect` prints of
// metadata: the input is metadata JSON, parsed as the image reader parses it (util::parse_json,
// depth-limited), then printed as `inspect --json` and the text form do. The printed form must
// stay within InspectBounds (about max_total_bytes, plus markers) and be valid JSON.
#include <cstdint>
#include <string>
#include <string_view>

#include "modeltool/inspect.h"
#include "util/json.h"

using namespace colibri;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  nlohmann::json meta;
  if (Error e = util::parse_json(std::string_view(reinterpret_cast<const char *>(data), size), "fuzz", &meta)) {
    if (e.message.empty()) __builtin_trap();
    return 0;
  }
  modeltool::InspectBounds bounds;
  bounds.max_depth = 6;
  bounds.max_items = 8;
  bounds.max_string_bytes = 32;
  bounds.max_total_bytes = 1024;
  const nlohmann::json printable = modeltool::printable_metadata(meta, bounds);
  const std::string json_text = printable.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  // Bounded: the budget, plus what the last value before the budget ran out and the markers add.
  constexpr size_t kSlack = 64 * 1024;
  if (json_text.size() > bounds.max_total_bytes + kSlack) __builtin_trap();
  nlohmann::json reparsed;
  if (util::parse_json(json_text, "printed", &reparsed)) __builtin_trap();  // still valid JSON
  const std::string text = modeltool::metadata_text(meta, bounds);
  if (text.size() > bounds.max_total_bytes + kSlack) __builtin_trap();
  return 0;
}

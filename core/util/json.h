// core/util/json.h — the one way the library parses JSON it did not write: with a nesting limit.
//
// nlohmann::json parses without recursion, but copying, printing and walking a parsed value
// recurse once per level, so a file that nests a million arrays deep (a few MB) would take a
// process down later. parse_json refuses nesting deeper than the limit while parsing, before
// any value exists, and says where: the object keys on the way down ("model" > "extra" > [0]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace colibri::util {

// Objects and arrays inside each other. Real metadata and tokenizer configs nest < 10 deep.
inline constexpr uint32_t kMaxJsonDepth = 128;

// Parses `text` into *out. On a syntax error or nesting deeper than max_depth returns
// ErrorKind::Corrupt (callers with another kind in mind re-kind it) whose message starts with
// `what` ("the metadata JSON") and names the byte offset, and for depth the limit and the path.
Error parse_json(std::string_view text, std::string_view what, nlohmann::json *out, uint32_t max_depth = kMaxJsonDepth);
// Keys of one object in an ordered_json (which finds a key by a linear search).
inline constexpr size_t kMaxOrderedObjectKeys = 4096;

// The same into an ordered_json, which keeps each object's keys in the order of the text:
// for JSON whose order shows in what is made from it (a chat template's tools, printed by
// tojson as Python prints a dict: in insertion order). An object of more than
// kMaxOrderedObjectKeys keys is refused (Corrupt), naming where.
Error parse_json(std::string_view text, std::string_view what, nlohmann::ordered_json *out,
                 uint32_t max_depth = kMaxJsonDepth);

}  // namespace colibri::util

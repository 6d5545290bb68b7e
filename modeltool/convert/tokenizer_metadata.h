// modeltool/convert/tokenizer_metadata.h — the image's "tokenizer" metadata object:
//
//   { "json":          the exact text of tokenizer.json,
//     "chat_template": string or null,
//     "bos_token_id":  int or null,   "eos_token_ids": [int...],   "pad_token_id": int or null,
//     "bos_token":     string or null, "eos_token":    string or null,
//     "add_bos_token": bool,           "add_eos_token": bool }
//
// Sources, first match wins (docs/convert.md):
//   chat_template  tokenizer_config.json "chat_template" (a list of named templates: the one
//                  named "default"), else chat_template.jinja, else chat_template.json
//   special ids    generation_config.json, else the tokenizer_config.json token resolved
//                  through tokenizer.json (added_tokens, then the model vocabulary), else config.json
//   token strings  tokenizer_config.json (a string or an AddedToken object), else the id's token
//   add_*_token    tokenizer_config.json, else false
#pragma once

#include <nlohmann/json.hpp>

#include "modeltool/convert/source_files.h"
#include "util/error.h"

namespace colibri::modeltool::convert {

// Reads the tokenizer files of `files`' directory (recording each one) and fills *out.
// tokenizer.json is required: the image carries the tokenizer.
Error build_tokenizer_metadata(SourceFiles *files, const nlohmann::json &config, nlohmann::json *out);

}  // namespace colibri::modeltool::convert

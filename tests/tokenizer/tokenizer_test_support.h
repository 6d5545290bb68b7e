// tests/tokenizer/tokenizer_test_support.h — file and fixture helpers for the tokenizer tests.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace tokenizer_test {

using nlohmann::json;
using colibri::tokenizer::Tokenizer;

inline std::string source_path(const std::string &relative) { return std::string(COLIBRI_SOURCE_DIR) + "/" + relative; }

inline bool file_exists(const std::string &path) { return std::ifstream(path).good(); }

inline std::string read_file(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

inline std::vector<json> read_jsonl(const std::string &path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::vector<json> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

inline std::unique_ptr<Tokenizer> load_tokenizer(const std::string &relative_path) {
  colibri::Error error;
  auto tok = Tokenizer::from_json(read_file(source_path(relative_path)), &error);
  INFO(relative_path << ": " << error.message);
  REQUIRE(tok != nullptr);
  return tok;
}

inline std::string hex_to_bytes(const std::string &hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// The bytes a corpus record encodes: its raw (possibly invalid) bytes when it has them.
inline std::string record_input(const json &record) {
  if (record.contains("bytes_hex")) return hex_to_bytes(record["bytes_hex"].get<std::string>());
  return record["text"].get<std::string>();
}

inline std::vector<int32_t> ids_of(const json &array) { return array.get<std::vector<int32_t>>(); }

inline std::string decode_all(const Tokenizer &tok, const std::vector<int32_t> &ids, bool skip_special) {
  std::string text;
  colibri::Error error = tok.decode(ids.data(), ids.size(), skip_special, &text);
  INFO(error.message);
  REQUIRE(error.ok());
  return text;
}

inline std::vector<int32_t> encode(const Tokenizer &tok, const std::string &text, bool add_special, bool parse_special) {
  std::vector<int32_t> ids;
  colibri::tokenizer::EncodeOptions options;
  options.add_special_tokens = add_special;
  options.parse_special = parse_special;
  colibri::Error error = tok.encode(text, options, &ids);
  INFO(error.message);
  REQUIRE(error.ok());
  return ids;
}

}  // namespace tokenizer_test

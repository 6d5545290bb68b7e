// modeltool/convert/source_files.h — reading the small files of a checkpoint directory
// (config.json, tokenizer files) and recording every file the converter reads, with its
// size and XXH3-64 hash, for the image's provenance.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace colibri::modeltool::convert {

bool path_exists(const std::string &path);
// Reads a whole (small) file; Io error naming the path and the OS reason.
Error read_whole_file(const std::string &path, std::string *text);

// The files of one checkpoint directory that went into an image.
class SourceFiles {
 public:
  explicit SourceFiles(std::string directory) : directory_(std::move(directory)) {}

  const std::string &directory() const { return directory_; }
  std::string path(const std::string &name) const { return directory_ + "/" + name; }

  // Reads DIR/name and records it. An absent file is not an error: *present = false.
  Error read_text(const std::string &name, std::string *text, bool *present);
  // As read_text, then parses JSON (no exceptions); a parse error names the file.
  Error read_json(const std::string &name, nlohmann::json *value, bool *present);
  // Records a large file (a shard) by streaming it through the hash, without keeping it;
  // `on_bytes` (optional) hears of each block hashed.
  Error record(const std::string &name, const std::function<void(uint64_t bytes)> &on_bytes = {});

  // [{"file", "bytes", "xxh3": "0x%016X"}], sorted by file name.
  nlohmann::json provenance() const;
  // Full paths of every recorded file.
  std::vector<std::string> paths() const;

 private:
  struct Record {
    uint64_t bytes = 0;
    uint64_t xxh3 = 0;
  };
  std::string directory_;
  std::map<std::string, Record> records_;
};

}  // namespace colibri::modeltool::convert

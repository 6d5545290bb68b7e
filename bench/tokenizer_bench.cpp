// bench/tokenizer_bench.cpp — encode throughput (MB/s) of each fixture tokenizer (prints
// figures; asserts nothing).
//
// Two texts of about --mb MB each:
//   corpus:  tests/fixtures/tokenizer/train_corpus.txt repeated (ordinary prose and code; the
//            words repeat, so the BPE word cache serves most of them, as it does for real text);
//   unique:  seeded pseudo-random words over Latin, accented, Cyrillic and CJK letters, digits
//            and punctuation: nearly every word is new, so this measures the merge loop itself.
// For each tokenizer x text: one warm-up encode, then --runs timed encodes of the whole text;
// prints median, min and max MB/s and the token count. Also decode MB/s (median) of the ids.
// Usage: tokenizer_bench [--source-dir DIR] [--mb N] [--runs N]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

using colibri::Error;
using colibri::tokenizer::EncodeOptions;
using colibri::tokenizer::Tokenizer;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool read_file(const std::string &path, std::string *out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream buffer;
  buffer << in.rdbuf();
  *out = buffer.str();
  return true;
}

std::string repeat_to(const std::string &unit, size_t bytes) {
  std::string out;
  out.reserve(bytes + unit.size());
  while (out.size() < bytes) out += unit;
  return out;
}

std::string unique_words(size_t bytes) {
  static const char *const kAlphabet[] = {
      "a", "b", "c", "d", "e", "f", "g", "h", "i", "k", "l", "m", "n", "o", "p", "r", "s", "t", "u", "w",
      "é", "è", "ü", "ñ", "ø", "д", "ж", "я", "的", "是", "语", "0", "1", "7", "'", "-"};
  const size_t alphabet_size = sizeof kAlphabet / sizeof kAlphabet[0];
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  std::string out;
  out.reserve(bytes + 64);
  while (out.size() < bytes) {
    const size_t length = 1 + next() % 12;
    for (size_t i = 0; i < length; ++i) out += kAlphabet[next() % alphabet_size];
    const uint64_t sep = next() % 20;
    out += sep == 0 ? ".\n" : sep == 1 ? ", " : " ";
  }
  return out;
}

struct Stats {
  double median, min, max;
};
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

}  // namespace

int main(int argc, char **argv) {
  std::string source_dir = COLIBRI_SOURCE_DIR;
  double megabytes = 8.0;
  int runs = 5;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--source-dir") && i + 1 < argc) source_dir = argv[++i];
    else if (!std::strcmp(argv[i], "--mb") && i + 1 < argc) megabytes = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) runs = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--source-dir DIR] [--mb N] [--runs N]\n", argv[0]);
      return 2;
    }
  }
  runs = std::max(runs, 3);
  const auto bytes = static_cast<size_t>(megabytes * 1e6);

  std::string corpus_unit;
  if (!read_file(source_dir + "/tests/fixtures/tokenizer/train_corpus.txt", &corpus_unit)) {
    std::fprintf(stderr, "cannot read %s/tests/fixtures/tokenizer/train_corpus.txt\n", source_dir.c_str());
    return 1;
  }
  struct Text {
    const char *name;
    std::string bytes;
  };
  const Text texts[] = {{"corpus", repeat_to(corpus_unit, bytes)}, {"unique", unique_words(bytes)}};

  struct Entry {
    const char *name;
    const char *path;
  };
  const Entry tokenizers[] = {
      {"bytelevel_bpe (Qwen2/OLMoE style)", "tests/fixtures/oracle/qwen2_moe_shared/tokenizer.json"},
      {"llama_bpe (Mixtral style)", "tests/fixtures/oracle/mixtral_gqa/tokenizer.json"},
      {"colibri-tiny-moe (GPT-2 ByteLevel)", "models/colibri-tiny-moe/tokenizer.json"},
  };

  std::printf("encode throughput, %d runs after 1 warm-up, %.1f MB texts (MB = 1e6 bytes of input)\n\n", runs,
              megabytes);
  std::printf("| tokenizer | text | median MB/s | min | max | tokens | decode MB/s |\n|---|---|---|---|---|---|---|\n");
  for (const Entry &entry : tokenizers) {
    std::string json;
    if (!read_file(source_dir + "/" + entry.path, &json)) {
      std::printf("| %s | (absent: %s) | | | | | |\n", entry.name, entry.path);
      continue;
    }
    Error error;
    auto tok = Tokenizer::from_json(json, &error);
    if (!tok) {
      std::fprintf(stderr, "%s: %s\n", entry.path, error.message.c_str());
      return 1;
    }
    EncodeOptions options;
    options.add_special_tokens = false;
    for (const Text &text : texts) {
      std::vector<int32_t> ids;
      if (Error e = tok->encode(text.bytes, options, &ids)) {
        std::fprintf(stderr, "encode failed: %s\n", e.message.c_str());
        return 1;
      }
      std::vector<double> encode_rates, decode_rates;
      std::string decoded;
      for (int r = 0; r < runs; ++r) {
        double start = now_s();
        (void)tok->encode(text.bytes, options, &ids);
        encode_rates.push_back(static_cast<double>(text.bytes.size()) / 1e6 / (now_s() - start));
        start = now_s();
        (void)tok->decode(ids.data(), ids.size(), false, &decoded);
        decode_rates.push_back(static_cast<double>(text.bytes.size()) / 1e6 / (now_s() - start));
      }
      const Stats s = stats(encode_rates);
      std::printf("| %s | %s | %.2f | %.2f | %.2f | %zu | %.1f |\n", entry.name, text.name, s.median, s.min, s.max,
                  ids.size(), stats(decode_rates).median);
      std::fflush(stdout);
    }
  }
  return 0;
}

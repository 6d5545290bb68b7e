// tests/cli/test_cli.cpp — the `colibri` executable end to end, run as a user would (popen):
// exit codes and messages, the .npy logits against the transformers oracle, greedy decoding,
// tokenize/detokenize round trips, the bundled model's reference text and perplexity
// (models/colibri-tiny-moe/reference.json), bench --json. Paths come from CMake:
//   COLIBRI_CLI_EXE, COLIBRI_MODEL_EXE, COLIBRI_SOURCE_DIR, COLIBRI_CLI_TEST_DIR,
//   COLIBRI_ORACLE_IMAGE (tests/fixtures/oracle/mixtral_gqa converted as f32),
//   COLIBRI_DEFAULT_MODEL_IMAGE (the bundled model, built by the default target).
#define CATCH_CONFIG_MAIN
#include <dirent.h>
#include <linux/mempolicy.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

using Catch::Contains;
using nlohmann::json;

namespace {

struct Run {
  int exit_code;
  std::string out;  // standard output
  std::string err;  // standard error
};

std::string read_file(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool exists(const std::string &path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0;
}

// Temporary directories, removed when the test process exits.
struct TempDirs {
  std::vector<std::string> paths;
  ~TempDirs() {
    for (const std::string &p : paths) {
      std::error_code ignored;
      std::filesystem::remove_all(p, ignored);
    }
  }
};

std::string temp_dir() {
  static TempDirs dirs;
  char tmpl[] = "/tmp/colibri-cli-test-XXXXXX";
  char *dir = ::mkdtemp(tmpl);
  REQUIRE(dir);
  dirs.paths.emplace_back(dir);
  return dir;
}

// Runs `colibri ARGS` (ARGS is shell text), stdin from `input` when given.
Run colibri(const std::string &args, const std::string &input = "") {
  static const std::string dir = temp_dir();
  static int counter = 0;
  const std::string err_path = dir + "/stderr-" + std::to_string(counter) + ".txt";
  const std::string in_path = dir + "/stdin-" + std::to_string(counter++) + ".txt";
  std::ofstream(in_path, std::ios::binary) << input;
  const std::string cmd = std::string(COLIBRI_CLI_EXE) + " " + args + " <" + in_path + " 2>" + err_path;
  FILE *pipe = ::popen(cmd.c_str(), "r");
  REQUIRE(pipe);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, read_file(err_path)};
}

std::string quote(const std::string &s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string join(const std::vector<int> &ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  return s;
}

json read_json(const std::string &path) { return json::parse(read_file(path)); }

const std::string kSource = COLIBRI_SOURCE_DIR;
const std::string kOracleDir = kSource + "/tests/fixtures/oracle/mixtral_gqa";
const std::string kBundledDir = kSource + "/models/colibri-tiny-moe";

// The oracle image: made by the ctest fixture, or here when the test runs on its own.
std::string oracle_image() {
  const std::string image = COLIBRI_ORACLE_IMAGE;
  if (!exists(image)) {
    const std::string cmd = std::string(COLIBRI_MODEL_EXE) + " convert " + kOracleDir + " -o " + image + " --dtype f32 --force --quiet";
    REQUIRE(std::system(cmd.c_str()) == 0);
  }
  return image;
}

std::string bundled_image() {
  const std::string image = COLIBRI_DEFAULT_MODEL_IMAGE;
  INFO("the bundled model image is built by the default target: cmake --build BUILD_DIR");
  REQUIRE(exists(image));
  return image;
}

struct Npy {
  std::string header;  // the dict text, padding included
  size_t header_total = 0;
  std::vector<float> values;
};

Npy read_npy(const std::string &path) {
  std::string bytes = read_file(path);
  REQUIRE(bytes.size() >= 10);
  REQUIRE(bytes.compare(0, 8, std::string("\x93NUMPY\x01\x00", 8)) == 0);
  size_t length = static_cast<uint8_t>(bytes[8]) | static_cast<size_t>(static_cast<uint8_t>(bytes[9])) << 8;
  Npy npy;
  npy.header = bytes.substr(10, length);
  npy.header_total = 10 + length;
  REQUIRE((bytes.size() - npy.header_total) % 4 == 0);
  npy.values.resize((bytes.size() - npy.header_total) / 4);
  std::memcpy(npy.values.data(), bytes.data() + npy.header_total, bytes.size() - npy.header_total);
  return npy;
}

std::vector<float> read_f32(const std::string &path) {
  std::string bytes = read_file(path);
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

size_t argmax(const float *row, size_t n) {
  size_t best = 0;
  for (size_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return best;
}

}  // namespace

TEST_CASE("usage errors exit 2 with a message that names the problem", "[cli][usage]") {
  Run none = colibri("");
  CHECK(none.exit_code == 2);
  CHECK_THAT(none.err, Contains("Commands:"));
  Run unknown = colibri("frobnicate");
  CHECK(unknown.exit_code == 2);
  CHECK_THAT(unknown.err, Contains("unknown command 'frobnicate'"));
  Run negative = colibri("run -p hi -n -5");
  CHECK(negative.exit_code == 2);
  CHECK_THAT(negative.err, Contains("-n/--max-tokens must be an integer from 1 to 1000000, got -5"));
  Run threads = colibri("run -p hi --threads 100000");
  CHECK(threads.exit_code == 2);
  CHECK_THAT(threads.err, Contains("--threads must be an integer from 1 to 1024"));
  Run flag = colibri("run -p hi --no-such-flag");
  CHECK(flag.exit_code == 2);
  CHECK_THAT(flag.err, Contains("no-such-flag") && Contains("colibri run --help"));
  CHECK(colibri("run").exit_code == 2);
  CHECK(colibri("run -p hi -f x.txt").exit_code == 2);
  CHECK(colibri("run -p hi stray").exit_code == 2);
  CHECK(colibri("run -p hi --temp nan").exit_code == 2);
  CHECK(colibri("run -p hi --top-p 1e-300").exit_code == 2);  // 0 as the sampler's float
  // The sampling flags' ranges are the library's (colibri_sampler_options): the edges run, a
  // value beyond them is a usage error before any output, not a generation error after the echo.
  for (const std::string edge : {"--repeat-penalty 10", "--repeat-penalty 0.01", "--presence-penalty 2",
                                 "--presence-penalty -2", "--frequency-penalty 2", "--frequency-penalty -2",
                                 "--temp 100", "--min-p 1"}) {
    INFO(edge);
    CHECK(colibri("run -p hi -n 2 --seed 1 " + edge).exit_code == 0);
  }
  for (const std::string beyond : {"--repeat-penalty 10.5", "--presence-penalty 2.5", "--frequency-penalty -3"}) {
    INFO(beyond);
    Run r = colibri("run -p hi -n 2 " + beyond);
    CHECK(r.exit_code == 2);
    CHECK(r.out.empty());
    CHECK_THAT(r.err, Contains(beyond.substr(0, beyond.find(' '))));
  }
  CHECK(colibri("run -p hi --numa bind:x").exit_code == 2);
  Run isa = colibri("run -p hi --isa sse");
  CHECK(isa.exit_code == 2);
  CHECK_THAT(isa.err, Contains("--isa must be auto, avx512, avx2 or scalar, got 'sse'"));
  CHECK(colibri("logits --tokens 1,2").exit_code == 2);          // no -o
  CHECK(colibri("logits -o x.npy --tokens 1,,2").exit_code == 2);  // bad list
  CHECK(colibri("perplexity").exit_code == 2);
  CHECK(colibri("perplexity -f x --window 64 --stride 65").exit_code == 2);
  CHECK(colibri("bench -r 0").exit_code == 2);
  CHECK(colibri("bench -t 1,0").exit_code == 2);
  CHECK(colibri("tokenize").exit_code == 2);
  CHECK(colibri("detokenize").exit_code == 2);
  // Every message is one line on stderr, nothing on stdout.
  CHECK(negative.out.empty());
  CHECK(std::count(negative.err.begin(), negative.err.end(), '\n') == 1);
}

TEST_CASE("output that cannot be written is an error, not a silent exit 0", "[cli][errors]") {
  if (!exists("/dev/full")) {
    WARN("no /dev/full on this machine: not checked");
    return;
  }
  for (const std::string args : {"tokenize -p hello", "run -p hi -n 2 --seed 1", "bench -p 8 -n 0 -r 1 -t 1 --json --probe-mib 16"}) {
    INFO(args);
    Run r = colibri(args + " >/dev/full");
    CHECK(r.exit_code == 4);  // I/O (docs/cli.md "Exit status")
    CHECK_THAT(r.err, Contains("writing to standard output failed"));
  }
}

TEST_CASE("run on an image whose tokenizer this build cannot load says why", "[cli][errors]") {
  const std::string dir = temp_dir();
  std::filesystem::copy(kOracleDir, dir + "/hf");
  std::ofstream(dir + "/hf/tokenizer.json", std::ios::trunc) << R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})";
  const std::string image = dir + "/m.colibri";
  REQUIRE(std::system((std::string(COLIBRI_MODEL_EXE) + " convert " + dir + "/hf -o " + image + " -q 2>/dev/null").c_str()) == 0);
  Run r = colibri("run -m " + image + " -p hi -n 2");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("tokenizer could not be loaded") && Contains("WordPiece"));
}

TEST_CASE("NaN after the last MoE input fails run with the stage named, never token 0 forever", "[cli][errors][nonfinite]") {
  // COLIBRI_NAN_IMAGE: the tiny synthetic model with its final norm all NaN (make_nan_image).
  for (const std::string sampling : {"--temp 0", "--temp 0.8 --seed 3"}) {
    INFO(sampling);
    Run r = colibri("run --raw -m " COLIBRI_NAN_IMAGE " -p ab -n 8 " + sampling);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Contains("not finite") && Contains("(stage: output_norm;") && Contains("position"));
    CHECK(r.out.empty());  // no token text was printed
  }
}

TEST_CASE("a device given to -f is refused, not read until memory runs out", "[cli][errors]") {
  for (const std::string command : {"tokenize", "run", "perplexity"}) {
    INFO(command);
    Run r = colibri(command + " -f /dev/zero");
    CHECK(r.exit_code == 4);
    CHECK_THAT(r.err, Contains("/dev/zero: is a device"));
  }
}

TEST_CASE("JSON output (--json) survives a file name that is not UTF-8", "[cli][json]") {
  const std::string path = temp_dir() + "/text-\xff.txt";
  std::ofstream(path) << "In the beginning God created the heaven and the earth.\n";
  Run r = colibri("perplexity --json -f '" + path + "'");
  REQUIRE(r.exit_code == 0);
  const json out = json::parse(r.out);
  CHECK(out["file"].get<std::string>().find("\xEF\xBF\xBD") != std::string::npos);  // U+FFFD for the bad byte
  CHECK(out["perplexity"].get<double>() > 1.0);
}

TEST_CASE("--help is complete for every subcommand and exits 0", "[cli][usage]") {
  Run top = colibri("--help");
  CHECK(top.exit_code == 0);
  for (const char *c : {"run", "bench", "perplexity", "logits", "tokenize", "detokenize"}) CHECK_THAT(top.out, Contains(c));
  CHECK(colibri("--version").exit_code == 0);
  const std::vector<std::pair<std::string, std::vector<std::string>>> expected = {
      {"run", {"--model", "--prompt", "--file", "--chat", "--max-tokens", "--temp", "--top-k", "--top-p", "--min-p",
               "--repeat-penalty", "--presence-penalty", "--frequency-penalty", "--seed", "--stop", "--threads", "--ctx",
               "--kv-f16", "--numa", "--mlock", "--populate", "--load-into-memory", "--verify", "--raw"}},
      {"bench", {"--model", "--n-prompt", "--n-gen", "--depth", "--threads", "--repetitions", "--json", "--profile"}},
      {"perplexity", {"--model", "--file", "--window", "--stride"}},
      {"logits", {"--model", "--tokens", "--all-positions", "--output"}},
      {"tokenize", {"--model", "--prompt", "--file", "--special"}},
      {"detokenize", {"--model", "--tokens"}},
  };
  for (const auto &[command, flags] : expected) {
    Run help = colibri(command + " --help");
    INFO(command);
    CHECK(help.exit_code == 0);
    for (const std::string &f : flags) CHECK_THAT(help.out, Contains(f));
  }
}

TEST_CASE("a missing file or a non-image is a one-line error with the shared exit codes, never a crash", "[cli][errors]") {
  Run missing = colibri("run -m /nonexistent/model.colibri -p hi");
  CHECK(missing.exit_code == 4);  // I/O
  CHECK_THAT(missing.err, Contains("/nonexistent/model.colibri"));
  Run text = colibri("tokenize -m " + kBundledDir + "/config.json -p hi");
  CHECK(text.exit_code == 3);  // not an image
  CHECK_THAT(text.err, Contains("not a Colibri image"));
  Run safetensors = colibri("run -m " + kBundledDir + "/model.safetensors -p hi");
  CHECK(safetensors.exit_code == 3);
  CHECK_THAT(safetensors.err, Contains("colibri-model convert"));
  Run no_prompt_file = colibri("run -m " + oracle_image() + " -f /nonexistent/prompt.txt");
  CHECK(no_prompt_file.exit_code == 4);
  CHECK_THAT(no_prompt_file.err, Contains("/nonexistent/prompt.txt"));
  Run vocab = colibri("logits -m " + oracle_image() + " --tokens 1,512 -o /tmp/never.npy");
  CHECK(vocab.exit_code == 2);
  CHECK_THAT(vocab.err, Contains("outside the model's vocabulary"));
}

TEST_CASE("logits writes a valid .npy equal to the transformers oracle within 1e-4", "[cli][oracle][logits]") {
  const json oracle = read_json(kOracleDir + "/oracle.json");
  const std::vector<int> ids = oracle["input_ids"];
  const size_t vocab = oracle["logits_shape"][1];
  const std::vector<float> expected = read_f32(kOracleDir + "/logits.bin");
  REQUIRE(expected.size() == ids.size() * vocab);
  const std::string dir = temp_dir();

  Run all = colibri("logits -m " + oracle_image() + " --tokens " + join(ids) + " --all-positions -o " + dir + "/all.npy");
  REQUIRE(all.exit_code == 0);
  Npy npy = read_npy(dir + "/all.npy");
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(ids.size()) + ", " +
                           std::to_string(vocab) + "), }";
  CHECK(npy.header.compare(0, dict.size(), dict) == 0);
  CHECK(npy.header.back() == '\n');
  CHECK(npy.header_total % 64 == 0);
  REQUIRE(npy.values.size() == expected.size());
  double max_diff = 0;
  for (size_t i = 0; i < expected.size(); ++i) max_diff = std::max(max_diff, std::fabs(double(npy.values[i]) - expected[i]));
  CHECK(max_diff < 1e-4);

  Run last = colibri("logits -m " + oracle_image() + " --tokens " + join(ids) + " -o " + dir + "/last.npy");
  REQUIRE(last.exit_code == 0);
  Npy last_npy = read_npy(dir + "/last.npy");
  const std::string last_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, " + std::to_string(vocab) + "), }";
  CHECK(last_npy.header.compare(0, last_dict.size(), last_dict) == 0);
  REQUIRE(last_npy.values.size() == vocab);
  for (size_t i = 0; i < vocab; ++i) CHECK(std::fabs(last_npy.values[i] - expected[(ids.size() - 1) * vocab + i]) < 1e-4);
}

TEST_CASE("logits replaces the output atomically and leaves nothing behind on failure", "[cli][logits]") {
  const std::string dir = temp_dir();
  std::ofstream(dir + "/out.npy") << "old";
  REQUIRE(colibri("logits -m " + oracle_image() + " --tokens 1,2,3 -o " + dir + "/out.npy").exit_code == 0);
  CHECK(read_npy(dir + "/out.npy").values.size() == 512);
  Run bad = colibri("logits -m " + oracle_image() + " --tokens 1 -o " + dir + "/missing/out.npy");
  CHECK(bad.exit_code == 4);
  CHECK_THAT(bad.err, Contains(dir + "/missing"));
  std::vector<std::string> entries;
  if (DIR *d = ::opendir(dir.c_str())) {
    while (dirent *e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) entries.emplace_back(e->d_name);
    ::closedir(d);
  }
  CHECK(entries == std::vector<std::string>{"out.npy"});

  // Never over the model itself, a FIFO or a device: usage errors, the files untouched.
  const std::string model = dir + "/model.colibri";
  {
    std::ifstream in(oracle_image(), std::ios::binary);
    std::ofstream out(model, std::ios::binary);
    out << in.rdbuf();
  }
  const std::string model_bytes = read_file(model);
  Run self = colibri("logits -m " + model + " --tokens 1,2 -o " + model);
  CHECK(self.exit_code == 2);
  CHECK_THAT(self.err, Contains("is the model image"));
  CHECK(read_file(model) == model_bytes);
  REQUIRE(::mkfifo((dir + "/fifo").c_str(), 0600) == 0);
  Run fifo = colibri("logits -m " + model + " --tokens 1,2 -o " + dir + "/fifo");
  CHECK(fifo.exit_code == 2);
  CHECK_THAT(fifo.err, Contains("not a regular file"));
  struct stat st{};
  REQUIRE(::stat((dir + "/fifo").c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
}

TEST_CASE("greedy decoding reproduces the oracle's greedy tokens", "[cli][oracle][greedy]") {
  const json oracle = read_json(kOracleDir + "/oracle.json");
  const std::vector<int> input_ids = oracle["input_ids"];
  const std::vector<int> greedy = oracle["greedy_tokens"];
  const std::string image = oracle_image();
  const std::string dir = temp_dir();

  // The input ids are prompt_text's plus one more token: their text, encoded with special
  // tokens, gives them back, so `run` can be given the same prompt as text.
  Run text = colibri("detokenize -m " + image + " --skip-special --tokens " + join(input_ids));
  REQUIRE(text.exit_code == 0);
  const std::string prompt = text.out;
  CHECK(prompt.rfind(oracle["prompt_text"].get<std::string>(), 0) == 0);
  Run ids = colibri("tokenize -m " + image + " --special -p " + quote(prompt));
  REQUIRE(ids.exit_code == 0);
  REQUIRE(ids.out == join(input_ids) + "\n");

  // Step by step through `colibri logits`: the argmax of the last position is the next token.
  std::vector<int> sequence = input_ids;
  for (size_t step = 0; step < greedy.size(); ++step) {
    Run r = colibri("logits -m " + image + " --tokens " + join(sequence) + " -o " + dir + "/step.npy");
    REQUIRE(r.exit_code == 0);
    Npy npy = read_npy(dir + "/step.npy");
    INFO("step " << step);
    CHECK(static_cast<int>(argmax(npy.values.data(), npy.values.size())) == greedy[step]);
    sequence.push_back(greedy[step]);
  }

  // `colibri run --temp 0` streams exactly the text of those tokens.
  Run expected = colibri("detokenize -m " + image + " --tokens " + join(greedy));
  REQUIRE(expected.exit_code == 0);
  Run run = colibri("run -m " + image + " -p " + quote(prompt) + " -n " + std::to_string(greedy.size()) +
                    " --temp 0 --ignore-eos --raw");
  REQUIRE(run.exit_code == 0);
  CHECK(run.out == expected.out);
  CHECK_THAT(run.err, Contains("generated " + std::to_string(greedy.size()) + " tokens") && Contains("finish: length"));
  // The same from a copy of the image in memory.
  Run loaded = colibri("run -m " + image + " -p " + quote(prompt) + " -n " + std::to_string(greedy.size()) +
                       " --temp 0 --ignore-eos --raw --load-into-memory");
  REQUIRE(loaded.exit_code == 0);
  CHECK(loaded.out == expected.out);
}

TEST_CASE("tokenize and detokenize round-trip text", "[cli][tokenizer]") {
  const std::string text = "In the beginning God created the heaven and the earth.\nAnd the earth was without form; 42 — café.";
  for (const std::string &image : {oracle_image(), bundled_image()}) {
    INFO(image);
    Run ids = colibri("tokenize -m " + image + " -f -", text);
    REQUIRE(ids.exit_code == 0);
    REQUIRE(ids.out.back() == '\n');
    CHECK(ids.out.find_first_not_of("0123456789,\n") == std::string::npos);
    Run back = colibri("detokenize -m " + image + " --tokens " + ids.out.substr(0, ids.out.size() - 1));
    REQUIRE(back.exit_code == 0);
    CHECK(back.out == text);
    // With --special the post-processor's BOS comes first; --skip-special leaves it out again.
    Run special = colibri("tokenize -m " + image + " --special -f -", text);
    REQUIRE(special.exit_code == 0);
    CHECK(special.out.size() > ids.out.size());
    Run skipped = colibri("detokenize -m " + image + " --skip-special --tokens " + special.out.substr(0, special.out.size() - 1));
    CHECK(skipped.out == text);
  }
}

TEST_CASE("a model whose vocabulary is padded past its tokenizer's generates and decodes padding ids as no text",
          "[cli][tokenizer]") {
  // Qwen and OLMoE checkpoints have more embedding rows than tokenizer ids; Hugging Face decodes
  // a padding id as empty text. The oracle fixture is converted with a tokenizer cut to ids
  // 0..99 (and the merges that stay inside them), so the model's ids 100..511 are padding.
  const std::string dir = temp_dir();
  const std::string src = dir + "/padded";
  std::filesystem::copy(kOracleDir, src);
  json tok = read_json(src + "/tokenizer.json");
  constexpr int kKept = 100;
  json vocab = json::object();
  for (auto it = tok["model"]["vocab"].begin(); it != tok["model"]["vocab"].end(); ++it)
    if (it.value().get<int>() < kKept) vocab[it.key()] = it.value();
  json merges = json::array();
  for (const json &m : tok["model"]["merges"]) {
    const std::string text = m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>();
    const size_t space = text.find(' ');
    const std::string a = text.substr(0, space), b = text.substr(space + 1);
    if (vocab.contains(a) && vocab.contains(b) && vocab.contains(a + b)) merges.push_back(m);
  }
  tok["model"]["vocab"] = vocab;
  tok["model"]["merges"] = merges;
  std::ofstream(src + "/tokenizer.json") << tok.dump();
  const std::string image = dir + "/padded.colibri";
  REQUIRE(std::system((std::string(COLIBRI_MODEL_EXE) + " convert " + src + " -o " + image + " --quiet").c_str()) == 0);

  // detokenize: a padding id adds nothing; an id past the model's 512 rows is a usage error.
  Run plain = colibri("detokenize -m " + image + " --tokens 1,40,41");
  REQUIRE(plain.exit_code == 0);
  Run padded = colibri("detokenize -m " + image + " --tokens 1,40,300,41,511");
  INFO(padded.err);
  REQUIRE(padded.exit_code == 0);
  CHECK(padded.out == plain.out);
  Run outside = colibri("detokenize -m " + image + " --tokens 1,512");
  CHECK(outside.exit_code == 2);
  CHECK_THAT(outside.err, Contains("token 512 is outside the model's vocabulary (ids 0..511)"));

  // run: the greedy tokens of the full tokenizer's prompt include padding ids here (most of the
  // vocabulary is); generation goes to the end instead of failing on the first one.
  Run run = colibri("run -m " + image + " -p 'The test is small' -n 48 --temp 0 --ignore-eos --raw");
  INFO(run.err);
  CHECK(run.exit_code == 0);
  CHECK_THAT(run.err, Contains("generated 48 tokens") && Contains("finish: length"));
}

TEST_CASE("run without -m uses the bundled model and prints the reference greedy text", "[cli][bundled]") {
  bundled_image();
  const json reference = read_json(kBundledDir + "/reference.json");
  const std::string prompt = reference["greedy"]["prompt"];
  const std::string text = reference["greedy"]["generated_text"];
  const int n = reference["greedy"]["new_tokens"];
  Run run = colibri("run -p " + quote(prompt) + " -n " + std::to_string(n) + " --temp 0");
  REQUIRE(run.exit_code == 0);
  CHECK(run.out == prompt + text + "\n");
  CHECK_THAT(run.err, Contains("prompt 5 tokens") && Contains("generated 32 tokens") && Contains("tokens/s") &&
                          Contains("finish: length"));
  Run raw = colibri("run -p " + quote(prompt) + " -n " + std::to_string(n) + " --temp 0 --raw");
  REQUIRE(raw.exit_code == 0);
  CHECK(raw.out == text);
}

TEST_CASE("the bundled model's logits equal the committed transformers reference", "[cli][bundled]") {
  const json reference = read_json(kBundledDir + "/reference.json");
  const std::vector<int> ids = reference["reference_logits"]["token_ids"];
  const std::vector<float> expected = read_f32(kBundledDir + "/reference_logits.bin");
  const std::string dir = temp_dir();
  Run r = colibri("logits --tokens " + join(ids) + " --all-positions -o " + dir + "/ref.npy");
  REQUIRE(r.exit_code == 0);
  Npy npy = read_npy(dir + "/ref.npy");
  REQUIRE(npy.values.size() == expected.size());
  double max_diff = 0;
  for (size_t i = 0; i < expected.size(); ++i) max_diff = std::max(max_diff, std::fabs(double(npy.values[i]) - expected[i]));
  CHECK(max_diff < 1e-4);
}

TEST_CASE("perplexity of the bundled model on the held-out text is within 0.5% of transformers'", "[cli][bundled][perplexity]") {
  bundled_image();
  const json reference = read_json(kBundledDir + "/reference.json");
  const double expected = reference["perplexity"]["value"];
  Run r = colibri("perplexity -f " + kBundledDir + "/heldout.txt --window 256 --stride 256 --json");
  REQUIRE(r.exit_code == 0);
  const json result = json::parse(r.out);
  const double ppl = result["perplexity"];
  INFO("colibri " << ppl << " vs transformers " << expected);
  CHECK(std::fabs(ppl / expected - 1) < 0.005);
  CHECK(result["tokens_in_file"] == reference["perplexity"]["tokens_in_file"]);
  CHECK(result["tokens_scored"] == reference["perplexity"]["tokens_scored"]);
  CHECK(result["tokens_per_second"].get<double>() > 0);
  // --stride defaults to the window: non-overlapping windows of any size.
  Run small = colibri("perplexity -f " + kBundledDir + "/heldout.txt --window 128 --json");
  REQUIRE(small.exit_code == 0);
  CHECK(json::parse(small.out)["stride"] == 128);
}

TEST_CASE("chat keeps a conversation on stdin with the model's template", "[cli][chat]") {
  Run chat = colibri("run --chat -n 8 --temp 0", "And God said,\n/reset\nIn the beginning\n");
  REQUIRE(chat.exit_code == 0);
  CHECK(std::count(chat.out.begin(), chat.out.end(), '\n') == 2);
  CHECK_THAT(chat.err, Contains("2 turns") && Contains("conversation cleared"));
}

TEST_CASE("the --isa flag caps the kernels of the sessions a command creates", "[cli][isa]") {
  Run scalar = colibri("bench -p 16 -n 0 -r 1 -t 1 --json --probe-mib 16 --isa scalar");
  REQUIRE(scalar.exit_code == 0);
  CHECK(json::parse(scalar.out)["backend"] == "cpu-scalar");
  // The scalar kernels' logits agree with the oracle as closely as the default ones.
  const json oracle = read_json(kOracleDir + "/oracle.json");
  const std::vector<int> ids = oracle["input_ids"];
  const size_t vocab = oracle["logits_shape"][1];
  const std::vector<float> expected = read_f32(kOracleDir + "/logits.bin");
  const std::string dir = temp_dir();
  Run r = colibri("logits -m " + oracle_image() + " --tokens " + join(ids) + " --isa scalar -o " + dir + "/s.npy");
  REQUIRE(r.exit_code == 0);
  Npy npy = read_npy(dir + "/s.npy");
  REQUIRE(npy.values.size() == vocab);
  for (size_t i = 0; i < vocab; ++i) CHECK(std::fabs(npy.values[i] - expected[(ids.size() - 1) * vocab + i]) < 1e-4);
}

// What `numactl --physcpubind=C --membind=0 colibri ...` does, without numactl: the CPU
// affinity and the memory policy of the thread that forks are inherited by the child and kept
// across exec. popen runs on a thread of its own, so the test's thread keeps its own.
Run colibri_confined(int cpu, const std::string &args) {
  Run run{-1, "", ""};
  bool confined = false;
  std::thread t([&] {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    unsigned long node0 = 1;
    confined = ::sched_setaffinity(0, sizeof set, &set) == 0 &&
               ::syscall(SYS_set_mempolicy, MPOL_BIND, &node0, 64 + 1ul) == 0;
    if (!confined) return;
    const std::string cmd = std::string(COLIBRI_CLI_EXE) + " " + args + " 2>&1";
    FILE *pipe = ::popen(cmd.c_str(), "r");
    if (!pipe) return;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) run.out.append(buf, n);
    const int status = ::pclose(pipe);
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  });
  t.join();
  REQUIRE(confined);
  return run;
}

TEST_CASE("under an inherited CPU affinity and memory policy (numactl) bench keeps its threads and weights there",
          "[cli][bench][numa]") {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  REQUIRE(::sched_getaffinity(0, sizeof mine, &mine) == 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &mine)) ++cpu;
  const std::string bench = "bench --json -p 8 -n 4 -r 1 --probe-mib 32 ";
  Run interleave = colibri_confined(cpu, bench + "--numa interleave");
  INFO(interleave.out);
  REQUIRE(interleave.exit_code == 0);
  const json j = json::parse(interleave.out.substr(interleave.out.find('{')));
  // One thread: the CPUs the process may use, not the machine's.
  for (const json &r : j["results"]) CHECK(r["threads"] == 1);
  const std::string placement = j["model"]["placement"];
  CHECK(j["model"]["weights"] == (placement.find("copied into memory") != std::string::npos ? "loaded into memory" : "file mapping"));
  if (placement.find("nothing placed") == std::string::npos) {
    // Interleaved over the nodes the inherited policy allows (node 0), as the kernel reports.
    CHECK_THAT(placement, Contains("interleaved over node 0;") && Contains("measured: node 0: 100% of "));
  }
  Run bind = colibri_confined(cpu, bench + "--numa bind:0");
  CHECK(bind.exit_code == 0);
}

TEST_CASE("bench --json parses and has the table's fields", "[cli][bench]") {
  Run r = colibri("bench -p 16 -n 8 -r 3 -t 1 --json --profile --probe-mib 32");
  REQUIRE(r.exit_code == 0);
  const json j = json::parse(r.out);
  CHECK(j["model"]["family"] == "qwen3_moe");
  CHECK(j["model"]["active_weight_bytes"].get<uint64_t>() > 0);
  CHECK(j["model"]["parameter_count"].get<uint64_t>() > j["model"]["active_parameter_count"].get<uint64_t>());
  CHECK(j["model"]["file_size_bytes"].get<uint64_t>() > 0);
  CHECK(j["model"]["weights"] == "file mapping");
  // The mapping's pages as /proc/self/smaps counts them after the tests: the weights were read.
  REQUIRE(j["model"].contains("mapping"));
  const uint64_t resident = j["model"]["mapping"]["resident_bytes"].get<uint64_t>();
  CHECK(resident >= j["model"]["active_weight_bytes"].get<uint64_t>());
  CHECK(resident <= j["model"]["file_size_bytes"].get<uint64_t>() + 4096);
  CHECK(j["model"]["mapping"]["huge_page_bytes"].get<uint64_t>() <= resident);
  CHECK(j["backend"].get<std::string>().rfind("cpu-", 0) == 0);
  REQUIRE(j["bandwidth"].size() == 1);
  const json &bw = j["bandwidth"][0];
  CHECK(bw["read_gb_per_s"].get<double>() > 0);
  // The figure is the better of the two readers' medians, and says which one it is.
  const double plain = bw["read_gb_per_s_plain"].get<double>(), ahead = bw["read_gb_per_s_prefetch"].get<double>();
  CHECK(bw["read_gb_per_s"].get<double>() == std::max(plain, ahead));
  CHECK(bw["probe_reader"] == (ahead > plain ? "prefetch" : "plain"));
  REQUIRE(j["results"].size() == 2);
  const json &pp = j["results"][0], &tg = j["results"][1];
  CHECK(pp["test"] == "pp16");
  CHECK(tg["test"] == "tg8");
  for (const json *t : {&pp, &tg}) {
    CHECK((*t)["threads"] == 1);
    CHECK((*t)["tokens_per_second"]["samples"].size() == 3);
    const json &tps = (*t)["tokens_per_second"];
    CHECK(tps["median"].get<double>() > 0);
    CHECK(tps["min"].get<double>() <= tps["median"].get<double>());
    CHECK(tps["median"].get<double>() <= tps["max"].get<double>());
    CHECK(tps["sd"].get<double>() >= 0);
    CHECK((*t)["profile"]["stage_ns_per_token"].contains("experts"));
  }
  CHECK(tg["roofline_percent"].get<double>() > 0);
  CHECK(tg["roofline_tokens_per_second"].get<double>() > 0);
  CHECK_FALSE(pp.contains("roofline_percent"));

  Run table = colibri("bench -p 16 -n 8 -r 3 -t 1 --probe-mib 32");
  REQUIRE(table.exit_code == 0);
  CHECK_THAT(table.out, Contains("| model | size | params | backend | threads | test | t/s |") && Contains("| pp16 |") &&
                            Contains("| tg8 |") && Contains("GB/s") && Contains(" ± ") &&
                            Contains("file mapping after the tests: ") && Contains("% of it in 2 MiB pages"));
  // Loaded into memory, nothing maps the file: no mapping line.
  Run loaded = colibri("bench -p 0 -n 4 -r 1 -t 1 --json --probe-mib 16 --load-into-memory");
  REQUIRE(loaded.exit_code == 0);
  CHECK_FALSE(json::parse(loaded.out)["model"].contains("mapping"));
}

TEST_CASE("bench -d runs every test after that many cached positions, named as llama-bench names them", "[cli][bench]") {
  Run r = colibri("bench -p 16 -n 8 -d 0,64 -r 1 -t 1 --json --profile --probe-mib 16");
  REQUIRE(r.exit_code == 0);
  const json j = json::parse(r.out);
  REQUIRE(j["results"].size() == 4);
  CHECK(j["results"][0]["test"] == "pp16");
  CHECK(j["results"][1]["test"] == "tg8");
  CHECK(j["results"][2]["test"] == "pp16 @ d64");
  CHECK(j["results"][3]["test"] == "tg8 @ d64");
  CHECK(j["results"][3]["depth"] == 64);
  CHECK(j["results"][0]["depth"] == 0);
  // The untimed prefill of the depth is not in the counters: 8 decode steps, 8 tokens.
  CHECK(j["results"][3]["profile"]["tokens"] == 8);
  CHECK(j["results"][3]["profile"]["forward_calls"] == 8);
  CHECK(j["results"][2]["profile"]["tokens"] == 16);
  // The KV bytes of 64 more positions lower the roofline.
  CHECK(j["results"][3]["roofline_tokens_per_second"].get<double>() < j["results"][1]["roofline_tokens_per_second"].get<double>());
  Run bad = colibri("bench -p 16 -n 0 -d 70000");
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Contains("-d/--depth"));
}

// Issue 18, item 4: the image truncated under a running process. Either the library's check
// between forward calls refuses the next one (exit 4, "truncated or replaced while in use") or,
// when the truncation lands inside a call, the SIGBUS handler says so (exit 135); never a silent
// death by signal. The command is a decode benchmark that runs for tens of seconds (1001 runs of
// 128 steps), so it cannot finish before the truncation: `colibri run` on the bundled model
// reaches its 256-token context in ~70 ms, and a truncation after that met a finished process
// (exit 0). The truncation waits until the image is mapped (/proc/PID/maps names it).
TEST_CASE("a running command whose image is truncated reports it, not a silent SIGBUS", "[cli][reliability]") {
  const std::string dir = temp_dir();
  const std::string image = dir + "/changing.colibri";
  std::filesystem::copy_file(bundled_image(), image);
  const std::string out_path = dir + "/out.txt", err_path = dir + "/err.txt";
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const std::string cmd = std::string("exec ") + COLIBRI_CLI_EXE + " bench -m " + image +
                            " -p 0 -n 128 -r 1000 -t 1 --probe-mib 16 >" + out_path + " 2>" + err_path + " </dev/null";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char *>(nullptr));
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  const std::string maps = "/proc/" + std::to_string(pid) + "/maps";
  bool mapped = false;
  while (!mapped && std::chrono::steady_clock::now() < deadline) {
    mapped = read_file(maps).find(image) != std::string::npos;
    if (!mapped) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  REQUIRE(mapped);
  // Let it decode for a while (the probe, the warm-up, some timed runs), then truncate.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  int status = 0;
  REQUIRE(::waitpid(pid, &status, WNOHANG) == 0);  // still running
  REQUIRE(::truncate(image.c_str(), 4096) == 0);
  pid_t waited = 0;
  while ((waited = ::waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (waited != pid) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    FAIL("colibri bench did not stop after the truncation");
  }
  const std::string err = read_file(err_path);
  INFO(err);
  REQUIRE(WIFEXITED(status));  // not killed by SIGBUS
  if (WEXITSTATUS(status) == 4) {
    CHECK_THAT(err, Contains("the image was truncated or replaced while in use: size ") && Contains("→ 4096") &&
                        Contains("reopen it"));
  } else {
    CHECK(WEXITSTATUS(status) == 135);
    CHECK_THAT(err, Contains("colibri: fatal: SIGBUS") && Contains("truncated or overwritten while in use"));
  }
}

// ---- issue 24: one flag vocabulary, llama.cpp habits, machine-readable output ----------------

TEST_CASE("llama.cpp spellings mean the same as Colibri's flags", "[cli][vocabulary]") {
  Run ours = colibri("run -p 'In the beginning' -n 6 --seed 7 --threads 1 --ctx 64 --temp 0.9 --stop xyz --kv-f16 --raw");
  REQUIRE(ours.exit_code == 0);
  Run theirs = colibri("run -p 'In the beginning' --n-predict 6 -s 7 -t 1 -c 64 --temperature 0.9 -r xyz -ctk f16 -ctv f16 "
                       "--no-display-prompt");
  REQUIRE(theirs.exit_code == 0);
  CHECK(theirs.out == ours.out);
  CHECK_THAT(theirs.err, Contains("seed 7"));
  CHECK(colibri("run -p hi -n 2 --seed 1 --ctx-size=64 --max-seq-len 64 --reverse-prompt=abc --no-mmap").exit_code == 0);
  // The design sources' deployment flags run as written.
  Run deploy = colibri("run --model " + std::string(COLIBRI_DEFAULT_MODEL_IMAGE) + " -p hi -n 2 --seed 1 --threads 1 --batch-size 4 --max-seq-len 128 "
                       "--top-k 40 --route-deterministic --warmup --numa-bind 0 --log-level info --profile");
  CHECK(deploy.exit_code == 0);
  CHECK_THAT(deploy.err, Contains("batch 4") && Contains("context 128") && Contains("profile over"));
  CHECK_THAT(colibri("run --help").out, Contains("--route-deterministic") && Contains("changes nothing"));
}

TEST_CASE("flags Colibri does not have are named with what it does instead", "[cli][vocabulary]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"run -p hi -ngl 99", "--device cuda (or cuda:N, or --gpu-id N) puts every layer on the GPU"},
      {"run -p hi --n-gpu-layers 99", "never some layers on each"},
      {"run -p hi -fa", "attention always runs fused"},
      {"run -p hi --port 8080", "does not serve HTTP: `colibri serve"},
      {"run -p hi -ts 3,1", "never some layers on each"},
      {"bench -ngl 99", "--device cuda"},
      {"run -p hi --device tpu", "--device must be cpu, cuda or cuda:N"},
      {"run -p hi --device cuda:x", "--device cuda:N"},
      {"run -p hi --gpu-id 1 --device cuda:0", "name different devices"},
      {"run -p hi --device cuda --numa bind:0", "does not apply with --device cuda"},
      {"run -p hi -ctk q8_0", "f32 (the default) or f16"},
      {"run -p hi -ctk f16 -ctv f32", "share one dtype"},
      {"run -p hi --numa-bind 0,1", "numactl --membind=0,1"},
      {"bench -o csv", "markdown table"},
      {"run -p hi -xyz", "unknown flag '-xyz'"},
  };
  for (const auto &[args, why] : cases) {
    INFO(args);
    Run r = colibri(args);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(why));
    CHECK_THAT(r.err, !Contains("unexpected argument"));
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
  CHECK_THAT(colibri("run -p hi -ngl 99").err, Contains("-ngl"));
  CHECK(colibri("run -p hi -n64 --seed 1 --raw").exit_code == 0);  // a short flag with its number attached stays valid
}

TEST_CASE("the device flag: cpu is the default, and cuda without a usable GPU is one line and exit 5", "[cli][device]") {
  Run cpu = colibri("run -p hi -n 2 --seed 1 --device cpu");
  Run plain = colibri("run -p hi -n 2 --seed 1");
  REQUIRE(cpu.exit_code == 0);
  CHECK(cpu.out == plain.out);
  // -dev and --main-gpu are llama.cpp's spellings of --device and --gpu-id.
  const std::string npy = temp_dir() + "/logits.npy";
  for (const std::string &args : {std::string("run -p hi -n 2 --device cuda"), std::string("run -p hi -n 2 --gpu-id 0"),
                                  std::string("bench -p 8 -n 0 -r 3 -dev cuda:0"),
                                  "logits --tokens 1,2 -o " + npy + " --main-gpu 0"}) {
    INFO(args);
    Run r = colibri(args);
    if (r.exit_code == 0) {
      WARN("a CUDA device is present: " << args << " ran on it");
      continue;
    }
    CHECK(r.exit_code == 5);
    CHECK_THAT(r.err, Contains("no CUDA device") || Contains("CUDA backend"));
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
}

TEST_CASE("bench -o json is --json", "[cli][vocabulary][json]") {
  Run r = colibri("bench -p 8 -n 0 -r 1 -t 1 --probe-mib 16 -o json");
  REQUIRE(r.exit_code == 0);
  CHECK(json::parse(r.out).contains("results"));
}

TEST_CASE("run --json prints the summary as one object with the seed", "[cli][json]") {
  Run text = colibri("run -p 'In the beginning' -n 5 --seed 11 --raw");
  REQUIRE(text.exit_code == 0);
  Run r = colibri("run -p 'In the beginning' -n 5 --seed 11 --json");
  REQUIRE(r.exit_code == 0);
  const json out = json::parse(r.out);
  CHECK(out["text"] == text.out);
  CHECK(out["seed"] == 11);
  CHECK(out["prompt_tokens"].get<int>() > 0);
  CHECK(out["generated_tokens"].get<int>() <= 5);
  CHECK(out["generated_tokens"].get<int>() >= 1);
  CHECK(out["finish_reason"].is_string());
  CHECK(out["decode_seconds"].get<double>() >= 0.0);
  CHECK(colibri("run --chat --json", "hi\n").exit_code == 2);
}

TEST_CASE("run --chat: the summary has the seed and an empty reply says so", "[cli][chat]") {
  Run first = colibri("run --chat --temp 0 -n 8 --seed 5", "And God said\n");
  REQUIRE(first.exit_code == 0);
  CHECK_THAT(first.err, Contains("seed 5"));
  const size_t at = first.out.find_first_not_of(" \t\r\n");
  REQUIRE(at != std::string::npos);
  const std::string stop(1, first.out[at]);
  if (stop == "'" || stop == "\\") {
    WARN("the reply starts with a quote character: not checked");
    return;
  }
  // Stopping at the reply's first visible character leaves a reply without text.
  Run empty = colibri("run --chat --temp 0 -n 8 --seed 5 --stop '" + stop + "'", "And God said\n");
  REQUIRE(empty.exit_code == 0);
  CHECK_THAT(empty.err, Contains("ended this reply without any text"));
}

TEST_CASE("threads stay inside the CPU set the process was given (taskset, numactl)", "[cli][numa]") {
  if (std::system("taskset -c 0 true 2>/dev/null") != 0) {
    WARN("taskset is not available: not checked");
    return;
  }
  Run r = colibri("run -p hi -n 1 --seed 1 --log-level info");
  REQUIRE(r.exit_code == 0);
  const std::string cmd = std::string("taskset -c 0 ") + COLIBRI_CLI_EXE + " run -p hi -n 1 --seed 1 --log-level info 2>&1 >/dev/null";
  FILE *pipe = ::popen(cmd.c_str(), "r");
  REQUIRE(pipe);
  std::string err;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) err.append(buffer, n);
  CHECK(::pclose(pipe) == 0);
  CHECK_THAT(err, Contains("session: 1 threads"));
}

// tests/capi/test_concurrency.cpp — several sessions on one shared model, driven from
// different threads at once, give exactly what the same work gives run one after another.
// Linked against libcolibri.so and colibri.h only.
//
// Usage: test_concurrency IMAGE
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "colibri.h"

namespace {

constexpr int kThreads = 4;
constexpr int kRounds = 3;

const int32_t kInputIds[] = {ORACLE_INPUT_IDS};
constexpr size_t kInputCount = sizeof kInputIds / sizeof kInputIds[0];

std::string last_error() {
  char message[1024];
  colibri_last_error(message, sizeof message, nullptr);
  return message;
}

struct Work {
  std::vector<int32_t> prompt;
  uint64_t seed = 0;
  float temperature = 0.0f;
};

struct Result {
  std::vector<int32_t> tokens;  // from the stream
  std::string text;
  std::vector<float> last_logits;  // after prefill + 4 decode steps of the same prompt
  std::string error;
};

// One unit of work on its own session: a sampled generation (pull stream), then a
// prefill/decode run whose final logits are kept.
Result run(colibri_model *model, const Work &work) {
  Result r;
  colibri_session_options so;
  colibri_session_options_init(&so, sizeof so);
  so.context_length = 64;
  so.threads = 2;
  so.seed = work.seed;
  colibri_session *session = nullptr;
  if (colibri_session_create(model, &so, &session) != COLIBRI_OK) {
    r.error = "session: " + last_error();
    return r;
  }
  colibri_sampler_options sampler;
  colibri_sampler_options_init(&sampler, sizeof sampler);
  sampler.temperature = work.temperature;
  colibri_generate_options g;
  colibri_generate_options_init(&g, sizeof g);
  g.max_tokens = 16;
  g.ignore_eos = 1;
  g.sampler = &sampler;
  for (int round = 0; round < kRounds && r.error.empty(); ++round) {
    colibri_stream *stream = nullptr;
    if (colibri_stream_open(session, work.prompt.data(), work.prompt.size(), &g, &stream) != COLIBRI_OK) {
      r.error = "stream: " + last_error();
      break;
    }
    std::string text;
    const char *piece;
    size_t size;
    int32_t status;
    while ((status = colibri_stream_next(stream, &piece, &size)) == COLIBRI_OK) text.append(piece, size);
    if (status != COLIBRI_DONE) r.error = "next: " + last_error();
    size_t count = 0;
    colibri_stream_tokens(stream, nullptr, 0, &count);
    std::vector<int32_t> tokens(count);
    colibri_stream_tokens(stream, tokens.data(), tokens.size(), &count);
    colibri_stream_close(stream);
    if (round == 0) {
      r.tokens = tokens;
      r.text = text;
    } else if (tokens != r.tokens || text != r.text) {
      r.error = "a repeated generation on the same session differed";
    }
  }
  if (r.error.empty()) {
    colibri_session_reset(session);
    if (colibri_session_prefill(session, 0, work.prompt.data(), work.prompt.size()) != COLIBRI_OK) r.error = last_error();
    for (int step = 0; step < 4 && r.error.empty(); ++step)
      if (colibri_session_decode(session, 0, 100 + step) != COLIBRI_OK) r.error = last_error();
    const float *logits = nullptr;
    size_t vocab = 0;
    if (r.error.empty() && colibri_session_logits(session, 0, &logits, &vocab, nullptr) == COLIBRI_OK)
      r.last_logits.assign(logits, logits + vocab);
  }
  colibri_session_free(session);
  return r;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s IMAGE\n", argv[0]);
    return 2;
  }
  colibri_model *model = nullptr;
  if (colibri_model_open(argv[1], nullptr, &model) != COLIBRI_OK) {
    std::fprintf(stderr, "open: %s\n", last_error().c_str());
    return 1;
  }
  // Four different jobs: prompts of different lengths, greedy and seeded sampling.
  std::vector<Work> work(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    work[t].prompt.assign(kInputIds, kInputIds + kInputCount - static_cast<size_t>(t));
    work[t].seed = 1000 + static_cast<uint64_t>(t);
    work[t].temperature = t % 2 == 0 ? 0.0f : 0.9f;
  }
  std::vector<Result> sequential(kThreads), concurrent(kThreads);
  for (int t = 0; t < kThreads; ++t) sequential[t] = run(model, work[t]);
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) threads.emplace_back([&, t] { concurrent[t] = run(model, work[t]); });
    for (std::thread &th : threads) th.join();
  }
  // The caller's reference can go while other threads... (all joined here) — close last.
  colibri_model_close(model);

  int failures = 0;
  for (int t = 0; t < kThreads; ++t) {
    const Result &s = sequential[t], &c = concurrent[t];
    if (!s.error.empty() || !c.error.empty()) {
      std::fprintf(stderr, "job %d failed: sequential '%s', concurrent '%s'\n", t, s.error.c_str(), c.error.c_str());
      ++failures;
      continue;
    }
    if (s.tokens.size() != 16) {
      std::fprintf(stderr, "job %d: %zu tokens, expected 16\n", t, s.tokens.size());
      ++failures;
    }
    if (s.tokens != c.tokens || s.text != c.text) {
      std::fprintf(stderr, "job %d: concurrent generation differs from the sequential one\n", t);
      ++failures;
    }
    if (s.last_logits.empty() ||
        std::memcmp(s.last_logits.data(), c.last_logits.data(), s.last_logits.size() * sizeof(float)) != 0) {
      std::fprintf(stderr, "job %d: concurrent logits differ from the sequential ones\n", t);
      ++failures;
    }
  }
  // Different jobs really did different work.
  if (sequential[0].tokens == sequential[1].tokens) {
    std::fprintf(stderr, "jobs 0 and 1 produced the same tokens: the test does not discriminate\n");
    ++failures;
  }
  std::printf("test_concurrency: %d threads x %d rounds, %d failures\n", kThreads, kRounds, failures);
  return failures == 0 ? 0 : 1;
}

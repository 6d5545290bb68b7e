// bench/serving_bench.cpp — the serving engine (core/serving) against one request at a time.
// Prints figures; asserts nothing.
//
//   serving_bench --model IMAGE [--threads 2] [--streams 8,32] [--tokens 64] [--prompt 16]
//                 [--history 1000] [--block 16] [--step 256]
//
// 1. Throughput: N requests of --prompt tokens generating --tokens tokens each (seeded
//    sampling, EOS ignored, tokens only), (a) one after another on one session (prefill, then
//    sample and decode token by token: the single-stream path) and (b) all submitted at once
//    to an engine of N slots. Prints the
//    aggregate tokens/s of both (generated tokens / wall time, prefill included) and the ratio,
//    and that the engine's tokens equal the sequential ones.
// 2. Second chat turn: a --history token prompt generates 16 tokens (turn 1); turn 2 is the
//    history + turn 1's output + 8 new tokens. Its time to first token on an engine that ran
//    turn 1 (prefix cache) against the same prompt on a fresh engine without the cache.
// The model needs a tokenizer.json (bench images from `engine_bench --make` have one; the
// requests are tokens only, so it need not cover the vocabulary).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/sampler.h"
#include "serving/engine.h"
#include "tokenizer/tokenizer.h"

using namespace colibri;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

[[noreturn]] void die(const std::string &m) {
  std::fprintf(stderr, "serving_bench: %s\n", m.c_str());
  std::exit(1);
}

// A prompt of n tokens spread over the vocabulary, different per request.
std::vector<int32_t> prompt_of(size_t n, size_t request, uint64_t vocab) {
  std::vector<int32_t> p;
  for (size_t i = 0; i < n; ++i) p.push_back(static_cast<int32_t>((request * 7919 + i * 104729 + 3) % vocab));
  return p;
}

// Tokens only (the benchmark images' tokenizer covers a few ids of the vocabulary).
serving::RequestOptions request_options(uint32_t tokens, uint64_t seed) {
  serving::RequestOptions o;
  o.max_tokens = tokens;
  o.ignore_eos = true;
  o.sampling.seed = seed;
  o.text = false;
  return o;
}

// One request alone on a session: prefill, then sample and decode one token at a time (the
// single-stream path); returns the sampled tokens.
std::vector<int32_t> generate_alone(runtime::Session &s, const std::vector<int32_t> &prompt,
                                    const serving::RequestOptions &o) {
  s.reset_sequence(0);
  runtime::Sampler sampler(o.sampling, s.model().config().vocab_size);
  std::vector<runtime::BatchEntry> batch;
  const size_t chunk = s.options().max_batch_tokens;
  for (size_t begin = 0; begin < prompt.size(); begin += chunk) {
    batch.clear();
    for (size_t i = begin; i < std::min(prompt.size(), begin + chunk); ++i)
      batch.push_back({0, static_cast<uint32_t>(i), prompt[i], i + 1 == prompt.size() ? 1u : 0u});
    if (Error e = s.forward(batch.data(), batch.size())) die(e.message);
  }
  for (int32_t t : prompt) sampler.accept(t);
  std::vector<int32_t> out;
  for (uint32_t position = static_cast<uint32_t>(prompt.size());;) {
    int32_t token = -1;
    if (Error se = sampler.sample(s.logits(0), &token)) die(se.message);
    sampler.accept(token);
    out.push_back(token);
    if (out.size() >= o.max_tokens) return out;
    const runtime::BatchEntry e{0, position++, token, 1};
    if (Error fe = s.forward(&e, 1)) die(fe.message);
  }
}

std::unique_ptr<serving::Engine> make_engine(const model::Model &m, const tokenizer::Tokenizer &t, uint32_t sequences,
                                             uint32_t context, size_t threads, uint32_t block, uint32_t step,
                                             bool prefix_cache) {
  serving::EngineOptions o;
  o.max_sequences = sequences;
  o.context_length = context;
  o.step_tokens = std::max(step, sequences);
  o.block_tokens = block;
  o.queue_capacity = sequences;
  o.prefix_cache = prefix_cache;
  o.session.threads = threads;
  Error err;
  auto e = serving::Engine::create(m, t, o, &err);
  if (!e) die(err.message);
  return e;
}

void drain(serving::Request &r) {
  std::string piece;
  while (r.next(&piece, std::chrono::nanoseconds(-1)) == serving::Request::Poll::Piece) {
  }
  const serving::RequestResult res = r.result();
  if (res.finish == runtime::FinishReason::Error) die(res.error.message);
}

}  // namespace

int main(int argc, char **argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each figure as soon as it is measured
  std::string model_path;
  size_t threads = 2, tokens = 64, prompt = 16, history = 1000;
  uint32_t block = 16, step = 256;
  std::vector<uint32_t> streams = {8, 32};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--model") model_path = value();
    else if (a == "--threads") threads = std::stoul(value());
    else if (a == "--tokens") tokens = std::stoul(value());
    else if (a == "--prompt") prompt = std::stoul(value());
    else if (a == "--history") history = std::stoul(value());
    else if (a == "--block") block = static_cast<uint32_t>(std::stoul(value()));
    else if (a == "--step") step = static_cast<uint32_t>(std::stoul(value()));
    else if (a == "--streams") {
      streams.clear();
      std::stringstream list(value());
      for (std::string item; std::getline(list, item, ',');) streams.push_back(static_cast<uint32_t>(std::stoul(item)));
    } else {
      die("usage: serving_bench --model IMAGE [--threads N] [--streams 8,32] [--tokens N] [--prompt N] [--history N] "
          "[--block N] [--step N]");
    }
  }
  if (model_path.empty()) die("give --model IMAGE");
  Error err;
  auto model = model::Model::load(model_path, {}, &err);
  if (!model) die(err.message);
  auto tok = tokenizer::Tokenizer::from_json(model->tokenizer().json, &err);
  if (!tok) die("the model's tokenizer: " + err.message);
  const uint64_t vocab = model->config().vocab_size;
  std::printf("model %s, %zu threads, %zu-token prompts, %zu tokens per request, KV blocks of %u, step %u tokens\n",
              model_path.c_str(), threads, prompt, tokens, block, step);

  // 1. Throughput.
  const uint32_t context = static_cast<uint32_t>(prompt + tokens + 1);
  runtime::SessionOptions so;
  so.context_length = context;
  so.threads = threads;
  auto session = runtime::Session::create(*model, so, &err);
  if (!session) die(err.message);
  for (uint32_t n : streams) {
    std::vector<std::vector<int32_t>> sequential_tokens(n);
    double t0 = now_s();
    for (uint32_t r = 0; r < n; ++r)
      sequential_tokens[r] = generate_alone(*session, prompt_of(prompt, r, vocab),
                                            request_options(static_cast<uint32_t>(tokens), 100 + r));
    const double sequential_s = now_s() - t0;
    auto engine = make_engine(*model, *tok, n, context, threads, block, step, true);
    std::vector<std::shared_ptr<serving::Request>> requests(n);
    t0 = now_s();
    for (uint32_t r = 0; r < n; ++r)
      if (Error e = engine->submit(prompt_of(prompt, r, vocab), request_options(static_cast<uint32_t>(tokens), 100 + r),
                                   &requests[r]))
        die(e.message);
    for (auto &r : requests) drain(*r);
    const double engine_s = now_s() - t0;
    size_t same = 0;
    for (uint32_t r = 0; r < n; ++r) same += requests[r]->generated_tokens() == sequential_tokens[r] ? 1 : 0;
    const serving::EngineStats st = engine->stats();
    const double total = static_cast<double>(n) * static_cast<double>(tokens);
    std::printf("%3u streams: sequential %.1f tok/s (%.2f s), engine %.1f tok/s (%.2f s): %.2fx; %llu steps, "
                "max %llu sequences per step; tokens equal to sequential: %zu/%u\n",
                n, total / sequential_s, sequential_s, total / engine_s, engine_s, sequential_s / engine_s,
                static_cast<unsigned long long>(st.steps), static_cast<unsigned long long>(st.max_batch_sequences), same, n);
  }

  // 2. Second chat turn over a long history.
  const std::vector<int32_t> turn1 = prompt_of(history, 999, vocab);
  const uint32_t turn_context = static_cast<uint32_t>(history + 16 + 8 + 32);
  auto warm = make_engine(*model, *tok, 2, turn_context, threads, block, step, true);
  std::shared_ptr<serving::Request> first;
  if (Error e = warm->submit(turn1, request_options(16, 1), &first)) die(e.message);
  drain(*first);
  std::vector<int32_t> turn2 = turn1;
  for (int32_t t : first->generated_tokens()) turn2.push_back(t);
  for (int32_t t : prompt_of(8, 555, vocab)) turn2.push_back(t);
  std::shared_ptr<serving::Request> second;
  if (Error e = warm->submit(turn2, request_options(4, 2), &second)) die(e.message);
  drain(*second);
  auto cold = make_engine(*model, *tok, 2, turn_context, threads, block, step, false);
  std::shared_ptr<serving::Request> cold_turn;
  if (Error e = cold->submit(turn2, request_options(4, 2), &cold_turn)) die(e.message);
  drain(*cold_turn);
  const serving::RequestResult w = second->result(), c = cold_turn->result();
  std::printf("second turn (%zu-token prompt, %llu from the prefix cache): time to first token %.1f ms cached, "
              "%.1f ms cold: %.1fx; same tokens: %s\n",
              turn2.size(), static_cast<unsigned long long>(w.prefix_hit_tokens), w.time_to_first_token_ns / 1e6,
              c.time_to_first_token_ns / 1e6,
              static_cast<double>(c.time_to_first_token_ns) / static_cast<double>(std::max<uint64_t>(w.time_to_first_token_ns, 1)),
              second->generated_tokens() == cold_turn->generated_tokens() ? "yes" : "NO");
  return 0;
}

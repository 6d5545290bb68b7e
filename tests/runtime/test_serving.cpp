// tests/runtime/test_serving.cpp — the serving engine (core/serving) on the bundled model:
// every request's tokens and text equal a lone session's generation with the same seed,
// whatever runs beside it (batch composition, thread count, preemption under a small KV
// budget, prefix-cache hits); cancellation (queued, prefilling, decoding), deadlines, the
// bounded queue (Busy), limits refused at submit, and many submitting threads at once.
#include <catch2/catch.hpp>
#include <cmath>

#include <atomic>
#include <fstream>
#include <thread>

#include "runtime/generation.h"
#include "runtime/oracle_support.h"
#include "serving/engine.h"

using namespace colibri;
using namespace std::chrono_literals;

namespace {

struct Bundled {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
};

Bundled &bundled() {
  static Bundled b = [] {
    Bundled out;
    const std::string dir = std::string(COLIBRI_SOURCE_DIR) + "/models/colibri-tiny-moe";
    std::string image = testing::temp_dir("serving") + "/tiny.colibri";
    std::string cmd = std::string(COLIBRI_MODEL_EXE) + " convert " + dir + " -o " + image + " > /dev/null";
    if (std::system(cmd.c_str()) == 0) out.model = testing::load_model(image);
    if (out.model) {
      Error err;
      out.tokenizer = tokenizer::Tokenizer::from_json(out.model->tokenizer().json, &err);
    }
    return out;
  }();
  REQUIRE(b.model);
  REQUIRE(b.tokenizer);
  return b;
}

std::vector<int32_t> encode(const std::string &text) {
  std::vector<int32_t> ids;
  REQUIRE(bundled().tokenizer->encode(text, {}, &ids).ok());
  return ids;
}

const char *const kPrompts[] = {
    "Once upon a time", "The little fox ran", "Tom had a red ball. He", "One day, Lily went to the park and",
    "The sun was", "A big dog", "Sam and Mia were friends. They liked to", "The cat sat on",
};

serving::RequestOptions request_options(uint64_t seed, uint32_t max_tokens, float temperature = 0.9f) {
  serving::RequestOptions o;
  o.max_tokens = max_tokens;
  o.sampling.temperature = temperature;
  o.sampling.seed = seed;
  o.sampling.top_k = 20;
  return o;
}

struct Output {
  std::vector<int32_t> tokens;
  std::string text;
  runtime::FinishReason finish = runtime::FinishReason::None;
};

// The reference: a lone contiguous session running runtime::Generation.
Output reference(const std::vector<int32_t> &prompt, const serving::RequestOptions &o) {
  runtime::SessionOptions so;
  so.context_length = 256;
  so.max_batch_tokens = 64;
  so.threads = 1;
  Error err;
  auto s = runtime::Session::create(*bundled().model, so, &err);
  REQUIRE(s);
  runtime::GenerateOptions g;
  g.max_tokens = o.max_tokens;
  g.sampling = o.sampling;
  g.ignore_eos = o.ignore_eos;
  g.stop_strings = o.stop_strings;
  auto gen = runtime::Generation::start(*s, *bundled().tokenizer, prompt, g, &err);
  REQUIRE(gen);
  Output out;
  std::string piece;
  for (bool done = false; !done;) {
    REQUIRE(gen->next(&piece, &done).ok());
    out.text += piece;
  }
  out.tokens = gen->generated_tokens();
  out.finish = gen->finish_reason();
  return out;
}

serving::EngineOptions engine_options(uint32_t sequences, size_t threads = 2) {
  serving::EngineOptions o;
  o.max_sequences = sequences;
  o.context_length = 256;
  o.step_tokens = 48;  // prompts are prefilled in several chunks beside the decodes
  o.block_tokens = 16;
  o.session.threads = threads;
  return o;
}

std::unique_ptr<serving::Engine> make_engine(const serving::EngineOptions &o) {
  Error err;
  auto e = serving::Engine::create(*bundled().model, *bundled().tokenizer, o, &err);
  INFO(err.message);
  REQUIRE(e);
  return e;
}

Output drain(serving::Request &r) {
  Output out;
  std::string piece;
  while (r.next(&piece, -1ns) == serving::Request::Poll::Piece) out.text += piece;
  out.tokens = r.generated_tokens();
  out.finish = r.result().finish;
  return out;
}

// Stats are published at the end of each step, after the requests of the step finished:
// waits (bounded) for the engine to settle with nothing running.
serving::EngineStats settled_stats(const serving::Engine &engine) {
  for (int i = 0; i < 2000; ++i) {
    serving::EngineStats st = engine.stats();
    if (st.active_sequences == 0 && st.queue_depth == 0) return st;
    std::this_thread::sleep_for(1ms);
  }
  return engine.stats();
}

}  // namespace

TEST_CASE("engine: every request equals a lone generation with its seed, whatever is batched with it", "[serving]") {
  // 8 requests with different prompts, seeds and lengths on engines of 1, 3 and 8 slots
  // (queueing, partial batches, full batches) and 1 or 3 threads.
  std::vector<std::vector<int32_t>> prompts;
  std::vector<serving::RequestOptions> opts;
  std::vector<Output> want;
  for (size_t i = 0; i < 8; ++i) {
    prompts.push_back(encode(kPrompts[i]));
    opts.push_back(request_options(100 + i, static_cast<uint32_t>(12 + 5 * i), i % 3 == 0 ? 0.0f : 0.9f));
    want.push_back(reference(prompts.back(), opts.back()));
  }
  for (auto [sequences, threads] : {std::pair<uint32_t, size_t>{1, 1}, {3, 3}, {8, 2}}) {
    INFO("sequences=" << sequences << " threads=" << threads);
    auto engine = make_engine(engine_options(sequences, threads));
    std::vector<std::shared_ptr<serving::Request>> requests(8);
    for (size_t i = 0; i < 8; ++i) REQUIRE(engine->submit(prompts[i], opts[i], &requests[i]).ok());
    for (size_t i = 0; i < 8; ++i) {
      Output got = drain(*requests[i]);
      CHECK(got.tokens == want[i].tokens);
      CHECK(got.text == want[i].text);
      CHECK(got.finish == want[i].finish);
      const serving::RequestResult r = requests[i]->result();
      CHECK(r.prompt_tokens == prompts[i].size());
      CHECK(r.generated_tokens == want[i].tokens.size());
      CHECK(r.time_to_first_token_ns > 0);
    }
    const serving::EngineStats st = settled_stats(*engine);
    CHECK(st.finished == 8);
    CHECK(st.max_batch_sequences <= sequences);
    if (sequences == 8) CHECK(st.max_batch_sequences >= 4);  // requests really ran together
  }
}

TEST_CASE("engine: a small KV budget preempts and recomputes, with the same results", "[serving][blocks]") {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<serving::RequestOptions> opts;
  std::vector<Output> want;
  for (size_t i = 0; i < 4; ++i) {
    prompts.push_back(encode(kPrompts[i]));
    opts.push_back(request_options(7 + i, 60));
    opts.back().ignore_eos = true;
    want.push_back(reference(prompts.back(), opts.back()));
    opts.back().top_logprobs = i % 2 ? 3 : 0;  // recorded once per token, recomputation or not
    opts.back().logprobs = true;
  }
  serving::EngineOptions o = engine_options(4);
  // 4 sequences of up to ~70 tokens need 4 x 5 blocks; give 9.
  const uint64_t block_bytes = 2ull * 4 * o.block_tokens * bundled().model->config().layer_count * bundled().model->kv_dim();
  o.kv_budget_bytes = 9 * block_bytes;
  auto engine = make_engine(o);
  std::vector<std::shared_ptr<serving::Request>> requests(4);
  for (size_t i = 0; i < 4; ++i) REQUIRE(engine->submit(prompts[i], opts[i], &requests[i]).ok());
  for (size_t i = 0; i < 4; ++i) {
    const Output got = drain(*requests[i]);
    CHECK(got.tokens == want[i].tokens);
    runtime::TokenLogprob chosen;
    std::vector<runtime::TokenLogprob> top;
    bool records = false;
    for (size_t t = 0; t < got.tokens.size(); ++t) {
      REQUIRE(requests[i]->logprobs(t, &chosen, &top, &records));
      CHECK(chosen.token == got.tokens[t]);
      CHECK((chosen.logprob <= 0.0f && std::isfinite(chosen.logprob)));
      CHECK(top.size() == (i % 2 ? 3u : 0u));
    }
    CHECK_FALSE(requests[i]->logprobs(got.tokens.size(), &chosen, &top, &records));
    CHECK(records);
  }
  const serving::EngineStats st = engine->stats();
  CHECK(st.preemptions > 0);
  CHECK(st.kv.block_count == 9);
  // A prompt that no budget of 9 blocks can hold is refused at once.
  std::vector<int32_t> huge(9 * 16, prompts[0][0]);
  std::shared_ptr<serving::Request> r;
  Error e = engine->submit(huge, opts[0], &r);
  CHECK(e.kind == ErrorKind::InvalidArgument);
  CHECK(e.message.find("KV budget") != std::string::npos);
}

TEST_CASE("engine: the second chat turn reuses the first turn's KV and gives the cold results", "[serving][prefix]") {
  const std::vector<int32_t> turn1 = encode("Once upon a time, there was a little girl named Lily. She loved to play");
  serving::RequestOptions o = request_options(3, 40);
  o.ignore_eos = true;
  auto engine = make_engine(engine_options(2));
  std::shared_ptr<serving::Request> first;
  REQUIRE(engine->submit(turn1, o, &first).ok());
  drain(*first);
  CHECK(first->result().prefix_hit_tokens == 0);
  std::vector<int32_t> turn2 = turn1;
  for (int32_t t : first->generated_tokens()) turn2.push_back(t);
  for (int32_t t : encode(" Then she went home.")) turn2.push_back(t);
  std::shared_ptr<serving::Request> second;
  REQUIRE(engine->submit(turn2, o, &second).ok());
  Output warm = drain(*second);
  const serving::RequestResult r = second->result();
  CHECK(r.prefix_hit_tokens >= ((turn1.size() + 39) / 16) * 16);  // the first turn's full blocks
  CHECK(r.prefix_hit_tokens % 16 == 0);
  CHECK(settled_stats(*engine).prefix_hit_tokens == r.prefix_hit_tokens);
  CHECK(warm.tokens == reference(turn2, o).tokens);
  // And the engine without the prefix cache agrees.
  serving::EngineOptions cold_options = engine_options(2);
  cold_options.prefix_cache = false;
  auto cold = make_engine(cold_options);
  std::shared_ptr<serving::Request> again;
  REQUIRE(cold->submit(turn2, o, &again).ok());
  CHECK(drain(*again).tokens == warm.tokens);
  CHECK(again->result().prefix_hit_tokens == 0);
}

TEST_CASE("engine: cancellation while queued, prefilling or decoding, and deadlines", "[serving][cancel]") {
  serving::EngineOptions eo = engine_options(1);
  eo.step_tokens = 2;  // a long prompt prefills over many steps
  auto engine = make_engine(eo);
  serving::RequestOptions o = request_options(1, 200);
  o.ignore_eos = true;
  std::shared_ptr<serving::Request> running, queued;
  REQUIRE(engine->submit(encode(kPrompts[0]), o, &running).ok());
  REQUIRE(engine->submit(encode(kPrompts[1]), o, &queued).ok());
  std::string piece;
  REQUIRE(running->next(&piece, -1ns) == serving::Request::Poll::Piece);  // decoding now
  queued->cancel();   // waits for the single slot
  running->cancel();
  Output a = drain(*running), b = drain(*queued);
  CHECK(a.finish == runtime::FinishReason::Cancelled);
  CHECK(a.tokens.size() < 200);
  CHECK(b.finish == runtime::FinishReason::Cancelled);
  CHECK(b.tokens.empty());

  // Cancelled during a long prefill (100 steps of 2 tokens) once it has begun: no token is
  // generated.
  std::vector<int32_t> long_prompt;
  while (long_prompt.size() < 200) long_prompt.insert(long_prompt.end(), a.tokens.begin(), a.tokens.end());
  long_prompt.resize(200);
  std::shared_ptr<serving::Request> prefilling;
  const uint64_t prefilled_before = settled_stats(*engine).prefill_tokens;
  REQUIRE(engine->submit(long_prompt, o, &prefilling).ok());
  while (engine->stats().prefill_tokens < prefilled_before + 6) std::this_thread::sleep_for(100us);
  prefilling->cancel();
  Output c = drain(*prefilling);
  CHECK(c.finish == runtime::FinishReason::Cancelled);
  CHECK(c.tokens.empty());

  // A deadline already passed, and one that passes during decoding.
  serving::RequestOptions past = o;
  past.deadline = serving::Clock::now();
  std::shared_ptr<serving::Request> late;
  REQUIRE(engine->submit(encode(kPrompts[2]), past, &late).ok());
  CHECK(drain(*late).finish == runtime::FinishReason::Deadline);
  // (A context of 8192 tokens takes far longer than 50 ms to fill.)
  serving::EngineOptions long_context = engine_options(1);
  long_context.context_length = 8192;
  auto roomy = make_engine(long_context);
  serving::RequestOptions soon = o;
  soon.max_tokens = 1000000;
  soon.deadline = serving::Clock::now() + 50ms;
  std::shared_ptr<serving::Request> timed;
  REQUIRE(roomy->submit(encode(kPrompts[3]), soon, &timed).ok());
  REQUIRE(timed->next(&piece, -1ns) == serving::Request::Poll::Piece);  // decoding before the deadline
  Output d = drain(*timed);
  CHECK(d.finish == runtime::FinishReason::Deadline);
  CHECK(timed->result().error.ok());
  // Pending: a poll with no wait on a finished-and-drained request is Done, not Pending.
  CHECK(timed->next(&piece, 0ns) == serving::Request::Poll::Done);
}

TEST_CASE("engine: a full queue answers Busy at once, bad requests are refused at submit", "[serving][limits]") {
  serving::EngineOptions eo = engine_options(1);
  eo.queue_capacity = 1;
  auto engine = make_engine(eo);
  serving::RequestOptions o = request_options(1, 100000);
  o.ignore_eos = true;
  std::shared_ptr<serving::Request> a, b, c;
  REQUIRE(engine->submit(encode(kPrompts[0]), o, &a).ok());
  std::string piece;
  REQUIRE(a->next(&piece, -1ns) == serving::Request::Poll::Piece);  // a holds the only slot
  REQUIRE(engine->submit(encode(kPrompts[1]), o, &b).ok());         // b waits
  Error busy = engine->submit(encode(kPrompts[2]), o, &c);
  CHECK(busy.kind == ErrorKind::Busy);
  CHECK(busy.message.find("queue_capacity") != std::string::npos);
  CHECK(!c);
  CHECK(engine->stats().rejected_busy == 1);

  std::shared_ptr<serving::Request> r;
  CHECK(engine->submit({}, o, &r).kind == ErrorKind::InvalidArgument);
  CHECK(engine->submit({-1}, o, &r).kind == ErrorKind::InvalidArgument);
  CHECK(engine->submit(std::vector<int32_t>(256, 1), o, &r).kind == ErrorKind::InvalidArgument);  // context
  serving::RequestOptions bad = o;
  bad.sampling.top_p = 2.0f;
  CHECK(engine->submit({1, 2}, bad, &r).kind == ErrorKind::InvalidArgument);
  // Destroying the engine ends what runs and waits (Cancelled); the requests stay readable.
  engine.reset();
  CHECK(drain(*a).finish == runtime::FinishReason::Cancelled);
  CHECK(drain(*b).finish == runtime::FinishReason::Cancelled);
}

TEST_CASE("engine: queue_capacity 0 accepts while a slot is free and answers Busy otherwise", "[serving][limits]") {
  // A queue of 0 once refused every request, the first included (`colibri serve --queue 0`).
  serving::EngineOptions eo = engine_options(2);
  eo.queue_capacity = 0;
  auto engine = make_engine(eo);
  serving::RequestOptions o = request_options(1, 100000);
  o.ignore_eos = true;
  std::shared_ptr<serving::Request> a, b, c, d;
  REQUIRE(engine->submit(encode(kPrompts[0]), o, &a).ok());
  REQUIRE(engine->submit(encode(kPrompts[1]), o, &b).ok());
  CHECK(engine->submit(encode(kPrompts[2]), o, &c).kind == ErrorKind::Busy);
  a->cancel();
  REQUIRE(drain(*a).finish == runtime::FinishReason::Cancelled);
  // a's slot is free once it finished: the next request is accepted again.
  CHECK(engine->submit(encode(kPrompts[2]), o, &d).ok());
  CHECK(engine->stats().rejected_busy == 1);
}

TEST_CASE("engine: many threads submitting, reading and cancelling at once", "[serving][stress]") {
  serving::EngineOptions eo = engine_options(4);
  eo.queue_capacity = 8;
  eo.kv_budget_bytes = 12ull * 2 * 4 * eo.block_tokens * bundled().model->config().layer_count * bundled().model->kv_dim();
  auto engine = make_engine(eo);
  const std::vector<int32_t> prompt = encode(kPrompts[4]);
  const serving::RequestOptions o = request_options(11, 24);
  const Output want = reference(prompt, o);
  std::atomic<int> matched{0}, cancelled{0}, busy{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) {
        std::shared_ptr<serving::Request> r;
        Error e = engine->submit(prompt, o, &r);
        if (e.kind == ErrorKind::Busy) {
          ++busy;
          std::this_thread::sleep_for(1ms);
          continue;
        }
        if (e) {
          ++failed;
          continue;
        }
        if ((t + i) % 4 == 0) r->cancel();
        Output got = drain(*r);
        if (got.finish == runtime::FinishReason::Cancelled) ++cancelled;
        else if (got.tokens == want.tokens && got.text == want.text) ++matched;
        else ++failed;
      }
    });
  }
  for (auto &th : threads) th.join();
  CHECK(failed == 0);
  CHECK(matched + cancelled + busy == 30);
  CHECK(matched > 0);
  const serving::EngineStats st = settled_stats(*engine);
  CHECK(st.active_sequences == 0);
  CHECK(st.queue_depth == 0);
  CHECK(st.kv.blocks_in_use == 0);
}

// gpt-oss's sliding-window layers in the engine's paged cache live in the window pool: each
// sequence holds only the blocks over its last window + step_tokens − 1 positions, and the
// results are a lone contiguous session's, for every request of a batch and for a second
// turn that takes its prefix (full and window blocks) from the cache.
TEST_CASE("engine: a sliding-window model keeps its window layers bounded and gives a lone session's tokens", "[serving][sliding]") {
  auto model = testing::load_model(testing::convert_fixture("gpt_oss_sinks", "f32"));
  REQUIRE(model);
  REQUIRE(model->config().sliding_window == 4);
  Error err;
  auto tok = tokenizer::Tokenizer::from_json(model->tokenizer().json, &err);
  INFO(err.message);
  REQUIRE(tok);
  auto lone = [&](const std::vector<int32_t> &prompt, const serving::RequestOptions &o) {
    runtime::SessionOptions so;
    so.context_length = 128;
    so.max_batch_tokens = 128;  // window 4 + 127 > 128: every position kept
    so.threads = 1;
    auto s = runtime::Session::create(*model, so, &err);
    REQUIRE(s);
    runtime::GenerateOptions g;
    g.max_tokens = o.max_tokens;
    g.sampling = o.sampling;
    g.ignore_eos = true;
    auto gen = runtime::Generation::start(*s, *tok, prompt, g, &err);
    REQUIRE(gen);
    std::string piece;
    for (bool done = false; !done;) REQUIRE(gen->next(&piece, &done).ok());
    return gen->generated_tokens();
  };
  serving::EngineOptions eo;
  eo.max_sequences = 4;
  eo.context_length = 128;
  eo.step_tokens = 12;
  eo.block_tokens = 4;
  eo.session.threads = 2;
  auto engine = serving::Engine::create(*model, *tok, eo, &err);
  INFO(err.message);
  REQUIRE(engine);
  const uint64_t vocab = model->config().vocab_size;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<serving::Request>> requests(4);
  for (size_t r = 0; r < 4; ++r) {
    std::vector<int32_t> p;
    for (size_t i = 0; i < 21 + 3 * r; ++i) p.push_back(static_cast<int32_t>((r * 31 + i * 17 + 5) % vocab));
    prompts.push_back(p);
    serving::RequestOptions o = request_options(40 + r, 50);
    o.ignore_eos = true;
    o.text = false;
    REQUIRE(engine->submit(p, o, &requests[r]).ok());
  }
  std::vector<std::vector<int32_t>> outputs;
  for (size_t r = 0; r < 4; ++r) {
    outputs.push_back(drain(*requests[r]).tokens);
    serving::RequestOptions o = request_options(40 + r, 50);
    CHECK(outputs[r] == lone(prompts[r], o));
  }
  const serving::EngineStats st = settled_stats(*engine);
  // Window 4 + step 12 − 1 = 15 positions: at most ceil((15 + 12) / 4) + 1 = 8 blocks a
  // sequence, the pool twice that for 4 sequences, whatever the context.
  CHECK(st.kv.window_block_count == 2 * 8 * 4);
  CHECK(st.kv.window_blocks_in_use == 0);
  CHECK(st.kv.block_count == 4 * 128 / 4);

  // The second turn of request 0: its history's blocks, window ones included, are cached.
  std::vector<int32_t> turn2 = prompts[0];
  turn2.insert(turn2.end(), outputs[0].begin(), outputs[0].end());
  for (int32_t t : {3, 9, 27}) turn2.push_back(t);
  serving::RequestOptions o = request_options(77, 20);
  o.ignore_eos = true;
  o.text = false;
  std::shared_ptr<serving::Request> second;
  REQUIRE(engine->submit(turn2, o, &second).ok());
  CHECK(drain(*second).tokens == lone(turn2, o));
  CHECK(second->result().prefix_hit_tokens >= 60);
}

// core/serving/engine.cpp — the scheduler of the serving engine (engine.h): admission by KV
// blocks, one forward per step over decode tokens and prefill chunks, per-request sampling
// and text, preemption, the prefix cache, cancellation and deadlines.
#include "serving/engine.h"

#include <algorithm>
#include <utility>

#include "util/strings.h"

namespace colibri::serving {

using runtime::FinishReason;
using util::strprintf;

namespace {

uint64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return b > a ? static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count()) : 0;
}

size_t histogram_bucket(size_t sequences) {
  size_t bucket = 0;
  for (size_t limit = 1; limit < sequences && bucket + 1 < kBatchHistogramBuckets; limit *= 2) ++bucket;
  return bucket;
}

// The engine's limits (named: the messages cite them).
constexpr uint32_t kMaxSequences = 4096;
constexpr uint32_t kMaxQueue = 1u << 20;
constexpr uint32_t kMaxBlockTokens = 4096;

}  // namespace

// A request as the scheduler sees it.
struct Engine::Sequence {
  std::shared_ptr<Request> request;
  RequestOptions options;
  std::vector<int32_t> tokens;  // prompt, then every sampled token
  size_t prompt_length = 0;
  uint32_t computed = 0;        // positions whose KV is in the cache
  uint32_t slot = 0;
  bool running = false;
  bool accepted = false;  // counted in unfinished_ (submit queued it)
  bool admitted_once = false;
  uint64_t admission = 0;       // admission order (preemption takes the newest)
  runtime::Sampler sampler;
  tokenizer::StreamDecoder decoder;
  std::string pending;          // decoded text held back (a possible stop string)
  Clock::time_point submitted, first_token;

  Sequence(const RequestOptions &o, size_t vocab, const tokenizer::Tokenizer &t)
      : options(o), sampler(o.sampling, vocab), decoder(t) {}
  size_t generated() const { return tokens.size() - prompt_length; }
};

// ---- Request ---------------------------------------------------------------------------------

Request::Poll Request::next(std::string *piece, std::chrono::nanoseconds timeout) {
  piece->clear();
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [&] { return !pieces_.empty() || finished_; };
  if (timeout < std::chrono::nanoseconds::zero()) cv_.wait(lock, ready);
  else if (!cv_.wait_for(lock, timeout, ready)) return Poll::Pending;
  if (pieces_.empty()) return Poll::Done;
  *piece = std::move(pieces_.front());
  pieces_.pop_front();
  return Poll::Piece;
}

bool Request::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

RequestResult Request::result() const {
  std::lock_guard<std::mutex> lock(mu_);
  RequestResult r = result_;
  r.generated_tokens = generated_.size();
  return r;
}

std::vector<int32_t> Request::generated_tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generated_;
}

bool Request::logprobs(size_t index, runtime::TokenLogprob *chosen, std::vector<runtime::TokenLogprob> *top,
                       bool *records) const {
  std::lock_guard<std::mutex> lock(mu_);
  *records = records_logprobs_;
  if (!records_logprobs_ || index >= chosen_.size()) return false;
  *chosen = chosen_[index];
  top->assign(top_.begin() + static_cast<std::ptrdiff_t>(index * top_count_),
              top_.begin() + static_cast<std::ptrdiff_t>((index + 1) * top_count_));
  return true;
}

// ---- Engine ----------------------------------------------------------------------------------

Engine::Engine(const model::Model &model, const tokenizer::Tokenizer &tokenizer, const EngineOptions &options)
    : model_(model), tokenizer_(tokenizer), options_(options) {}

std::unique_ptr<Engine> Engine::create(const model::Model &model, const tokenizer::Tokenizer &tokenizer,
                                       const EngineOptions &options_in, Error *error) {
  auto invalid = [&](std::string m) {
    *error = make_error(ErrorKind::InvalidArgument, std::move(m));
    return nullptr;
  };
  EngineOptions o = options_in;
  if (o.max_sequences == 0 || o.max_sequences > kMaxSequences)
    return invalid(strprintf("max_sequences %u is out of range (1..%u)", o.max_sequences, kMaxSequences));
  if (o.step_tokens < o.max_sequences)
    return invalid(strprintf("step_tokens %u is below max_sequences %u: every running sequence decodes one token per "
                             "step",
                             o.step_tokens, o.max_sequences));
  if (o.block_tokens == 0 || o.block_tokens > kMaxBlockTokens)
    return invalid(strprintf("block_tokens %u is out of range (1..%u)", o.block_tokens, kMaxBlockTokens));
  if (o.queue_capacity > kMaxQueue)
    return invalid(strprintf("queue_capacity %u is out of range (0..%u)", o.queue_capacity, kMaxQueue));
  runtime::SessionOptions so = o.session;
  so.context_length = o.context_length;
  so.max_sequences = o.max_sequences;
  so.max_batch_tokens = o.step_tokens;
  so.max_logit_rows = o.max_sequences;
  so.kv_block_tokens = o.block_tokens;
  so.kv_blocks = 0;
  so.kv_budget_bytes = o.kv_budget_bytes;  // the session turns it into blocks (kv_cache.h's formulas)
  std::unique_ptr<Engine> e(new Engine(model, tokenizer, o));
  e->session_ = runtime::Session::create(model, so, error);
  if (!e->session_) return nullptr;
  e->options_.context_length = e->session_->options().context_length;
  for (int64_t id : model.tokenizer().eos_token_ids) e->model_eos_.push_back(static_cast<int32_t>(id));
  for (uint32_t s = o.max_sequences; s > 0; --s) e->free_slots_.push_back(s - 1);
  e->batch_.reserve(o.step_tokens);
  e->logit_owner_.reserve(o.max_sequences);
  e->running_.reserve(o.max_sequences);
  e->stats_.block_tokens = o.block_tokens;
  e->stats_.kv = e->session_->kv_cache().stats();
  e->thread_ = std::thread([engine = e.get()] { engine->run(); });
  return e;
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // The scheduler finished its running sequences; what still waits is cancelled here.
  for (auto &seq : waiting_) finish(*seq, FinishReason::Cancelled);
  waiting_.clear();
}

Error Engine::submit(const std::vector<int32_t> &prompt, const RequestOptions &options, std::shared_ptr<Request> *out) {
  out->reset();
  const uint64_t vocab = model_.config().vocab_size;
  if (prompt.empty()) return make_error(ErrorKind::InvalidArgument, "the prompt is empty: give at least one token");
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || static_cast<uint64_t>(prompt[i]) >= vocab)
      return make_error(ErrorKind::InvalidArgument, strprintf("prompt token %zu: id %d is outside the vocabulary (0..%llu)",
                                                              i, prompt[i], static_cast<unsigned long long>(vocab - 1)));
  if (Error e = options.sampling.validate()) return e;
  if (options.top_logprobs > runtime::kMaxTopLogprobs)
    return make_error(ErrorKind::InvalidArgument, strprintf("top_logprobs %u is out of range (0..%u)",
                                                            options.top_logprobs, runtime::kMaxTopLogprobs));
  if (prompt.size() >= options_.context_length)
    return make_error(ErrorKind::InvalidArgument,
                      strprintf("the prompt has %zu tokens but the context holds %u (one more is needed to generate); "
                                "shorten the prompt or create the engine with a larger context length",
                                prompt.size(), options_.context_length));
  const uint64_t blocks = (prompt.size() + 1 + options_.block_tokens - 1) / options_.block_tokens;
  const uint32_t pool = session_->kv_cache().block_count();
  if (blocks > pool)
    return make_error(ErrorKind::InvalidArgument,
                      strprintf("the prompt needs %llu KV blocks of %u tokens but the engine's KV budget holds %u; "
                                "raise the KV budget or shorten the prompt",
                                static_cast<unsigned long long>(blocks), options_.block_tokens, pool));
  auto seq = std::make_unique<Sequence>(options, vocab, tokenizer_);
  if (seq->options.eos_token_ids.empty()) seq->options.eos_token_ids = model_eos_;
  seq->tokens = prompt;
  seq->tokens.reserve(prompt.size() + options.max_tokens);
  seq->prompt_length = prompt.size();
  for (int32_t t : prompt) seq->sampler.accept(t);
  seq->request = std::make_shared<Request>();
  seq->request->result_.prompt_tokens = prompt.size();
  seq->request->records_logprobs_ = options.logprobs || options.top_logprobs > 0;
  seq->request->top_count_ = std::min<size_t>(options.top_logprobs, vocab);
  seq->submitted = Clock::now();
  std::shared_ptr<Request> request = seq->request;
  if (options.max_tokens == 0) {  // nothing to generate: done at once
    finish(*seq, FinishReason::Length);
    *out = std::move(request);
    return {};
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return make_error(ErrorKind::InvalidArgument, "the engine is shutting down");
    // Accepted and unfinished requests: at most max_sequences running plus queue_capacity
    // waiting (so a queue_capacity of 0 admits while a slot is free and refuses otherwise).
    if (unfinished_ >= static_cast<size_t>(options_.max_sequences) + options_.queue_capacity) {
      ++stats_.rejected_busy;
      return make_error(ErrorKind::Busy,
                        strprintf("the engine is full (%u requests running and %u waiting: max_sequences + "
                                  "queue_capacity): try again later",
                                  options_.max_sequences, options_.queue_capacity));
    }
    seq->accepted = true;
    ++unfinished_;
    waiting_.push_back(std::move(seq));
    ++stats_.submitted;
    stats_.queue_depth = waiting_.size();
  }
  cv_.notify_one();
  *out = std::move(request);
  return {};
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Engine::run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !running_.empty(); });
      if (stopping_) break;
    }
    step();
  }
  for (auto &seq : running_) {
    finish(*seq, FinishReason::Cancelled);
    release_slot(*seq);
  }
  running_.clear();
}

void Engine::publish(Sequence &seq, std::string piece) {
  if (piece.empty()) return;
  {
    std::lock_guard<std::mutex> lock(seq.request->mu_);
    seq.request->pieces_.push_back(std::move(piece));
  }
  seq.request->cv_.notify_all();
}

void Engine::finish(Sequence &seq, FinishReason reason, Error error) {
  const Clock::time_point now = Clock::now();
  Request &r = *seq.request;
  {
    std::lock_guard<std::mutex> lock(r.mu_);
    if (r.finished_) return;
  }
  // The engine's counters first (one thread finishes a sequence), so that a caller who sees
  // the request finished also finds its place free: a submit right after is not Busy.
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.finished;
    if (seq.accepted) --unfinished_;
  }
  {
    std::lock_guard<std::mutex> lock(r.mu_);
    r.result_.finish = reason;
    r.result_.error = std::move(error);
    r.result_.generated_tokens = seq.generated();
    if (seq.generated() > 0) r.result_.decode_ns = ns_between(seq.first_token, now);
    r.finished_ = true;
  }
  r.cv_.notify_all();
}

void Engine::release_slot(Sequence &seq) {
  if (!seq.running) return;
  if (options_.prefix_cache) session_->commit_prefix(seq.slot, seq.tokens.data(), seq.computed);
  session_->reset_sequence(seq.slot);
  free_slots_.push_back(seq.slot);
  seq.running = false;
  seq.computed = 0;
}

bool Engine::admit(Sequence &seq, uint32_t slot) {
  runtime::KvCache &kv = session_->kv_cache();
  seq.slot = slot;
  uint32_t hit = 0;
  if (options_.prefix_cache) hit = session_->attach_prefix(slot, seq.tokens.data(), seq.tokens.size());
  const uint32_t length = static_cast<uint32_t>(seq.tokens.size());
  if (kv.blocks_needed(slot, length) > kv.available_blocks()) {
    session_->reset_sequence(slot);  // gives the attached blocks back (they stay cached)
    return false;
  }
  if (Error e = session_->reserve(slot, length)) {  // cannot fail after the check above
    session_->reset_sequence(slot);
    return false;
  }
  seq.computed = hit;
  seq.running = true;
  seq.admission = admissions_++;
  if (!seq.admitted_once) {
    seq.admitted_once = true;
    std::lock_guard<std::mutex> lock(seq.request->mu_);
    seq.request->result_.prefix_hit_tokens = hit;
    seq.request->result_.queue_ns = ns_between(seq.submitted, Clock::now());
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.prefix_hit_tokens += hit;
  return true;
}

void Engine::preempt(Sequence &seq) {
  release_slot(seq);
  {
    std::lock_guard<std::mutex> lock(seq.request->mu_);
    ++seq.request->result_.preemptions;
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.preemptions;
}

bool Engine::check_ended(Sequence &seq, Clock::time_point now) {
  if (seq.request->cancel_.load(std::memory_order_relaxed)) {
    finish(seq, FinishReason::Cancelled);
    return true;
  }
  if (now >= seq.options.deadline) {
    finish(seq, FinishReason::Deadline);
    return true;
  }
  return false;
}

// The text of one sampled token: EOS, stop strings, max_tokens, the context.
// `logits` is the row the token was sampled from (its logprobs, when the request records them).
void Engine::on_token(Sequence &seq, int32_t token, const float *logits) {
  if (seq.generated() == 0) {
    seq.first_token = Clock::now();
    std::lock_guard<std::mutex> lock(seq.request->mu_);
    seq.request->result_.time_to_first_token_ns = ns_between(seq.submitted, seq.first_token);
  }
  seq.sampler.accept(token);
  seq.tokens.push_back(token);
  {
    Request &r = *seq.request;
    runtime::TokenLogprob chosen, top[runtime::kMaxTopLogprobs];
    // Computed outside the lock (a pass over the row); published with the token, so that a
    // reader never sees a token without its logprobs.
    if (r.records_logprobs_)
      runtime::compute_logprobs(logits, model_.config().vocab_size, token, static_cast<uint32_t>(r.top_count_),
                                &chosen, top);
    std::lock_guard<std::mutex> lock(r.mu_);
    r.generated_.push_back(token);
    if (r.records_logprobs_) {
      r.chosen_.push_back(chosen);
      r.top_.insert(r.top_.end(), top, top + r.top_count_);
    }
  }
  const bool text = seq.options.text;
  // At an end, the text held back (incomplete bytes, a stop-string prefix) is released.
  auto end = [&](FinishReason reason, Error error) {
    if (text) {
      std::string tail;
      Error e = seq.decoder.flush(&tail);
      seq.pending += tail;
      publish(seq, std::exchange(seq.pending, std::string()));
      if (e) {
        reason = FinishReason::Error;
        error = e;
      }
    }
    finish(seq, reason, std::move(error));
  };
  const bool is_eos = !seq.options.ignore_eos && std::find(seq.options.eos_token_ids.begin(),
                                                           seq.options.eos_token_ids.end(), token) != seq.options.eos_token_ids.end();
  if (is_eos) return end(FinishReason::EndOfSequence, {});
  if (text) {
    std::string piece;
    if (Error e = seq.decoder.push(token, &piece)) return finish(seq, FinishReason::Error, e);
    seq.pending += piece;
    for (const std::string &stop : seq.options.stop_strings) {
      const size_t at = stop.empty() ? std::string::npos : seq.pending.find(stop);
      if (at != std::string::npos) {
        publish(seq, seq.pending.substr(0, at));
        seq.pending.clear();
        return finish(seq, FinishReason::StopString);
      }
    }
  }
  if (seq.generated() >= seq.options.max_tokens) return end(FinishReason::Length, {});
  if (seq.tokens.size() > options_.context_length) {
    // The sampled token cannot be fed back: its text is released, then the full context is
    // the request's error.
    {
      std::lock_guard<std::mutex> lock(seq.request->mu_);
      seq.request->result_.context_full = true;
    }
    return end(FinishReason::Error,
               make_error(ErrorKind::InvalidArgument,
                          strprintf("the context is full (%u tokens: %zu prompt + %zu generated); raise the context "
                                    "length or lower max_tokens",
                                    options_.context_length, seq.prompt_length, seq.generated())));
  }
  if (text) {
    const size_t safe = runtime::releasable_length(seq.pending, seq.options.stop_strings);
    publish(seq, seq.pending.substr(0, safe));
    seq.pending.erase(0, safe);
  }
}

void Engine::step() {
  runtime::KvCache &kv = session_->kv_cache();
  const Clock::time_point now = Clock::now();

  // 1. Requests that were cancelled or passed their deadline leave, running or waiting.
  for (auto &seq : running_)
    if (check_ended(*seq, now)) release_slot(*seq);
  running_.erase(std::remove_if(running_.begin(), running_.end(), [](const auto &s) { return !s->running; }),
                 running_.end());
  std::vector<std::unique_ptr<Sequence>> ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if ((*it)->request->cancel_.load(std::memory_order_relaxed) || now >= (*it)->options.deadline) {
        ended.push_back(std::move(*it));
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto &seq : ended) check_ended(*seq, now);

  // 2. Admission, first come first served: a free slot and the prompt's blocks (after the
  // prefix cache's share) available. The head of the queue waits for blocks rather than being
  // overtaken, so a long prompt is not starved by short ones.
  while (!free_slots_.empty()) {
    std::unique_ptr<Sequence> seq;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (waiting_.empty()) break;
      seq = std::move(waiting_.front());
      waiting_.pop_front();
    }
    const uint32_t slot = free_slots_.back();
    if (!admit(*seq, slot)) {
      if (running_.empty()) {
        // Nothing else holds blocks: the whole pool is too small for this sequence (it grew
        // past it while running with others). It ends instead of waiting for good.
        finish(*seq, FinishReason::Error,
               make_error(ErrorKind::OutOfMemory,
                          strprintf("the KV budget (%u blocks of %u tokens) cannot hold this request's %zu tokens; "
                                    "raise the KV budget or lower max_tokens",
                                    kv.block_count(), options_.block_tokens, seq->tokens.size())));
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      waiting_.push_front(std::move(seq));
      break;
    }
    free_slots_.pop_back();
    running_.push_back(std::move(seq));
  }

  // 3. Every decoding sequence needs a block for its next position; when the pool is empty the
  // newest sequence gives its blocks back and waits (preemption by recomputation).
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence &seq = *running_[i];
    if (!seq.running) continue;
    const uint32_t length = static_cast<uint32_t>(seq.tokens.size());
    while (seq.running && kv.blocks_needed(seq.slot, length) > kv.available_blocks()) {
      Sequence *newest = nullptr;
      for (auto &other : running_)
        if (other->running && (!newest || other->admission > newest->admission)) newest = other.get();
      preempt(*newest);
    }
    if (seq.running) (void)session_->reserve(seq.slot, length);
  }
  // Preempted sequences go back to the head of the queue, in admission order.
  for (size_t i = running_.size(); i > 0; --i) {
    if (running_[i - 1]->running) continue;
    std::unique_ptr<Sequence> seq = std::move(running_[i - 1]);
    running_.erase(running_.begin() + static_cast<long>(i - 1));
    std::lock_guard<std::mutex> lock(mu_);
    waiting_.push_front(std::move(seq));
  }

  // 4. The step's batch: one token for each decoding sequence, then prefill chunks in
  // admission order within the token budget. Logits only for each sequence's last token.
  batch_.clear();
  logit_owner_.clear();
  size_t budget = options_.step_tokens, sequences = 0, decode_tokens = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (auto &ptr : running_) {
      Sequence &seq = *ptr;
      const size_t remaining = seq.tokens.size() - seq.computed;
      const bool decoding = remaining == 1;
      if (decoding != (pass == 0) || budget == 0) continue;
      const size_t chunk = std::min(remaining, budget);
      for (size_t i = 0; i < chunk; ++i) {
        const uint32_t position = seq.computed + static_cast<uint32_t>(i);
        const bool last = position + 1 == seq.tokens.size();
        batch_.push_back({seq.slot, position, seq.tokens[position], last ? 1u : 0u});
        if (last) logit_owner_.push_back(&seq);
      }
      budget -= chunk;
      ++sequences;
      if (decoding) ++decode_tokens;
    }
  }
  if (batch_.empty()) {
    update_stats(0, 0, 0);
    return;
  }

  // 5. One forward pass for all of them.
  Error error = session_->forward(batch_.data(), batch_.size());
  for (const runtime::BatchEntry &e : batch_) {
    for (auto &seq : running_)
      if (seq->slot == e.sequence && seq->running) {
        seq->computed = std::max(seq->computed, e.position + 1);
        break;
      }
  }
  if (error) {
    // The pass failed (a non-finite value under the error policy): every sequence in it ends
    // with the error; the engine goes on with the others.
    for (auto &seq : running_) {
      bool in_batch = false;
      for (const runtime::BatchEntry &e : batch_) in_batch = in_batch || e.sequence == seq->slot;
      if (!in_batch) continue;
      seq->computed = 0;
      finish(*seq, FinishReason::Error, error);
      release_slot(*seq);
    }
  } else {
    // 6. Sample each sequence whose last token was computed; finished ones leave.
    for (size_t row = 0; row < logit_owner_.size(); ++row) {
      Sequence &seq = *logit_owner_[row];
      int32_t token = -1;
      if (Error e = seq.sampler.sample(session_->logits(row), &token)) {
        // A row with no finite candidate (the sampler refuses to pick): this request ends with
        // the error, the others go on.
        seq.computed = 0;
        finish(seq, FinishReason::Error, e);
        release_slot(seq);
        continue;
      }
      on_token(seq, token, session_->logits(row));
      if (seq.request->finished()) release_slot(seq);
      else if (options_.prefix_cache) session_->commit_prefix(seq.slot, seq.tokens.data(), seq.computed);
    }
  }
  running_.erase(std::remove_if(running_.begin(), running_.end(), [](const auto &s) { return !s->running; }),
                 running_.end());

  update_stats(sequences, decode_tokens, batch_.size() - decode_tokens);
}

void Engine::update_stats(size_t sequences, size_t decode_tokens, size_t prefill_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  if (sequences) {
    ++stats_.steps;
    ++stats_.batch_histogram[histogram_bucket(sequences)];
    stats_.max_batch_sequences = std::max<uint64_t>(stats_.max_batch_sequences, sequences);
  }
  stats_.decode_tokens += decode_tokens;
  stats_.prefill_tokens += prefill_tokens;
  stats_.queue_depth = waiting_.size();
  stats_.active_sequences = running_.size();
  stats_.kv = session_->kv_cache().stats();
}

}  // namespace colibri::serving

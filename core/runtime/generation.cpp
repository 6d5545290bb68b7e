// core/runtime/generation.cpp — prefill, decode loop, EOS/stop-string handling, streaming.
#include "runtime/generation.h"

#include <algorithm>
#include <utility>

#include "util/strings.h"

namespace colibri::runtime {

using util::strprintf;

const char *finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::None: return "none";
    case FinishReason::Length: return "length";
    case FinishReason::EndOfSequence: return "eos";
    case FinishReason::StopString: return "stop";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Deadline: return "deadline";
    case FinishReason::Error: return "error";
  }
  return "none";
}

Generation::Generation(Session &session, const tokenizer::Tokenizer &tokenizer, const GenerateOptions &options)
    : session_(session),
      tokenizer_(tokenizer),
      options_(options),
      sampler_(options.sampling, session.model().config().vocab_size),
      decoder_(tokenizer) {}

std::unique_ptr<Generation> Generation::start(Session &session, const tokenizer::Tokenizer &tokenizer,
                                              const std::vector<int32_t> &prompt, const GenerateOptions &options,
                                              Error *error) {
  auto fail = [&](Error e) {
    *error = std::move(e);
    return nullptr;
  };
  if (Error e = options.sampling.validate()) return fail(e);
  const SessionOptions &so = session.options();
  if (options.sequence >= so.max_sequences)
    return fail(make_error(ErrorKind::InvalidArgument, strprintf("sequence %u: the session has %u slots", options.sequence,
                                                                 so.max_sequences)));
  if (prompt.empty()) return fail(make_error(ErrorKind::InvalidArgument, "the prompt is empty: give at least one token"));
  if (prompt.size() >= so.context_length)
    return fail(make_error(ErrorKind::InvalidArgument,
                           strprintf("the prompt has %zu tokens but the context holds %u (one more is needed to "
                                     "generate); shorten the prompt or use a larger context length",
                                     prompt.size(), so.context_length)));
  std::unique_ptr<Generation> g(new Generation(session, tokenizer, options));
  if (g->options_.eos_token_ids.empty()) {
    for (int64_t id : session.model().tokenizer().eos_token_ids) g->options_.eos_token_ids.push_back(static_cast<int32_t>(id));
  }
  session.reset_sequence(options.sequence);
  // Prefill in chunks of the session's batch size; logits only for the last prompt token.
  std::vector<BatchEntry> batch;
  for (size_t begin = 0; begin < prompt.size(); begin += so.max_batch_tokens) {
    size_t end = std::min(prompt.size(), begin + so.max_batch_tokens);
    batch.clear();
    for (size_t i = begin; i < end; ++i)
      batch.push_back({options.sequence, static_cast<uint32_t>(i), prompt[i], i + 1 == prompt.size() ? 1u : 0u});
    if (Error e = session.forward(batch.data(), batch.size())) return fail(e);
  }
  for (int32_t t : prompt) g->sampler_.accept(t);
  g->prompt_length_ = prompt.size();
  g->position_ = static_cast<uint32_t>(prompt.size());
  return g;
}

Error Generation::step(int32_t *token) {
  if (Error e = sampler_.sample(session_.logits(0), token)) return e;
  sampler_.accept(*token);
  generated_.push_back(*token);
  return {};
}

size_t releasable_length(const std::string &pending, const std::vector<std::string> &stop_strings) {
  size_t safe = pending.size();
  for (const std::string &stop : stop_strings) {
    if (stop.empty()) continue;
    // Longest suffix of pending that is a proper prefix of `stop`.
    size_t max_len = std::min(stop.size() - 1, pending.size());
    for (size_t len = max_len; len > 0; --len) {
      if (pending.compare(pending.size() - len, len, stop, 0, len) == 0) {
        safe = std::min(safe, pending.size() - len);
        break;
      }
    }
  }
  return safe;
}

// Text may be released up to the point where a stop string could still begin.
void Generation::release_text(bool final, std::string *piece) {
  const size_t safe = final ? pending_.size() : releasable_length(pending_, options_.stop_strings);
  piece->append(pending_, 0, safe);
  pending_.erase(0, safe);
}

Error Generation::next(std::string *piece, bool *done) {
  piece->clear();
  *done = false;
  if (context_full_) {  // the previous call released the last text; now the error
    finished_ = true;
    return std::exchange(context_full_, Error{});
  }
  if (finished_) {
    *done = true;
    return {};
  }
  auto finish = [&](FinishReason reason) {
    finish_ = reason;
    finished_ = true;
    *done = true;
  };
  if (cancelled_) {
    finish(FinishReason::Cancelled);
    return {};
  }
  if (generated_.size() >= options_.max_tokens) {
    std::string tail;
    if (Error e = decoder_.flush(&tail)) return e;
    pending_ += tail;
    release_text(true, piece);
    finish(FinishReason::Length);
    return {};
  }
  int32_t token;
  if (Error e = step(&token)) return e;
  bool is_eos = !options_.ignore_eos &&
                std::find(options_.eos_token_ids.begin(), options_.eos_token_ids.end(), token) != options_.eos_token_ids.end();
  if (is_eos) {
    std::string tail;
    if (Error e = decoder_.flush(&tail)) return e;
    pending_ += tail;
    release_text(true, piece);
    finish(FinishReason::EndOfSequence);
    return {};
  }
  std::string text;
  if (Error e = decoder_.push(token, &text)) return e;
  pending_ += text;
  for (const std::string &stop : options_.stop_strings) {
    size_t at = stop.empty() ? std::string::npos : pending_.find(stop);
    if (at != std::string::npos) {
      piece->append(pending_, 0, at);
      pending_.clear();
      finish(FinishReason::StopString);
      return {};
    }
  }
  // Feed the token back unless this was the last one allowed.
  if (generated_.size() < options_.max_tokens) {
    if (position_ >= session_.options().context_length) {
      // The sampled token cannot be fed back, but its text belongs to the output: release all
      // text first (held-back bytes and stop-string prefixes included, as at any end) and
      // report the full context on the next call, or now if there is no text.
      Error full = make_error(ErrorKind::InvalidArgument,
                              strprintf("the context is full (%u tokens: %zu prompt + %zu generated); raise the "
                                        "context length or lower max_tokens",
                                        session_.options().context_length, prompt_length_, generated_.size()));
      std::string tail;
      if (Error e = decoder_.flush(&tail)) return e;
      pending_ += tail;
      release_text(true, piece);
      if (piece->empty()) {
        finished_ = true;
        return full;
      }
      context_full_ = std::move(full);
      return {};
    }
    BatchEntry e{options_.sequence, position_, token, 1};
    if (Error fe = session_.forward(&e, 1)) return fe;
    ++position_;
  }
  release_text(false, piece);
  return {};
}

Error generate(Session &session, const tokenizer::Tokenizer &tokenizer, const std::vector<int32_t> &prompt,
               const GenerateOptions &options, const std::function<bool(std::string_view)> &on_piece,
               std::string *text, FinishReason *reason) {
  Error error;
  auto g = Generation::start(session, tokenizer, prompt, options, &error);
  if (!g) return error;
  std::string piece;
  for (bool done = false; !done;) {
    if (Error e = g->next(&piece, &done)) return e;
    if (piece.empty()) continue;
    if (text) *text += piece;
    if (on_piece && !on_piece(piece)) {
      g->cancel();
      break;
    }
  }
  if (reason) *reason = g->cancelled() ? FinishReason::Cancelled : g->finish_reason();
  return {};
}

}  // namespace colibri::runtime

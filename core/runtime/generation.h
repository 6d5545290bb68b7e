// core/runtime/generation.h — the generation loop: prompt → prefill (in chunks of the
// session's batch size) → decode until max_tokens, an EOS id (several allowed) or a stop
// string (which may span tokens; the returned text excludes it). Text comes out in pieces
// that are always complete UTF-8, through a pull interface (next) or a callback that can
// cancel (generate). Running out of context is an error with a clear message, never a
// silent truncation.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/sampler.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace colibri::runtime {

// Deadline: the serving engine's per-request deadline passed (serving/engine.h); Error: the
// request failed (its error says why).
enum class FinishReason : uint32_t {
  None = 0,
  Length = 1,
  EndOfSequence = 2,
  StopString = 3,
  Cancelled = 4,
  Deadline = 5,
  Error = 6,
};
const char *finish_reason_name(FinishReason reason);  // "length", "eos", "stop", "cancelled", "deadline", "error"

// How much of `pending` (decoded text not yet released) can be released: all of it but the
// longest suffix that could still grow into one of the stop strings.
size_t releasable_length(const std::string &pending, const std::vector<std::string> &stop_strings);

struct GenerateOptions {
  uint32_t max_tokens = 256;
  SamplerOptions sampling;
  std::vector<int32_t> eos_token_ids;     // empty: the model's EOS ids
  bool ignore_eos = false;
  std::vector<std::string> stop_strings;  // text that ends generation (excluded from the output)
  uint32_t sequence = 0;                  // session sequence slot to use (reset first)
};

class Generation {
 public:
  // Resets `options.sequence` in the session and prefills the prompt.
  static std::unique_ptr<Generation> start(Session &session, const tokenizer::Tokenizer &tokenizer,
                                           const std::vector<int32_t> &prompt, const GenerateOptions &options,
                                           Error *error);

  // Produces the next piece of text (possibly empty while bytes or a possible stop string
  // are held back). *done is set when generation has finished; the final call may still
  // return text. After done, further calls return done with no text.
  Error next(std::string *piece, bool *done);

  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  FinishReason finish_reason() const { return finish_; }
  const std::vector<int32_t> &generated_tokens() const { return generated_; }
  size_t prompt_tokens() const { return prompt_length_; }

 private:
  Generation(Session &session, const tokenizer::Tokenizer &tokenizer, const GenerateOptions &options);
  Error step(int32_t *token);                  // sample from the current logits and feed the token back
  void release_text(bool final, std::string *piece);  // moves safe text from pending_ to piece

  Session &session_;
  const tokenizer::Tokenizer &tokenizer_;
  GenerateOptions options_;
  Sampler sampler_;
  tokenizer::StreamDecoder decoder_;
  std::vector<int32_t> generated_;
  size_t prompt_length_ = 0;
  uint32_t position_ = 0;   // next position to write
  std::string pending_;     // decoded text not yet released (may hold a stop-string prefix)
  FinishReason finish_ = FinishReason::None;
  Error context_full_;      // set when the context filled up: returned by the call after the last text
  bool finished_ = false;
  bool cancelled_ = false;
};

// Runs a whole generation, calling on_piece for each non-empty piece; returning false from
// on_piece cancels. The full text (without any stop string) goes to *text when non-null.
Error generate(Session &session, const tokenizer::Tokenizer &tokenizer, const std::vector<int32_t> &prompt,
               const GenerateOptions &options, const std::function<bool(std::string_view)> &on_piece,
               std::string *text, FinishReason *reason);

}  // namespace colibri::runtime

// cli/serve_api.h — the OpenAI-compatible request and response bodies of `colibri serve`
// (docs/server.md), apart from HTTP and the engine so that tests and the fuzzer reach them
// directly. Parsing is total: any byte string gives either a request or an ApiError that names
// the field, never an exception of another kind, a crash or unbounded work (the body size is
// capped by the server, the nesting depth and the sizes of every list here).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace colibri_cli::serve {

// An error answered to the client: the HTTP status and an OpenAI-style body
// {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // the request field at fault; empty: none (JSON null)
  std::string type = "invalid_request_error";
  std::string code;   // empty: none (JSON null)
};

nlohmann::json error_body(const ApiError &error);

// Limits on what a request may ask for (the server's flags fill the context-dependent ones).
struct RequestLimits {
  size_t max_depth = 32;            // JSON nesting of the body
  size_t max_stop_strings = 16;     // OpenAI allows 4; more costs nothing measurable
  size_t max_stop_bytes = 1024;     // per stop string
  size_t max_messages = 4096;       // chat messages per request
  size_t max_prompt_tokens = 1u << 20;  // a token-id prompt's length
  uint32_t max_top_logprobs = 20;   // chat top_logprobs, completions logprobs
  int64_t vocab_size = 0;           // token-id prompts are checked against it (0: unchecked)
};

enum class Endpoint { Completions, ChatCompletions };

struct ChatMessage {
  std::string role;
  std::string content;
};

// One generation request, validated: every value is in the range the engine accepts.
struct GenerationRequest {
  Endpoint endpoint = Endpoint::Completions;
  // Completions: the prompt as text, or as token ids (a list of integers).
  std::string prompt_text;
  std::vector<int32_t> prompt_tokens;
  bool prompt_is_tokens = false;
  // Chat completions.
  std::vector<ChatMessage> messages;

  std::optional<uint32_t> max_tokens;  // absent: until EOS or the context is full
  // The OpenAI defaults (temperature 1, top_p 1); top_k and min_p are extensions, off unless set.
  float temperature = 1.0f;
  float top_p = 1.0f;
  uint32_t top_k = 0;
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;  // extension (llama.cpp's repeat_penalty)
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool ignore_eos = false;     // extension (llama.cpp's)
  bool echo = false;           // completions: the prompt text before the completion
  uint32_t top_logprobs = 0;   // 0: no logprobs
  bool logprobs = false;       // chat: logprobs: true; completions: logprobs >= 0 given
  std::string user;            // logged, never interpreted
};

// Parses a request body of `endpoint`. Unknown fields are ignored; a field of the wrong type or
// out of range is an ApiError naming it. Throws nothing else than ApiError (and std::bad_alloc).
GenerationRequest parse_request(std::string_view body, Endpoint endpoint, const RequestLimits &limits);

// The deepest nesting of arrays/objects in `text` (strings skipped), stopping at `limit` + 1.
size_t json_depth(std::string_view text, size_t limit);

// OpenAI's finish_reason for a COLIBRI_FINISH_* value ("stop", "length", "timeout", ...).
const char *finish_reason_name(uint32_t finish_reason);

// A fresh id for a response: "cmpl-" / "chatcmpl-" and 24 hex digits (a counter and a random
// part, so that ids do not repeat across restarts).
std::string response_id(Endpoint endpoint, uint64_t serial, uint64_t random);

}  // namespace colibri_cli::serve

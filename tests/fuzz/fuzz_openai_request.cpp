// tests/fuzz/fuzz_openai_request.cpp — libFuzzer target: `colibri serve`'s request parsing
// (cli/serve_api.h) on arbitrary bodies, for both endpoints. Anything may be rejected (an
// ApiError naming the field); nothing may crash, hang or leak, and what is accepted must hold
// values the engine accepts.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "serve_api.h"

using colibri_cli::serve::ApiError;
using colibri_cli::serve::Endpoint;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string_view body(reinterpret_cast<const char *>(data), size);
  colibri_cli::serve::RequestLimits limits;
  limits.vocab_size = 4096;
  for (Endpoint endpoint : {Endpoint::Completions, Endpoint::ChatCompletions}) {
    try {
      const auto r = colibri_cli::serve::parse_request(body, endpoint, limits);
      check(r.temperature >= 0 && r.temperature <= 2);
      check(r.top_p > 0 && r.top_p <= 1);
      check(r.min_p >= 0 && r.min_p <= 1);
      check(r.repetition_penalty > 0 && r.repetition_penalty <= 10);
      check(r.stop.size() <= limits.max_stop_strings);
      for (const auto &s : r.stop) check(!s.empty() && s.size() <= limits.max_stop_bytes);
      for (int32_t t : r.prompt_tokens) check(t >= 0 && t < limits.vocab_size);
      check(endpoint == Endpoint::Completions || !r.messages.empty());
      check(!r.max_tokens || *r.max_tokens >= 1);
    } catch (const ApiError &e) {
      check(e.status >= 400 && e.status < 600 && !e.message.empty());
      (void)colibri_cli::serve::error_body(e).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
  }
  return 0;
}

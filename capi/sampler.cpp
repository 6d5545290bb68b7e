// capi/sampler.cpp — colibri_sampler_*: the engine's sampler chain (runtime/sampler.h) as a
// standalone handle, and the options conversion the generation calls share.
#include <optional>

#include "capi/internal.h"
#include "runtime/sampler.h"

using namespace colibri;

namespace colibri::capi {
struct SamplerHandle : HandleBase {
  SamplerHandle(const runtime::SamplerOptions &options, size_t vocab)
      : HandleBase(HandleKind::Sampler), sampler(std::make_unique<runtime::Sampler>(options, vocab)), vocab_size(vocab) {}
  std::unique_ptr<runtime::Sampler> sampler;  // released by colibri_sampler_free (the shell is quarantined)
  size_t vocab_size;
  std::atomic<uintptr_t> user{0};  // the busy word (BusyUse): one call at a time
};
COLIBRI_CAPI_HANDLE_CASTS(colibri_sampler, SamplerHandle)

// Checks the handle and holds its busy word for the call (BAD_STATE while another thread's
// call holds it).
class SamplerUse {
 public:
  explicit SamplerUse(colibri_sampler *h) noexcept : status_(check(h, "sampler")) {
    if (status_) return;
    use_.emplace(impl(h)->user, "sampler");
    status_ = use_->status();
  }
  int32_t status() const { return status_; }

 private:
  int32_t status_;
  std::optional<BusyUse> use_;
};
}  // namespace colibri::capi

namespace {

constexpr size_t kSamplerOptionsAbi1 = sizeof(colibri_sampler_options);

colibri_sampler_options default_sampler_options() {
  const runtime::SamplerOptions engine;  // the engine's defaults are the API's defaults
  colibri_sampler_options o{};
  o.struct_size = sizeof o;
  o.temperature = engine.temperature;
  o.top_k = engine.top_k;
  o.top_p = engine.top_p;
  o.min_p = engine.min_p;
  o.repetition_penalty = engine.repetition_penalty;
  o.presence_penalty = engine.presence_penalty;
  o.frequency_penalty = engine.frequency_penalty;
  o.penalty_last_n = engine.penalty_last_n;
  o.seed = COLIBRI_SEED_FROM_SESSION;
  return o;
}

}  // namespace

namespace colibri::capi {

int32_t sampler_options_from_c(const colibri_sampler_options *in, uint64_t session_seed, runtime::SamplerOptions *out) {
  colibri_sampler_options o = default_sampler_options();
  if (int32_t s = read_options(in, &o, kSamplerOptionsAbi1, "colibri_sampler_options")) return s;
  COLIBRI_REQUIRE_ARG(o.reserved0 == 0, "colibri_sampler_options.reserved0 must be 0");
  runtime::SamplerOptions r;
  r.temperature = o.temperature;
  r.top_k = o.top_k;
  r.top_p = o.top_p;
  r.min_p = o.min_p;
  r.repetition_penalty = o.repetition_penalty;
  r.presence_penalty = o.presence_penalty;
  r.frequency_penalty = o.frequency_penalty;
  r.penalty_last_n = o.penalty_last_n;
  r.seed = o.seed == COLIBRI_SEED_FROM_SESSION ? session_seed : o.seed;
  if (Error e = r.validate()) return fail(COLIBRI_ERROR_INVALID_ARGUMENT, "colibri_sampler_options." + e.message);
  *out = r;
  return COLIBRI_OK;
}

}  // namespace colibri::capi

extern "C" {

COLIBRI_API int32_t colibri_sampler_options_init(colibri_sampler_options *options, size_t struct_size) {
  return capi::options_init(__func__, options, struct_size, default_sampler_options, kSamplerOptionsAbi1, "colibri_sampler_options");
}

COLIBRI_API int32_t colibri_sampler_create(const colibri_sampler_options *options, size_t vocab_size,
                                           colibri_sampler **sampler_out) {
  return capi::guard(__func__, [&]() -> int32_t {
    COLIBRI_REQUIRE_ARG(sampler_out, "sampler_out must not be NULL");
    *sampler_out = nullptr;
    COLIBRI_REQUIRE_ARG(vocab_size > 0 && vocab_size <= INT32_MAX, "vocab_size " + std::to_string(vocab_size) +
                                                                        " is out of range (1..2147483647)");
    runtime::SamplerOptions so;
    if (int32_t s = capi::sampler_options_from_c(options, 0, &so)) return s;
    *sampler_out = capi::handle(new capi::SamplerHandle(so, vocab_size));
    return COLIBRI_OK;
  });
}

COLIBRI_API void colibri_sampler_free(colibri_sampler *sampler) {
  capi::guard_void(__func__, [&] {
    // Not while a call on it runs (its busy word), and only once (its tag).
    if (!sampler || capi::check(sampler, "sampler")) return;  // a misuse is recorded in the last error
    if (!capi::claim_busy_for_free(capi::impl(sampler)->user, "sampler")) return;
    if (!capi::claim_for_free(sampler, capi::HandleKind::Sampler, "sampler")) return;
    capi::impl(sampler)->sampler.reset();
    capi::quarantine(capi::impl(sampler), [](capi::HandleBase *h) { delete static_cast<capi::SamplerHandle *>(h); });
  });
}

COLIBRI_API int32_t colibri_sampler_sample(colibri_sampler *sampler, const float *logits, int32_t *token) {
  return capi::guard(__func__, [&]() -> int32_t {
    capi::SamplerUse use(sampler);
    if (use.status()) return use.status();
    COLIBRI_REQUIRE_ARG(logits && token, "logits and token must not be NULL");
    // The engine's sampler checks the row in its copy pass: NaN or +inf → NON_FINITE naming
    // the index, every logit -inf → INVALID_ARGUMENT; no id is returned from such a row.
    if (Error e = capi::impl(sampler)->sampler->sample(logits, token)) return capi::fail(e);
    return COLIBRI_OK;
  });
}

COLIBRI_API int32_t colibri_sampler_accept(colibri_sampler *sampler, int32_t token) {
  return capi::guard(__func__, [&]() -> int32_t {
    capi::SamplerUse use(sampler);
    if (use.status()) return use.status();
    COLIBRI_REQUIRE_ARG(token >= 0 && static_cast<size_t>(token) < capi::impl(sampler)->vocab_size,
                        "token " + std::to_string(token) + " is outside the vocabulary (0.." +
                            std::to_string(capi::impl(sampler)->vocab_size - 1) + ")");
    capi::impl(sampler)->sampler->accept(token);
    return COLIBRI_OK;
  });
}

COLIBRI_API int32_t colibri_sampler_reset(colibri_sampler *sampler) {
  return capi::guard(__func__, [&]() -> int32_t {
    capi::SamplerUse use(sampler);
    if (use.status()) return use.status();
    capi::impl(sampler)->sampler->reset();
    return COLIBRI_OK;
  });
}

}  // extern "C"

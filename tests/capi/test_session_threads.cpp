// tests/capi/test_session_threads.cpp — two threads on one session (issue 18, item 6): the
// second thread's calls are refused with BAD_STATE "in use by another thread" while the first
// thread's call runs, a free from the second thread is refused, and a storm of calls from
// four threads on one session gives only OK, BAD_STATE or CONTEXT_FULL, never a crash or an
// abort in the engine. The same for a sampler shared by four threads, and a request read by
// two (their busy words). Linked
// against libcolibri.so and colibri.h only.
//
// Usage: test_session_threads IMAGE
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "colibri.h"

namespace {

int g_failures = 0;

#define EXPECT(cond)                                                            \
  do {                                                                          \
    if (!(cond)) {                                                              \
      ++g_failures;                                                             \
      std::fprintf(stderr, "%s:%d: EXPECT failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                           \
  } while (0)

std::string last_error() {
  char message[1024];
  colibri_last_error(message, sizeof message, nullptr);
  return message;
}

colibri_session *make_session(colibri_model *model) {
  colibri_session_options so;
  colibri_session_options_init(&so, sizeof so);
  so.context_length = 64;
  so.threads = 2;
  colibri_session *session = nullptr;
  if (colibri_session_create(model, &so, &session) != COLIBRI_OK) std::fprintf(stderr, "session: %s\n", last_error().c_str());
  return session;
}

// Thread A generates; its piece callback holds the session (A is inside colibri_generate)
// until thread B has tried every call on it.
struct Handshake {
  std::atomic<int> a_inside{0};
  std::atomic<int> b_done{0};
};

int32_t hold_until_b_is_done(void *user, const char *, size_t) {
  auto *h = static_cast<Handshake *>(user);
  h->a_inside.store(1);
  while (!h->b_done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return 0;
}

void second_thread_is_refused(colibri_model *model) {
  colibri_session *session = make_session(model);
  if (!session) {
    ++g_failures;
    return;
  }
  Handshake h;
  int32_t a_status = COLIBRI_ERROR_INTERNAL;
  colibri_generate_result result{};
  result.struct_size = sizeof result;
  std::thread a([&] {
    colibri_sampler_options sampler;
    colibri_sampler_options_init(&sampler, sizeof sampler);
    sampler.temperature = 0.0f;
    colibri_generate_options g;
    colibri_generate_options_init(&g, sizeof g);
    g.max_tokens = 4;
    g.ignore_eos = 1;
    g.sampler = &sampler;
    const int32_t prompt[] = {1, 5, 6};
    a_status = colibri_generate(session, prompt, 3, &g, hold_until_b_is_done, &h, &result);
  });
  while (!h.a_inside.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // Thread B (this one), while A's call runs:
  EXPECT(colibri_session_decode(session, 0, 1) == COLIBRI_ERROR_BAD_STATE);
  EXPECT(last_error().find("in use by another thread") != std::string::npos);
  const float *logits = nullptr;
  EXPECT(colibri_session_logits(session, 0, &logits, nullptr, nullptr) == COLIBRI_ERROR_BAD_STATE && !logits);
  uint32_t length = 0;
  EXPECT(colibri_session_sequence_length(session, 0, &length) == COLIBRI_ERROR_BAD_STATE);
  colibri_stream *stream = nullptr;
  const int32_t prompt[] = {1, 5};
  EXPECT(colibri_stream_open(session, prompt, 2, nullptr, &stream) == COLIBRI_ERROR_BAD_STATE && !stream);
  EXPECT(colibri_session_reset(session) == COLIBRI_ERROR_BAD_STATE);
  colibri_session_free(session);  // refused: A is using it
  EXPECT(last_error().find("in use by another thread; nothing was freed") != std::string::npos);
  colibri_session_info info{};
  info.struct_size = sizeof info;
  EXPECT(colibri_session_get_info(session, &info) == COLIBRI_OK);  // immutable: allowed
  h.b_done.store(1);
  a.join();
  EXPECT(a_status == COLIBRI_OK);
  EXPECT(result.generated_token_count == 4);
  EXPECT(colibri_session_decode(session, 0, 1) == COLIBRI_OK);  // free again once A returned
  colibri_session_free(session);
}

// Four threads decode, read logits and reset on one session at once. The old library let them
// into the engine together (an abort in a kernel precondition, or worse).
void storm(colibri_model *model) {
  constexpr int kThreads = 4, kCalls = 300;
  colibri_session *session = make_session(model);
  if (!session) {
    ++g_failures;
    return;
  }
  std::atomic<int> ok{0}, busy{0}, full{0}, other{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        int32_t s;
        const float *logits = nullptr;
        switch ((i + t) % 3) {
          case 0: s = colibri_session_decode(session, 0, 5 + t); break;
          case 1: s = colibri_session_logits(session, 0, &logits, nullptr, nullptr); break;
          default: s = i % 30 == 2 ? colibri_session_reset(session) : colibri_session_decode(session, 0, 7); break;
        }
        if (s == COLIBRI_OK) {
          ++ok;
        } else if (s == COLIBRI_ERROR_BAD_STATE) {
          const std::string m = last_error();
          // In use by another thread, or no logits yet (a reset or the first call).
          if (m.find("in use by another thread") != std::string::npos) ++busy;
          else if (m.find("no logits") == std::string::npos) ++other;
        } else if (s == COLIBRI_ERROR_CONTEXT_FULL) {
          ++full;
          colibri_session_reset(session);
        } else {
          std::fprintf(stderr, "thread %d call %d: status %d: %s\n", t, i, s, last_error().c_str());
          ++other;
        }
      }
    });
  for (std::thread &th : threads) th.join();
  std::printf("storm: %d ok, %d refused as in use, %d context full\n", ok.load(), busy.load(), full.load());
  EXPECT(other.load() == 0);
  EXPECT(ok.load() > 0);
  EXPECT(colibri_session_reset(session) == COLIBRI_OK && colibri_session_decode(session, 0, 1) == COLIBRI_OK);
  colibri_session_free(session);
}

// Four threads sample from one sampler (its busy word, issue 18): every call is OK or
// BAD_STATE "in use by another thread", never a crash or a torn state. A large vocabulary
// makes each call long enough for the threads to meet.
void sampler_storm() {
  constexpr size_t kVocab = 1u << 20;
  constexpr int kThreads = 4, kCalls = 40;
  std::vector<float> logits(kVocab);
  for (size_t i = 0; i < kVocab; ++i) logits[i] = static_cast<float>((i * 2654435761u) % 1000) / 100.0f;
  colibri_sampler_options so;
  colibri_sampler_options_init(&so, sizeof so);
  so.top_k = 0;
  so.seed = 3;
  colibri_sampler *sampler = nullptr;
  EXPECT(colibri_sampler_create(&so, kVocab, &sampler) == COLIBRI_OK);
  if (!sampler) return;
  std::atomic<int> ok{0}, busy{0}, other{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        int32_t token = -1;
        const int32_t s = (i + t) % 4 == 3 ? colibri_sampler_accept(sampler, 7) : colibri_sampler_sample(sampler, logits.data(), &token);
        if (s == COLIBRI_OK) {
          ++ok;
        } else if (s == COLIBRI_ERROR_BAD_STATE && last_error().find("the sampler is in use by another thread") != std::string::npos) {
          ++busy;
        } else {
          std::fprintf(stderr, "sampler thread %d call %d: status %d: %s\n", t, i, s, last_error().c_str());
          ++other;
        }
      }
    });
  for (std::thread &th : threads) th.join();
  std::printf("sampler storm: %d ok, %d refused as in use\n", ok.load(), busy.load());
  EXPECT(other.load() == 0);
  EXPECT(ok.load() > 0);
  EXPECT(busy.load() > 0);
  int32_t token = -1;
  EXPECT(colibri_sampler_sample(sampler, logits.data(), &token) == COLIBRI_OK);
  colibri_sampler_free(sampler);
  EXPECT(colibri_sampler_sample(sampler, logits.data(), &token) == COLIBRI_ERROR_BAD_STATE);
  EXPECT(last_error().find("already freed") != std::string::npos);
}

// A request read by two threads (its pull stream's busy word): while thread A waits in
// colibri_request_next, thread B's next and free are refused with BAD_STATE; cancel (thread-
// safe) ends A's wait. The request waits behind a 16000-token one in a one-slot engine, so A's
// wait outlasts any scheduling delay of a loaded machine.
void request_two_readers(colibri_model *model) {
  colibri_engine_options eo;
  colibri_engine_options_init(&eo, sizeof eo);
  eo.max_sequences = 1;
  eo.context_length = 16384;
  eo.step_tokens = 16;
  colibri_engine *engine = nullptr;
  EXPECT(colibri_engine_create(model, &eo, &engine) == COLIBRI_OK);
  if (!engine) return;
  colibri_request_options ro;
  colibri_request_options_init(&ro, sizeof ro);
  ro.max_tokens = 16000;
  ro.ignore_eos = 1;
  const int32_t prompt[] = {1, 5, 6};
  colibri_request *holder = nullptr, *waiting = nullptr;
  EXPECT(colibri_request_submit(engine, prompt, 3, &ro, &holder) == COLIBRI_OK);
  EXPECT(colibri_request_submit(engine, prompt, 3, &ro, &waiting) == COLIBRI_OK);
  if (!holder || !waiting) return;
  std::atomic<bool> a_calling{false};
  std::atomic<int32_t> a_status{COLIBRI_ERROR_INTERNAL};
  std::thread a([&] {
    const char *piece;
    size_t size;
    a_calling.store(true);
    a_status.store(colibri_request_next(waiting, -1, &piece, &size));  // waits: no slot yet
  });
  while (!a_calling.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // B: until A is inside its wait, B's own zero-timeout look succeeds (PENDING).
  bool refused = false;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < give_up) {
    const char *piece;
    size_t size;
    const int32_t s = colibri_request_next(waiting, 0, &piece, &size);
    if (s == COLIBRI_ERROR_BAD_STATE) refused = last_error().find("is in use by another thread") != std::string::npos;
    if (s != COLIBRI_PENDING) {
      if (!refused) std::fprintf(stderr, "request_two_readers: status %d: %s\n", s, last_error().c_str());
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT(refused);
  colibri_request_free(waiting);  // refused while A waits
  EXPECT(last_error().find("nothing was freed") != std::string::npos);
  EXPECT(colibri_request_cancel(waiting) == COLIBRI_OK);  // thread-safe: ends A's wait
  a.join();
  EXPECT(a_status.load() == COLIBRI_DONE);
  const char *piece;
  size_t size;
  EXPECT(colibri_request_next(waiting, 0, &piece, &size) == COLIBRI_DONE);
  colibri_request_free(waiting);
  EXPECT(colibri_request_cancel(waiting) == COLIBRI_ERROR_BAD_STATE);  // freed now
  colibri_request_free(holder);
  colibri_engine_free(engine);
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s IMAGE\n", argv[0]);
    return 2;
  }
  colibri_model *model = nullptr;
  if (colibri_model_open(argv[1], nullptr, &model) != COLIBRI_OK) {
    std::fprintf(stderr, "%s: %s\n", argv[1], last_error().c_str());
    return 1;
  }
  second_thread_is_refused(model);
  storm(model);
  sampler_storm();
  request_two_readers(model);
  colibri_model_close(model);
  std::printf("test_session_threads: %d failures\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}

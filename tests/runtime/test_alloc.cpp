// tests/runtime/test_alloc.cpp — after warm-up, a decode step and a prefill make zero heap
// allocations. This executable replaces every global operator new (aligned forms included)
// with a counting one and, outside sanitizer builds (whose runtime owns malloc), interposes
// glibc's malloc family too, so a kernel's or a library's direct malloc is counted as well.
#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include <catch2/catch.hpp>

#include "runtime/oracle_support.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define COLIBRI_COUNT_MALLOC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define COLIBRI_COUNT_MALLOC 0
#endif
#endif
#if !defined(COLIBRI_COUNT_MALLOC) && defined(__GLIBC__)
#define COLIBRI_COUNT_MALLOC 1
#endif
#ifndef COLIBRI_COUNT_MALLOC
#define COLIBRI_COUNT_MALLOC 0
#endif


#if COLIBRI_COUNT_MALLOC
extern "C" {
void *__libc_malloc(size_t);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);
void *__libc_memalign(size_t, size_t);
void __libc_free(void *);
}
// operator new counts itself once, then takes memory below the counted malloc.
static void *raw_malloc(size_t size) { return __libc_malloc(size); }
static void *raw_aligned(size_t align, size_t size) { return __libc_memalign(align, size); }
#else
static void *raw_malloc(size_t size) { return std::malloc(size); }
static void *raw_aligned(size_t align, size_t size) { return std::aligned_alloc(align, size); }
#endif

static std::atomic<size_t> g_allocations{0};

// Every replaceable form is replaced, all on malloc/free, so allocation and deallocation
// always match (ASan checks that) and every allocation is counted.
static void *counted_alloc(size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return raw_malloc(size ? size : 1);
}
void *operator new(size_t size) {
  if (void *p = counted_alloc(size)) return p;
  throw std::bad_alloc();
}
void *operator new[](size_t size) {
  if (void *p = counted_alloc(size)) return p;
  throw std::bad_alloc();
}
void *operator new(size_t size, const std::nothrow_t &) noexcept { return counted_alloc(size); }
void *operator new[](size_t size, const std::nothrow_t &) noexcept { return counted_alloc(size); }
void operator delete(void *p) noexcept { std::free(p); }
void operator delete[](void *p) noexcept { std::free(p); }
void operator delete(void *p, size_t) noexcept { std::free(p); }
void operator delete[](void *p, size_t) noexcept { std::free(p); }
void operator delete(void *p, const std::nothrow_t &) noexcept { std::free(p); }
void operator delete[](void *p, const std::nothrow_t &) noexcept { std::free(p); }

// Aligned forms, on aligned_alloc/free (a size rounded up to the alignment, as it requires).
static void *counted_aligned(size_t size, std::align_val_t align) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  const size_t a = static_cast<size_t>(align);
  return raw_aligned(a, (size + a - 1) / a * a + (size == 0 ? a : 0));
}
void *operator new(size_t size, std::align_val_t align) {
  if (void *p = counted_aligned(size, align)) return p;
  throw std::bad_alloc();
}
void *operator new[](size_t size, std::align_val_t align) {
  if (void *p = counted_aligned(size, align)) return p;
  throw std::bad_alloc();
}
void *operator new(size_t size, std::align_val_t align, const std::nothrow_t &) noexcept { return counted_aligned(size, align); }
void *operator new[](size_t size, std::align_val_t align, const std::nothrow_t &) noexcept { return counted_aligned(size, align); }
void operator delete(void *p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void *p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void *p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void *p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void *p, std::align_val_t, const std::nothrow_t &) noexcept { std::free(p); }
void operator delete[](void *p, std::align_val_t, const std::nothrow_t &) noexcept { std::free(p); }

#if COLIBRI_COUNT_MALLOC
// The executable's malloc family interposes on every caller in the process (the engine's code
// linked in here, libstdc++, libc), counts, and forwards to glibc's own entry points.
extern "C" {
void *malloc(size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(size);
}
void *calloc(size_t n, size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_calloc(n, size);
}
void *realloc(void *p, size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_realloc(p, size);
}
void *aligned_alloc(size_t align, size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_memalign(align, size);
}
int posix_memalign(void **out, size_t align, size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  void *p = __libc_memalign(align, size);
  if (!p) return 12;  // ENOMEM
  *out = p;
  return 0;
}
void free(void *p) { __libc_free(p); }
}
#endif

using namespace colibri;

TEST_CASE("decode steps and a prefill after warm-up perform no heap allocation, for every dtype and KV type",
          "[engine][alloc]") {
  if (!COLIBRI_COUNT_MALLOC) WARN("a sanitizer owns malloc here: only operator new (all forms) is counted");
  for (const std::string &name :
       {std::string("qwen2_moe_shared"), std::string("qwen3_moe_qknorm"), std::string("glm4_moe_groups"),
        std::string("deepseek_v3_mla")}) {
    for (const char *dtype : {"f32", "f16", "bf16", "q8", "q8f16", "q4", "mxfp4"}) {
      for (runtime::KvDtype kv : {runtime::KvDtype::F32, runtime::KvDtype::F16}) {
        INFO(name << " " << dtype << (kv == runtime::KvDtype::F16 ? " f16 KV" : " f32 KV"));
        std::string path = testing::convert_fixture(name, dtype);
        REQUIRE(!path.empty());
        auto m = testing::load_model(path);
        REQUIRE(m);
        runtime::SessionOptions so;
        so.context_length = 64;
        so.max_sequences = 2;
        so.threads = 2;
        so.kv_dtype = kv;
        Error err;
        auto s = runtime::Session::create(*m, so, &err);
        REQUIRE(s);
        // Warm-up: a prefill and a decode step on sequence 0.
        std::vector<runtime::BatchEntry> prefill;
        for (uint32_t p = 0; p < 12; ++p) prefill.push_back({0, p, static_cast<int32_t>(p * 5 + 1), p == 11 ? 1u : 0u});
        REQUIRE(s->forward(prefill.data(), prefill.size()).ok());
        runtime::BatchEntry warm{0, 12, 3, 1};
        REQUIRE(s->forward(&warm, 1).ok());
        // Measured: a 12-token prefill of sequence 1, then 8 decode steps of both sequences.
        for (runtime::BatchEntry &e : prefill) e.sequence = 1;
        const size_t before = g_allocations.load();
        Error fe = s->forward(prefill.data(), prefill.size());
        for (uint32_t pos = 13; fe.ok() && pos < 21; ++pos) {
          runtime::BatchEntry steps[2] = {{0, pos, static_cast<int32_t>(pos * 11), 1},
                                          {1, pos - 1, static_cast<int32_t>(pos * 7), 1}};
          fe = s->forward(steps, 2);
        }
        const size_t during = g_allocations.load() - before;
        if (!fe.ok()) FAIL(fe.message);
        INFO("allocations during the prefill and 8 decode steps = " << during);
        CHECK(during == 0);
      }
    }
  }
}

TEST_CASE("the allocation counter sees operator new, aligned new and (outside sanitizers) malloc", "[alloc]") {
  // The instrument of the test above: if it missed a form, that test could not fail on it.
  void *volatile sink = nullptr;
  size_t before = g_allocations.load();
  sink = ::operator new(24);
  ::operator delete(sink);
  CHECK(g_allocations.load() - before == 1);
  before = g_allocations.load();
  sink = ::operator new(100, std::align_val_t{64});
  ::operator delete(sink, std::align_val_t{64});
  CHECK(g_allocations.load() - before == 1);
  if (COLIBRI_COUNT_MALLOC) {
    before = g_allocations.load();
    void *(*volatile alloc)(size_t) = &std::malloc;  // through a pointer: the call cannot be elided
    sink = alloc(40);
    std::free(sink);
    CHECK(g_allocations.load() - before == 1);
  }
}

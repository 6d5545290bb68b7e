// tests/runtime/test_alloc.cpp — after warm-up, a decode step makes zero heap allocations.
// This executable replaces the global operator new with a counting one.
#include <atomic>
#include <cstdlib>
#include <new>

#include <catch2/catch.hpp>

#include "runtime/oracle_support.h"

static std::atomic<size_t> g_allocations{0};

// Every replaceable form is replaced, all on malloc/free, so allocation and deallocation
// always match (ASan checks that) and every allocation is counted.
static void *counted_alloc(size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size ? size : 1);
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

using namespace colibri;

TEST_CASE("a decode step after warm-up performs no heap allocation", "[engine][alloc]") {
  for (const std::string &name : {std::string("qwen2_moe_shared"), std::string("qwen3_moe_qknorm")}) {
    std::string path = testing::convert_fixture(name, "q8");
    REQUIRE(!path.empty());
    auto m = testing::load_model(path);
    REQUIRE(m);
    runtime::SessionOptions so;
    so.context_length = 64;
    so.threads = 2;
    Error err;
    auto s = runtime::Session::create(*m, so, &err);
    REQUIRE(s);
    runtime::BatchEntry e{0, 0, 7, 1};
    REQUIRE(s->forward(&e, 1).ok());  // warm-up
    size_t before = g_allocations.load();
    for (uint32_t pos = 1; pos < 9; ++pos) {
      runtime::BatchEntry step{0, pos, static_cast<int32_t>(pos * 11), 1};
      Error fe = s->forward(&step, 1);
      if (!fe.ok()) FAIL(fe.message);
    }
    size_t during = g_allocations.load() - before;
    INFO(name << ": allocations during 8 decode steps = " << during);
    CHECK(during == 0);
  }
}

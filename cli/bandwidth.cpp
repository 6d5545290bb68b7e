// cli/bandwidth.cpp — the read-bandwidth probe (see bandwidth.h).
#include "bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <thread>
#include <vector>

namespace colibri_cli {

namespace {

struct FreeDeleter {
  void operator()(void *p) const { std::free(p); }
};

// Sums a slice with four independent accumulators so the loop is limited by memory, not by
// one add chain; the compiler vectorises it.
uint64_t sum_slice(const uint64_t *begin, const uint64_t *end) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  for (const uint64_t *p = begin; p + 4 <= end; p += 4) {
    a += p[0];
    b += p[1];
    c += p[2];
    d += p[3];
  }
  return a + b + c + d;
}

// Runs body(thread_index) on `threads` threads and returns the wall time in seconds.
template <typename Body>
double run_on_threads(size_t threads, Body body) {
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (size_t t = 1; t < threads; ++t) workers.emplace_back(body, t);
  body(0);
  for (std::thread &w : workers) w.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

double measure_read_bandwidth_gbs(size_t threads, size_t buffer_bytes, size_t repetitions) {
  threads = std::max<size_t>(threads, 1);
  const size_t count = buffer_bytes / sizeof(uint64_t) / 64 * 64;
  std::unique_ptr<uint64_t, FreeDeleter> buffer(static_cast<uint64_t *>(std::aligned_alloc(4096, count * sizeof(uint64_t))));
  if (!buffer) throw std::bad_alloc();
  uint64_t *data = buffer.get();
  auto slice = [&](size_t t, size_t *begin, size_t *end) {
    *begin = count * t / threads;
    *end = count * (t + 1) / threads;
  };
  // First touch by the reading thread places the pages as the reads will want them.
  run_on_threads(threads, [&](size_t t) {
    size_t begin, end;
    slice(t, &begin, &end);
    for (size_t i = begin; i < end; ++i) data[i] = i;
  });
  std::vector<uint64_t> sinks(threads * 8);
  std::vector<double> rates;
  for (size_t rep = 0; rep <= repetitions; ++rep) {
    double seconds = run_on_threads(threads, [&](size_t t) {
      size_t begin, end;
      slice(t, &begin, &end);
      sinks[t * 8] = sum_slice(data + begin, data + end);
    });
    if (rep > 0) rates.push_back(static_cast<double>(count * sizeof(uint64_t)) / seconds / 1e9);
  }
  volatile uint64_t keep = 0;
  for (uint64_t s : sinks) keep = keep + s;
  (void)keep;
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace colibri_cli

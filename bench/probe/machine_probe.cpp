// bench/probe/machine_probe.cpp — the read-bandwidth and FMA-peak probes (see machine_probe.h).
#include "machine_probe.h"

#include <unistd.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#if defined(__x86_64__)
// GCC 12's AVX-512 headers initialise _mm512_undefined_*() values from themselves, which
// -Wuninitialized reports inside the header (GCC PR 105593); silence it for the header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace colibri_probe {

namespace {

using Clock = std::chrono::steady_clock;

struct FreeDeleter {
  void operator()(void *p) const { std::free(p); }
};

// Bytes read per loop iteration by every reader: 8 accumulators × 64 bytes.
constexpr size_t kChunkBytes = 512;

// The prefetching readers ask for each line this far ahead of the loads, into L2
// (prefetcht1). On the 2-core dev VM a plain read drew 19–22 GB/s and this one 23–26 with
// 1 GiB buffers in alternating passes; 1 KiB ahead helped less. Prefetching past the end of
// the slice is harmless (prefetches do not fault).
constexpr size_t kPrefetchAhead = 4096;

template <bool Prefetch>
inline void prefetch_chunk(const unsigned char *p) {
  if constexpr (Prefetch)
    for (int i = 0; i < 8; ++i) __builtin_prefetch(p + kPrefetchAhead + 64 * i, 0, 2);
}

#if defined(__x86_64__)
template <bool Prefetch>
__attribute__((target("avx512f"))) uint64_t read_avx512(const unsigned char *p, size_t n) {
  __m512i acc[8];
  for (__m512i &a : acc) a = _mm512_setzero_si512();
  for (size_t off = 0; off < n; off += kChunkBytes) {
    prefetch_chunk<Prefetch>(p + off);
    for (int i = 0; i < 8; ++i)
      acc[i] = _mm512_add_epi64(acc[i], _mm512_load_si512(reinterpret_cast<const void *>(p + off + 64 * i)));
  }
  for (int i = 1; i < 8; ++i) acc[0] = _mm512_add_epi64(acc[0], acc[i]);
  // Not _mm512_reduce_add_epi64: GCC implements it with signed additions, whose overflow
  // (the sums wrap by design) UBSan rightly reports. Unsigned lanes wrap legally.
  uint64_t lanes[8];
  _mm512_storeu_si512(lanes, acc[0]);
  uint64_t total = 0;
  for (uint64_t lane : lanes) total += lane;
  return total;
}

template <bool Prefetch>
__attribute__((target("avx2"))) uint64_t read_avx2(const unsigned char *p, size_t n) {
  __m256i acc[8];
  for (__m256i &a : acc) a = _mm256_setzero_si256();
  for (size_t off = 0; off < n; off += kChunkBytes) {
    prefetch_chunk<Prefetch>(p + off);
    for (int i = 0; i < 8; ++i) {
      const __m256i *line = reinterpret_cast<const __m256i *>(p + off + 64 * i);
      acc[i] = _mm256_add_epi64(acc[i], _mm256_add_epi64(_mm256_load_si256(line), _mm256_load_si256(line + 1)));
    }
  }
  for (int i = 1; i < 8; ++i) acc[0] = _mm256_add_epi64(acc[0], acc[i]);
  uint64_t lanes[4];
  _mm256_storeu_si256(reinterpret_cast<__m256i *>(lanes), acc[0]);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

__attribute__((target("avx512f"))) float fma_avx512(size_t iterations) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
  for (size_t it = 0; it < iterations; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], m, a);
  for (int i = 1; i < 12; ++i) acc[0] = _mm512_add_ps(acc[0], acc[i]);
  return _mm512_reduce_add_ps(acc[0]);
}

__attribute__((target("avx2,fma"))) float fma_avx2(size_t iterations) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
  for (size_t it = 0; it < iterations; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], m, a);
  for (int i = 1; i < 12; ++i) acc[0] = _mm256_add_ps(acc[0], acc[i]);
  float out[8];
  _mm256_storeu_ps(out, acc[0]);
  return out[0] + out[7];
}
#endif

template <bool Prefetch>
uint64_t read_scalar(const unsigned char *p, size_t n) {
  uint64_t acc[8] = {};
  for (size_t off = 0; off < n; off += kChunkBytes) {
    prefetch_chunk<Prefetch>(p + off);
    for (int i = 0; i < 8; ++i) {
      uint64_t words[8];
      std::memcpy(words, p + off + 64 * i, sizeof words);
      for (uint64_t w : words) acc[i] += w;
    }
  }
  uint64_t total = 0;
  for (uint64_t a : acc) total += a;
  return total;
}

float fma_scalar(size_t iterations) {
  float acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = static_cast<float>(i);
  for (size_t it = 0; it < iterations; ++it)
    for (float &a : acc) a = a * 0.999999f + 1e-7f;
  float s = 0;
  for (float a : acc) s += a;
  return s;
}

enum class Width { Scalar, Avx2, Avx512 };

Width widest() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return Width::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Width::Avx2;
#endif
  return Width::Scalar;
}

const char *width_name(Width w) {
  return w == Width::Avx512 ? "avx512" : w == Width::Avx2 ? "avx2" : "scalar";
}

Width capped(const std::string &max_isa) {
  Width width = widest();
  if (max_isa == "scalar") width = Width::Scalar;
  if (max_isa == "avx2" && width == Width::Avx512) width = Width::Avx2;
  return width;
}

template <bool Prefetch>
uint64_t read_slice(Width w, const unsigned char *p, size_t n) {
#if defined(__x86_64__)
  if (w == Width::Avx512) return read_avx512<Prefetch>(p, n);
  if (w == Width::Avx2) return read_avx2<Prefetch>(p, n);
#endif
  (void)w;
  return read_scalar<Prefetch>(p, n);
}

uint64_t sum_bytes(const unsigned char *p, size_t n) {
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) total += p[i];
  return total;
}

struct Summary {
  double median = 0, min = 0, max = 0;
};

Summary summarise(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  Summary s;
  s.median = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  s.min = v.front();
  s.max = v.back();
  return s;
}

size_t sysfs_cache_bytes(int index) {
  std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
  std::string text;
  if (!(in >> text) || text.empty()) return 0;
  size_t scale = 1;
  switch (text.back()) {
    case 'K': scale = size_t(1) << 10; text.pop_back(); break;
    case 'M': scale = size_t(1) << 20; text.pop_back(); break;
    case 'G': scale = size_t(1) << 30; text.pop_back(); break;
    default: break;
  }
  char *end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  return end != nullptr && *end == '\0' ? static_cast<size_t>(value) * scale : 0;
}

}  // namespace

std::string probe_isa(const std::string &max_isa) { return width_name(capped(max_isa)); }

uint64_t read_range(const void *p, size_t n, const std::string &max_isa, bool prefetch) {
  // The readers take whole 512-byte chunks from a 64-byte aligned start; the unaligned head
  // and the tail after the last whole chunk are summed byte by byte (under 576 bytes).
  const unsigned char *bytes = static_cast<const unsigned char *>(p);
  const size_t head = std::min(n, static_cast<size_t>((64 - reinterpret_cast<uintptr_t>(bytes) % 64) % 64));
  const size_t body = (n - head) / kChunkBytes * kChunkBytes;
  const Width width = capped(max_isa);
  uint64_t total = sum_bytes(bytes, head) + sum_bytes(bytes + head + body, n - head - body);
  if (body != 0) total += prefetch ? read_slice<true>(width, bytes + head, body) : read_slice<false>(width, bytes + head, body);
  return total;
}

size_t last_level_cache_bytes() {
  size_t best = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
  for (int name : {_SC_LEVEL2_CACHE_SIZE, _SC_LEVEL3_CACHE_SIZE, _SC_LEVEL4_CACHE_SIZE}) {
    const long v = sysconf(name);
    if (v > 0) best = std::max(best, static_cast<size_t>(v));
  }
#endif
  for (int index = 0; index < 8; ++index) best = std::max(best, sysfs_cache_bytes(index));
  return best;
}

size_t default_probe_bytes() { return std::max<size_t>(size_t(1) << 30, 4 * last_level_cache_bytes()); }

ReadProbeResult measure_read_bandwidth(const ReadProbeOptions &options) {
  const size_t threads = std::max<size_t>(options.threads, 1);
  const size_t repetitions = std::max<size_t>(options.repetitions, 1);
  const size_t requested = options.buffer_bytes != 0 ? options.buffer_bytes : default_probe_bytes();
  // Every thread's slice is a whole number of chunks.
  const size_t slice = std::max<size_t>(requested / threads / kChunkBytes, 1) * kChunkBytes;
  const size_t total = slice * threads;
  // 2 MiB-aligned and, on Linux, backed by transparent huge pages where the system allows
  // them (fewer TLB misses: the probe should be the best case, not a page-walk benchmark).
  constexpr size_t kHugePage = size_t(2) << 20;
  const size_t allocated = (total + kHugePage - 1) / kHugePage * kHugePage;
  std::unique_ptr<unsigned char, FreeDeleter> buffer(static_cast<unsigned char *>(std::aligned_alloc(kHugePage, allocated)));
  if (!buffer) throw std::bad_alloc();
#if defined(__linux__)
  ::madvise(buffer.get(), allocated, MADV_HUGEPAGE);  // advisory: failure changes nothing
#endif
  const Width width = capped(options.max_isa);

  // Pass 0 touches the pages (first touch by the reader), pass 1 is the warm-up, then the
  // timed passes alternate the plain and the prefetching reader (so both see the same
  // minutes of the host's drift). Thread 0 times each pass between two barriers.
  const size_t passes = 2 * repetitions + 2;
  auto prefetching = [](size_t pass) { return pass >= 2 && pass % 2 == 1; };
  std::vector<double> seconds(passes, 0.0);
  std::vector<uint64_t> sinks(threads * 8, 0);  // one cache line apart
  std::barrier sync(static_cast<std::ptrdiff_t>(threads));
  auto body = [&](size_t t) {
    unsigned char *mine = buffer.get() + t * slice;
    for (size_t pass = 0; pass < passes; ++pass) {
      sync.arrive_and_wait();
      const Clock::time_point start = Clock::now();
      if (pass == 0) {
        for (size_t i = 0; i < slice; ++i) mine[i] = static_cast<unsigned char>(i * 7 + t);
      } else if (prefetching(pass)) {
        sinks[t * 8] += read_slice<true>(width, mine, slice);
      } else {
        sinks[t * 8] += read_slice<false>(width, mine, slice);
      }
      sync.arrive_and_wait();
      if (t == 0) seconds[pass] = std::chrono::duration<double>(Clock::now() - start).count();
    }
  };
  std::vector<std::thread> workers;
  workers.reserve(threads - 1);
  for (size_t t = 1; t < threads; ++t) workers.emplace_back(body, t);
  body(0);
  for (std::thread &w : workers) w.join();
  volatile uint64_t keep = 0;
  for (uint64_t s : sinks) keep = keep + s;

  std::vector<double> plain_rates, prefetch_rates;
  for (size_t pass = 2; pass < passes; ++pass)
    (prefetching(pass) ? prefetch_rates : plain_rates).push_back(static_cast<double>(total) / seconds[pass] / 1e9);
  const Summary plain = summarise(plain_rates), ahead = summarise(prefetch_rates);
  const Summary &best = ahead.median > plain.median ? ahead : plain;
  ReadProbeResult r;
  r.median_gbs = best.median;
  r.min_gbs = best.min;
  r.max_gbs = best.max;
  r.plain_median_gbs = plain.median;
  r.prefetch_median_gbs = ahead.median;
  r.reader = &best == &ahead ? "prefetch" : "plain";
  r.buffer_bytes = total;
  r.threads = threads;
  r.loads = width_name(width);
  return r;
}

FmaProbeResult measure_fma_peak(size_t threads, const std::string &max_isa, size_t iterations, size_t trials) {
  threads = std::max<size_t>(threads, 1);
  const Width width = capped(max_isa);
  std::vector<float> sinks(threads * 16, 0.0f);
  auto body = [&](size_t t) {
#if defined(__x86_64__)
    if (width == Width::Avx512) {
      sinks[t * 16] = fma_avx512(iterations);
      return;
    }
    if (width == Width::Avx2) {
      sinks[t * 16] = fma_avx2(iterations);
      return;
    }
#endif
    sinks[t * 16] = fma_scalar(iterations);
  };
  double s = 0;
  for (size_t trial = 0; trial < std::max<size_t>(trials, 1); ++trial) {
    const Clock::time_point start = Clock::now();
    std::vector<std::thread> workers;
    for (size_t t = 1; t < threads; ++t) workers.emplace_back(body, t);
    body(0);
    for (std::thread &w : workers) w.join();
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (trial == 0 || elapsed < s) s = elapsed;
  }
  volatile float keep = 0;
  for (float v : sinks) keep = keep + v;
  const double lanes = width == Width::Avx512 ? 16 : width == Width::Avx2 ? 8 : 1;
  FmaProbeResult r;
  r.gflops = static_cast<double>(iterations) * 12 * lanes * 2 * static_cast<double>(threads) / s / 1e9;
  r.threads = threads;
  r.isa = width_name(width);
  return r;
}

}  // namespace colibri_probe

// bench/kernels_bench.cpp — micro benchmark of the CPU kernels and the thread pool.
//
// Reports, next to a memory-read bandwidth probe and an FMA peak probe measured in the same
// run (docs/architecture.md §9):
//   * decode: matmul_rows at T=1, GB/s of weight bytes, streamed from DRAM (copies of the
//     matrix spanning >= 1 GiB, visited round-robin) and hot (one copy, cache-resident);
//   * prefill: gemm_rows at T=128 in GFLOP/s (and matmul_rows at T=128 for comparison), and
//     gemm_rows at T=32 with the weights streamed from DRAM (an expert's share of a prefill);
//   * the pool: the cost of an empty parallel_for.
// for 1 thread and N threads (default 2). Every figure is the median of --runs samples
// (default 5, minimum 3) after a warm-up, shown with [min..max]. Single-thread figures are
// also given per second of the thread's CPU time: on a shared VM that is what the kernel
// can do when it runs, while the wall-clock figures include time lost to other load.
//
// Usage: kernels_bench [--isa scalar|avx2|avx512] [--threads N] [--runs N] [--quick] [--batch]
//   --batch: only the sweep of 1..64 tokens per expert matrix from DRAM (matmul_rows vs gemm_rows);
//            --dtype f16|q8/32|q4/32 and --tokens 6,7,8 narrow it to one dtype and those counts
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <time.h>

#include "core/util/thread_pool.h"
#include "kernels/cpu/kernels.h"
#include "machine_probe.h"

namespace {

using colibri::kernels::DType;
using colibri::kernels::KernelTable;
using colibri::util::ThreadPool;
using Clock = std::chrono::steady_clock;

struct Stats {
  double median, min, max;
};

// Runs `sample` (which returns the measured quantity) once to warm up, then `runs` times.
Stats measure(int runs, const std::function<double()> &sample) {
  sample();
  std::vector<double> v;
  for (int i = 0; i < runs; ++i) v.push_back(sample());
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPU time of the calling thread: unlike the wall clock it does not count time the thread
// spent preempted, so on a shared machine it shows what the kernel itself can do.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Median of samples[1..] (samples[0] is the warm-up).
double median_after_warmup(std::vector<double> samples) {
  samples.erase(samples.begin());
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

std::string format(const Stats &s, const char *unit) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%7.1f %s [%.1f..%.1f]", s.median, unit, s.min, s.max);
  return buf;
}

struct AlignedBuffer {
  unsigned char *data = nullptr;
  size_t bytes = 0;
  explicit AlignedBuffer(size_t n) : data(static_cast<unsigned char *>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096))), bytes(n) {
    if (data == nullptr) {
      std::fprintf(stderr, "kernels_bench: cannot allocate %zu bytes\n", n);
      std::exit(1);
    }
  }
  ~AlignedBuffer() { std::free(data); }
  AlignedBuffer(const AlignedBuffer &) = delete;
  AlignedBuffer &operator=(const AlignedBuffer &) = delete;
};

// ---- probes --------------------------------------------------------------------------------

// ---- matrices ------------------------------------------------------------------------------

struct Format {
  const char *name;
  DType dtype;
  uint32_t group_size;
};

const Format kFormats[] = {
    {"f32", DType::F32, 0}, {"f16", DType::F16, 0}, {"bf16", DType::BF16, 0},
    {"q8/32", DType::Q8, 32}, {"q8/64", DType::Q8, 64},
    {"q8f16", DType::Q8F16, 32}, {"q4/32", DType::Q4, 32}, {"q4/128", DType::Q4, 128},
    {"mxfp4", DType::MXFP4, 32},
};

// A row of a version-2 block dtype from pseudo-random bytes (speed does not depend on the
// values): every code, and scales set to a finite f16 (q4, q8f16) or e8m0 127 (mxfp4).
void fill_block_row(const Format &f, size_t cols, uint32_t *state, unsigned char *dst) {
  const size_t rb = colibri::kernels::row_bytes(f.dtype, f.group_size, cols);
  for (size_t i = 0; i < rb; ++i) {
    *state = *state * 1664525u + 1013904223u;
    dst[i] = static_cast<unsigned char>(*state >> 24);
  }
  const size_t block = rb / (cols / f.group_size);
  const uint16_t scale = colibri::kernels::f32_to_f16_value(0.01f);
  for (size_t b = 0; b < cols / f.group_size; ++b) {
    if (f.dtype == DType::MXFP4) dst[b * block] = 127;
    else std::memcpy(dst + b * block, &scale, 2);
  }
}

// `copies` copies of one random [rows, cols] matrix, each starting on a 4 KiB boundary.
struct Weights {
  size_t rows, cols, matrix_bytes, stride, copies;
  std::unique_ptr<AlignedBuffer> buffer;
  const void *copy(size_t i) const { return buffer->data + i * stride; }
};

Weights make_weights(const KernelTable &k, const Format &f, size_t rows, size_t cols, size_t copies) {
  Weights w{rows, cols, 0, 0, copies, nullptr};
  w.matrix_bytes = rows * colibri::kernels::row_bytes(f.dtype, f.group_size, cols);
  w.stride = (w.matrix_bytes + 4095) / 4096 * 4096;
  w.buffer = std::make_unique<AlignedBuffer>(w.stride * copies);
  std::vector<float> row(cols);
  uint32_t state = 1234567;
  const size_t rb = colibri::kernels::row_bytes(f.dtype, f.group_size, cols);
  for (size_t r = 0; r < rows; ++r) {
    for (float &v : row) {
      state = state * 1664525u + 1013904223u;
      v = (float(state >> 8) / 16777216.0f - 0.5f) * 0.1f;
    }
    unsigned char *dst = w.buffer->data + r * rb;
    switch (f.dtype) {
      case DType::F32: std::memcpy(dst, row.data(), cols * 4); break;
      case DType::F16: k.f32_to_f16(row.data(), reinterpret_cast<uint16_t *>(dst), cols); break;
      case DType::BF16: k.f32_to_bf16(row.data(), reinterpret_cast<uint16_t *>(dst), cols); break;
      case DType::Q8: k.quantize_row_q8(row.data(), cols, f.group_size, dst); break;
      default: fill_block_row(f, cols, &state, dst); break;
    }
  }
  for (size_t c = 1; c < copies; ++c) std::memcpy(w.buffer->data + c * w.stride, w.buffer->data, w.matrix_bytes);
  return w;
}

// Enough copies (>= 2) to span dram_bytes: visited round-robin, every call reads from DRAM.
Weights make_dram_weights(const KernelTable &k, const Format &f, size_t rows, size_t cols, size_t dram_bytes) {
  const size_t one_bytes = rows * colibri::kernels::row_bytes(f.dtype, f.group_size, cols);
  return make_weights(k, f, rows, cols, std::max<size_t>(2, dram_bytes / one_bytes));
}

// `tokens` activation rows of `cols` floats, and their q8 form for q8 formats.
struct Activations {
  std::vector<float> x;
  std::vector<unsigned char> xq;
};

Activations make_activations(const KernelTable &k, const Format &f, size_t cols, size_t tokens) {
  Activations a;
  a.x.resize(tokens * cols);
  for (size_t i = 0; i < a.x.size(); ++i) a.x[i] = float(i % 97) * 0.001f - 0.05f;
  const uint32_t act = f.group_size == 0 ? 32 : colibri::kernels::activation_group_size(f.dtype, f.group_size);
  const size_t xrow = colibri::kernels::row_bytes(DType::Q8, act, cols);
  a.xq.resize(xrow * tokens);
  if (colibri::kernels::takes_q8_activations(f.dtype))
    for (size_t t = 0; t < tokens; ++t) k.quantize_row_q8(a.x.data() + t * cols, cols, act, a.xq.data() + t * xrow);
  return a;
}

// y = W x for `tokens` tokens over all rows. With one thread: one call over all rows. With
// more: rows split into tasks of 64 over the pool. q8 uses the pre-quantised entry
// (activations quantised once, as the forward pass does for the k experts of a token).
struct MatmulCall {
  const KernelTable &k;
  const Format &f;
  size_t cols, rows, tokens;
  const float *x;
  const void *xq;
  float *y;
  bool gemm;

  void rows_range(const void *weights, size_t r0, size_t r1) const {
    if (colibri::kernels::takes_q8_activations(f.dtype)) {
      (gemm ? k.gemm_rows_q8 : k.matmul_rows_q8)(weights, f.dtype, f.group_size, cols, r0, r1, xq, tokens, y, rows);
    } else {
      (gemm ? k.gemm_rows : k.matmul_rows)(weights, f.dtype, f.group_size, cols, r0, r1, x, tokens, y, rows);
    }
  }

  void operator()(ThreadPool &pool, const void *weights) const {
    if (pool.thread_count() == 1) {
      rows_range(weights, 0, rows);
      return;
    }
    const size_t rows_per_task = 64;
    const size_t tasks = (rows + rows_per_task - 1) / rows_per_task;
    pool.parallel_for(tasks, [&](size_t t, size_t) {
      rows_range(weights, t * rows_per_task, std::min(rows, (t + 1) * rows_per_task));
    });
  }
};

struct Options {
  colibri::kernels::Isa isa = colibri::kernels::best_isa();
  size_t threads = 2;
  int runs = 5;
  bool quick = false;
  bool batch = false;  // --batch: only the tokens-per-expert sweep
  std::string batch_dtype;            // --dtype: the sweep for one of f16, q8/32, q4/32 only
  std::vector<size_t> batch_tokens;   // --tokens 6,8: those token counts only
};

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kernels_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--isa") {
      const std::string v = value();
      if (!colibri::kernels::parse_isa(v.c_str(), &o.isa)) {
        std::fprintf(stderr, "kernels_bench: unknown ISA '%s' (scalar, avx2, avx512)\n", v.c_str());
        std::exit(2);
      }
    } else if (a == "--threads") {
      o.threads = std::max<size_t>(1, std::strtoul(value().c_str(), nullptr, 10));
    } else if (a == "--runs") {
      o.runs = std::max(3, std::atoi(value().c_str()));
    } else if (a == "--quick") {
      o.quick = true;
    } else if (a == "--batch") {
      o.batch = true;
    } else if (a == "--dtype") {
      o.batch_dtype = value();
    } else if (a == "--tokens") {
      const std::string v = value();
      for (size_t p = 0; p < v.size();) {
        const size_t comma = std::min(v.find(',', p), v.size());
        const unsigned long t = std::strtoul(v.substr(p, comma - p).c_str(), nullptr, 10);
        if (t < 1 || t > 64) {
          std::fprintf(stderr, "kernels_bench: --tokens takes counts 1..64, got '%s'\n", v.c_str());
          std::exit(2);
        }
        o.batch_tokens.push_back(t);
        p = comma + 1;
      }
    } else {
      std::fprintf(stderr, "usage: kernels_bench [--isa scalar|avx2|avx512] [--threads N] [--runs N>=3] [--quick] [--batch [--dtype f16|q8/32|q4/32] [--tokens T,T,...]]\n");
      std::exit(a == "--help" || a == "-h" ? 0 : 2);
    }
  }
  return o;
}

// A continuous-batching decode step gives each active expert a few tokens (32 sequences,
// top-2 of 8 experts: ~8 each). Weights streamed from DRAM (copies round-robin), all rows
// of one expert matrix per call split over the pool as the engine does, for T = 1..16
// through the driver the engine picks (matmul_rows for T <= 8, gemm_rows above) and the
// other one: GFLOP/s and GB/s of weight bytes.
void batch_sweep(const KernelTable &k, ThreadPool &pool, size_t dram_bytes, int runs, const Options &opt) {
  std::printf("\nbatched decode from DRAM: an expert's matrix per call, %zu threads, GFLOP/s (GB/s of weights)\n",
              pool.thread_count());
  std::printf("%-10s %-6s %3s  %-26s %-26s\n", "rows x cols", "dtype", "T", "matmul_rows", "gemm_rows");
  const size_t shapes[2][2] = {{2816, 1024}, {1024, 2816}};
  const Format *formats[] = {&kFormats[1], &kFormats[3], &kFormats[6]};  // f16, q8/32, q4/32
  for (const auto &shape : shapes) {
    const size_t rows = shape[0], cols = shape[1];
    for (const Format *f : formats) {
      if (!opt.batch_dtype.empty() && opt.batch_dtype != f->name) continue;
      const Weights w = make_dram_weights(k, *f, rows, cols, dram_bytes);
      const std::vector<size_t> all_tokens = {1, 2, 4, 6, 8, 10, 12, 16, 24, 32, 48, 64};
      for (size_t tokens : opt.batch_tokens.empty() ? all_tokens : opt.batch_tokens) {
        const Activations act = make_activations(k, *f, cols, tokens);
        std::vector<float> y(tokens * rows);
        std::string cells[2];
        for (int gemm = 0; gemm < 2; ++gemm) {
          const MatmulCall call{k, *f, cols, rows, tokens, act.x.data(), act.xq.data(), y.data(), gemm == 1};
          double gbs = 0;
          const Stats s = measure(runs, [&] {
            const Clock::time_point start = Clock::now();
            for (size_t c = 0; c < w.copies; ++c) call(pool, w.copy(c));
            const double t = seconds_since(start);
            gbs = double(w.matrix_bytes) * double(w.copies) / t / 1e9;
            return 2.0 * double(rows) * double(cols) * double(tokens) * double(w.copies) / t / 1e9;
          });
          char cell[64];
          std::snprintf(cell, sizeof(cell), "%6.1f [%.1f..%.1f] (%4.1f)", s.median, s.min, s.max, gbs);
          cells[gemm] = cell;
        }
        char shape_name[48];
        std::snprintf(shape_name, sizeof(shape_name), "%zux%zu", rows, cols);
        std::printf("%-10s %-6s %3zu  %-26s %-26s\n", shape_name, f->name, tokens, cells[0].c_str(), cells[1].c_str());
      }
    }
  }
}

}  // namespace

int main(int argc, char **argv) {
  const Options opt = parse(argc, argv);
  const KernelTable &k = colibri::kernels::kernel_table(opt.isa);
  const size_t dram_bytes = opt.quick ? (256u << 20) : (1024u << 20);

  colibri::util::ThreadPoolOptions one_options;
  one_options.thread_count = 1;
  colibri::util::ThreadPoolOptions many_options;
  many_options.thread_count = opt.threads;
  ThreadPool one(one_options), many(many_options);
  ThreadPool *pools[2] = {&one, &many};

  if (opt.batch) {
    std::printf("kernels_bench --batch: isa %s\n", colibri::kernels::isa_name(k.isa));
    batch_sweep(k, many, dram_bytes, opt.runs, opt);
    return 0;
  }
  std::printf("kernels_bench: isa %s, %zu thread(s) vs 1, medians of %d runs [min..max]\n",
              colibri::kernels::isa_name(k.isa), opt.threads, opt.runs);
  // Other load on the machine changes every figure here: print it with them.
  if (FILE *f = std::fopen("/proc/loadavg", "r")) {
    char line[128] = {};
    if (std::fgets(line, sizeof(line), f)) std::printf("load average at start: %s", line);
    std::fclose(f);
  }

  // Probes (bench/probe, shared with engine_bench and `colibri bench`).
  double read_gbs[2] = {0, 0};
  for (int p = 0; p < 2; ++p) {
    colibri_probe::ReadProbeOptions ro;
    ro.threads = pools[p]->thread_count();
    ro.buffer_bytes = dram_bytes;
    ro.repetitions = static_cast<size_t>(opt.runs);
    const colibri_probe::ReadProbeResult r = colibri_probe::measure_read_bandwidth(ro);
    read_gbs[p] = r.median_gbs;
    std::printf("memory read bandwidth, %zu thread(s), %zu MiB, %s loads: %.1f GB/s [%.1f..%.1f] (%s reader; plain %.1f, prefetching %.1f)\n",
                r.threads, r.buffer_bytes >> 20, r.loads.c_str(), r.median_gbs, r.min_gbs, r.max_gbs, r.reader.c_str(),
                r.plain_median_gbs, r.prefetch_median_gbs);
  }
  for (const char *isa : {"avx2", "avx512"}) {
    const colibri_probe::FmaProbeResult f = colibri_probe::measure_fma_peak(1, isa);
    if (f.isa == isa) std::printf("fp32 FMA peak, 1 thread, %s: %.1f GFLOP/s\n", isa, f.gflops);
  }
  {
    const Stats s = measure(opt.runs, [&] {
      const int calls = 20000;
      std::vector<size_t> sink(many.thread_count());
      const Clock::time_point start = Clock::now();
      for (int i = 0; i < calls; ++i)
        many.parallel_for(many.thread_count(), [&](size_t task, size_t) { sink[task] += task; });
      return seconds_since(start) / calls * 1e6;
    });
    std::printf("empty parallel_for, %zu threads: %s\n", many.thread_count(), format(s, "us").c_str());
  }

  const size_t shapes[2][2] = {{2816, 1024}, {1024, 2816}};  // rows x cols

  std::printf("\ndecode: matmul_rows, T=1, GB/s of weight bytes (DRAM: >= %zu MiB of copies round-robin, %% = of the\n"
              "read probe with the same thread count; hot: one copy, cache-resident)\n",
              dram_bytes >> 20);
  std::printf("%-10s %-6s %-34s %-34s %-30s %-30s %s\n", "rows x cols", "dtype", "DRAM 1 thread", "DRAM N threads",
              "hot 1 thread", "hot N threads", "1 thread per CPU-s: DRAM / hot");
  for (const auto &shape : shapes) {
    const size_t rows = shape[0], cols = shape[1];
    for (const Format &f : kFormats) {
      const Weights w = make_dram_weights(k, f, rows, cols, dram_bytes);
      const size_t one_bytes = w.matrix_bytes, copies = w.copies;
      const Activations act = make_activations(k, f, cols, 1);
      std::vector<float> y(rows);
      const MatmulCall call{k, f, cols, rows, 1, act.x.data(), act.xq.data(), y.data(), false};
      std::string cells[4];
      double cpu_gbs[2] = {0, 0};
      int cell = 0;
      for (bool dram : {true, false}) {
        for (int p = 0; p < 2; ++p) {
          std::vector<double> cpu;
          const Stats s = measure(opt.runs, [&] {
            const size_t calls = dram ? copies : std::max<size_t>(10, (size_t(64) << 20) / one_bytes);
            const Clock::time_point start = Clock::now();
            const double c0 = thread_cpu_seconds();
            for (size_t c = 0; c < calls; ++c) call(*pools[p], w.copy(dram ? c : 0));
            const double bytes = double(one_bytes) * double(calls);
            cpu.push_back(bytes / (thread_cpu_seconds() - c0) / 1e9);
            return bytes / seconds_since(start) / 1e9;
          });
          if (p == 0) cpu_gbs[dram ? 0 : 1] = median_after_warmup(cpu);
          cells[cell] = format(s, "GB/s");
          if (dram) {
            char pct[16];
            std::snprintf(pct, sizeof(pct), " %3.0f%%", 100.0 * s.median / read_gbs[p]);
            cells[cell] += pct;
          }
          ++cell;
        }
      }
      char shape_name[48];
      std::snprintf(shape_name, sizeof(shape_name), "%zux%zu", rows, cols);
      std::printf("%-10s %-6s %-34s %-34s %-30s %-30s %.1f / %.1f GB/s\n", shape_name, f.name, cells[0].c_str(),
                  cells[1].c_str(), cells[2].c_str(), cells[3].c_str(), cpu_gbs[0], cpu_gbs[1]);
    }
  }

  const size_t tokens = 128;
  std::printf("\nprefill: T=%zu, GFLOP/s (2·rows·cols·T per call; weights hot; 1 thread = one call over all rows,\n"
              "N threads = tasks of 64 rows; matmul_rows = the decode kernel in chunks of 8 tokens, for comparison)\n", tokens);
  std::printf("%-10s %-6s %-30s %-30s %-30s %s\n", "rows x cols", "dtype", "gemm_rows 1 thread", "gemm_rows N threads",
              "matmul_rows 1 thread", "1 thread per CPU-s: gemm / matmul");
  for (const auto &shape : shapes) {
    const size_t rows = shape[0], cols = shape[1];
    for (const Format &f : kFormats) {
      const Weights w = make_weights(k, f, rows, cols, 1);
      const Activations act = make_activations(k, f, cols, tokens);
      std::vector<float> y(tokens * rows);
      const double flops = 2.0 * double(rows) * double(cols) * double(tokens);
      std::string cells[3];
      double cpu_gflops[3] = {0, 0, 0};
      int cell = 0;
      for (int variant = 0; variant < 3; ++variant) {
        ThreadPool &pool = variant == 1 ? many : one;
        const MatmulCall call{k, f, cols, rows, tokens, act.x.data(), act.xq.data(), y.data(), variant != 2};
        std::vector<double> cpu;
        const Stats s = measure(opt.runs, [&] {
          const int calls = opt.quick ? 2 : 5;
          const Clock::time_point start = Clock::now();
          const double c0 = thread_cpu_seconds();
          for (int c = 0; c < calls; ++c) call(pool, w.copy(0));
          cpu.push_back(flops * calls / (thread_cpu_seconds() - c0) / 1e9);
          return flops * calls / seconds_since(start) / 1e9;
        });
        cpu_gflops[variant] = median_after_warmup(cpu);
        cells[cell++] = format(s, "GFLOP/s");
      }
      char shape_name[48];
      std::snprintf(shape_name, sizeof(shape_name), "%zux%zu", rows, cols);
      std::printf("%-10s %-6s %-30s %-30s %-30s %.1f / %.1f GFLOP/s\n", shape_name, f.name, cells[0].c_str(),
                  cells[1].c_str(), cells[2].c_str(), cpu_gflops[0], cpu_gflops[2]);
    }
  }
  // Prefill with cold weights: few tokens per expert (a 128-token prefill routes ~32 tokens
  // to each of 8 experts in top-2), so each weight panel comes from DRAM and is used by few
  // token tiles; this shows whether the driver hides the panel loads behind the arithmetic.
  const size_t cold_tokens = 32;
  std::printf("\nprefill from DRAM: T=%zu, GFLOP/s, 1 thread, one call over all rows of each of >= %zu MiB of copies\n"
              "round-robin (an expert's share of a 128-token top-2 prefill over 8 experts)\n",
              cold_tokens, dram_bytes >> 20);
  std::printf("%-10s %-6s %-30s\n", "rows x cols", "dtype", "gemm_rows 1 thread, cold");
  for (const auto &shape : shapes) {
    const size_t rows = shape[0], cols = shape[1];
    for (const Format &f : kFormats) {
      const Weights w = make_dram_weights(k, f, rows, cols, dram_bytes);
      const Activations act = make_activations(k, f, cols, cold_tokens);
      std::vector<float> y(cold_tokens * rows);
      const MatmulCall call{k, f, cols, rows, cold_tokens, act.x.data(), act.xq.data(), y.data(), true};
      const Stats s = measure(opt.runs, [&] {
        const Clock::time_point start = Clock::now();
        for (size_t c = 0; c < w.copies; ++c) call(one, w.copy(c));
        return 2.0 * double(rows) * double(cols) * double(cold_tokens) * double(w.copies) / seconds_since(start) / 1e9;
      });
      char shape_name[48];
      std::snprintf(shape_name, sizeof(shape_name), "%zux%zu", rows, cols);
      std::printf("%-10s %-6s %s\n", shape_name, f.name, format(s, "GFLOP/s").c_str());
    }
  }
  return 0;
}

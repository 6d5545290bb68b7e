// bench/probe/machine_probe.h — what the machine can do, measured on the spot: a STREAM-like
// memory read probe and an fp32 FMA peak probe (docs/architecture.md §9: every roofline figure is
// a ratio to a probe run in the same process, minutes apart at most, with the same thread
// count, because the host's bandwidth swings by 2× from one hour to the next).
//
// One implementation for every benchmark: `colibri bench` (cli/), engine_bench and
// kernels_bench (bench/) all link this static library. It measures the machine, not the
// engine: it depends on nothing in Colibri, so the CLI can use it and still reach the engine
// through the public C API only.
//
// The read probe is what a roofline needs: the fastest sequential read this CPU can sustain
// from DRAM. Each thread reads its own contiguous slice (which it touched first, so its pages
// sit where it runs) with the widest vector loads the CPU has (AVX-512, else AVX2, else
// 64-bit words) into 8 independent accumulators, so the loop is limited by memory and not by
// an add chain or the load width. Two readers alternate pass by pass: plain loads, and the
// same loads with a software prefetch 4 KiB ahead (the decode kernels prefetch too; on the
// dev VM a plain read draws up to 25% less than a prefetching one when the host's bandwidth
// is low, about as much when it is high, and a plain-only probe let a kernel report "123% of
// the roofline"). The figure is the better reader's median. The
// buffer defaults to max(1 GiB, 4 × the last-level cache) so that the caches cannot serve it,
// and asks for transparent huge pages.
#pragma once

#include <cstddef>
#include <string>

namespace colibri_probe {

struct ReadProbeOptions {
  size_t threads = 1;        // threads reading at once (each its own slice), >= 1
  size_t buffer_bytes = 0;   // 0 = default_probe_bytes()
  size_t repetitions = 5;    // timed passes of each reader after one untimed warm-up pass, >= 1
  // Widest loads to use: "avx512", "avx2" or "scalar"; empty = the widest the CPU has. A
  // kernel run on a narrower instruction set than the CPU's (an AVX2 build on an AVX-512
  // host, standing in for an AVX2 machine) is compared with a probe of the same width: on
  // some CPUs 256-bit loads alone cannot draw the full DRAM bandwidth.
  std::string max_isa;
};

struct ReadProbeResult {
  double median_gbs = 0;  // GB/s = 1e9 bytes/s, the median over the timed passes
  double min_gbs = 0;
  double max_gbs = 0;
  size_t buffer_bytes = 0;  // bytes read per pass
  size_t threads = 0;
  std::string loads;  // "avx512", "avx2" or "scalar": the load width used
  // Both readers' medians; median/min/max above are those of the better one, named here
  // ("plain" or "prefetch").
  double plain_median_gbs = 0;
  double prefetch_median_gbs = 0;
  std::string reader;
};

// Throws std::bad_alloc when the buffer cannot be allocated and std::system_error when a
// thread cannot be started. Takes buffer_bytes / bandwidth × (2 × repetitions + 2) seconds
// (`repetitions` timed passes of each reader).
ReadProbeResult measure_read_bandwidth(const ReadProbeOptions &options);

// Reads the n bytes at p (any alignment) with the probe's reader: the loads of `max_isa`
// (as in ReadProbeOptions), with the 4 KiB-ahead prefetch when `prefetch`. Returns a value
// that depends on every byte (a wrapping sum of 64-bit words, and of single bytes at the
// unaligned ends), which the caller should use so that the reads cannot be optimised away.
// For comparing a kernel with a plain read of the very bytes it reads, in the same process
// and the same second (engine_bench --moe-vs-read).
uint64_t read_range(const void *p, size_t n, const std::string &max_isa = "", bool prefetch = true);

// Bytes of the largest CPU cache (sysconf, then /sys), 0 when unknown.
size_t last_level_cache_bytes();

// max(1 GiB, 4 × last_level_cache_bytes()).
size_t default_probe_bytes();

struct FmaProbeResult {
  double gflops = 0;   // fp32 FLOP/s (an FMA counts 2) of all threads together, 1e9/s
  size_t threads = 0;
  std::string isa;     // "avx512" or "avx2" (the widest the CPU has), "scalar" otherwise
};

// The width `max_isa` gives on this CPU ("avx512", "avx2" or "scalar"; empty = the widest).
std::string probe_isa(const std::string &max_isa);

// Peak fp32 FMA throughput: each thread runs 12 independent FMA chains on the widest vectors
// the CPU has, capped at `max_isa` ("avx512", "avx2" or "scalar"; empty = no cap: compare a
// kernel with the peak of the instruction set it runs on), for `iterations` rounds; the best
// of `trials` such runs. Wall-clock time: other load on the machine can only lower a run,
// never raise it, so the best run is the estimate of the peak.
FmaProbeResult measure_fma_peak(size_t threads, const std::string &max_isa = "", size_t iterations = 5'000'000,
                                size_t trials = 5);

}  // namespace colibri_probe

// cli/bandwidth.h — a STREAM-like memory read probe, run by `colibri bench` with the same
// thread count as the decode it is compared with (ARCHITECTURE.md §9). It lives in the CLI
// because it measures the machine, not the engine.
#pragma once

#include <cstddef>

namespace colibri_cli {

// Median read bandwidth in GB/s (1e9 bytes/s) of `threads` threads each summing its own slice
// of a `buffer_bytes` buffer (allocated and touched by those threads), over `repetitions`
// timed passes after one warm-up pass. Throws std::bad_alloc when the buffer cannot be had.
double measure_read_bandwidth_gbs(size_t threads, size_t buffer_bytes, size_t repetitions);

}  // namespace colibri_cli

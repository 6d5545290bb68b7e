// core/util/numa.h — NUMA placement policy for the weights and the worker threads, through
// libnuma (libnuma.so.1, loaded at run time with dlopen on first use, so nothing links it)
// when it is installed and the kernel supports NUMA. On a single-node machine or without
// libnuma every policy is accepted and does nothing (the report says which and why), so the
// same flags work everywhere; bind:N with N >= 1 is an error there, naming the reason.
#pragma once

#include <cstddef>
#include <string>

#include "util/error.h"

namespace colibri::util {

struct NumaPolicy {
  enum class Mode : uint32_t { Off = 0, Bind = 1, Interleave = 2 };
  Mode mode = Mode::Off;
  int node = 0;  // Bind only
};

// "off", "bind:N", "interleave"; InvalidArgument otherwise.
Error parse_numa_policy(const std::string &text, NumaPolicy *out);
std::string numa_policy_name(const NumaPolicy &policy);

// Number of NUMA nodes usable by this process (1 when NUMA is unavailable).
int numa_node_count();

// One line for diagnostics: "libnuma.so.1 loaded, 2 nodes", or why NUMA is unavailable
// ("libnuma.so.1 could not be loaded (...; install libnuma1 ...)").
std::string numa_support();

// Sets the memory policy of [address, address + bytes) (page-aligned by the caller): bind
// to one node or interleave over all. Pages already faulted in keep their placement, so call
// before populating. *applied says what happened ("interleave over 2 nodes", "no NUMA: off").
Error numa_apply_to_memory(const NumaPolicy &policy, const void *address, size_t bytes, std::string *applied);

// Restricts the calling thread (and threads it creates afterwards) to the CPUs of the bound
// node. Interleave and off leave the thread alone.
Error numa_apply_to_thread(const NumaPolicy &policy);

}  // namespace colibri::util

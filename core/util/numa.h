// core/util/numa.h — NUMA placement policy for the weights and the worker threads, through
// libnuma when the build found it and the kernel supports it (checked at run time). On a
// single-node machine or without libnuma every policy is accepted and does nothing (the
// report says so), so the same flags work everywhere.
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

// Sets the memory policy of [address, address + bytes) (page-aligned by the caller): bind
// to one node or interleave over all. Pages already faulted in keep their placement, so call
// before populating. *applied says what happened ("interleave over 2 nodes", "no NUMA: off").
Error numa_apply_to_memory(const NumaPolicy &policy, const void *address, size_t bytes, std::string *applied);

// Restricts the calling thread (and threads it creates afterwards) to the CPUs of the bound
// node. Interleave and off leave the thread alone.
Error numa_apply_to_thread(const NumaPolicy &policy);

}  // namespace colibri::util

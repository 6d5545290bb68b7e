// core/util/numa.h — NUMA placement of the weights and the worker threads, and the measured
// placement of pages, through libnuma (libnuma.so.1, loaded at run time with dlopen on first
// use, so nothing links it) when it is installed and the kernel supports NUMA.
//
// What is placed, and how (docs/cli.md "--numa" has the user's view):
//   * Memory: the caller gives a range of anonymous memory that is not faulted in yet (the
//     weights' copy, Image::load_into_memory); apply_memory_placement sets its policy (bind:N:
//     MPOL_BIND to node N; interleave: MPOL_INTERLEAVE over the allowed nodes), and the pages
//     land there when the copy faults them in, whichever thread copies. A file mapping cannot be
//     placed: its pages are the page cache, allocated by whoever read the file first (by that
//     thread's policy, never the mapping's) and shared with every process that maps it, so the
//     model loader copies when a policy is asked for.
//   * Threads: bind:N runs the session's workers on node N's CPUs (ThreadPlacement), and the
//     thread that calls forward() on them for the call (ScopedThreadCpus): the pool runs a share
//     of every task on the calling thread.
//   * The inherited placement is honoured: a process started under `numactl --cpunodebind=A
//     --membind=B` (or in a cpuset) keeps its threads on A's CPUs and its memory on B. Nodes
//     are taken from memory_nodes() (the cpuset's memory nodes narrowed by a restricting
//     inherited memory policy) and CPUs from the calling thread's affinity; a policy that
//     would leave them is an error naming both sets, never an override.
//   * The report is measured: measure_page_placement asks the kernel (move_pages without target
//     nodes, which only queries) for the node of sampled pages.
//
// Everything that talks to the system goes through NumaSystem: system_numa() is this machine;
// tests pass a simulated one with several nodes. Without libnuma (or without kernel NUMA
// support) every policy is accepted and places nothing (the report says which and why), so the
// same flags work everywhere; bind:N with N >= 1 is an error there, naming the reason.
#pragma once

#include <sched.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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

// The NUMA facts and system calls placement uses.
class NumaSystem {
 public:
  virtual ~NumaSystem() = default;
  // Empty when placement is possible here; otherwise why not ("libnuma.so.1 could not be
  // loaded (...)", "the kernel has no NUMA support").
  virtual std::string unavailable_reason() const = 0;
  // Configured nodes (1 when unavailable).
  virtual int node_count() const = 0;
  // The CPUs of `node`, ascending (empty for a node without CPUs).
  virtual std::vector<int> node_cpus(int node) const = 0;
  // The nodes the calling thread may place memory on, ascending: the cpuset's memory nodes,
  // narrowed to the nodes of an inherited memory policy that restricts them (MPOL_BIND,
  // MPOL_INTERLEAVE, MPOL_PREFERRED_MANY: numactl --membind / --interleave / --preferred-many).
  virtual std::vector<int> memory_nodes() const = 0;
  // Bytes `node` can still give without swapping (free memory + file page cache, which the
  // kernel reclaims first), or -1 when unknown.
  virtual int64_t node_available_bytes(int node) const = 0;
  // Sets the policy of [address, address + bytes) (page-aligned, not faulted in yet): Bind to
  // the nodes (strict) or Interleave over them.
  virtual Error set_memory_policy(void *address, size_t bytes, NumaPolicy::Mode mode,
                                  const std::vector<int> &nodes) const = 0;
  // The node of each page (any address inside it), or a negative errno (-ENOENT: not resident).
  virtual Error query_page_nodes(const void *const *pages, size_t count, int *nodes) const = 0;
};

// This machine (libnuma through dlopen, loaded on first use; immutable afterwards).
const NumaSystem &system_numa();

// Number of NUMA nodes of this machine (1 when NUMA is unavailable).
int numa_node_count();
// One line for diagnostics: "libnuma.so.1 loaded, 2 nodes", or why NUMA is unavailable.
std::string numa_support();

// "0", "0-3", "0,2,5-7".
std::string format_id_list(const std::vector<int> &ids);
// The CPUs the calling thread may run on (sched_getaffinity), ascending.
std::vector<int> calling_thread_cpus();

// Where a policy puts a range of `bytes` of memory.
struct MemoryPlacement {
  NumaPolicy::Mode mode = NumaPolicy::Mode::Off;  // Off: nothing to place (off, or NUMA unavailable)
  std::vector<int> nodes;                          // Bind: one node; Interleave: the allowed nodes
  std::string description;                         // "bound to node 1", "interleaved over nodes 0-3", why not
};

// Decides the placement: bind:N needs N among memory_nodes() and about `bytes` available on it;
// interleave takes memory_nodes(). Errors name the node, the allowed set and the fix.
Error plan_memory_placement(const NumaPolicy &policy, const NumaSystem &system, uint64_t bytes, MemoryPlacement *out);
// Sets the planned policy on [address, address + bytes); nothing for mode Off.
Error apply_memory_placement(const MemoryPlacement &placement, const NumaSystem &system, void *address, size_t bytes);

// Where the pages of a range are, by a query of evenly spaced sample pages.
struct PagePlacement {
  size_t sampled = 0;                 // pages asked about
  size_t resident = 0;                // of them, in memory (the rest not faulted in yet)
  std::vector<size_t> pages_per_node; // resident pages by node
  std::string not_measured;           // why nothing could be asked (NUMA unavailable), else empty
};
inline constexpr size_t kPlacementSamplePages = 1024;
PagePlacement measure_page_placement(const NumaSystem &system, const void *address, size_t bytes,
                                     size_t max_samples = kPlacementSamplePages);
// "node 0: 100% of 1024 sampled pages", "node 0: 50.0%, node 1: 50.0% of 1024 sampled pages",
// "12 of 1024 sampled pages resident: node 0: 100%", "not measured (...)".
std::string describe_page_placement(const PagePlacement &placement);

// Where a policy runs a session's threads.
struct ThreadPlacement {
  std::vector<int> cpus;       // CPUs to run the threads on; empty: where they are (inherited)
  std::string description;     // "on node 1's CPUs 4-7", ...
};

// bind:N: node N's CPUs among those the calling thread may use (an error naming both sets when
// none is); other policies leave the threads where they are.
Error plan_thread_placement(const NumaPolicy &policy, const NumaSystem &system, ThreadPlacement *out);

cpu_set_t cpu_set_of(const std::vector<int> &cpus);

// Runs the calling thread on `cpus` from construction to destruction when its own CPUs are not
// all among them, then gives it its own CPUs back; nothing when they are (a thread confined by
// numactl --cpunodebind) or when cpus is null. The session wraps forward() in one, so that the
// caller's share of every task runs on the bound node, whichever thread calls. Costs one
// sched_getaffinity per call, and two sched_setaffinity plus the move to the node when the
// thread may run elsewhere; no allocation. (A pool whose caller ran no task at all cost a
// hand-over per parallel_for instead: 6–160 µs each on the loaded 2-CPU VM against 0.1 µs,
// docs/performance.md.)
class ScopedThreadCpus {
 public:
  explicit ScopedThreadCpus(const cpu_set_t *cpus);
  ~ScopedThreadCpus();
  ScopedThreadCpus(const ScopedThreadCpus &) = delete;
  ScopedThreadCpus &operator=(const ScopedThreadCpus &) = delete;
  bool moved() const { return moved_; }

 private:
  cpu_set_t saved_;
  bool moved_ = false;
};

}  // namespace colibri::util

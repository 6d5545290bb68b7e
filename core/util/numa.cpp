// core/util/numa.cpp — NUMA placement through libnuma, loaded at run time with dlopen: the
// library is linked against nothing NUMA-related, so it loads (and every policy is a no-op)
// on a machine without libnuma.so.1, and uses it where it is installed. See numa.h.
#include "util/numa.h"

#include <dlfcn.h>
#include <linux/mempolicy.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <type_traits>

#include "util/strings.h"

namespace colibri::util {

namespace {

// Policy modes newer than the system's <linux/mempolicy.h> may know (the value is ABI).
constexpr int kMpolWeightedInterleave = 6;
// get_mempolicy returns the mode with its flags (MPOL_F_STATIC_NODES, ...) in the high bits.
constexpr int kMpolModeMask = 0xFF;

// Node masks passed to the kernel: 1024 nodes (CONFIG_NODES_SHIFT 10, the largest x86-64
// configuration), as unsigned longs; the kernel's maxnode counts one past the last bit.
constexpr unsigned kMaskBits = 1024;
constexpr unsigned kMaskWords = kMaskBits / (8 * sizeof(unsigned long));
using NodeMask = unsigned long[kMaskWords];
constexpr unsigned long kMaxNode = kMaskBits + 1;

std::vector<int> mask_to_ids(const unsigned long *mask) {
  std::vector<int> ids;
  for (unsigned i = 0; i < kMaskBits; ++i)
    if (mask[i / (8 * sizeof(unsigned long))] >> (i % (8 * sizeof(unsigned long))) & 1ul) ids.push_back(static_cast<int>(i));
  return ids;
}

std::vector<int> intersect(const std::vector<int> &a, const std::vector<int> &b) {
  std::vector<int> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

bool contains(const std::vector<int> &ids, int id) { return std::binary_search(ids.begin(), ids.end(), id); }

std::string plural(size_t n, const char *word) { return strprintf("%s%s", word, n == 1 ? "" : "s"); }

// The libnuma entry points we use (numa(3), numaif.h; stable since libnuma 2.0, soname
// libnuma.so.1). `struct bitmask` stays opaque: only passed back to libnuma's accessors.
struct NumaLibrary {
  bool loaded = false;
  std::string why_not;  // dlerror() text when not loaded
  int (*available)() = nullptr;
  int (*configured_nodes)() = nullptr;
  int (*possible_cpus)() = nullptr;
  void *(*allocate_cpumask)() = nullptr;
  void (*bitmask_free)(void *) = nullptr;
  int (*bitmask_isbitset)(const void *, unsigned) = nullptr;
  int (*node_to_cpus)(int, void *) = nullptr;
  long (*get_mempolicy)(int *, unsigned long *, unsigned long, void *, unsigned) = nullptr;
  long (*mbind)(void *, unsigned long, int, const unsigned long *, unsigned long, unsigned) = nullptr;
  long (*move_pages)(int, unsigned long, void **, const int *, int *, int) = nullptr;
};

constexpr const char *kLibnuma = "libnuma.so.1";

NumaLibrary load_libnuma() {
  NumaLibrary lib;
  void *handle = ::dlopen(kLibnuma, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char *e = ::dlerror();
    lib.why_not = e ? e : "dlopen failed";
    return lib;
  }
  bool complete = true;
  auto bind = [&](auto &fn, const char *name) {
    void *symbol = ::dlsym(handle, name);
    if (symbol == nullptr) complete = false;
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(symbol);
  };
  bind(lib.available, "numa_available");
  bind(lib.configured_nodes, "numa_num_configured_nodes");
  bind(lib.possible_cpus, "numa_num_possible_cpus");
  bind(lib.allocate_cpumask, "numa_allocate_cpumask");
  bind(lib.bitmask_free, "numa_bitmask_free");
  bind(lib.bitmask_isbitset, "numa_bitmask_isbitset");
  bind(lib.node_to_cpus, "numa_node_to_cpus");
  bind(lib.get_mempolicy, "get_mempolicy");
  bind(lib.mbind, "mbind");
  bind(lib.move_pages, "move_pages");
  if (!complete) {
    lib = NumaLibrary{};
    lib.why_not = strprintf("%s lacks a numa_* function this build uses (libnuma older than 2.0?)", kLibnuma);
    return lib;  // the handle stays open: unloading a library is never needed here
  }
  lib.loaded = true;
  return lib;
}

// This machine: libnuma loaded once, at construction (system_numa's function-local static,
// thread-safe), and never modified afterwards.
class SystemNuma final : public NumaSystem {
 public:
  SystemNuma() : lib_(load_libnuma()) {
    if (!lib_.loaded)
      reason_ = strprintf("%s could not be loaded (%s; install libnuma1 to place memory on NUMA nodes)", kLibnuma,
                          lib_.why_not.c_str());
    else if (lib_.available() < 0)
      reason_ = "the kernel has no NUMA support";
    if (reason_.empty()) {
      const int nodes = lib_.configured_nodes();
      nodes_ = nodes > 0 ? nodes : 1;
    }
  }

  std::string unavailable_reason() const override { return reason_; }
  int node_count() const override { return nodes_; }

  std::vector<int> node_cpus(int node) const override {
    std::vector<int> cpus;
    if (!reason_.empty()) {
      if (node == 0) cpus = calling_thread_cpus();  // one node: all of them
      return cpus;
    }
    void *mask = lib_.allocate_cpumask();
    if (mask == nullptr) return cpus;
    if (lib_.node_to_cpus(node, mask) == 0) {
      const int possible = lib_.possible_cpus();
      for (int cpu = 0; cpu < possible; ++cpu)
        if (lib_.bitmask_isbitset(mask, static_cast<unsigned>(cpu))) cpus.push_back(cpu);
    }
    lib_.bitmask_free(mask);
    return cpus;
  }

  std::vector<int> memory_nodes() const override {
    std::vector<int> all;
    for (int n = 0; n < nodes_; ++n) all.push_back(n);
    if (!reason_.empty()) return all;
    NodeMask allowed_mask = {};
    std::vector<int> allowed = all;
    if (lib_.get_mempolicy(nullptr, allowed_mask, kMaxNode, nullptr, MPOL_F_MEMS_ALLOWED) == 0)
      allowed = mask_to_ids(allowed_mask);
    int mode = 0;
    NodeMask policy_mask = {};
    if (lib_.get_mempolicy(&mode, policy_mask, kMaxNode, nullptr, 0) != 0) return allowed;
    mode &= kMpolModeMask;
    const bool restricting = mode == MPOL_BIND || mode == MPOL_INTERLEAVE || mode == MPOL_PREFERRED_MANY ||
                             mode == kMpolWeightedInterleave;
    return restricting ? intersect(allowed, mask_to_ids(policy_mask)) : allowed;
  }

  int64_t node_available_bytes(int node) const override {
    const std::string path = strprintf("/sys/devices/system/node/node%d/meminfo", node);
    FILE *f = std::fopen(path.c_str(), "re");
    if (f == nullptr) return -1;
    // Lines "Node 0 MemFree:        123456 kB"; free memory plus the file page cache.
    int64_t kib = 0;
    bool found = false;
    char line[256];
    while (std::fgets(line, sizeof line, f)) {
      char key[64];
      long long value = 0;
      int id = 0;
      if (std::sscanf(line, "Node %d %63s %lld", &id, key, &value) != 3) continue;
      if (std::strcmp(key, "MemFree:") == 0 || std::strcmp(key, "Active(file):") == 0 ||
          std::strcmp(key, "Inactive(file):") == 0) {
        kib += value;
        found = true;
      }
    }
    std::fclose(f);
    return found ? kib * 1024 : -1;
  }

  Error set_memory_policy(void *address, size_t bytes, NumaPolicy::Mode mode, const std::vector<int> &nodes) const override {
    if (!reason_.empty()) return make_error(ErrorKind::Unsupported, "NUMA placement: " + reason_);
    NodeMask mask = {};
    for (int n : nodes) {
      if (n < 0 || static_cast<unsigned>(n) >= kMaskBits)
        return make_error(ErrorKind::InvalidArgument, strprintf("NUMA node %d is out of range", n));
      mask[static_cast<unsigned>(n) / (8 * sizeof(unsigned long))] |= 1ul << (static_cast<unsigned>(n) % (8 * sizeof(unsigned long)));
    }
    const int kernel_mode = mode == NumaPolicy::Mode::Interleave ? MPOL_INTERLEAVE : MPOL_BIND;
    if (lib_.mbind(address, bytes, kernel_mode, mask, kMaxNode, 0) != 0) {
      const int e = errno;
      return make_error(ErrorKind::Io, strprintf("cannot set the NUMA policy (%s over node%s %s) of %s of memory: %s",
                                                 kernel_mode == MPOL_INTERLEAVE ? "interleave" : "bind",
                                                 nodes.size() == 1 ? "" : "s", format_id_list(nodes).c_str(),
                                                 human_bytes(bytes).c_str(), errno_text(e).c_str()));
    }
    return {};
  }

  Error query_page_nodes(const void *const *pages, size_t count, int *nodes) const override {
    if (!reason_.empty()) return make_error(ErrorKind::Unsupported, "NUMA placement: " + reason_);
    // move_pages with no target nodes only reports where each page is (move_pages(2)).
    if (lib_.move_pages(0, count, const_cast<void **>(pages), nullptr, nodes, 0) != 0) {
      const int e = errno;
      return make_error(ErrorKind::Io, "cannot query the NUMA node of pages (move_pages): " + errno_text(e));
    }
    return {};
  }

 private:
  NumaLibrary lib_;
  std::string reason_;
  int nodes_ = 1;
};

}  // namespace

const NumaSystem &system_numa() {
  static const SystemNuma system;
  return system;
}

int numa_node_count() { return system_numa().node_count(); }

std::string numa_support() {
  const NumaSystem &s = system_numa();
  const std::string why = s.unavailable_reason();
  if (!why.empty()) return why;
  const int n = s.node_count();
  return strprintf("%s loaded, %d %s", kLibnuma, n, plural(static_cast<size_t>(n), "node").c_str());
}

std::string format_id_list(const std::vector<int> &ids) {
  std::string out;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += j == i ? std::to_string(ids[i]) : strprintf("%d-%d", ids[i], ids[j]);
    i = j + 1;
  }
  return out.empty() ? "none" : out;
}

std::vector<int> calling_thread_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

Error parse_numa_policy(const std::string &text, NumaPolicy *out) {
  NumaPolicy p;
  if (text == "off" || text.empty()) {
    p.mode = NumaPolicy::Mode::Off;
  } else if (text == "interleave") {
    p.mode = NumaPolicy::Mode::Interleave;
  } else if (text.rfind("bind:", 0) == 0 && text.size() > 5) {
    char *end = nullptr;
    long node = std::strtol(text.c_str() + 5, &end, 10);
    if (*end != '\0' || node < 0 || node > 1023)
      return make_error(ErrorKind::InvalidArgument, strprintf("NUMA policy '%s': the node must be a number 0..1023", text.c_str()));
    p.mode = NumaPolicy::Mode::Bind;
    p.node = static_cast<int>(node);
  } else {
    return make_error(ErrorKind::InvalidArgument,
                      strprintf("NUMA policy '%s' is not one of: off, bind:N, interleave", text.c_str()));
  }
  *out = p;
  return {};
}

std::string numa_policy_name(const NumaPolicy &policy) {
  switch (policy.mode) {
    case NumaPolicy::Mode::Off: return "off";
    case NumaPolicy::Mode::Interleave: return "interleave";
    case NumaPolicy::Mode::Bind: return strprintf("bind:%d", policy.node);
  }
  return "off";
}

namespace {

// bind:N with N not a node of this machine (or NUMA unavailable, which leaves node 0 only).
Error check_bind_node(const NumaPolicy &policy, const NumaSystem &system) {
  const int nodes = system.node_count();
  if (policy.node < nodes) return {};
  const std::string why = system.unavailable_reason();
  if (!why.empty())
    return make_error(ErrorKind::InvalidArgument, strprintf("NUMA policy bind:%d: %s", policy.node, why.c_str()));
  return make_error(ErrorKind::InvalidArgument, strprintf("NUMA policy bind:%d: this machine has %d %s (0..%d)", policy.node,
                                                          nodes, plural(static_cast<size_t>(nodes), "node").c_str(), nodes - 1));
}

}  // namespace

Error plan_memory_placement(const NumaPolicy &policy, const NumaSystem &system, uint64_t bytes, MemoryPlacement *out) {
  *out = MemoryPlacement{};
  if (policy.mode == NumaPolicy::Mode::Off) {
    out->description = "off";
    return {};
  }
  if (policy.mode == NumaPolicy::Mode::Bind)
    if (Error e = check_bind_node(policy, system)) return e;
  const std::string why = system.unavailable_reason();
  if (!why.empty()) {
    out->description = strprintf("%s requested, but %s: nothing placed", numa_policy_name(policy).c_str(), why.c_str());
    return {};
  }
  const std::vector<int> allowed = system.memory_nodes();
  if (policy.mode == NumaPolicy::Mode::Interleave) {
    if (allowed.empty()) return make_error(ErrorKind::Io, "NUMA policy interleave: the kernel reports no memory node this process may use");
    out->mode = NumaPolicy::Mode::Interleave;
    out->nodes = allowed;
    out->description = strprintf("interleaved over %s %s", plural(allowed.size(), "node").c_str(), format_id_list(allowed).c_str());
    return {};
  }
  const int node = policy.node;
  if (!contains(allowed, node))
    return make_error(ErrorKind::InvalidArgument,
                      strprintf("NUMA policy bind:%d: this process may place memory on %s %s only (its cpuset, or the "
                                "memory policy it was started with, e.g. numactl --membind): bind to one of them, or "
                                "start it with other numactl or cpuset settings",
                                node, plural(allowed.size(), "node").c_str(), format_id_list(allowed).c_str()));
  // MPOL_BIND is strict: a node that runs out while the copy is filled would call the OOM
  // killer rather than fail an allocation, so the room is checked first.
  const int64_t available = system.node_available_bytes(node);
  if (available >= 0 && bytes > static_cast<uint64_t>(available))
    return make_error(ErrorKind::OutOfMemory,
                      strprintf("NUMA policy bind:%d: the weights need %s, but node %d has about %s available (free "
                                "memory and page cache); bind to a node with room, or use interleave or off",
                                node, human_bytes(bytes).c_str(), node, human_bytes(static_cast<uint64_t>(available)).c_str()));
  out->mode = NumaPolicy::Mode::Bind;
  out->nodes = {node};
  out->description = strprintf("bound to node %d", node);
  return {};
}

Error apply_memory_placement(const MemoryPlacement &placement, const NumaSystem &system, void *address, size_t bytes) {
  if (placement.mode == NumaPolicy::Mode::Off) return {};
  return system.set_memory_policy(address, bytes, placement.mode, placement.nodes);
}

PagePlacement measure_page_placement(const NumaSystem &system, const void *address, size_t bytes, size_t max_samples) {
  PagePlacement p;
  const std::string why = system.unavailable_reason();
  if (!why.empty()) {
    p.not_measured = why;
    return p;
  }
  const long page_size_raw = sysconf(_SC_PAGESIZE);
  const uintptr_t page = page_size_raw > 0 ? static_cast<uintptr_t>(page_size_raw) : 4096;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(address) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(address) + bytes;
  const size_t pages = bytes == 0 ? 0 : static_cast<size_t>((end - begin + page - 1) / page);
  const size_t n = std::min(pages, max_samples);
  if (n == 0) return p;
  std::vector<const void *> addresses(n);
  for (size_t i = 0; i < n; ++i) addresses[i] = reinterpret_cast<const void *>(begin + (i * pages / n) * page);
  std::vector<int> nodes(n, -ENOENT);
  if (Error e = system.query_page_nodes(addresses.data(), n, nodes.data())) {
    p.not_measured = e.message;
    return p;
  }
  p.sampled = n;
  for (int node : nodes) {
    if (node < 0) continue;
    ++p.resident;
    if (p.pages_per_node.size() <= static_cast<size_t>(node)) p.pages_per_node.resize(static_cast<size_t>(node) + 1, 0);
    ++p.pages_per_node[static_cast<size_t>(node)];
  }
  return p;
}

std::string describe_page_placement(const PagePlacement &p) {
  if (!p.not_measured.empty()) return "not measured (" + p.not_measured + ")";
  if (p.sampled == 0) return "no pages to measure";
  if (p.resident == 0) return strprintf("0 of %zu sampled pages resident yet (the kernel places them when first read)", p.sampled);
  std::string shares;
  for (size_t node = 0; node < p.pages_per_node.size(); ++node) {
    if (p.pages_per_node[node] == 0) continue;
    const double percent = 100.0 * static_cast<double>(p.pages_per_node[node]) / static_cast<double>(p.resident);
    const bool whole = p.pages_per_node[node] * 100 % p.resident == 0;
    shares += strprintf("%snode %zu: %.*f%%", shares.empty() ? "" : ", ", node, whole ? 0 : 1, percent);
  }
  if (p.resident == p.sampled) return strprintf("%s of %zu sampled pages", shares.c_str(), p.sampled);
  return strprintf("%zu of %zu sampled pages resident: %s", p.resident, p.sampled, shares.c_str());
}

Error plan_thread_placement(const NumaPolicy &policy, const NumaSystem &system, ThreadPlacement *out) {
  *out = ThreadPlacement{};
  if (policy.mode != NumaPolicy::Mode::Bind) return {};
  if (Error e = check_bind_node(policy, system)) return e;
  if (!system.unavailable_reason().empty()) return {};  // bind:0 without NUMA: every CPU is node 0's
  const int node = policy.node;
  const std::vector<int> node_cpus = system.node_cpus(node);
  const std::vector<int> mine = calling_thread_cpus();
  if (node_cpus.empty())
    return make_error(ErrorKind::InvalidArgument, strprintf("NUMA policy bind:%d: node %d has no CPUs (a memory-only node); "
                                                            "bind to a node with CPUs, or use interleave",
                                                            node, node));
  std::vector<int> cpus = intersect(node_cpus, mine);
  if (cpus.empty())
    return make_error(ErrorKind::InvalidArgument,
                      strprintf("NUMA policy bind:%d: node %d's CPUs (%s) are not among the CPUs this process may run "
                                "on (%s: its affinity, e.g. numactl --cpunodebind or taskset); bind to a node whose CPUs "
                                "it may use, or start it with other settings",
                                node, node, format_id_list(node_cpus).c_str(), format_id_list(mine).c_str()));
  out->description = strprintf("on node %d's %s %s", node, plural(cpus.size(), "CPU").c_str(), format_id_list(cpus).c_str());
  out->cpus = std::move(cpus);
  return {};
}

cpu_set_t cpu_set_of(const std::vector<int> &cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus)
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &set);
  return set;
}

ScopedThreadCpus::ScopedThreadCpus(const cpu_set_t *cpus) {
  CPU_ZERO(&saved_);
  if (cpus == nullptr || sched_getaffinity(0, sizeof saved_, &saved_) != 0) return;
  cpu_set_t outside;
  CPU_ZERO(&outside);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &saved_) && !CPU_ISSET(cpu, cpus)) CPU_SET(cpu, &outside);
  if (CPU_COUNT(&outside) == 0) return;  // already confined to them
  // Advisory: a refusal (a cpuset changed meanwhile) leaves the thread where it is.
  moved_ = sched_setaffinity(0, sizeof *cpus, cpus) == 0;
}

ScopedThreadCpus::~ScopedThreadCpus() {
  if (moved_) sched_setaffinity(0, sizeof saved_, &saved_);
}

}  // namespace colibri::util

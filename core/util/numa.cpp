// core/util/numa.cpp — NUMA placement through libnuma, loaded at run time with dlopen: the
// library is linked against nothing NUMA-related, so it loads (and every policy works as a
// no-op) on a machine without libnuma.so.1, and uses it where it is installed.
#include "util/numa.h"

#include <dlfcn.h>

#include <cstdlib>
#include <type_traits>

#include "util/strings.h"

namespace colibri::util {

namespace {

// The libnuma entry points we use (numa(3); stable since libnuma 2.0, soname libnuma.so.1).
// `struct bitmask` stays opaque: only numa_all_nodes_ptr's value is passed back to libnuma.
struct NumaLibrary {
  bool loaded = false;
  std::string why_not;  // dlerror() text when not loaded
  int (*available)() = nullptr;
  int (*configured_nodes)() = nullptr;
  void (*interleave_memory)(void *, size_t, void *) = nullptr;
  void (*tonode_memory)(void *, size_t, int) = nullptr;
  int (*run_on_node)(int) = nullptr;
  void **all_nodes = nullptr;  // &numa_all_nodes_ptr
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
  bind(lib.interleave_memory, "numa_interleave_memory");
  bind(lib.tonode_memory, "numa_tonode_memory");
  bind(lib.run_on_node, "numa_run_on_node");
  bind(lib.all_nodes, "numa_all_nodes_ptr");
  if (!complete) {
    lib = NumaLibrary{};
    lib.why_not = strprintf("%s lacks a numa_* function this build uses (libnuma older than 2.0?)", kLibnuma);
    return lib;  // the handle stays open: unloading a library is never needed here
  }
  lib.loaded = true;
  return lib;
}

// Loaded once, on first use, then never modified (a function-local static: thread-safe).
const NumaLibrary &libnuma() {
  static const NumaLibrary lib = load_libnuma();
  return lib;
}

// libnuma loaded and the kernel has NUMA support.
bool numa_usable() {
  const NumaLibrary &lib = libnuma();
  return lib.loaded && lib.available() >= 0;
}

// Why a policy that needs more than one node cannot be applied.
std::string single_node_reason() {
  const NumaLibrary &lib = libnuma();
  if (!lib.loaded)
    return strprintf("%s could not be loaded (%s; install libnuma1 to place memory on NUMA nodes)", kLibnuma,
                     lib.why_not.c_str());
  if (lib.available() < 0) return "the kernel has no NUMA support";
  return "only one NUMA node is available";
}

// bind:N with N not a node of this machine (or NUMA unavailable, which leaves node 0 only).
Error no_such_node(int node, int nodes) {
  if (nodes == 1 && !numa_usable())
    return make_error(ErrorKind::InvalidArgument, strprintf("NUMA policy bind:%d: %s", node, single_node_reason().c_str()));
  return make_error(ErrorKind::InvalidArgument, strprintf("NUMA policy bind:%d: this machine has %d node%s (0..%d)", node,
                                                          nodes, nodes == 1 ? "" : "s", nodes - 1));
}

}  // namespace

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

int numa_node_count() {
  if (!numa_usable()) return 1;
  const int nodes = libnuma().configured_nodes();
  return nodes > 0 ? nodes : 1;
}

std::string numa_support() {
  if (numa_usable()) return strprintf("%s loaded, %d node%s", kLibnuma, numa_node_count(), numa_node_count() == 1 ? "" : "s");
  return single_node_reason();
}

Error numa_apply_to_memory(const NumaPolicy &policy, const void *address, size_t bytes, std::string *applied) {
  if (policy.mode == NumaPolicy::Mode::Off) {
    *applied = "off";
    return {};
  }
  const int nodes = numa_node_count();
  if (policy.mode == NumaPolicy::Mode::Bind && policy.node >= nodes) return no_such_node(policy.node, nodes);
  if (nodes > 1) {
    const NumaLibrary &lib = libnuma();
    void *p = const_cast<void *>(address);
    if (policy.mode == NumaPolicy::Mode::Interleave) {
      lib.interleave_memory(p, bytes, *lib.all_nodes);
      *applied = strprintf("interleave over %d nodes", nodes);
    } else {
      lib.tonode_memory(p, bytes, policy.node);
      *applied = strprintf("bound to node %d", policy.node);
    }
    return {};
  }
  *applied = strprintf("%s requested, but %s: nothing to do", numa_policy_name(policy).c_str(), single_node_reason().c_str());
  return {};
}

Error numa_apply_to_thread(const NumaPolicy &policy) {
  if (policy.mode != NumaPolicy::Mode::Bind) return {};
  const int nodes = numa_node_count();
  if (policy.node >= nodes) return no_such_node(policy.node, nodes);
  if (nodes > 1 && libnuma().run_on_node(policy.node) != 0)
    return make_error(ErrorKind::Io, strprintf("cannot run on NUMA node %d", policy.node));
  return {};
}

}  // namespace colibri::util

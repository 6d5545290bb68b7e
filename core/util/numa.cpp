// core/util/numa.cpp — libnuma-backed placement, compiled without NUMA when libnuma is absent.
#include "util/numa.h"

#include <cstdlib>

#include "util/strings.h"

#if COLIBRI_HAVE_NUMA
#include <numa.h>
#include <numaif.h>
#endif

namespace colibri::util {

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
#if COLIBRI_HAVE_NUMA
  if (numa_available() < 0) return 1;
  return numa_num_configured_nodes();
#else
  return 1;
#endif
}

Error numa_apply_to_memory(const NumaPolicy &policy, const void *address, size_t bytes, std::string *applied) {
  if (policy.mode == NumaPolicy::Mode::Off) {
    *applied = "off";
    return {};
  }
  int nodes = numa_node_count();
  if (policy.mode == NumaPolicy::Mode::Bind && policy.node >= nodes)
    return make_error(ErrorKind::InvalidArgument, strprintf("NUMA policy bind:%d: this machine has %d node%s (0..%d)",
                                                            policy.node, nodes, nodes == 1 ? "" : "s", nodes - 1));
#if COLIBRI_HAVE_NUMA
  if (numa_available() >= 0 && nodes > 1) {
    void *p = const_cast<void *>(address);
    if (policy.mode == NumaPolicy::Mode::Interleave) {
      numa_interleave_memory(p, bytes, numa_all_nodes_ptr);
      *applied = strprintf("interleave over %d nodes", nodes);
    } else {
      numa_tonode_memory(p, bytes, policy.node);
      *applied = strprintf("bound to node %d", policy.node);
    }
    return {};
  }
#endif
  (void)address;
  (void)bytes;
  *applied = strprintf("%s requested, but only one NUMA node is available: nothing to do", numa_policy_name(policy).c_str());
  return {};
}

Error numa_apply_to_thread(const NumaPolicy &policy) {
  if (policy.mode != NumaPolicy::Mode::Bind) return {};
  int nodes = numa_node_count();
  if (policy.node >= nodes)
    return make_error(ErrorKind::InvalidArgument, strprintf("NUMA policy bind:%d: this machine has %d node%s", policy.node,
                                                            nodes, nodes == 1 ? "" : "s"));
#if COLIBRI_HAVE_NUMA
  if (numa_available() >= 0 && nodes > 1 && numa_run_on_node(policy.node) != 0)
    return make_error(ErrorKind::Io, strprintf("cannot run on NUMA node %d", policy.node));
#endif
  return {};
}

}  // namespace colibri::util

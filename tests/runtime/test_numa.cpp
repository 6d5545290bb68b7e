// tests/runtime/test_numa.cpp — NUMA placement is done, not only reported (issue 18, item 10).
//
// On this machine (one node, usually) the real system calls run: the policy is set on the
// weights' copy before it is filled, and the report is the kernel's answer (move_pages) for
// sampled pages: "node 0: 100% of 1024 sampled pages". A simulated machine with several nodes
// (FakeNuma, passed through LoadOptions / SessionOptions) checks the decisions: which nodes a
// policy uses, that an inherited memory policy or CPU affinity (numactl) narrows them and is
// never overridden, the measured report, and that under bind:N the calling thread, which runs a
// share of every task, is on node N for the call.
#include <catch2/catch.hpp>
#include <linux/mempolicy.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "model/model.h"
#include "runtime/session.h"
#include "support/synthetic_image.h"
#include "support/synthetic_model.h"
#include "util/numa.h"

using namespace colibri;
using Catch::Contains;
using util::NumaPolicy;

namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

// A machine with `nodes` nodes: memory placement is recorded and answered by page index
// (interleave: node i % n of the range's nodes; bind: the node), CPUs are given per node.
class FakeNuma final : public util::NumaSystem {
 public:
  int nodes = 2;
  std::vector<std::vector<int>> cpus_by_node;
  std::vector<int> allowed_memory;      // empty: all nodes
  std::vector<int64_t> available;       // per node; empty: unknown (-1)

  struct Placed {
    uintptr_t begin, end;
    NumaPolicy::Mode mode;
    std::vector<int> nodes;
    bool first_page_resident_when_set;  // by the real kernel, where it can tell
  };
  mutable std::vector<Placed> placed;

  std::string unavailable_reason() const override { return ""; }
  int node_count() const override { return nodes; }
  std::vector<int> node_cpus(int node) const override {
    return static_cast<size_t>(node) < cpus_by_node.size() ? cpus_by_node[static_cast<size_t>(node)] : std::vector<int>{};
  }
  std::vector<int> memory_nodes() const override {
    if (!allowed_memory.empty()) return allowed_memory;
    std::vector<int> all;
    for (int n = 0; n < nodes; ++n) all.push_back(n);
    return all;
  }
  int64_t node_available_bytes(int node) const override {
    return static_cast<size_t>(node) < available.size() ? available[static_cast<size_t>(node)] : -1;
  }
  Error set_memory_policy(void *address, size_t bytes, NumaPolicy::Mode mode, const std::vector<int> &n) const override {
    bool resident = false;
    const util::NumaSystem &real = util::system_numa();
    if (real.unavailable_reason().empty()) {
      const void *page = address;
      int node = -ENOENT;
      if (real.query_page_nodes(&page, 1, &node).ok()) resident = node >= 0;
    }
    const uintptr_t begin = reinterpret_cast<uintptr_t>(address);
    placed.push_back({begin, begin + bytes, mode, n, resident});
    return {};
  }
  Error query_page_nodes(const void *const *pages, size_t count, int *out) const override {
    for (size_t i = 0; i < count; ++i) {
      const uintptr_t p = reinterpret_cast<uintptr_t>(pages[i]);
      out[i] = -ENOENT;
      for (const Placed &r : placed) {
        if (p < r.begin || p >= r.end) continue;
        const size_t index = (p - r.begin) / kPage;
        out[i] = r.mode == NumaPolicy::Mode::Bind ? r.nodes[0] : r.nodes[index % r.nodes.size()];
      }
    }
    return {};
  }
};

std::string tiny_model(const std::string &tag) {
  const std::string path = testing::memory_temp_dir(tag) + "/m.colibri";
  REQUIRE_FALSE(testing::write_synthetic_model(path));
  return path;
}

// The report's measured part, as the loader computes it, for the weights of `m`.
std::string measured(const util::NumaSystem &system, const model::Model &m) {
  const uint64_t begin = m.image().header().weight_data_offset;
  return util::describe_page_placement(
      util::measure_page_placement(system, m.image().bytes() + begin, m.image().file_size() - begin));
}

std::vector<float> logits_of(const model::Model &m, const runtime::SessionOptions &options_in) {
  runtime::SessionOptions so = options_in;
  so.context_length = 16;
  so.max_batch_tokens = 8;
  Error e;
  auto s = runtime::Session::create(m, so, &e);
  INFO(e.message);
  REQUIRE(s);
  std::vector<runtime::BatchEntry> batch = {{0, 0, 1, 0}, {0, 1, 5, 0}, {0, 2, 9, 1}};
  REQUIRE(s->forward(batch.data(), batch.size()).ok());
  const float *l = s->logits(0);
  return std::vector<float>(l, l + m.config().vocab_size);
}

long set_thread_mempolicy(int mode, const std::vector<int> &nodes) {
  unsigned long mask[16] = {};
  for (int n : nodes) mask[n / 64] |= 1ul << (n % 64);
  return syscall(SYS_set_mempolicy, mode, nodes.empty() ? nullptr : mask, nodes.empty() ? 0ul : 1025ul);
}

}  // namespace

TEST_CASE("bind and interleave place the weights here and report the kernel's measurement", "[numa]") {
  const std::string path = tiny_model("numa-real");
  const util::NumaSystem &real = util::system_numa();
  for (const char *text : {"interleave", "bind:0"}) {
    NumaPolicy policy;
    REQUIRE(util::parse_numa_policy(text, &policy).ok());
    model::LoadOptions lo;
    lo.numa = policy;
    Error e;
    auto m = model::Model::load(path, lo, &e);
    INFO(text << ": " << e.message);
    REQUIRE(m);
    const std::string report = m->numa_report();
    CAPTURE(report, util::numa_support());
    if (!real.unavailable_reason().empty()) {
      CHECK_THAT(report, Contains("nothing placed") && Contains(real.unavailable_reason()));
      CHECK_FALSE(m->image().loaded_into_memory());
      continue;
    }
    // Placed: the weights are a copy whose every page the kernel reports on an allowed node.
    CHECK(m->image().loaded_into_memory());
    CHECK_THAT(report, Contains(std::string(text) + ": weights copied into memory"));
    CHECK_THAT(report, Contains(" sampled pages"));
    CHECK_THAT(report, !Contains("resident"));  // every sampled page is in memory
    if (real.node_count() == 1) CHECK_THAT(report, Contains("measured: node 0: 100% of "));
  }
}

TEST_CASE("off keeps the file mapping and measures what is resident", "[numa]") {
  const std::string path = tiny_model("numa-off");
  if (!util::system_numa().unavailable_reason().empty()) {
    WARN("NUMA unavailable here (" << util::numa_support() << "): not measured");
    return;
  }
  model::LoadOptions lo;
  Error e;
  auto lazy = model::Model::load(path, lo, &e);
  REQUIRE(lazy);
  CHECK_FALSE(lazy->image().loaded_into_memory());
  CHECK_THAT(lazy->numa_report(), Contains("off (weights in the file mapping); measured: "));
  lo.image.populate = true;  // every page mapped at open
  auto populated = model::Model::load(path, lo, &e);
  REQUIRE(populated);
  CHECK_THAT(populated->numa_report(), Contains(" sampled pages") && !Contains("resident"));
}

TEST_CASE("page placement is the kernel's answer: untouched pages are not resident, touched ones are", "[numa]") {
  const util::NumaSystem &real = util::system_numa();
  if (!real.unavailable_reason().empty()) {
    WARN("NUMA unavailable here (" << util::numa_support() << "): not measured");
    return;
  }
  const size_t pages = 64;
  void *memory = mmap(nullptr, pages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(memory != MAP_FAILED);
  auto *bytes = static_cast<unsigned char *>(memory);
  util::PagePlacement before = util::measure_page_placement(real, bytes, pages * kPage, pages);
  CHECK(before.sampled == pages);
  CHECK(before.resident == 0);
  CHECK_THAT(util::describe_page_placement(before), Contains("0 of 64 sampled pages resident yet"));
  // Bind the range to the first allowed node, then touch half of it.
  const std::vector<int> allowed = real.memory_nodes();
  REQUIRE(!allowed.empty());
  util::MemoryPlacement bind{NumaPolicy::Mode::Bind, {allowed[0]}, "test"};
  REQUIRE(util::apply_memory_placement(bind, real, bytes, pages * kPage).ok());
  for (size_t p = 0; p < pages / 2; ++p) bytes[p * kPage] = 1;
  util::PagePlacement after = util::measure_page_placement(real, bytes, pages * kPage, pages);
  CHECK(after.resident == pages / 2);
  REQUIRE(after.pages_per_node.size() == static_cast<size_t>(allowed[0]) + 1);
  CHECK(after.pages_per_node[static_cast<size_t>(allowed[0])] == pages / 2);
  CHECK_THAT(util::describe_page_placement(after),
             Contains("32 of 64 sampled pages resident: node " + std::to_string(allowed[0]) + ": 100%"));
  munmap(memory, pages * kPage);
}

TEST_CASE("an inherited memory policy (numactl --membind) bounds the nodes a policy uses", "[numa]") {
  const util::NumaSystem &real = util::system_numa();
  if (!real.unavailable_reason().empty()) {
    WARN("NUMA unavailable here (" << util::numa_support() << "): not checked");
    return;
  }
  const std::vector<int> allowed = real.memory_nodes();
  REQUIRE(!allowed.empty());
  // On a thread of its own: set_mempolicy is per thread, as numactl leaves it for the process.
  long set_status = -1;
  std::vector<int> seen;
  util::MemoryPlacement planned;
  Error plan_error;
  std::thread t([&] {
    set_status = set_thread_mempolicy(MPOL_BIND, {allowed.back()});
    seen = real.memory_nodes();
    plan_error = util::plan_memory_placement({NumaPolicy::Mode::Interleave, 0}, real, 1 << 20, &planned);
    set_thread_mempolicy(MPOL_DEFAULT, {});
  });
  t.join();
  REQUIRE(set_status == 0);
  CHECK(seen == std::vector<int>{allowed.back()});
  REQUIRE(plan_error.ok());
  CHECK(planned.nodes == std::vector<int>{allowed.back()});
}

TEST_CASE("on a simulated two-node machine interleave spreads the copy over both nodes and says so", "[numa][fake]") {
  const std::string path = tiny_model("numa-fake");
  FakeNuma fake;
  model::LoadOptions lo;
  lo.numa = {NumaPolicy::Mode::Interleave, 0};
  lo.numa_system = &fake;
  lo.image.populate = true;  // would fault the mapping in from the loading thread: not used with a policy
  lo.warm_up = true;
  Error e;
  auto m = model::Model::load(path, lo, &e);
  INFO(e.message);
  REQUIRE(m);
  CHECK(m->image().loaded_into_memory());
  REQUIRE(fake.placed.size() == 1);
  const FakeNuma::Placed &p = fake.placed[0];
  CHECK(p.mode == NumaPolicy::Mode::Interleave);
  CHECK(p.nodes == std::vector<int>{0, 1});
  // The policy covers the whole copy and was set before any page of it was faulted in.
  CHECK(p.begin == reinterpret_cast<uintptr_t>(m->image().bytes()));
  CHECK(p.end - p.begin >= m->image().file_size());
  CHECK_FALSE(p.first_page_resident_when_set);
  CHECK(m->numa_report() == "interleave: weights copied into memory interleaved over nodes 0-1; measured: " + measured(fake, *m));
  // Both nodes hold half the sampled pages (to one page).
  const uint64_t begin = m->image().header().weight_data_offset;
  util::PagePlacement where = util::measure_page_placement(fake, m->image().bytes() + begin, m->image().file_size() - begin);
  REQUIRE(where.pages_per_node.size() == 2);
  CHECK(where.resident == where.sampled);
  CHECK(where.pages_per_node[0] + 1 >= where.pages_per_node[1]);
  CHECK(where.pages_per_node[1] + 1 >= where.pages_per_node[0]);
  CHECK_THAT(m->numa_report(), Contains("node 0: ") && Contains("node 1: "));
  // Same bits as the plain mapping.
  auto mapped = model::Model::load(path, {}, &e);
  REQUIRE(mapped);
  runtime::SessionOptions so;
  so.threads = 2;
  CHECK(logits_of(*m, so) == logits_of(*mapped, so));
}

TEST_CASE("on a simulated machine bind:N places on node N, or refuses with the reason", "[numa][fake]") {
  const std::string path = tiny_model("numa-bind");
  FakeNuma fake;
  fake.nodes = 4;
  model::LoadOptions lo;
  lo.numa_system = &fake;
  lo.numa = {NumaPolicy::Mode::Bind, 2};
  Error e;
  auto m = model::Model::load(path, lo, &e);
  INFO(e.message);
  REQUIRE(m);
  CHECK(m->numa_report() == "bind:2: weights copied into memory bound to node 2; measured: " + measured(fake, *m));
  CHECK_THAT(m->numa_report(), Contains("measured: node 2: 100% of "));
  // A node that does not exist.
  lo.numa = {NumaPolicy::Mode::Bind, 7};
  CHECK_FALSE(model::Model::load(path, lo, &e));
  CHECK_THAT(e.message, Contains("bind:7") && Contains("this machine has 4 nodes (0..3)"));
  // A node without room for the weights: refused before the copy (MPOL_BIND would call the OOM killer).
  fake.available = {-1, -1, -1, 4096};
  lo.numa = {NumaPolicy::Mode::Bind, 3};
  CHECK_FALSE(model::Model::load(path, lo, &e));
  CHECK(e.kind == ErrorKind::OutOfMemory);
  CHECK_THAT(e.message, Contains("node 3 has about 4.00 KiB available") && Contains("interleave"));
}

TEST_CASE("an inherited memory policy on a simulated machine narrows interleave and refuses binding outside it",
          "[numa][fake]") {
  const std::string path = tiny_model("numa-inherit");
  FakeNuma fake;
  fake.nodes = 4;
  fake.allowed_memory = {1, 2};  // as `numactl --membind=1,2` leaves the process
  model::LoadOptions lo;
  lo.numa_system = &fake;
  lo.numa = {NumaPolicy::Mode::Interleave, 0};
  Error e;
  auto m = model::Model::load(path, lo, &e);
  REQUIRE(m);
  REQUIRE(fake.placed.size() == 1);
  CHECK(fake.placed[0].nodes == std::vector<int>{1, 2});
  CHECK_THAT(m->numa_report(), Contains("interleaved over nodes 1-2") && Contains("node 1: ") && Contains("node 2: ") &&
                                   !Contains("node 0") && !Contains("node 3"));
  lo.numa = {NumaPolicy::Mode::Bind, 0};
  CHECK_FALSE(model::Model::load(path, lo, &e));
  CHECK_THAT(e.message, Contains("bind:0") && Contains("nodes 1-2 only") && Contains("numactl"));
  lo.numa = {NumaPolicy::Mode::Bind, 2};
  CHECK(model::Model::load(path, lo, &e));
}

namespace {

// The expert hook runs on the thread that called forward(), in the middle of the pass: where
// that thread is then, and whether all its CPUs were among `node`.
struct CallerSite {
  const std::vector<int> *node = nullptr;
  int calls = 0;
  bool always_inside = true;
  static int32_t hook(void *user, uint32_t, uint32_t, const float *rows_in, size_t rows, size_t hidden, float *rows_out) {
    auto *self = static_cast<CallerSite *>(user);
    ++self->calls;
    for (int cpu : util::calling_thread_cpus())
      if (!std::binary_search(self->node->begin(), self->node->end(), cpu)) self->always_inside = false;
    if (!std::binary_search(self->node->begin(), self->node->end(), sched_getcpu())) self->always_inside = false;
    std::memcpy(rows_out, rows_in, rows * hidden * sizeof(float));
    return 0;
  }
};

// One forward on s: during it the calling thread runs on `cpus` only (the expert hook, which
// runs on the caller, looks), and after it on its own CPUs again.
void check_caller_confined(runtime::Session &s, const std::vector<int> &cpus) {
  CallerSite site;
  site.node = &cpus;
  s.set_expert_hook({&CallerSite::hook, &site});
  const std::vector<int> before = util::calling_thread_cpus();
  std::vector<runtime::BatchEntry> batch = {{0, 0, 1, 0}, {0, 1, 5, 1}};
  REQUIRE(s.forward(batch.data(), batch.size()).ok());
  CHECK(site.calls > 0);
  CHECK(site.always_inside);                     // during the call
  CHECK(util::calling_thread_cpus() == before);  // after it: its own CPUs back
}

}  // namespace

TEST_CASE("bind:N runs the session's workers on node N, and the calling thread there for the call",
          "[numa][fake][threads]") {
  const std::vector<int> cpus = util::calling_thread_cpus();
  if (cpus.size() < 2) {
    WARN("one CPU: a node cannot have fewer CPUs than the process; not checked");
    return;
  }
  const std::string path = tiny_model("numa-threads");
  Error e;
  auto m = model::Model::load(path, {}, &e);
  REQUIRE(m);
  FakeNuma fake;
  const std::vector<int> node1(cpus.begin() + 1, cpus.end());
  fake.cpus_by_node = {{cpus[0]}, node1};
  runtime::SessionOptions plain;
  plain.threads = 2;
  const std::vector<float> expected = logits_of(*m, plain);

  runtime::SessionOptions so;
  so.numa = {NumaPolicy::Mode::Bind, 1};
  so.numa_system = &fake;
  so.context_length = 16;
  so.max_batch_tokens = 8;
  CHECK(logits_of(*m, so) == expected);  // same bits, whichever threads ran
  auto s = runtime::Session::create(*m, so, &e);
  REQUIRE(s);
  CHECK(s->thread_count() == node1.size());  // one thread per CPU of the node
  CHECK_THAT(s->thread_placement(), Contains("on node 1's"));
  check_caller_confined(*s, node1);  // on node 1 only for the call

  // A caller confined to node 0 (numactl --cpunodebind=0) cannot bind to node 1: its affinity
  // is kept, not overridden.
  bool refused = false;
  std::string message;
  std::thread t([&] {
    cpu_set_t set = util::cpu_set_of({cpus[0]});
    if (sched_setaffinity(0, sizeof set, &set) != 0) return;
    Error err;
    refused = runtime::Session::create(*m, so, &err) == nullptr;
    message = err.message;
  });
  t.join();
  CHECK(refused);
  CHECK_THAT(message, Contains("bind:1") && Contains("not among the CPUs this process may run on"));
}

TEST_CASE("pin_threads runs the caller's share on thread 0's CPU for the call and gives its CPUs back",
          "[numa][threads]") {
  const std::vector<int> cpus = util::calling_thread_cpus();
  if (cpus.size() < 2) {
    WARN("one CPU: pinning the caller to one CPU cannot be told from not pinning it; not checked");
    return;
  }
  const std::string path = tiny_model("pin-threads");
  Error e;
  auto m = model::Model::load(path, {}, &e);
  REQUIRE(m);
  runtime::SessionOptions plain;
  plain.threads = 2;
  const std::vector<float> expected = logits_of(*m, plain);
  runtime::SessionOptions so = plain;
  so.pin_threads = true;
  so.context_length = 16;
  so.max_batch_tokens = 8;
  CHECK(logits_of(*m, so) == expected);  // same bits pinned or not
  auto s = runtime::Session::create(*m, so, &e);
  REQUIRE(s);
  CHECK_THAT(s->thread_placement(), Contains("pinned"));
  check_caller_confined(*s, {cpus[0]});  // on the first CPU only for the call
}

TEST_CASE("bind:0 on this machine keeps the threads on node 0's CPUs that the process may use", "[numa][threads]") {
  const std::string path = tiny_model("numa-bind0");
  Error e;
  auto m = model::Model::load(path, {}, &e);
  REQUIRE(m);
  runtime::SessionOptions so;
  so.numa = {NumaPolicy::Mode::Bind, 0};
  so.context_length = 16;
  auto s = runtime::Session::create(*m, so, &e);
  INFO(e.message);
  REQUIRE(s);
  const util::NumaSystem &real = util::system_numa();
  if (real.unavailable_reason().empty() && real.node_count() == 1) {
    // One node: every CPU the process may use is node 0's.
    CHECK(s->thread_count() == util::calling_thread_cpus().size());
    CHECK_THAT(s->thread_placement(), Contains("on node 0's"));
  }
}

TEST_CASE("NUMA policies parse and name themselves", "[numa]") {
  NumaPolicy p;
  REQUIRE(util::parse_numa_policy("bind:0", &p).ok());
  CHECK(p.mode == NumaPolicy::Mode::Bind);
  CHECK(p.node == 0);
  REQUIRE(util::parse_numa_policy("interleave", &p).ok());
  CHECK(util::numa_policy_name(p) == "interleave");
  CHECK_THAT(util::parse_numa_policy("bind:x", &p).message, Contains("node must be a number"));
  CHECK_THAT(util::parse_numa_policy("spread", &p).message, Contains("off, bind:N, interleave"));
  CHECK(util::format_id_list({0, 1, 2, 3}) == "0-3");
  CHECK(util::format_id_list({0, 2, 5, 6, 7}) == "0,2,5-7");
  CHECK(util::format_id_list({}) == "none");
}

// tests/unit/thread_pool_test.cpp — the persistent pool: every task runs exactly once,
// a slow or descheduled worker's tasks are taken over by the others, back-to-back calls and
// sleeping workers both work, exceptions come back to the caller, and a row-split matmul
// gives the same bits for every thread count.
#include <catch2/catch.hpp>

#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/util/thread_pool.h"
#include "kernels/cpu/kernels.h"
#include "tests/support/in_child.h"

using colibri::util::ThreadPool;
using colibri::util::ThreadPoolOptions;

namespace {

ThreadPoolOptions with_threads(size_t n, uint32_t spin_us = 1000) {
  ThreadPoolOptions options;
  options.thread_count = n;
  options.spin_microseconds = spin_us;
  return options;
}

}  // namespace

TEST_CASE("parallel_for runs every task exactly once", "[thread_pool]") {
  for (size_t threads : {1, 2, 3, 4, 7}) {
    ThreadPool pool(with_threads(threads));
    REQUIRE(pool.thread_count() == threads);
    for (size_t tasks : {0, 1, 2, 3, 5, 7, 8, 64, 1000}) {
      INFO("threads=" << threads << " tasks=" << tasks);
      std::vector<std::atomic<int>> runs(tasks);
      std::vector<size_t> ran_on(tasks, ~size_t(0));
      pool.parallel_for(tasks, [&](size_t task, size_t thread) {
        runs[task].fetch_add(1);
        ran_on[task] = thread;
      });
      for (size_t t = 0; t < tasks; ++t) {
        REQUIRE(runs[t].load() == 1);
        REQUIRE(ran_on[t] < threads);
      }
      REQUIRE(pool.partition_begin(tasks, 0) == 0);
      REQUIRE(pool.partition_begin(tasks, threads) == tasks);
    }
  }
}

TEST_CASE("a worker stuck in a task does not hold up the rest of its range", "[thread_pool]") {
  // The first task a worker runs blocks until the caller has run every other task: with a
  // static partition alone this would deadlock; with stealing the caller takes the
  // worker's remaining tasks and then releases it.
  ThreadPool pool(with_threads(2));
  const size_t tasks = 100;
  std::vector<std::atomic<int>> runs(tasks);
  std::atomic<size_t> done_by_caller{0};
  std::atomic<bool> release{false};
  std::atomic<int> worker_tasks{0};
  pool.parallel_for(tasks, [&](size_t task, size_t thread) {
    runs[task].fetch_add(1);
    if (thread == 0) {
      if (done_by_caller.fetch_add(1) + 1 + static_cast<size_t>(worker_tasks.load()) >= tasks) release = true;
      return;
    }
    if (worker_tasks.fetch_add(1) == 0) {
      if (done_by_caller.load() + 1 >= tasks) release = true;
      while (!release.load()) std::this_thread::yield();
    }
  });
  for (size_t t = 0; t < tasks; ++t) REQUIRE(runs[t].load() == 1);
  // The caller ran its own 50 and all of the worker's but the ones the worker claimed.
  REQUIRE(done_by_caller.load() + static_cast<size_t>(worker_tasks.load()) == tasks);
  REQUIRE(done_by_caller.load() >= tasks / 2);
}

TEST_CASE("a late worker never runs or counts a task of another job", "[thread_pool][stress]") {
  // Alternating small and large task counts with more threads than CPUs: workers often wake
  // after the caller has finished a job alone and is writing the next one. Every task of
  // every job must run exactly once, before its parallel_for returns.
  for (size_t threads : {2, 3, 5}) {
    ThreadPool pool(with_threads(threads, /*spin_us=*/20));
    constexpr size_t kMax = 97;
    std::vector<std::atomic<int>> runs(kMax);
    std::atomic<int> stray{0};
    // (No 1: a one-task call runs inline and publishes no job.)
    const size_t counts[] = {2, 97, 2, 64, 3, 31, 2, 5, 96};
    for (uint32_t job = 0; job < 60000; ++job) {
      const size_t n = counts[job % (sizeof(counts) / sizeof(counts[0]))];
      for (size_t t = 0; t < n; ++t) runs[t].store(0, std::memory_order_relaxed);
      pool.parallel_for(n, [&, n](size_t task, size_t) {
        if (task >= n) stray.fetch_add(1);
        else runs[task].fetch_add(1);
      });
      bool all_once = true;
      for (size_t t = 0; t < n; ++t) all_once = all_once && runs[t].load() == 1;
      if (!all_once || stray.load() != 0) {
        INFO("threads=" << threads << " job=" << job << " n=" << n << " stray=" << stray.load());
        for (size_t t = 0; t < n; ++t) INFO("task " << t << " ran " << runs[t].load() << " times");
        FAIL("a task ran other than exactly once");
      }
    }
    REQUIRE(stray.load() == 0);
  }
}

TEST_CASE("thread index is exclusive: per-thread scratch needs no locking", "[thread_pool]") {
  ThreadPool pool(with_threads(4));
  std::vector<std::atomic<int>> inside(pool.thread_count());
  std::atomic<bool> overlap{false};
  for (int round = 0; round < 200; ++round) {
    pool.parallel_for(37, [&](size_t, size_t thread) {
      if (inside[thread].fetch_add(1) != 0) overlap = true;
      inside[thread].fetch_sub(1);
    });
  }
  REQUIRE_FALSE(overlap.load());
}

TEST_CASE("many back-to-back calls (the decode pattern) stay correct", "[thread_pool][stress]") {
  // 3 threads on a 2-CPU machine also exercises the oversubscribed (yielding) path.
  for (size_t threads : {2, 3}) {
  ThreadPool pool(with_threads(threads));
  std::vector<uint64_t> partial(64);
  for (uint64_t round = 0; round < 5000; ++round) {
    const size_t tasks = 1 + round % 64;
    pool.parallel_for(tasks, [&](size_t task, size_t) { partial[task] = round * 1000 + task; });
    uint64_t sum = 0;
    for (size_t t = 0; t < tasks; ++t) sum += partial[t] - round * 1000;
    REQUIRE(sum == tasks * (tasks - 1) / 2);
  }
  }
}

TEST_CASE("workers that went to sleep wake up for the next call", "[thread_pool]") {
  ThreadPool pool(with_threads(4, /*spin_us=*/0));
  for (int round = 0; round < 50; ++round) {
    if (round % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(3));
    std::atomic<int> count{0};
    pool.parallel_for(100, [&](size_t, size_t) { count.fetch_add(1); });
    REQUIRE(count.load() == 100);
  }
}

TEST_CASE("an exception in a task reaches the caller after all threads stop", "[thread_pool]") {
  for (size_t threads : {1, 2, 4}) {
    ThreadPool pool(with_threads(threads));
    std::atomic<int> finished{0};
    REQUIRE_THROWS_AS(pool.parallel_for(40, [&](size_t task, size_t) {
      if (task == 33) throw std::runtime_error("task 33 failed");
      finished.fetch_add(1);
    }), std::runtime_error);
    // The pool is still usable.
    std::atomic<int> count{0};
    pool.parallel_for(40, [&](size_t, size_t) { count.fetch_add(1); });
    REQUIRE(count.load() == 40);
  }
}

TEST_CASE("calls from two outside threads are serialised, not interleaved", "[thread_pool]") {
  // Also for one-task calls, which run on the calling thread: two of them at once would both
  // be thread 0 and share its scratch.
  for (size_t tasks : {9, 1}) {
    INFO("tasks=" << tasks);
    ThreadPool pool(with_threads(3));
    std::atomic<int> active{0};
    std::atomic<bool> interleaved{false};
    auto client = [&] {
      for (int i = 0; i < 300; ++i) {
        pool.parallel_for(tasks, [&](size_t task, size_t) {
          if (task == 0 && active.fetch_add(1) != 0) interleaved = true;
          if (task == 0) std::this_thread::yield();
          if (task == 0) active.fetch_sub(1);
        });
      }
    };
    std::thread a(client), b(client);
    a.join();
    b.join();
    REQUIRE_FALSE(interleaved.load());
  }
}

TEST_CASE("a one-task call runs on the calling thread as thread 0", "[thread_pool]") {
  for (size_t threads : {1, 2, 4}) {
    INFO("threads=" << threads);
    ThreadPool pool(with_threads(threads));
    for (int round = 0; round < 50; ++round) {
      std::thread::id ran_on;
      size_t index = ~size_t(0);
      pool.parallel_for(1, [&](size_t task, size_t thread) {
        REQUIRE(task == 0);
        ran_on = std::this_thread::get_id();
        index = thread;
      });
      REQUIRE(ran_on == std::this_thread::get_id());
      REQUIRE(index == 0);
      // Interleaved with calls the workers take part in (the decode pattern).
      std::atomic<int> count{0};
      pool.parallel_for(8, [&](size_t, size_t) { count.fetch_add(1); });
      REQUIRE(count.load() == 8);
    }
    REQUIRE_THROWS_AS(pool.parallel_for(1, [](size_t, size_t) { throw std::runtime_error("the only task failed"); }),
                      std::runtime_error);
    std::atomic<int> count{0};
    pool.parallel_for(1, [&](size_t, size_t) { count.fetch_add(1); });
    pool.parallel_for(5, [&](size_t, size_t) { count.fetch_add(1); });
    REQUIRE(count.load() == 6);
  }
}

TEST_CASE("a row-split matmul gives identical bits for every thread count", "[thread_pool][determinism]") {
  using namespace colibri::kernels;
  const KernelTable &k = default_kernel_table();
  const size_t rows = 333, cols = 512, tokens = 5;
  std::vector<uint16_t> w(rows * cols);
  std::vector<float> x(tokens * cols);
  uint32_t state = 12345;
  auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return (static_cast<float>(state >> 8) / 16777216.0f) - 0.5f;
  };
  for (uint16_t &v : w) v = f32_to_bf16_value(next());
  for (float &v : x) v = next();
  std::vector<float> reference;
  for (size_t threads : {1, 2, 3, 4, 8}) {
    ThreadPool pool(with_threads(threads));
    for (size_t rows_per_task : {1, 16, 64}) {
      std::vector<float> y(tokens * rows);
      const size_t tasks = (rows + rows_per_task - 1) / rows_per_task;
      for (auto fn : {k.matmul_rows, k.gemm_rows}) {
        pool.parallel_for(tasks, [&](size_t task, size_t) {
          const size_t r0 = task * rows_per_task, r1 = std::min(rows, r0 + rows_per_task);
          fn(w.data(), DType::BF16, 0, cols, r0, r1, x.data(), tokens, y.data(), rows);
        });
        if (reference.empty()) reference = y;
        REQUIRE(std::memcmp(y.data(), reference.data(), y.size() * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("construction and destruction with idle or sleeping workers", "[thread_pool]") {
  for (int i = 0; i < 20; ++i) {
    ThreadPool pool(with_threads(1 + i % 5, i % 2 ? 0 : 200));
    if (i % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ThreadPool automatic{ThreadPoolOptions{}};
  REQUIRE(automatic.thread_count() >= 1);
  ThreadPoolOptions pinned = with_threads(2);
  pinned.pin_threads = true;
  ThreadPool pinned_pool(pinned);
  std::atomic<int> count{0};
  pinned_pool.parallel_for(10, [&](size_t, size_t) { count.fetch_add(1); });
  REQUIRE(count.load() == 10);
}

namespace {

std::vector<int> my_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

// Runs `body` on a fresh thread whose affinity is `cpus` (as `numactl --cpunodebind` or
// `taskset` would leave a process), so the test's own thread keeps its CPUs. Catch2's
// assertions are not thread-safe: `body` only computes, the caller checks. False if the
// affinity could not be set.
template <class Body>
bool on_thread_with_cpus(const std::vector<int> &cpus, Body body) {
  bool set_ok = false;
  std::thread t([&] {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu : cpus) CPU_SET(cpu, &set);
    set_ok = sched_setaffinity(0, sizeof set, &set) == 0;
    if (set_ok) body();
  });
  t.join();
  return set_ok;
}

// Where each of `tasks` tasks ran: the CPU and whether on the calling thread. Each task spins a
// little so that every thread gets some.
struct TaskSites {
  std::vector<int> cpu;
  std::vector<bool> on_caller;
};

TaskSites run_and_record(ThreadPool &pool, size_t tasks) {
  TaskSites sites{std::vector<int>(tasks, -1), std::vector<bool>(tasks, false)};
  const std::thread::id caller = std::this_thread::get_id();
  pool.parallel_for(tasks, [&](size_t task, size_t) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    while (std::chrono::steady_clock::now() < until) {
    }
    sites.cpu[task] = sched_getcpu();
    sites.on_caller[task] = std::this_thread::get_id() == caller;
  });
  return sites;
}

}  // namespace

TEST_CASE("workers stay inside the CPUs the creating thread inherited, pinned or not", "[thread_pool][affinity]") {
  const std::vector<int> cpus = my_cpus();
  REQUIRE(!cpus.empty());
  const std::vector<int> one = {cpus.back()};
  for (bool pin : {false, true}) {
    TaskSites sites;
    size_t automatic_threads = 0;
    REQUIRE(on_thread_with_cpus(one, [&] {
      ThreadPoolOptions options = with_threads(3);
      options.pin_threads = pin;
      ThreadPool pool(options);
      sites = run_and_record(pool, 64);
      ThreadPool automatic(with_threads(0));
      automatic_threads = automatic.thread_count();
    }));
    INFO("pinned " << pin);
    for (int cpu : sites.cpu) CHECK(cpu == one[0]);
    // thread_count 0 is the number of CPUs the creating thread may use.
    CHECK(automatic_threads == 1);
  }
}

TEST_CASE("a pool given CPUs runs its workers there, and the caller's share where the caller is", "[thread_pool][affinity]") {
  const std::vector<int> cpus = my_cpus();
  if (cpus.size() < 2) {
    WARN("one CPU: the set of CPUs cannot differ from the caller's; not checked");
    return;
  }
  const std::vector<int> node = {cpus[1]};
  for (size_t threads : {size_t{0}, size_t{2}, size_t{3}}) {
    ThreadPoolOptions options = with_threads(threads);
    options.cpus = node;
    ThreadPool pool(options);
    INFO("threads " << threads);
    CHECK(pool.thread_count() == (threads == 0 ? 1 : threads));
    TaskSites sites = run_and_record(pool, 100);
    for (size_t t = 0; t < sites.cpu.size(); ++t)
      if (!sites.on_caller[t]) CHECK(sites.cpu[t] == node[0]);
  }
  // A one-task call runs on the caller, wherever it is.
  ThreadPoolOptions options = with_threads(2);
  options.cpus = node;
  ThreadPool pool(options);
  TaskSites sites = run_and_record(pool, 1);
  CHECK(sites.on_caller[0]);
}

// Issue 18, item 8: a thread the OS refuses (EAGAIN under a thread limit) is an error naming
// the limit, not a std::terminate (the constructor used to leave the workers it had started
// joinable) nor an "internal error".
TEST_CASE("a worker the OS refuses to start: the pool reports the thread limit", "[thread_pool]") {
  // The child must exit normally: not killed by std::terminate.
  const std::string message = colibri::testing::in_child([] {
    // RLIMIT_NPROC counts the user's processes and threads; root is exempt, so drop to nobody.
    // 3: this process and at most two workers (fewer if nobody runs other processes).
    struct rlimit rl = {3, 3};
    if (!colibri::testing::drop_root_privileges()) return std::string("setuid failed");
    if (setrlimit(RLIMIT_NPROC, &rl) != 0) return std::string("setrlimit failed");
    colibri::Error error;
    auto pool = ThreadPool::create(with_threads(8), "the test's pool", &error);
    return pool ? std::string("created") : std::string(colibri::error_kind_name(error.kind)) + ": " + error.message;
  });
  INFO(message);
  CHECK_THAT(message, Catch::StartsWith("out of memory or threads: resource exhaustion: the operating system refused "
                                        "to start thread ") &&
                          Catch::Contains(" of 8 for the test's pool") && Catch::Contains("Resource temporarily unavailable") &&
                          Catch::Contains("ulimit -u, here 3") && Catch::Contains("Use fewer threads"));
}

TEST_CASE("a pin or placement the OS refuses is an error naming the worker and the CPU, never dropped", "[thread_pool]") {
  // CPU_SETSIZE - 1 exists on no machine this runs on: pthread_setaffinity_np refuses it.
  ThreadPoolOptions o;
  o.thread_count = 2;
  o.pin_threads = true;
  o.cpus = {CPU_SETSIZE - 1};
  colibri::Error e;
  CHECK(ThreadPool::create_placed(o, "test pool", &e) == nullptr);
  CHECK(e.kind == colibri::ErrorKind::InvalidArgument);
  CHECK(e.message.find("test pool") != std::string::npos);
  CHECK(e.message.find("worker 1 to CPU " + std::to_string(CPU_SETSIZE - 1)) != std::string::npos);
  o.pin_threads = false;  // the same CPUs as a placement
  colibri::Error placed;
  CHECK(ThreadPool::create_placed(o, "test pool", &placed) == nullptr);
  CHECK(placed.message.find("on the CPUs it was given") != std::string::npos);
  // CPUs that exist: pinned workers, and the caller's slot is the first CPU.
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  int first = -1;
  for (int cpu = 0; cpu < CPU_SETSIZE && first < 0; ++cpu)
    if (CPU_ISSET(cpu, &set)) first = cpu;
  ThreadPoolOptions ok;
  ok.thread_count = 2;
  ok.pin_threads = true;
  colibri::Error none;
  auto pool = ThreadPool::create_placed(ok, "test pool", &none);
  REQUIRE(pool);
  CHECK(pool->caller_cpu() == first);
}

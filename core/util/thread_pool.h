// core/util/thread_pool.h — the persistent thread pool the forward pass splits work with.
//
// Workers are created once, in the constructor. parallel_for gives thread i the contiguous
// task range [i·n/P, (i+1)·n/P) first (the static partition: on an idle machine each thread
// runs its own range, which keeps the memory streams of a matmul apart); a thread that has
// finished its range then takes unclaimed tasks from the others' ranges, one at a time. So
// a worker that the OS has descheduled (another process on its core) or that has not woken
// up yet holds the call back by at most the one task it is running, not by its whole range.
// The calling thread works too and the call returns when every task is done. A call with one
// task (or a pool of one thread) runs on the calling thread alone, as thread 0. Because a task
// always runs whole, on one thread, with the inputs the caller defined, results never depend
// on the thread count or on which thread ran which task, as long as each task writes only
// its own outputs (docs/architecture.md §5).
//
// Cost model: a call performs no allocation and no system call while the workers are
// spinning (after their last task they poll for `spin_microseconds` — with `pause` for the
// first 20 µs, then yielding the core between polls so an oversubscribed machine still makes
// progress — and then block on a condition variable); claiming a task is one uncontended
// compare-and-swap. A decode step's dozens of calls cost microseconds (an empty call with 2
// threads: 0.6–2.4 µs median on the 2-CPU dev VM). No OpenMP (libgomp breaks late dlopen), no
// global state: every pool is an independent object.
//
// Thread safety: one parallel_for at a time per pool. Calls from two outside threads are
// serialised (the second waits); a call from inside a task of the same pool is a bug and
// aborts with a message, because it would deadlock.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include "util/error.h"

namespace colibri::util {

struct ThreadPoolOptions {
  // Threads that run tasks, the caller included. 0 = the CPUs this process may run on
  // (sched_getaffinity). 1 = no worker threads: parallel_for runs everything inline.
  size_t thread_count = 0;
  // Pin worker i (1 <= i < thread_count) to the i-th CPU of `cpus` (default: of the CPUs this
  // process may run on), wrapping around. The calling thread is left alone: the session moves
  // it to caller_cpu() for each call (util/numa.h ScopedThreadCpus).
  bool pin_threads = false;
  // The CPUs the workers run on (each worker's affinity, or with pin_threads the CPUs they are
  // pinned to), e.g. one NUMA node's: ascending, and a subset of the CPUs the creating thread may
  // run on (the caller's to check; NUMA placement does). The calling thread is not moved: it
  // runs its share where it is (the session moves it for the call, util/numa.h). Empty: the
  // creating thread's CPUs, which workers inherit (a process started under numactl or taskset
  // keeps its threads there). thread_count 0 means one thread per CPU of the set.
  std::vector<int> cpus;
  // How long an idle worker polls for the next call before blocking (microseconds).
  // Larger: lower latency between back-to-back calls; smaller: less CPU burnt when idle.
  uint32_t spin_microseconds = 1000;
};

// Thrown by the ThreadPool constructor when the OS refuses a worker thread (EAGAIN: a limit on
// threads); the workers already started are stopped and joined first. `started` threads ran
// (the caller counted), `wanted` were asked for.
struct ThreadStartError : std::system_error {
  ThreadStartError(std::error_code code, size_t started_threads, size_t wanted_threads)
      : std::system_error(code, "cannot start a thread-pool worker"), started(started_threads), wanted(wanted_threads) {}
  size_t started;
  size_t wanted;
};

class ThreadPool {
 public:
  // Throws ThreadStartError if the OS refuses a worker; create() returns it as an Error.
  explicit ThreadPool(const ThreadPoolOptions &options = {});
  // The pool, or nullptr with *error (kind OutOfMemory, util/error.h thread_start_error) naming
  // the thread limit, the thread and `purpose` ("the session's thread pool").
  static std::unique_ptr<ThreadPool> create(const ThreadPoolOptions &options, const std::string &purpose,
                                            Error *error);
  // create(), and also nullptr with *error (InvalidArgument) when the OS refused to pin a worker
  // (pin_threads) or to run it on the given cpus: placement that was asked for is never dropped
  // silently.
  static std::unique_ptr<ThreadPool> create_placed(const ThreadPoolOptions &options, const std::string &purpose,
                                                   Error *error);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  // Threads that run tasks, the caller included (>= 1).
  size_t thread_count() const { return thread_count_; }

  // Runs fn(task, thread) for every task in [0, task_count) and returns when all are done.
  // `thread` is in [0, thread_count()), 0 being the caller; no two tasks with the same
  // `thread` run at the same time, so it can index per-thread scratch. Which thread runs a
  // task is not fixed (see the top of this file): a task must not depend on it. fn is
  // borrowed for the call (no copy, no allocation). If tasks throw, the first exception is
  // rethrown here after all threads have stopped (tasks not started by then are skipped).
  // task_count must be below 2^32.
  template <class Fn>
  void parallel_for(size_t task_count, Fn &&fn) {
    using Callable = std::remove_reference_t<Fn>;
    run(task_count, &invoke<Callable>,
        const_cast<void *>(static_cast<const void *>(std::addressof(fn))));
  }

  // The CPU of thread 0's slot (the caller's): with pin_threads, the one CPU no worker is
  // pinned to while thread_count() <= the number of cpus.
  int caller_cpu() const { return cpus_[0]; }

  // The first task of thread `thread`'s own range for task_count tasks (thread ==
  // thread_count() gives task_count): the static partition each call starts from.
  size_t partition_begin(size_t task_count, size_t thread) const {
    // floor(task_count · thread / P) without overflow: task_count = q·P + r.
    const size_t q = task_count / thread_count_, r = task_count % thread_count_;
    return q * thread + r * thread / thread_count_;
  }

 private:
  using TaskFn = void (*)(void *context, size_t task, size_t thread);

  template <class Callable>
  static void invoke(void *context, size_t task, size_t thread) {
    (*static_cast<Callable *>(context))(task, thread);
  }

  void run(size_t task_count, TaskFn fn, void *context);
  void participate(uint64_t generation, size_t thread);
  void worker_main(size_t thread);
  uint64_t wait_for_job(uint64_t seen_generation);
  bool called_from_inside() const;
  void stop_workers();

  size_t thread_count_ = 1;
  uint32_t spin_microseconds_ = 0;
  std::string placement_error_;  // the first refused pin or placement, empty if none
  std::vector<int> cpus_;  // CPUs the workers run on (ThreadPoolOptions::cpus or the creator's), in order
  std::vector<std::thread> workers_;
  std::vector<std::thread::id> worker_ids_;

  // The current job. Written by the caller before it publishes the job with a seq_cst
  // increment of generation_, under a seqlock: job_stamp_ is 0 while the fields are being
  // written and the job's generation once they are complete. A worker that wakes up late may
  // read them while the next job is being written; it then sees a stamp other than the
  // generation it woke for and leaves without using them. See thread_pool.cpp.
  std::atomic<uint64_t> job_stamp_{0};
  std::atomic<TaskFn> job_fn_{nullptr};
  std::atomic<void *> job_context_{nullptr};
  std::atomic<size_t> job_task_count_{0};
  std::atomic<std::thread::id> job_caller_{};  // the thread inside run(), for nesting checks

  // Per thread: (generation << 32) | next unclaimed task of its own range, one cache line each.
  struct alignas(64) Cursor {
    std::atomic<uint64_t> next{0};
  };
  std::unique_ptr<Cursor[]> cursors_;

  alignas(64) std::atomic<uint64_t> generation_{0};  // polled by idle workers
  alignas(64) std::atomic<size_t> remaining_{0};     // tasks of the job not finished yet
  alignas(64) std::atomic<uint32_t> sleepers_{0};    // workers blocked on wake_
  std::atomic<bool> failed_{false};                  // a task threw: skip the rest
  std::atomic<bool> stop_{false};

  std::mutex wake_mutex_;
  std::condition_variable wake_;
  std::mutex call_mutex_;  // serialises callers from different threads
  std::mutex error_mutex_;
  std::exception_ptr error_;  // guarded by error_mutex_
};

}  // namespace colibri::util

// core/util/thread_pool.cpp — the persistent pool: start/stop, the spin-then-block handshake,
// the static partition and task stealing. See thread_pool.h for the contract.
//
// Handshake: the caller writes the job (function, context, task count, one cursor per
// thread tagged with the new generation, remaining_ = task count), then increments
// generation_ (seq_cst). An idle worker polls generation_ for spin_microseconds, then
// registers in sleepers_ under wake_mutex_ and waits on wake_. The caller only touches the
// mutex/condition variable when sleepers_ is non-zero. Both sides use seq_cst on
// generation_/sleepers_, so either the caller sees the sleeper or the sleeper sees the new
// generation before it waits: no lost wake-up.
//
// Claims: a task is claimed by a compare-and-swap on its range's cursor that also checks the
// cursor's generation tag, and remaining_ is decremented (release) after the task ran; the
// caller returns when remaining_ is 0 (acquire). The caller never waits for a worker that
// has claimed nothing.
//
// Late workers: a worker that wakes for job G after the caller has finished G (alone) may
// run while the caller writes job G+1. It reads the job fields under a seqlock (job_stamp_
// must equal G before and after the reads) and leaves if they are not G's. With G's fields
// it computes G's range ends, and G's cursors are then either drained or retagged G+1, so
// it claims nothing. A claim that succeeds proves G is still running (an unclaimed task
// keeps remaining_ above 0), so running G's function and decrementing remaining_ are both
// right. (A first version computed the range ends from fields it had not validated: with
// the next job's larger task count it "claimed" past the end of a drained G range, then
// decremented the next job's remaining_ — a hang, caught by engine_bench and pinned by "a
// late worker never runs or counts a task of another job".)
#include "util/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define COLIBRI_CPU_RELAX() _mm_pause()
#else
#define COLIBRI_CPU_RELAX() std::this_thread::yield()
#endif

namespace colibri::util {
namespace {

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  if (cpus.empty()) {
    const unsigned n = std::thread::hardware_concurrency();
    for (unsigned cpu = 0; cpu < (n == 0 ? 1u : n); ++cpu) cpus.push_back(static_cast<int>(cpu));
  }
  return cpus;
}

// 0, or the error number of the refusal (EINVAL: no CPU of the set exists or may be used).
int run_on_cpus(pthread_t thread, const std::vector<int> &cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus)
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &set);
  return pthread_setaffinity_np(thread, sizeof(set), &set);
}

using Clock = std::chrono::steady_clock;

// How long a waiting thread polls with `pause` before it starts yielding its core.
constexpr uint32_t kPauseSpinMicroseconds = 20;

}  // namespace

ThreadPool::ThreadPool(const ThreadPoolOptions &options)
    : spin_microseconds_(options.spin_microseconds), cpus_(options.cpus.empty() ? allowed_cpus() : options.cpus) {
  thread_count_ = options.thread_count == 0 ? cpus_.size() : options.thread_count;
  if (thread_count_ == 0) thread_count_ = 1;
  cursors_ = std::make_unique<Cursor[]>(thread_count_);
  workers_.reserve(thread_count_ - 1);
  worker_ids_.reserve(thread_count_ - 1);
  for (size_t thread = 1; thread < thread_count_; ++thread) {
    try {
      workers_.emplace_back([this, thread] { worker_main(thread); });
    } catch (const std::system_error &e) {
      // The OS refused a thread (EAGAIN: a thread limit). The destructor will not run for a
      // constructor that throws, and a joinable std::thread destroyed would std::terminate the
      // process: stop the workers started so far first.
      const size_t started = workers_.size() + 1;  // the caller counts
      stop_workers();
      throw ThreadStartError(e.code(), started, thread_count_);
    }
    worker_ids_.push_back(workers_.back().get_id());
    // A worker may run its first instructions elsewhere before this; it takes no task before
    // the first call, which comes after the constructor has returned.
    // A refused placement is kept as placement_error_ (create() returns it): a caller who asked
    // for pinned or placed threads must not get unplaced ones silently.
    int refused = 0;
    if (options.pin_threads) refused = run_on_cpus(workers_.back().native_handle(), {cpus_[thread % cpus_.size()]});
    else if (!options.cpus.empty()) refused = run_on_cpus(workers_.back().native_handle(), cpus_);
    if (refused != 0 && placement_error_.empty()) {
      placement_error_ = options.pin_threads ? "the OS refused to pin worker " + std::to_string(thread) + " to CPU " +
                                                   std::to_string(cpus_[thread % cpus_.size()])
                                             : "the OS refused to run worker " + std::to_string(thread) +
                                                   " on the CPUs it was given";
      placement_error_ += " (" + std::string(std::strerror(refused)) + ")";
    }
  }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
  stop_.store(true);
  generation_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(wake_mutex_);
  }
  wake_.notify_all();
  for (std::thread &worker : workers_) worker.join();
  workers_.clear();
}

std::unique_ptr<ThreadPool> ThreadPool::create(const ThreadPoolOptions &options, const std::string &purpose,
                                               Error *error) {
  try {
    return std::make_unique<ThreadPool>(options);
  } catch (const ThreadStartError &e) {
    *error = thread_start_error(e.code().value(), e.started, e.wanted, purpose);
    return nullptr;
  }
}

std::unique_ptr<ThreadPool> ThreadPool::create_placed(const ThreadPoolOptions &options, const std::string &purpose,
                                                      Error *error) {
  std::unique_ptr<ThreadPool> pool = create(options, purpose, error);
  if (pool && !pool->placement_error_.empty()) {
    *error = make_error(ErrorKind::InvalidArgument,
                        purpose + ": " + pool->placement_error_ +
                            "; give CPUs this process may run on (taskset, numactl, the container's cpuset) or "
                            "turn thread pinning off");
    return nullptr;
  }
  return pool;
}

bool ThreadPool::called_from_inside() const {
  const std::thread::id self = std::this_thread::get_id();
  for (const std::thread::id &id : worker_ids_)
    if (id == self) return true;
  return false;
}

// Runs tasks of job `generation` until none is left to claim: first this thread's own range,
// then the others' (the next thread's first, wrapping around).
void ThreadPool::participate(uint64_t generation, size_t thread) {
  // Seqlock read: the acquire loads keep the second stamp check after the field reads, and a
  // field value the caller stored (release) for the next job makes its stamp = 0 visible.
  if (job_stamp_.load(std::memory_order_acquire) != generation) return;
  const TaskFn fn = job_fn_.load(std::memory_order_acquire);
  void *const context = job_context_.load(std::memory_order_acquire);
  const size_t task_count = job_task_count_.load(std::memory_order_acquire);
  if (job_stamp_.load(std::memory_order_relaxed) != generation) return;  // overwritten meanwhile
  const uint64_t tag = generation & 0xFFFFFFFFu;
  for (size_t k = 0; k < thread_count_; ++k) {
    const size_t owner = (thread + k) % thread_count_;
    const uint64_t end = partition_begin(task_count, owner + 1);
    std::atomic<uint64_t> &cursor = cursors_[owner].next;
    uint64_t seen = cursor.load(std::memory_order_acquire);
    for (;;) {
      if ((seen >> 32) != tag || (seen & 0xFFFFFFFFu) >= end) break;  // another job, or drained
      if (!cursor.compare_exchange_weak(seen, seen + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
      const size_t task = static_cast<size_t>(seen & 0xFFFFFFFFu);
      if (!failed_.load(std::memory_order_relaxed)) {
        try {
          fn(context, task, thread);
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mutex_);
          if (!error_) error_ = std::current_exception();
          failed_.store(true, std::memory_order_relaxed);
        }
      }
      remaining_.fetch_sub(1, std::memory_order_release);
      seen = cursor.load(std::memory_order_acquire);
    }
  }
}

void ThreadPool::run(size_t task_count, TaskFn fn, void *context) {
  if (task_count == 0) return;
  if (called_from_inside()) {
    std::fprintf(stderr, "colibri: ThreadPool::parallel_for called from inside one of its own tasks "
                         "(nested parallelism would deadlock); run the inner loop serially\n");
    std::abort();
  }
  std::unique_lock<std::mutex> call_lock(call_mutex_, std::try_to_lock);
  if (!call_lock.owns_lock()) {
    if (job_caller_.load() == std::this_thread::get_id()) {
      std::fprintf(stderr, "colibri: ThreadPool::parallel_for called from inside one of its own "
                           "tasks (nested parallelism would deadlock); run the inner loop serially\n");
      std::abort();
    }
    call_lock.lock();  // another thread's call is running: wait for it
  }
  job_caller_.store(std::this_thread::get_id());
  if (task_count > 0xFFFFFFFFu) {
    std::fprintf(stderr, "colibri: ThreadPool::parallel_for with %zu tasks (the limit is 2^32 - 1)\n", task_count);
    std::abort();
  }
  if (task_count == 1 || workers_.empty()) {
    // Run here, as thread 0. Publishing a single task would cost a handshake, and the static
    // partition puts it in a worker's range: the worker would pull the task's inputs into its
    // core's caches and the caller would pull the outputs back. A task's exception leaves
    // through this frame (the unique_lock releases the call; `done` clears the caller).
    struct ClearCaller {
      std::atomic<std::thread::id> &caller;
      ~ClearCaller() { caller.store(std::thread::id()); }
    } done{job_caller_};
    for (size_t task = 0; task < task_count; ++task) fn(context, task, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(error_mutex_);
    error_ = nullptr;
  }
  failed_.store(false, std::memory_order_relaxed);
  const uint64_t generation = generation_.load(std::memory_order_relaxed) + 1;  // only callers change it
  job_stamp_.store(0, std::memory_order_relaxed);  // seqlock: fields in flux
  job_fn_.store(fn, std::memory_order_release);     // (release: a reader of these sees the 0)
  job_context_.store(context, std::memory_order_release);
  job_task_count_.store(task_count, std::memory_order_release);
  remaining_.store(task_count, std::memory_order_relaxed);
  for (size_t thread = 0; thread < thread_count_; ++thread)
    cursors_[thread].next.store(((generation & 0xFFFFFFFFu) << 32) | partition_begin(task_count, thread),
                                std::memory_order_relaxed);
  job_stamp_.store(generation, std::memory_order_release);  // fields complete
  generation_.fetch_add(1);  // seq_cst: publishes the job (see the top of this file)

  if (!workers_.empty() && sleepers_.load() != 0) {
    { std::lock_guard<std::mutex> lock(wake_mutex_); }
    wake_.notify_all();
  }
  participate(generation, 0);
  // Wait for tasks other threads have claimed and are still running. Normally they end
  // within microseconds; if not, their thread is probably descheduled (more threads than
  // free cores), and yielding our core lets it finish.
  Clock::time_point yield_after{};
  bool yielding = false;
  for (uint32_t spins = 1; remaining_.load(std::memory_order_acquire) != 0; ++spins) {
    if (yielding) {
      std::this_thread::yield();
      continue;
    }
    if (spins == 64) yield_after = Clock::now() + std::chrono::microseconds(kPauseSpinMicroseconds);
    if (spins > 64 && (spins & 63u) == 0 && Clock::now() >= yield_after) yielding = true;
    COLIBRI_CPU_RELAX();
  }
  job_caller_.store(std::thread::id());
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(error_mutex_);
    error = error_;
    error_ = nullptr;
  }
  call_lock.unlock();
  if (error) std::rethrow_exception(error);
}

// Waits for a generation other than seen_generation and returns it: polls with `pause` for a
// few microseconds, then polls with yields (so an oversubscribed machine still makes
// progress) until spin_microseconds have passed, then blocks.
uint64_t ThreadPool::wait_for_job(uint64_t seen_generation) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point yield_after = start + std::chrono::microseconds(kPauseSpinMicroseconds);
  const Clock::time_point block_after = start + std::chrono::microseconds(spin_microseconds_);
  for (uint32_t spins = 0;; ++spins) {
    const uint64_t generation = generation_.load(std::memory_order_acquire);
    if (generation != seen_generation) return generation;
    if ((spins & 63u) == 63u) {
      const Clock::time_point now = Clock::now();
      if (now >= block_after) break;
      if (now >= yield_after) std::this_thread::yield();
    }
    COLIBRI_CPU_RELAX();
  }
  std::unique_lock<std::mutex> lock(wake_mutex_);
  sleepers_.fetch_add(1);
  uint64_t generation;
  while ((generation = generation_.load()) == seen_generation) wake_.wait(lock);
  sleepers_.fetch_sub(1);
  return generation;
}

void ThreadPool::worker_main(size_t thread) {
  // The generation a worker works on is the one wait_for_job saw, never a re-read: the
  // caller does not wait for workers that claimed nothing, so by a re-read the destructor
  // may already have published its stop generation, and a worker that then waited for the
  // generation after *that* one would sleep forever (a hang in ~ThreadPool, found by the
  // "late worker" test). stop_ is stored before the stop generation is published.
  uint64_t seen_generation = 0;
  for (;;) {
    seen_generation = wait_for_job(seen_generation);
    if (stop_.load()) return;
    participate(seen_generation, thread);
  }
}

}  // namespace colibri::util

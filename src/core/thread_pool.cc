#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace mlaserve {
namespace {

// How long an idle worker waits for the next job before it sleeps on the futex: spinning on
// its core for the first kSpinOnly (a one-thread phase of a forward pass lasts tens of us), then
// yielding the core between looks (other processes on a small machine run meanwhile; with
// nothing else to run, a yield returns at once).
constexpr std::chrono::microseconds kSpinOnly{100};
constexpr std::chrono::microseconds kSpinBeforeSleep{1000};

// A spin-wait hint (x86 pause): the waiting core draws less power and yields the pipeline.
inline void SpinPause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::DefaultThreadCount() {
  if (const char* env = std::getenv("MLASERVE_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

void ThreadPool::RunChunks() {
  const int64_t num_chunks = (count_ + chunk_ - 1) / chunk_;
  for (;;) {
    int64_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (c >= num_chunks) break;
    int64_t begin = c * chunk_;
    (*body_)(begin, std::min(count_, begin + chunk_));
  }
}

void ThreadPool::WaitForWorkers() {
  // Spin first (workers finish within microseconds of us); yield if they were descheduled,
  // so an oversubscribed machine does not burn whole time slices here.
  for (int spin = 0; pending_workers_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin > 2000) std::this_thread::yield();
  }
}

void ThreadPool::WorkerLoop(int thread_index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin, then yield, for kSpinBeforeSleep in all (kernels come back to back during a forward
    // pass, some with work for one thread only), then sleep on the futex. By time, not by count:
    // 20,000 loads let a worker fall asleep while the caller ran a one-thread phase, and waking
    // it delayed the next ParallelFor by a futex wake-up (decode attention over a short context:
    // 0.22-0.27 ms a step -> 0.14-0.17, `bench --prompt-len 32 --decode-tokens 256`, reference
    // shape, docs/benchmarks.md). Spinning the whole 1 ms took the cores from the test suite's
    // other processes (ctest -j 2: 182-187 s -> 309 s; yielding after kSpinOnly: 194 s).
    uint64_t gen = generation_.load(std::memory_order_acquire);
    const auto start = std::chrono::steady_clock::now();
    bool yielding = false;
    for (int spin = 1; gen == seen; ++spin) {
      if (yielding) {
        std::this_thread::yield();
      } else {
        SpinPause();
      }
      gen = generation_.load(std::memory_order_acquire);
      if (yielding || spin % 256 == 0) {
        const auto waited = std::chrono::steady_clock::now() - start;
        if (waited >= kSpinBeforeSleep) break;
        yielding = waited >= kSpinOnly;
      }
    }
    if (gen == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    if (all_body_ != nullptr) {
      (*all_body_)(thread_index);
    } else {
      RunChunks();
    }
    pending_workers_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::ParallelFor(int64_t count, int64_t grain,
                             FunctionRef<void(int64_t, int64_t)> body) {
  if (count <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (num_threads_ == 1 || count <= grain) {
    body(0, count);
    return;
  }
  // Chunks: a few per thread for balance, never below the grain.
  int64_t chunk = std::max(grain, (count + 4 * num_threads_ - 1) / (4 * num_threads_));
  body_ = &body;
  all_body_ = nullptr;
  count_ = count;
  chunk_ = chunk;
  next_chunk_.store(0, std::memory_order_relaxed);
  pending_workers_.store(num_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  RunChunks();
  WaitForWorkers();
  body_ = nullptr;
}

void ThreadPool::RunOnAll(FunctionRef<void(int)> body) {
  if (num_threads_ == 1) {
    body(0);
    return;
  }
  all_body_ = &body;
  pending_workers_.store(num_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  body(0);
  WaitForWorkers();
  all_body_ = nullptr;
}

}  // namespace mlaserve

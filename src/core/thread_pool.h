// A fixed pool of worker threads for data-parallel kernels. Created once at start-up; the calling
// thread takes part in every ParallelFor, so a pool of N threads starts N-1 workers.
// ParallelFor does not allocate and may be called only from one thread at a time (the engine
// thread); it returns when every chunk has run.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "core/function_ref.h"

namespace mlaserve {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs body(begin, end) over [0, count) split into chunks of at least `grain` items.
  // body must be safe to call concurrently on disjoint ranges.
  void ParallelFor(int64_t count, int64_t grain, FunctionRef<void(int64_t, int64_t)> body);

  // Runs body(thread_index) once on each of num_threads() threads.
  void RunOnAll(FunctionRef<void(int)> body);

  // Threads to use when the caller does not say: MLASERVE_THREADS or the machine's cores.
  static int DefaultThreadCount();

 private:
  void WorkerLoop(int thread_index);
  void RunChunks();
  void WaitForWorkers();

  int num_threads_;
  std::vector<std::thread> workers_;

  // The job being run; published by bumping generation_.
  FunctionRef<void(int64_t, int64_t)>* body_ = nullptr;
  FunctionRef<void(int)>* all_body_ = nullptr;
  int64_t count_ = 0;
  int64_t chunk_ = 1;
  std::atomic<int64_t> next_chunk_{0};
  std::atomic<int> pending_workers_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace mlaserve

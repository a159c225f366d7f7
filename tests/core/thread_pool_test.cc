#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace mlaserve {
namespace {

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t count : {0, 1, 7, 1000, 4097}) {
      for (int64_t grain : {1, 16, 5000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
        pool.ParallelFor(count, grain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
        });
        for (auto& h : hits) ASSERT_EQ(h.load(), 1);
      }
    }
  }
}

TEST(ThreadPool, RunOnAllRunsOncePerThread) {
  ThreadPool pool(3);
  for (int round = 0; round < 100; ++round) {
    std::vector<std::atomic<int>> seen(3);
    pool.RunOnAll([&](int t) { seen[size_t(t)]++; });
    for (auto& s : seen) ASSERT_EQ(s.load(), 1);
  }
}

}  // namespace
}  // namespace mlaserve

// Running a benchmark's requests: a pool of workers, one per allowed in-flight request, takes
// requests in order and sleeps until each one's arrival time; the calling thread only reports
// progress.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <system_error>
#include <thread>

#include "cli/bench_serving/bench_serving.h"

namespace mlaserve::cli::bench_serving {
namespace {

// Reports done/total on stderr: a redrawn bar on a terminal, else a line every few seconds.
class Progress {
 public:
  Progress(int total, bool enabled) : total_(total), enabled_(enabled), tty_(::isatty(2) == 1) {}

  void Update(int done, int failed, bool final) {
    if (!enabled_) return;
    const Clock::time_point now = Clock::now();
    if (tty_) {
      if (done == last_done_ && !final) return;  // redraw only on change
      last_done_ = done;
      constexpr int kWidth = 40;
      const int filled = total_ > 0 ? done * kWidth / total_ : kWidth;
      std::fprintf(stderr, "\r[%s%s] %d/%d", std::string(size_t(filled), '#').c_str(),
                   std::string(size_t(kWidth - filled), '.').c_str(), done, total_);
      if (failed > 0) std::fprintf(stderr, " (%d failed)", failed);
      if (final) std::fprintf(stderr, "\n");
    } else if (final || now - last_line_ >= std::chrono::seconds(5)) {
      std::fprintf(stderr, "bench-serving: %d/%d requests done%s\n", done, total_,
                   failed > 0 ? (" (" + std::to_string(failed) + " failed)").c_str() : "");
      last_line_ = now;
    }
    std::fflush(stderr);
  }

 private:
  int total_;
  bool enabled_;
  bool tty_;
  int last_done_ = -1;
  Clock::time_point last_line_ = Clock::now();
};

// Each request in flight holds a socket; the usual soft limit of 1024 descriptors is too few for
// a large --num-prompts at an infinite rate (SGLang's bench_serving raises it the same way).
void RaiseOpenFileLimit(int num_sockets) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t want = std::min<rlim_t>(limit.rlim_max, rlim_t(num_sockets) + 256);
  if (limit.rlim_cur >= want) return;
  limit.rlim_cur = want;
  ::setrlimit(RLIMIT_NOFILE, &limit);
}

}  // namespace

std::vector<RequestResult> RunAll(const HttpClient& client, const std::string& url, const HttpHeaders& headers,
                                  const ServingFlags& f, const std::string& model,
                                  const std::vector<BenchRequest>& requests, double* duration_s) {
  const int num_requests = int(requests.size());
  const std::vector<double> arrival_s = ArrivalTimes(num_requests, f.request_rate, f.seed);
  std::vector<RequestResult> results(static_cast<size_t>(num_requests));
  std::atomic<int> next{0};
  std::mutex mu;
  std::condition_variable finished_cv;
  int num_done = 0, num_failed = 0;  // guarded by mu
  const Clock::time_point t0 = Clock::now();
  auto worker = [&] {
    for (int i = next.fetch_add(1); i < num_requests; i = next.fetch_add(1)) {
      std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(arrival_s[size_t(i)])));
      results[size_t(i)] = RunRequest(client, url, headers, f, model, requests[size_t(i)]);
      {
        std::lock_guard<std::mutex> lock(mu);
        ++num_done;
        if (!results[size_t(i)].success) ++num_failed;
      }
      finished_cv.notify_one();
    }
  };
  const int num_workers = f.max_concurrency > 0 ? std::min(f.max_concurrency, num_requests) : num_requests;
  RaiseOpenFileLimit(num_workers);
  std::vector<std::thread> workers;
  workers.reserve(size_t(num_workers));
  try {
    for (int w = 0; w < num_workers; ++w) workers.emplace_back(worker);
  } catch (const std::system_error& e) {
    // Fewer workers only lower the concurrency reached; every request is still sent.
    std::fprintf(stderr, "bench-serving: started %zu of %d request threads (%s)\n", workers.size(), num_workers,
                 e.what());
  }
  if (workers.empty()) worker();  // not even one thread: send them from here, one by one
  Progress progress(num_requests, !f.disable_progress);
  {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      const bool all_done = num_done == num_requests;
      progress.Update(num_done, num_failed, all_done);
      if (all_done) break;
      finished_cv.wait_for(lock, std::chrono::milliseconds(200));
    }
  }
  for (std::thread& t : workers) t.join();
  *duration_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return results;
}

}  // namespace mlaserve::cli::bench_serving

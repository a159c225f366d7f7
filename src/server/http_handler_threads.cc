// Handler threads with a cap, a probe reserve and a queue; see http_handler_threads.h.
#include "server/http_handler_threads.h"

#include <exception>
#include <utility>

namespace mlaserve {

struct HttpHandlerThreads::ThreadStart {
  HttpHandlerThreads* threads;
  Job job;
};

HttpHandlerThreads::HttpHandlerThreads(HandlerThreadLimits limits, Run run)
    : limits_(limits), run_(std::move(run)) {}

HttpHandlerThreads::~HttpHandlerThreads() { Stop(); }

bool HttpHandlerThreads::Submit(std::unique_ptr<HttpConnection>& connection, bool probe) {
  std::lock_guard<std::mutex> lock(mutex_);
  JoinExitedLocked();
  Job job{.connection = std::move(connection), .probe = probe};
  try {
    const int cap = limits_.max_threads + (probe ? limits_.probe_threads : 0);
    if (busy_ < cap) {
      ++busy_;
      if (StartThreadLocked(job)) return true;
      --busy_;
    }
    // Someone must be running to take it from the queue later.
    if (busy_ > 0) {
      (probe ? queued_probes_ : queued_requests_).push_back(std::move(job));  // strong guarantee
      return true;
    }
  } catch (const std::exception&) {
    // Out of memory: treated like being out of threads.
  }
  connection = std::move(job.connection);
  return false;
}

void HttpHandlerThreads::Stop() {
  std::unique_lock<std::mutex> lock(mutex_);
  // With nothing running the queues are empty too: a queued job always has a runner to come.
  all_idle_.wait(lock, [this] { return busy_ == 0; });
  JoinExitedLocked();
}

bool HttpHandlerThreads::StartThreadLocked(Job& job) {
  // busy_ counts the new thread: after this, every thread not yet joined has room in exited_.
  exited_.reserve(exited_.size() + static_cast<size_t>(busy_));
  auto start = std::make_unique<ThreadStart>(ThreadStart{.threads = this, .job = std::move(job)});
  pthread_t thread;
  if (pthread_create(&thread, nullptr, &HttpHandlerThreads::ThreadMain, start.get()) != 0) {
    job = std::move(start->job);
    return false;
  }
  start.release();  // the thread owns it now
  return true;
}

void* HttpHandlerThreads::ThreadMain(void* raw_start) {
  std::unique_ptr<ThreadStart> start(static_cast<ThreadStart*>(raw_start));
  HttpHandlerThreads* threads = start->threads;
  Job job = std::move(start->job);
  start.reset();
  threads->Work(std::move(job));
  return nullptr;  // touches nothing of `threads` after Work: Stop() may be destroying it
}

void HttpHandlerThreads::Work(Job job) {
  for (;;) {
    run_(std::move(job.connection));
    std::lock_guard<std::mutex> lock(mutex_);
    --busy_;
    if (TakeRunnableLocked(job)) {
      ++busy_;
      continue;
    }
    exited_.push_back(pthread_self());  // within capacity: never allocates
    if (busy_ == 0) all_idle_.notify_all();
    return;
  }
}

bool HttpHandlerThreads::TakeRunnableLocked(Job& job) {
  if (!queued_probes_.empty() && busy_ < limits_.max_threads + limits_.probe_threads) {
    job = std::move(queued_probes_.front());
    queued_probes_.pop_front();
    return true;
  }
  if (!queued_requests_.empty() && busy_ < limits_.max_threads) {
    job = std::move(queued_requests_.front());
    queued_requests_.pop_front();
    return true;
  }
  return false;
}

void HttpHandlerThreads::JoinExitedLocked() {
  // The exited threads need nothing more from us (not even the lock): joining waits at most
  // for their last instructions.
  for (pthread_t thread : exited_) pthread_join(thread, nullptr);
  exited_.clear();
}

}  // namespace mlaserve

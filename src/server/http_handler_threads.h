// The threads that run the HTTP handler: one per request being answered, up to a cap, plus a
// small reserve that only probe requests (/health, /metrics) may use, so a liveness probe is
// answered even while every ordinary thread waits on a long generation. Requests beyond the cap
// wait in a FIFO queue (probes first) rather than being refused.
//
// A thread is started when a request can run and none is free; when its request is done it
// takes the next queued one it may run, or exits. So idle connections cost no thread, and a
// burst's threads go away once the burst is over. Stacks keep glibc's default size: only the
// pages a handler touches are resident, and handlers copy client JSON recursively (nlohmann),
// so a smaller stack would let a deeply nested body overflow it sooner.
#pragma once

#include <pthread.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "server/http_connection.h"

namespace mlaserve {

struct HandlerThreadLimits {
  int max_threads = 1;    // ordinary requests answered at once
  int probe_threads = 0;  // extra threads that only probe requests may use
};

class HttpHandlerThreads {
 public:
  // Called on a handler thread with a connection whose parser holds a complete request; it owns
  // the connection from then on (it answers and hands it back to the event loop).
  using Run = std::function<void(std::unique_ptr<HttpConnection>)>;

  HttpHandlerThreads(HandlerThreadLimits limits, Run run);
  ~HttpHandlerThreads();  // Stop()
  HttpHandlerThreads(const HttpHandlerThreads&) = delete;
  HttpHandlerThreads& operator=(const HttpHandlerThreads&) = delete;

  // Runs run(connection) on a handler thread: now when a thread may start for it, else once a
  // running request finishes (queued probes before queued ordinary requests, each in arrival
  // order). Moves from `connection` and returns true, except when the request could never run
  // (no thread can be started and none is running to take it later): then false, `connection`
  // untouched, and the caller answers 503. Thread-safe; not after Stop().
  [[nodiscard]] bool Submit(std::unique_ptr<HttpConnection>& connection, bool probe);

  // Waits until every submitted request has run, then joins every thread. Idempotent.
  void Stop();

 private:
  struct Job {
    std::unique_ptr<HttpConnection> connection;
    bool probe = false;
  };
  struct ThreadStart;  // what a new thread is handed; defined in the .cc

  static void* ThreadMain(void* start);
  void Work(Job job);
  // Starts a thread for `job` (busy_ already counts it). false, `job` untouched, when the
  // system refuses a thread. Throws std::bad_alloc.
  bool StartThreadLocked(Job& job);
  // Moves the next queued job that may run now (with busy_ threads busy) into `job`.
  bool TakeRunnableLocked(Job& job);
  void JoinExitedLocked();

  const HandlerThreadLimits limits_;
  const Run run_;

  std::mutex mutex_;
  std::condition_variable all_idle_;  // busy_ dropped to 0
  std::deque<Job> queued_probes_;
  std::deque<Job> queued_requests_;
  // Threads running a job. Each runs one at a time; one that finds nothing to run exits, so
  // every thread alive is busy or in exited_.
  int busy_ = 0;
  // Threads that have exited (or are about to), to be joined. Its capacity always covers every
  // thread not yet joined, so a thread adds itself without allocating.
  std::vector<pthread_t> exited_;
};

}  // namespace mlaserve

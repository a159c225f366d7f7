// The requests in flight, for the dashboard's table: per request its id, when it arrived, its
// prompt tokens, the tokens generated so far and whether its first token has come. Never the
// prompt's or the output's text. The API layer registers a request when it submits it and
// removes it when it finishes; the counts are atomics the handler thread bumps as outputs
// arrive (no lock per token). Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace mlaserve {

class RequestBoard {
 public:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    std::string rid;
    Clock::time_point arrived;
    std::atomic<int> prompt_tokens{0};      // known with the first output
    std::atomic<int> completion_tokens{0};  // so far
  };
  struct Row {
    std::string rid;
    double age_s = 0;
    int prompt_tokens = 0;
    int completion_tokens = 0;
    const char* state = "";  // "waiting" (queued or in prefill: no token yet), "decoding"
  };

  // The entry stays valid for the holder after Remove (shared ownership).
  std::shared_ptr<Entry> Add(const std::string& rid, Clock::time_point arrived);
  void Remove(const std::shared_ptr<Entry>& entry);
  // The oldest `limit` requests first, and how many there are in all.
  std::vector<Row> Rows(Clock::time_point now, size_t limit, size_t* total) const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<const Entry*, std::shared_ptr<Entry>> entries_;
};

}  // namespace mlaserve

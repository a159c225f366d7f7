// Hands one request's outputs from the engine thread (which must never block) to the handler
// thread that waits for them. Shared by the engine's callback and the handler: whichever lets
// go last frees it, so a handler whose client left can return while the engine still finishes
// the aborted request.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

#include "engine/engine_types.h"

namespace mlaserve {

class OutputChannel {
 public:
  void Push(RequestOutput&& out) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(out));
    }
    cv_.notify_one();
  }
  // The next output, or nullopt after `timeout` (so the caller can check its client).
  std::optional<RequestOutput> Pop(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !queue_.empty(); })) return std::nullopt;
    RequestOutput out = std::move(queue_.front());
    queue_.pop_front();
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
};

}  // namespace mlaserve

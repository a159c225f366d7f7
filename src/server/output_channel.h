// Hands the outputs of one handler's requests (one, or several for n > 1 and batches) from the engine thread (which must never block) to the handler
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
  struct Item {
    size_t index;  // which of the handler's requests this output belongs to
    RequestOutput output;
  };

  void Push(size_t index, RequestOutput&& out) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back({index, std::move(out)});
    }
    cv_.notify_one();
  }
  // The next output, or nullopt after `timeout` (so the caller can check its client).
  std::optional<Item> Pop(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !queue_.empty(); })) return std::nullopt;
    Item item = std::move(queue_.front());
    queue_.pop_front();
    return item;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
};

}  // namespace mlaserve

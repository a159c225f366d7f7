// Hands the outputs of one handler's requests (one, or several for n > 1 and batches) from the
// engine thread (which must never block) to the handler thread that waits for them. Shared by the
// engine's callback and the handler: whichever lets go last frees it, so a handler whose client
// left can return while the engine still finishes the aborted request.
//
// Allocation-free in steady state: the queue is a ring of Items whose RequestOutputs are reused.
// Push copies the engine's view into the next free slot (assigning into its strings and vectors),
// and Pop swaps the oldest slot with the caller's Item, so the caller's previous buffers become
// the slot's storage for a later Push. Once the ring and the buffers have grown to what the
// generation needs, no chunk allocates (top-logprob lists aside).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/engine_types.h"

namespace mlaserve {

class OutputChannel {
 public:
  struct Item {
    size_t index = 0;  // which of the handler's requests this output belongs to
    RequestOutput output;
  };

  // On the engine thread: copies `out` (valid only during this call) into the ring.
  void Push(size_t index, const OutputView& out) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (count_ == ring_.size()) Grow();
      Item& slot = ring_[(head_ + count_) % ring_.size()];
      slot.index = index;
      slot.output.Assign(out);
      ++count_;
    }
    cv_.notify_one();
  }
  // The next output, swapped into `item` (whose old contents the channel keeps as spare storage);
  // false after `timeout` with nothing to take (so the caller can check its client).
  bool Pop(Item& item, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return count_ > 0; })) return false;
    std::swap(item, ring_[head_]);
    head_ = (head_ + 1) % ring_.size();
    --count_;
    return true;
  }
  size_t capacity() const {  // slots in the ring (for tests: it grows only while outputs back up)
    std::lock_guard<std::mutex> lock(mu_);
    return ring_.size();
  }

 private:
  // Doubles the ring, the queued items first (in order) and the spare slots after them.
  void Grow() {
    std::vector<Item> bigger(std::max<size_t>(4, ring_.size() * 2));
    for (size_t i = 0; i < ring_.size(); ++i) bigger[i] = std::move(ring_[(head_ + i) % ring_.size()]);
    ring_ = std::move(bigger);
    head_ = 0;
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Item> ring_;  // [head_, head_ + count_) mod size: queued; the rest: spare storage
  size_t head_ = 0;
  size_t count_ = 0;
};

}  // namespace mlaserve

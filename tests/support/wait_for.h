// Waiting on a condition in tests, never a guessed delay: polls `ready` every 5 ms until it holds
// or `limit` passes.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace mlaserve::testing {

// True once `ready` holds; false when `limit` passed first.
inline bool WaitFor(const std::function<bool()>& ready, std::chrono::seconds limit = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!ready()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace mlaserve::testing

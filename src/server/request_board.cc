#include "server/request_board.h"

#include <algorithm>

namespace mlaserve {

std::shared_ptr<RequestBoard::Entry> RequestBoard::Add(const std::string& rid, Clock::time_point arrived) {
  auto entry = std::make_shared<Entry>();
  entry->rid = rid;
  entry->arrived = arrived;
  std::lock_guard<std::mutex> lock(mu_);
  entries_.emplace(entry.get(), entry);
  return entry;
}

void RequestBoard::Remove(const std::shared_ptr<Entry>& entry) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.erase(entry.get());
}

std::vector<RequestBoard::Row> RequestBoard::Rows(Clock::time_point now, size_t limit, size_t* total) const {
  std::vector<Row> rows;
  {
    std::lock_guard<std::mutex> lock(mu_);
    *total = entries_.size();
    rows.reserve(entries_.size());
    for (const auto& [key, e] : entries_) {
      const int completion = e->completion_tokens.load(std::memory_order_relaxed);
      rows.push_back(Row{.rid = e->rid,
                         .age_s = std::chrono::duration<double>(now - e->arrived).count(),
                         .prompt_tokens = e->prompt_tokens.load(std::memory_order_relaxed),
                         .completion_tokens = completion,
                         .state = completion > 0 ? "decoding" : "waiting"});
    }
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.age_s > b.age_s || (a.age_s == b.age_s && a.rid < b.rid); });
  if (rows.size() > limit) rows.resize(limit);
  return rows;
}

}  // namespace mlaserve

#include "batch/work_queue.h"

namespace mlaserve::batch {

Status WorkQueue::WriteFinished() {
  for (int64_t cursor = -1;;) {
    auto rows = db_.LoadOpen(cursor, kPageRows);
    if (!rows.ok()) return rows.status();
    if (rows->empty()) return Status::Ok();
    for (RecordProgress& p : *rows) {
      if (p.state == RecordState::kDone) {
        writer_.Expect(p.seq);
        MLA_RETURN_IF_ERROR(writer_.Offer(p.seq, std::move(p.output_line)));
      } else if (p.state != RecordState::kFailed && writer_.ordered()) {
        return Status::Ok();  // a record still to generate: later lines wait for it
      }
    }
    cursor = rows->back().seq;
  }
}

Result<std::optional<RecordProgress>> WorkQueue::Next() {
  std::lock_guard<std::mutex> lock(mu_);
  for (;;) {
    if (page_.empty()) {
      if (exhausted_) return std::optional<RecordProgress>();
      auto rows = db_.LoadOpen(cursor_, kPageRows);
      if (!rows.ok()) return rows.status();
      if (rows->empty()) {
        exhausted_ = true;
        continue;
      }
      cursor_ = rows->back().seq;
      for (RecordProgress& p : *rows) page_.push_back(std::move(p));
    }
    RecordProgress p = std::move(page_.front());
    page_.pop_front();
    if (p.state == RecordState::kFailed) continue;  // kept failed (--no-retry-failed); nothing to write
    writer_.Expect(p.seq);
    if (p.state == RecordState::kDone) {
      MLA_RETURN_IF_ERROR(writer_.Offer(p.seq, std::move(p.output_line)));
      continue;
    }
    return std::optional<RecordProgress>(std::move(p));
  }
}

}  // namespace mlaserve::batch

// What the batch runner's workers take next: the DB's rows not yet written, in input order, read
// a page at a time (memory is one page plus the records in flight, whatever the job's size).
// Finished rows met on the way are handed to the writer (done: their line; failed: nothing), so
// the ordered output keeps input order across runs.
// Thread-safety: Next may be called from any thread.
#pragma once

#include <deque>
#include <mutex>
#include <optional>

#include "batch/output_writer.h"
#include "batch/progress_db.h"

namespace mlaserve::batch {

class WorkQueue {
 public:
  // db and writer must outlive the queue.
  WorkQueue(ProgressDb& db, OutputWriter& writer) : db_(db), writer_(writer) {}

  // Before any server is contacted: writes the lines of done rows the output lacks, as far as
  // the order allows (ordered: up to the first record still to generate). Leaves the queue at
  // its start.
  Status WriteFinished();

  // The next record to generate (the writer expects it), or nullopt when none is left.
  Result<std::optional<RecordProgress>> Next();

 private:
  static constexpr int kPageRows = 256;

  std::mutex mu_;
  ProgressDb& db_;
  OutputWriter& writer_;
  int64_t cursor_ = -1;  // the last seq read from the DB
  std::deque<RecordProgress> page_;
  bool exhausted_ = false;
};

}  // namespace mlaserve::batch

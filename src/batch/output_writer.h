// The output JSONL file, written only from records the progress DB holds as done. It is the
// store of the output lines: the DB keeps only each written line's offset, length and hash
// (reconcile.h checks the file against them at start-up). Offer() appends lines:
//   ordered   (default) a record's line only once every record Expect()ed before it is written
//             or skipped, so the file is always a prefix of the input order;
//   unordered as soon as each record is done.
// Each append is write() + fdatasync(), then on_written tells the DB where the line is; a kill
// in between leaves a line past the DB's mark, which reconciliation recognises.
// The file is flock()ed while open: a second batch run on the same output is refused.
// Thread-safety: Expect and Offer may be called from any thread.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "batch/progress_db.h"
#include "core/status.h"

namespace mlaserve::batch {

class OutputWriter {
 public:
  using OnWritten = std::function<Status(const WrittenLine&)>;

  static Result<std::unique_ptr<OutputWriter>> Open(const std::string& path, bool ordered);
  ~OutputWriter();
  OutputWriter(const OutputWriter&) = delete;
  OutputWriter& operator=(const OutputWriter&) = delete;

  const std::string& path() const { return path_; }
  bool ordered() const { return ordered_; }
  int64_t size() const;
  // Cuts the file to `size` bytes (reconciliation: a partial last line, lost lines).
  Status Truncate(int64_t size);
  // Called after every append, under the writer's lock (so in file order).
  void set_on_written(OnWritten on_written) { on_written_ = std::move(on_written); }

  // Ordered mode: `seq` is the next record whose line (or failure) will be offered; calls come
  // in input order. Unordered mode: ignored.
  void Expect(int64_t seq);
  // Record `seq` is finished: `line` is its output line, or nullopt when it has none (failed).
  // Writes whatever may now be written.
  Status Offer(int64_t seq, std::optional<std::string> line);

  int64_t lines_written() const;  // by this writer

 private:
  OutputWriter() = default;
  Status Append(int64_t seq, const std::string& line);

  mutable std::mutex mu_;
  std::string path_;
  int fd_ = -1;
  bool ordered_ = true;
  int64_t end_ = 0;
  OnWritten on_written_;
  // Ordered mode: the records expected and not yet written, in input order, and what the
  // finished ones among them contribute.
  std::deque<int64_t> expected_;
  std::map<int64_t, std::optional<std::string>> finished_;
  int64_t lines_written_ = 0;
};

}  // namespace mlaserve::batch

// The output JSONL file, written only from records the progress DB holds as done.
// Open() reconciles what a killed run left: it truncates a partial last line and reads which
// ids the file already holds; those are never written again. Offer() then appends lines:
//   ordered   (default) line i only once lines 0..i-1 are written or skipped, so the file is
//             always a prefix of the input order;
//   unordered as soon as each record is done.
// Each append is write() + fdatasync(), so a line is whole in the file or absent.
// The file is flock()ed while open: a second batch run on the same output is refused.
// Thread-safety: Offer may be called from any thread.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace mlaserve::batch {

class OutputWriter {
 public:
  // ids: every valid record's id in input order.
  static Result<std::unique_ptr<OutputWriter>> Open(const std::string& path, bool ordered,
                                                    const std::vector<std::string>& ids);
  ~OutputWriter();
  OutputWriter(const OutputWriter&) = delete;
  OutputWriter& operator=(const OutputWriter&) = delete;

  // The lines the file held at Open, by id (the reconciliation's view).
  const std::unordered_map<std::string, std::string>& existing() const { return existing_; }
  // Bytes cut from a partial last line at Open (0 when the file ended cleanly).
  size_t truncated_bytes() const { return truncated_bytes_; }

  // Record `index` is finished: `line` is its output line, or nullopt when it has none (failed).
  // Writes whatever may now be written. Records already in the file are skipped.
  Status Offer(size_t index, std::optional<std::string> line);

  size_t num_in_file() const;  // lines in the file now

 private:
  OutputWriter() = default;
  Status Append(const std::string& line);

  mutable std::mutex mu_;
  int fd_ = -1;
  bool ordered_ = true;
  std::vector<std::string> ids_;
  std::unordered_map<std::string, std::string> existing_;
  size_t truncated_bytes_ = 0;
  // Ordered mode: what each finished record contributes, until the prefix before it is written.
  std::vector<std::optional<std::optional<std::string>>> pending_;
  size_t next_ = 0;  // ordered: the first record not yet written or skipped
  size_t lines_ = 0;
};

}  // namespace mlaserve::batch

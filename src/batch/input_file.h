// The batch input read as a stream, never held whole: a first pass walks the lines once (in
// 1 MiB reads) to index them (id, byte offset, length, hash of each valid record's line), and a
// worker reads its record's line back by offset when it takes the record. Memory is one read
// buffer plus the records in flight, whatever the input's size.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "batch/progress_db.h"
#include "batch/records.h"
#include "core/function_ref.h"
#include "core/status.h"

namespace mlaserve::batch {

// Calls on_line for every line (blank ones included; without the '\n') with its 1-based number
// and byte offset; stops at the first error it returns.
Status ForEachLine(const std::string& path,
                   FunctionRef<Status(int line_no, int64_t offset, std::string_view line)> on_line);

// The file's Hash64 (read in 1 MiB blocks): binds a progress DB to its input. One fast pass; a
// resumed run's only O(input) work.
Result<uint64_t> HashFile(const std::string& path);

// Counts what a record asks for, as the run's summary line reports it.
void CountRecord(const Record& record, InputSummary& summary);

// First pass for a run: every valid record gets a pending row (in batches), malformed lines and
// later duplicates become problems. Returns the summary, also stored in the DB.
Result<InputSummary> IndexInput(const std::string& path, ProgressDb& db);

// First pass for --dry-run: the same checks without a DB; problems are passed to on_problem.
// Duplicates are found with a set of the ids seen (the only per-record memory).
Result<InputSummary> CheckInput(const std::string& path, FunctionRef<void(const InputProblem&)> on_problem);

// The input opened for workers: reads a record's line back by offset.
class InputFile {
 public:
  static Result<std::unique_ptr<InputFile>> Open(const std::string& path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // The record of row `p`; an error if the line's bytes are not what the index saw.
  Result<Record> Read(const RecordProgress& p) const;

 private:
  InputFile() = default;
  std::string path_;
  int fd_ = -1;
};

}  // namespace mlaserve::batch

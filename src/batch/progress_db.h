// The batch job's source of truth: a SQLite database in WAL mode beside the output
// (OUT.jsonl.progress.db). It holds only what resumption needs, never the input or the output:
//   job       the input's content hash, the settings, the input's summary, where the output ends
//   records   one row per valid input record, in input order (seq): where its input line is
//             (byte offset, length, hash), its state, checkpoints while running, the output line
//             only between the done commit and the append, then the written line's offset, length
//             and hash (the output file is the line store)
//   problems  malformed input lines and later duplicate ids, for the errors file
//   runs      per finished run figures
//   hidden_dumps  with --dump-hidden-states: each done record's hidden-state file (name, rows,
//             size, hash), inserted by the done commit itself (batch/hidden_dump.h). A DB made
//             before this table gains it (empty) when opened.
// States: pending -> running (answers and the partial answer checkpointed, with per-segment
// provenance) -> done (the output line, one transaction) -> written (line in the output) | failed.
// Rows not yet written are reached through a partial index, so start-up on an existing job costs
// in proportion to the records not yet done. See docs/batch.md.
// Thread-safety: every method may be called from any thread; calls are serialized inside.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "batch/output_record.h"
#include "batch/records.h"
#include "core/status.h"

struct sqlite3;

namespace mlaserve::batch {

enum class RecordState { kPending, kRunning, kDone, kWritten, kFailed };
const char* RecordStateName(RecordState state);

// One valid input record as the first pass over the input found it.
struct IndexedRecord {
  std::string id;
  int line_no = 0;
  int64_t offset = 0;  // byte offset of the line in the input
  int64_t length = 0;  // bytes, without the '\n'
  uint64_t hash = 0;   // Hash64 of the line: checked when a worker reads it back
};

struct RecordProgress {
  int64_t seq = 0;                    // 0-based position among the input's valid records
  std::string id;
  int line_no = 0;
  int64_t in_offset = 0, in_length = 0;
  uint64_t in_hash = 0;
  RecordState state = RecordState::kPending;
  std::vector<Answer> turns;              // finished turns (text left empty), with their segments
  std::vector<TokenId> partial;           // the current turn's tokens so far
  std::vector<Segment> partial_segments;  // who generated `partial`, in order
  int continued = 0;                  // interruptions resumed from the checkpoint
  int restarted = 0;                  // interruptions that started the turn over
  std::string output_line;            // done: the line for the output file
  std::string error;                  // failed: why
};

// Where a record's line sits in the output file.
struct WrittenLine {
  int64_t seq = 0;
  int64_t offset = 0;
  int64_t length = 0;  // without the '\n'
  uint64_t hash = 0;   // Hash64 of the line
};

// The end of the verified part of the output: every byte before `end` is a line the DB knows.
struct OutputMark {
  int64_t end = 0;
  int64_t last_offset = 0;  // the last known line (length end - last_offset - 1)
  uint64_t last_hash = 0;
};

struct StateCounts {
  int64_t pending = 0, running = 0, done = 0, written = 0, failed = 0;
  int64_t total() const { return pending + running + done + written + failed; }
};

// What the first pass over the input found (stored, so a resumed run need not read it again).
struct InputSummary {
  int num_lines = 0;    // non-blank lines
  int64_t num_records = 0;
  int shapes[3] = {0, 0, 0};  // chat, sharegpt, prompt
  int64_t answers = 0;
  int64_t num_problems = 0;
};

// Per-run figures, one row per finished run (a killed run leaves none).
struct RunFigures {
  int records_done = 0;     // done in this run
  int records_failed = 0;
  int interruptions = 0;    // streams broken by a server going away
  int continued = 0;        // of those, resumed from the partial answer
  int restarted = 0;        // of those, started over (no /generate, or nothing checkpointed)
  double time_lost_s = 0;   // wall time during which no server answered /health (outages)
  int64_t output_tokens = 0;
  double duration_s = 0;
};

// A record's hidden-state file (batch/hidden_dump.h), stored by its done commit.
struct HiddenDumpFile {
  std::string file;   // name inside the dump directory
  int64_t rows = 0;   // hidden-state rows (the sequence's tokens - 1)
  int64_t bytes = 0;  // file size
  uint64_t hash = 0;  // Hash64 of the file's bytes
};

struct HiddenDumpRow {
  int64_t seq = 0;
  std::string id;
  RecordState state = RecordState::kPending;  // the record's
  HiddenDumpFile file;
};

class ProgressDb {
 public:
  static Result<std::unique_ptr<ProgressDb>> Open(const std::string& path);
  ~ProgressDb();
  ProgressDb(const ProgressDb&) = delete;
  ProgressDb& operator=(const ProgressDb&) = delete;

  // Whether Open created the file (no earlier run's state).
  bool created() const { return created_; }

  // Binds the DB to one job. The first call stores the values; a later call with another input
  // or other settings fails, saying which differs (settings_text is shown to the user).
  Status BindJob(const std::string& input_hash, const std::string& settings_hash, const std::string& settings_text);

  // The input index: absent until a first pass finished (a pass killed midway starts over).
  Result<std::optional<InputSummary>> Summary();
  Status BeginIndex();  // forgets a partial index
  // Adds rows (pending, seq continuing from the last) in one transaction; returns the records
  // whose id an earlier row already has, as duplicate problems (the first wins).
  Result<std::vector<InputProblem>> AddRecords(std::span<const IndexedRecord> records);
  Status AddProblems(std::span<const InputProblem> problems);
  Status FinishIndex(const InputSummary& summary);
  Result<std::vector<InputProblem>> Problems();

  // Rows not yet written, in input order, seq > after_seq, at most `limit`.
  Result<std::vector<RecordProgress>> LoadOpen(int64_t after_seq, int limit);
  // The row of `id`, if any (state and seq only).
  Result<std::optional<RecordProgress>> Find(const std::string& id);
  Result<StateCounts> Counts();
  Result<std::vector<RecordProgress>> Failed();  // id, line_no, error

  // Checkpoint: state running with these finished turns and this partial answer.
  Status SaveProgress(const RecordProgress& p);
  // Commit point: state done with the output line, and the record's hidden-state file when
  // given, in one transaction.
  Status MarkDone(const RecordProgress& p, const HiddenDumpFile* dump = nullptr);
  // Every stored hidden-state file, in input order, with its record's id and state.
  Result<std::vector<HiddenDumpRow>> HiddenDumps();
  Status ForgetHiddenDump(int64_t seq);
  Status MarkFailed(const RecordProgress& p);
  // Sets every failed row back to pending (its checkpointed turns, partial answer and segments
  // kept) for a rerun that retries them; returns how many there were.
  Result<int> RetryFailed();
  // The lines are in the output file: state written, the line dropped, the output mark moved to
  // the end of the last one. One transaction.
  Status MarkWritten(std::span<const WrittenLine> lines);
  Result<OutputMark> Mark();
  // The output file lost what the DB had as written past `end` (a line boundary): those rows
  // go back to pending (their lines are not kept here, so they are generated again). Returns
  // how many.
  Result<int64_t> ForgetWrittenFrom(int64_t end, const OutputMark& mark);
  // The end of the last written line at or before `size` (0 if none): where to cut the output.
  Result<OutputMark> LastWrittenWithin(int64_t size);

  Status RecordRun(const RunFigures& figures);
  Result<std::vector<RunFigures>> Runs();

 private:
  explicit ProgressDb(sqlite3* db) : db_(db) {}
  Status Exec(const std::string& sql);
  Status SetJobKey(const std::string& key, const std::string& value);  // caller holds mu_
  Result<std::string> JobKey(const std::string& key);                   // caller holds mu_
  Status SaveRow(const RecordProgress& p, RecordState state);
  Status SaveRowLocked(const RecordProgress& p, RecordState state);  // caller holds mu_

  std::mutex mu_;
  sqlite3* db_;
  bool created_ = false;
  int64_t next_seq_ = 0;  // while indexing
};

}  // namespace mlaserve::batch

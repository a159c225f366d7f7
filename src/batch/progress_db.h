// The batch job's source of truth: a SQLite database in WAL mode beside the output
// (OUT.jsonl.progress.db). One row per input record:
//   pending -> running (partial answer tokens checkpointed as they stream) -> done | failed
// A record becomes done in one transaction that also stores its output line; the output file is
// written from done rows only (output_writer.h), so a kill at any moment leaves either a done
// row whose line may still be missing from the output (written on the next start) or a
// running row whose checkpoint is continued on the next start. See docs/batch.md.
// Thread-safety: every method may be called from any thread; calls are serialized inside.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "batch/output_record.h"
#include "batch/records.h"
#include "core/status.h"

struct sqlite3;

namespace mlaserve::batch {

enum class RecordState { kPending, kRunning, kDone, kFailed };
const char* RecordStateName(RecordState state);

struct RecordProgress {
  std::string id;
  int line_no = 0;
  RecordState state = RecordState::kPending;
  std::vector<Answer> turns;          // finished turns (text left empty: decode ids when needed)
  std::vector<TokenId> partial;       // the current turn's tokens so far
  std::vector<std::string> kv_formats;  // the KV formats the server(s) generated this record with
  int continued = 0;                  // interruptions resumed from the checkpoint
  int restarted = 0;                  // interruptions that started the turn over
  std::string output_line;            // done: the line for the output file
  std::string error;                  // failed: why
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

class ProgressDb {
 public:
  static Result<std::unique_ptr<ProgressDb>> Open(const std::string& path);
  ~ProgressDb();
  ProgressDb(const ProgressDb&) = delete;
  ProgressDb& operator=(const ProgressDb&) = delete;

  // Binds the DB to one job. The first call stores the values; a later call with another input
  // or other settings fails, saying which differs (settings_text is shown to the user).
  Status BindJob(const std::string& input_hash, const std::string& settings_hash, const std::string& settings_text);

  // Adds rows for records not in the DB yet (pending), in one transaction.
  Status AddRecords(const std::vector<Record>& records);
  // Every row, in input order.
  Result<std::vector<RecordProgress>> LoadAll();

  // Checkpoint: state running with these finished turns and this partial answer.
  Status SaveProgress(const RecordProgress& p);
  // Commit point: state done with the output line, in one transaction.
  Status MarkDone(const RecordProgress& p);
  Status MarkFailed(const std::string& id, const std::string& error);
  // Sets every failed row back to pending (its checkpointed tokens kept) for a rerun that
  // retries them; returns how many there were.
  Result<int> RetryFailed();

  Status RecordRun(const RunFigures& figures);
  Result<std::vector<RunFigures>> Runs();

 private:
  explicit ProgressDb(sqlite3* db) : db_(db) {}
  Status Exec(const std::string& sql);
  Status SaveRow(const RecordProgress& p, RecordState state);

  std::mutex mu_;
  sqlite3* db_;
};

}  // namespace mlaserve::batch

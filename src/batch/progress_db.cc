#include "batch/progress_db.h"

#include <sqlite3.h>

#include <nlohmann/json.hpp>

namespace mlaserve::batch {
namespace {

using nlohmann::json;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS job(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records(
  id TEXT PRIMARY KEY,
  line_no INTEGER NOT NULL,
  state TEXT NOT NULL DEFAULT 'pending',
  turns TEXT NOT NULL DEFAULT '[]',
  partial TEXT NOT NULL DEFAULT '[]',
  kv_formats TEXT NOT NULL DEFAULT '[]',
  continued INTEGER NOT NULL DEFAULT 0,
  restarted INTEGER NOT NULL DEFAULT 0,
  output TEXT,
  error TEXT);
CREATE TABLE IF NOT EXISTS runs(
  run INTEGER PRIMARY KEY AUTOINCREMENT,
  records_done INTEGER, records_failed INTEGER, interruptions INTEGER, continued INTEGER,
  restarted INTEGER, time_lost_s REAL, output_tokens INTEGER, duration_s REAL);
)sql";

// A prepared statement, finalized on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) { rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr); }
  ~Stmt() { sqlite3_finalize(stmt_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  bool ok() const { return rc_ == SQLITE_OK; }
  void Bind(int i, const std::string& s) { sqlite3_bind_text(stmt_, i, s.data(), int(s.size()), SQLITE_TRANSIENT); }
  void Bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void Bind(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
  int Step() { return sqlite3_step(stmt_); }
  std::string Text(int col) const {
    const unsigned char* t = sqlite3_column_text(stmt_, col);
    return t ? std::string(reinterpret_cast<const char*>(t), size_t(sqlite3_column_bytes(stmt_, col))) : "";
  }
  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  double Real(int col) const { return sqlite3_column_double(stmt_, col); }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

Status SqlError(sqlite3* db, const std::string& what) {
  return Status::Error("progress DB: " + what + ": " + sqlite3_errmsg(db));
}

std::string TurnsJson(const std::vector<Answer>& turns) {
  json out = json::array();
  for (const Answer& a : turns) {
    out.push_back({{"ids", a.ids}, {"finish_reason", a.finish_reason}, {"prompt_tokens", a.prompt_tokens}});
  }
  return out.dump();
}

std::vector<Answer> ParseTurns(const std::string& text) {
  std::vector<Answer> turns;
  const json j = json::parse(text, nullptr, false);
  if (!j.is_array()) return turns;
  for (const json& t : j) {
    Answer a;
    a.ids = t.value("ids", std::vector<TokenId>{});
    a.finish_reason = t.value("finish_reason", "");
    a.prompt_tokens = t.value("prompt_tokens", 0);
    turns.push_back(std::move(a));
  }
  return turns;
}

template <typename T>
std::vector<T> ParseList(const std::string& text) {
  const json j = json::parse(text, nullptr, false);
  return j.is_array() ? j.get<std::vector<T>>() : std::vector<T>{};
}

RecordState StateFromName(const std::string& name) {
  if (name == "running") return RecordState::kRunning;
  if (name == "done") return RecordState::kDone;
  if (name == "failed") return RecordState::kFailed;
  return RecordState::kPending;
}

}  // namespace

const char* RecordStateName(RecordState state) {
  switch (state) {
    case RecordState::kPending: return "pending";
    case RecordState::kRunning: return "running";
    case RecordState::kDone: return "done";
    case RecordState::kFailed: return "failed";
  }
  return "pending";
}

Result<std::unique_ptr<ProgressDb>> ProgressDb::Open(const std::string& path) {
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                                 nullptr);
  std::unique_ptr<ProgressDb> db(new ProgressDb(raw));
  if (rc != SQLITE_OK) return SqlError(raw, "cannot open " + path);
  sqlite3_busy_timeout(raw, 5000);
  // WAL: a commit is one append to the log, readers never block the writer, and a process killed
  // mid-write leaves the last committed state. synchronous=NORMAL keeps every commit across a
  // process kill; only an OS crash may drop the last few (reconciliation adopts lines the
  // output already holds, so that loses no record either).
  MLA_RETURN_IF_ERROR(db->Exec("PRAGMA journal_mode=WAL"));
  MLA_RETURN_IF_ERROR(db->Exec("PRAGMA synchronous=NORMAL"));
  MLA_RETURN_IF_ERROR(db->Exec(kSchema));
  return db;
}

ProgressDb::~ProgressDb() { sqlite3_close(db_); }

Status ProgressDb::Exec(const std::string& sql) {
  char* message = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
    std::string text = message ? message : "error";
    sqlite3_free(message);
    return Status::Error("progress DB: " + text);
  }
  return Status::Ok();
}

Status ProgressDb::BindJob(const std::string& input_hash, const std::string& settings_hash,
                           const std::string& settings_text) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string stored_input, stored_settings, stored_text;
  {
    Stmt q(db_, "SELECT key, value FROM job");
    if (!q.ok()) return SqlError(db_, "read job");
    while (q.Step() == SQLITE_ROW) {
      const std::string key = q.Text(0);
      if (key == "input_hash") stored_input = q.Text(1);
      if (key == "settings_hash") stored_settings = q.Text(1);
      if (key == "settings") stored_text = q.Text(1);
    }
  }
  if (stored_input.empty()) {
    MLA_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    for (const auto& [key, value] : {std::pair<std::string, std::string>{"input_hash", input_hash},
                                     {"settings_hash", settings_hash}, {"settings", settings_text}}) {
      Stmt ins(db_, "INSERT OR REPLACE INTO job(key, value) VALUES(?, ?)");
      ins.Bind(1, key);
      ins.Bind(2, value);
      if (ins.Step() != SQLITE_DONE) {
        (void)Exec("ROLLBACK");
        return SqlError(db_, "bind job");
      }
    }
    return Exec("COMMIT");
  }
  if (stored_input != input_hash) {
    return Status::Error("this progress DB belongs to another input file (its content hash differs: the DB has " +
                         stored_input + ", this input is " + input_hash +
                         "); use another --output, or delete the output and its .progress.db to start over");
  }
  if (stored_settings != settings_hash) {
    return Status::Error("this progress DB was made with other settings (" + stored_text + "; now " + settings_text +
                         "); rerun with the same settings, or use another --output");
  }
  return Status::Ok();
}

Status ProgressDb::AddRecords(const std::vector<Record>& records) {
  std::lock_guard<std::mutex> lock(mu_);
  MLA_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  for (const Record& r : records) {
    Stmt one(db_, "INSERT OR IGNORE INTO records(id, line_no) VALUES(?, ?)");
    one.Bind(1, r.id);
    one.Bind(2, int64_t(r.line_no));
    if (one.Step() != SQLITE_DONE) {
      (void)Exec("ROLLBACK");
      return SqlError(db_, "add records");
    }
  }
  return Exec("COMMIT");
}

Result<std::vector<RecordProgress>> ProgressDb::LoadAll() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt q(db_,
         "SELECT id, line_no, state, turns, partial, kv_formats, continued, restarted, output, error "
         "FROM records ORDER BY line_no");
  if (!q.ok()) return SqlError(db_, "load");
  std::vector<RecordProgress> rows;
  int rc;
  while ((rc = q.Step()) == SQLITE_ROW) {
    RecordProgress p;
    p.id = q.Text(0);
    p.line_no = int(q.Int(1));
    p.state = StateFromName(q.Text(2));
    p.turns = ParseTurns(q.Text(3));
    p.partial = ParseList<TokenId>(q.Text(4));
    p.kv_formats = ParseList<std::string>(q.Text(5));
    p.continued = int(q.Int(6));
    p.restarted = int(q.Int(7));
    p.output_line = q.Text(8);
    p.error = q.Text(9);
    rows.push_back(std::move(p));
  }
  if (rc != SQLITE_DONE) return SqlError(db_, "load");
  return rows;
}

Status ProgressDb::SaveRow(const RecordProgress& p, RecordState state) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt up(db_,
          "UPDATE records SET state = ?, turns = ?, partial = ?, kv_formats = ?, continued = ?, restarted = ?, "
          "output = ? WHERE id = ?");
  if (!up.ok()) return SqlError(db_, "update");
  up.Bind(1, std::string(RecordStateName(state)));
  up.Bind(2, TurnsJson(p.turns));
  up.Bind(3, json(p.partial).dump());
  up.Bind(4, json(p.kv_formats).dump());
  up.Bind(5, int64_t(p.continued));
  up.Bind(6, int64_t(p.restarted));
  up.Bind(7, state == RecordState::kDone ? p.output_line : std::string());
  up.Bind(8, p.id);
  if (up.Step() != SQLITE_DONE) return SqlError(db_, "update " + p.id);
  if (sqlite3_changes(db_) != 1) return Status::Error("progress DB: no record '" + p.id + "'");
  return Status::Ok();
}

Status ProgressDb::SaveProgress(const RecordProgress& p) { return SaveRow(p, RecordState::kRunning); }

Status ProgressDb::MarkDone(const RecordProgress& p) { return SaveRow(p, RecordState::kDone); }

Status ProgressDb::MarkFailed(const std::string& id, const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt up(db_, "UPDATE records SET state = 'failed', error = ? WHERE id = ?");
  up.Bind(1, error);
  up.Bind(2, id);
  if (up.Step() != SQLITE_DONE) return SqlError(db_, "mark failed " + id);
  if (sqlite3_changes(db_) != 1) return Status::Error("progress DB: no record '" + id + "' to mark failed");
  return Status::Ok();
}

Result<int> ProgressDb::RetryFailed() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt up(db_, "UPDATE records SET state = 'pending', error = NULL WHERE state = 'failed'");
  if (up.Step() != SQLITE_DONE) return SqlError(db_, "retry failed records");
  return int(sqlite3_changes(db_));
}

Status ProgressDb::RecordRun(const RunFigures& f) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt ins(db_,
           "INSERT INTO runs(records_done, records_failed, interruptions, continued, restarted, time_lost_s, "
           "output_tokens, duration_s) VALUES(?, ?, ?, ?, ?, ?, ?, ?)");
  ins.Bind(1, int64_t(f.records_done));
  ins.Bind(2, int64_t(f.records_failed));
  ins.Bind(3, int64_t(f.interruptions));
  ins.Bind(4, int64_t(f.continued));
  ins.Bind(5, int64_t(f.restarted));
  ins.Bind(6, f.time_lost_s);
  ins.Bind(7, f.output_tokens);
  ins.Bind(8, f.duration_s);
  if (ins.Step() != SQLITE_DONE) return SqlError(db_, "record run");
  return Status::Ok();
}

Result<std::vector<RunFigures>> ProgressDb::Runs() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt q(db_,
         "SELECT records_done, records_failed, interruptions, continued, restarted, time_lost_s, output_tokens, "
         "duration_s FROM runs ORDER BY run");
  if (!q.ok()) return SqlError(db_, "runs");
  std::vector<RunFigures> out;
  int rc;
  while ((rc = q.Step()) == SQLITE_ROW) {
    out.push_back({.records_done = int(q.Int(0)), .records_failed = int(q.Int(1)), .interruptions = int(q.Int(2)),
                   .continued = int(q.Int(3)), .restarted = int(q.Int(4)), .time_lost_s = q.Real(5),
                   .output_tokens = q.Int(6), .duration_s = q.Real(7)});
  }
  if (rc != SQLITE_DONE) return SqlError(db_, "runs");  // e.g. busy: never a silently short list
  return out;
}

}  // namespace mlaserve::batch

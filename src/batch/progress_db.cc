#include "batch/progress_db.h"

#include <sqlite3.h>

#include <nlohmann/json.hpp>

namespace mlaserve::batch {
namespace {

using nlohmann::json;

// 2: input indexed by offset, lines kept only until written, segments (issue 10). 0: before.
constexpr int kSchemaVersion = 2;

// seq is the rowid: input order. records_open reaches the rows not yet written without reading
// the written ones (a resumed run starts in time proportional to what is left).
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS job(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records(
  seq INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  line_no INTEGER NOT NULL,
  in_offset INTEGER NOT NULL,
  in_length INTEGER NOT NULL,
  in_hash INTEGER NOT NULL,
  state TEXT NOT NULL DEFAULT 'pending',
  turns TEXT NOT NULL DEFAULT '[]',
  partial TEXT NOT NULL DEFAULT '[]',
  partial_segments TEXT NOT NULL DEFAULT '[]',
  continued INTEGER NOT NULL DEFAULT 0,
  restarted INTEGER NOT NULL DEFAULT 0,
  output TEXT,
  out_offset INTEGER,
  out_length INTEGER,
  out_hash INTEGER,
  error TEXT);
CREATE INDEX IF NOT EXISTS records_open ON records(seq, state) WHERE state <> 'written';
CREATE TABLE IF NOT EXISTS problems(line_no INTEGER PRIMARY KEY, id TEXT, reason TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs(
  run INTEGER PRIMARY KEY AUTOINCREMENT,
  records_done INTEGER, records_failed INTEGER, interruptions INTEGER, continued INTEGER,
  restarted INTEGER, time_lost_s REAL, output_tokens INTEGER, duration_s REAL);
CREATE TABLE IF NOT EXISTS hidden_dumps(
  seq INTEGER PRIMARY KEY, file TEXT NOT NULL, rows INTEGER NOT NULL, bytes INTEGER NOT NULL, hash INTEGER NOT NULL);
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
  // For the next row of a prepared insert/update: same SQL, new values.
  void Reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
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

json SegmentsJson(const std::vector<Segment>& segments) {
  json out = json::array();
  for (const Segment& s : segments) out.push_back({s.tokens, s.kv_cache_dtype, s.model, s.server_id});
  return out;
}

std::vector<Segment> ParseSegments(const json& j) {
  std::vector<Segment> out;
  if (!j.is_array()) return out;
  for (const json& s : j) {
    if (!s.is_array() || s.size() != 4) continue;
    out.push_back({.tokens = s[0].get<int>(), .kv_cache_dtype = s[1].get<std::string>(),
                   .model = s[2].get<std::string>(), .server_id = s[3].get<std::string>()});
  }
  return out;
}

std::string TurnsJson(const std::vector<Answer>& turns) {
  json out = json::array();
  for (const Answer& a : turns) {
    out.push_back({{"ids", a.ids}, {"finish_reason", a.finish_reason}, {"prompt_tokens", a.prompt_tokens},
                   {"segments", SegmentsJson(a.segments)}});
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
    a.segments = ParseSegments(t.value("segments", json::array()));
    turns.push_back(std::move(a));
  }
  return turns;
}

std::vector<TokenId> ParseIds(const std::string& text) {
  const json j = json::parse(text, nullptr, false);
  return j.is_array() ? j.get<std::vector<TokenId>>() : std::vector<TokenId>{};
}

RecordState StateFromName(const std::string& name) {
  if (name == "running") return RecordState::kRunning;
  if (name == "done") return RecordState::kDone;
  if (name == "written") return RecordState::kWritten;
  if (name == "failed") return RecordState::kFailed;
  return RecordState::kPending;
}

}  // namespace

const char* RecordStateName(RecordState state) {
  switch (state) {
    case RecordState::kPending: return "pending";
    case RecordState::kRunning: return "running";
    case RecordState::kDone: return "done";
    case RecordState::kWritten: return "written";
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
  int version = 0;
  bool existed = false;  // any tables: an earlier run's state (a file killed before its schema is not)
  {
    Stmt q(raw, "PRAGMA user_version");
    if (q.Step() == SQLITE_ROW) version = int(q.Int(0));
    Stmt tables(raw, "SELECT COUNT(*) FROM sqlite_master");
    if (tables.Step() == SQLITE_ROW) existed = tables.Int(0) > 0;
  }
  if (existed && version != kSchemaVersion) {
    return Status::Error(path + " was made by an older mlaserve batch (another format): finish that job with the "
                                "version that began it, or delete the DB (the output's lines are adopted when their "
                                "settings are this run's)");
  }
  MLA_RETURN_IF_ERROR(db->Exec("PRAGMA journal_mode=WAL"));
  MLA_RETURN_IF_ERROR(db->Exec("PRAGMA synchronous=NORMAL"));
  MLA_RETURN_IF_ERROR(db->Exec(kSchema));
  MLA_RETURN_IF_ERROR(db->Exec("PRAGMA user_version = " + std::to_string(kSchemaVersion)));
  db->created_ = !existed;
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
      if (Status s = SetJobKey(key, value); !s.ok()) {
        (void)Exec("ROLLBACK");
        return s;
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

Status ProgressDb::SetJobKey(const std::string& key, const std::string& value) {
  Stmt ins(db_, "INSERT OR REPLACE INTO job(key, value) VALUES(?, ?)");
  ins.Bind(1, key);
  ins.Bind(2, value);
  if (ins.Step() != SQLITE_DONE) return SqlError(db_, "set " + key);
  return Status::Ok();
}

Result<std::string> ProgressDb::JobKey(const std::string& key) {
  Stmt q(db_, "SELECT value FROM job WHERE key = ?");
  if (!q.ok()) return SqlError(db_, "read job");
  q.Bind(1, key);
  const int rc = q.Step();
  if (rc == SQLITE_ROW) return q.Text(0);
  if (rc != SQLITE_DONE) return SqlError(db_, "read " + key);
  return std::string();
}

Result<std::optional<InputSummary>> ProgressDb::Summary() {
  std::lock_guard<std::mutex> lock(mu_);
  auto text = JobKey("input_summary");
  if (!text.ok()) return text.status();
  if (text->empty()) return std::optional<InputSummary>();
  const json j = json::parse(*text, nullptr, false);
  if (!j.is_object()) return std::optional<InputSummary>();
  InputSummary s{.num_lines = j.value("lines", 0), .num_records = j.value("records", int64_t(0)),
                 .answers = j.value("answers", int64_t(0)), .num_problems = j.value("problems", int64_t(0))};
  const std::vector<int> shapes = j.value("shapes", std::vector<int>{0, 0, 0});
  for (size_t i = 0; i < 3 && i < shapes.size(); ++i) s.shapes[i] = shapes[i];
  return std::optional<InputSummary>(s);
}

Status ProgressDb::BeginIndex() {
  std::lock_guard<std::mutex> lock(mu_);
  next_seq_ = 0;
  return Exec("BEGIN IMMEDIATE; DELETE FROM records; DELETE FROM problems; DELETE FROM job WHERE key = "
              "'input_summary'; COMMIT");
}

Result<std::vector<InputProblem>> ProgressDb::AddRecords(std::span<const IndexedRecord> records) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<InputProblem> duplicates;
  MLA_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  Stmt ins(db_, "INSERT OR IGNORE INTO records(seq, id, line_no, in_offset, in_length, in_hash) VALUES(?,?,?,?,?,?)");
  Stmt first(db_, "SELECT line_no FROM records WHERE id = ?");
  for (const IndexedRecord& r : records) {
    ins.Reset();
    ins.Bind(1, next_seq_);
    ins.Bind(2, r.id);
    ins.Bind(3, int64_t(r.line_no));
    ins.Bind(4, r.offset);
    ins.Bind(5, r.length);
    ins.Bind(6, int64_t(r.hash));
    if (ins.Step() != SQLITE_DONE) {
      (void)Exec("ROLLBACK");
      return SqlError(db_, "add records");
    }
    if (sqlite3_changes(db_) == 1) {
      ++next_seq_;
      continue;
    }
    first.Reset();
    first.Bind(1, r.id);
    const int first_line = first.Step() == SQLITE_ROW ? int(first.Int(0)) : 0;
    duplicates.push_back({r.line_no, r.id,
                          "duplicate id '" + r.id + "' (first at line " + std::to_string(first_line) +
                              "; the first wins)"});
  }
  MLA_RETURN_IF_ERROR(Exec("COMMIT"));
  return duplicates;
}

Status ProgressDb::AddProblems(std::span<const InputProblem> problems) {
  std::lock_guard<std::mutex> lock(mu_);
  MLA_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  Stmt ins(db_, "INSERT OR REPLACE INTO problems(line_no, id, reason) VALUES(?, ?, ?)");
  for (const InputProblem& p : problems) {
    ins.Reset();
    ins.Bind(1, int64_t(p.line_no));
    ins.Bind(2, p.id);
    ins.Bind(3, p.reason);
    if (ins.Step() != SQLITE_DONE) {
      (void)Exec("ROLLBACK");
      return SqlError(db_, "add problems");
    }
  }
  return Exec("COMMIT");
}

Status ProgressDb::FinishIndex(const InputSummary& s) {
  std::lock_guard<std::mutex> lock(mu_);
  const json j{{"lines", s.num_lines},
               {"records", s.num_records},
               {"shapes", {s.shapes[0], s.shapes[1], s.shapes[2]}},
               {"answers", s.answers},
               {"problems", s.num_problems}};
  return SetJobKey("input_summary", j.dump());
}

Result<std::vector<InputProblem>> ProgressDb::Problems() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt q(db_, "SELECT line_no, id, reason FROM problems ORDER BY line_no");
  if (!q.ok()) return SqlError(db_, "problems");
  std::vector<InputProblem> out;
  int rc;
  while ((rc = q.Step()) == SQLITE_ROW) out.push_back({int(q.Int(0)), q.Text(1), q.Text(2)});
  if (rc != SQLITE_DONE) return SqlError(db_, "problems");
  return out;
}

Result<std::vector<RecordProgress>> ProgressDb::LoadOpen(int64_t after_seq, int limit) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt q(db_,
         "SELECT seq, id, line_no, in_offset, in_length, in_hash, state, turns, partial, partial_segments, continued, "
         "restarted, output, error FROM records INDEXED BY records_open "
         "WHERE state <> 'written' AND seq > ? ORDER BY seq LIMIT ?");
  if (!q.ok()) return SqlError(db_, "load");
  q.Bind(1, after_seq);
  q.Bind(2, int64_t(limit));
  std::vector<RecordProgress> rows;
  int rc;
  while ((rc = q.Step()) == SQLITE_ROW) {
    RecordProgress p;
    p.seq = q.Int(0);
    p.id = q.Text(1);
    p.line_no = int(q.Int(2));
    p.in_offset = q.Int(3);
    p.in_length = q.Int(4);
    p.in_hash = uint64_t(q.Int(5));
    p.state = StateFromName(q.Text(6));
    p.turns = ParseTurns(q.Text(7));
    p.partial = ParseIds(q.Text(8));
    p.partial_segments = ParseSegments(json::parse(q.Text(9), nullptr, false));
    p.continued = int(q.Int(10));
    p.restarted = int(q.Int(11));
    p.output_line = q.Text(12);
    p.error = q.Text(13);
    rows.push_back(std::move(p));
  }
  if (rc != SQLITE_DONE) return SqlError(db_, "load");
  return rows;
}

Result<std::optional<RecordProgress>> ProgressDb::Find(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt q(db_, "SELECT seq, state, line_no FROM records WHERE id = ?");
  if (!q.ok()) return SqlError(db_, "find");
  q.Bind(1, id);
  const int rc = q.Step();
  if (rc == SQLITE_DONE) return std::optional<RecordProgress>();
  if (rc != SQLITE_ROW) return SqlError(db_, "find " + id);
  RecordProgress p{.seq = q.Int(0), .id = id, .line_no = int(q.Int(2)), .state = StateFromName(q.Text(1))};
  return std::optional<RecordProgress>(std::move(p));
}

Result<StateCounts> ProgressDb::Counts() {
  std::lock_guard<std::mutex> lock(mu_);
  StateCounts c;
  {
    Stmt all(db_, "SELECT COUNT(*) FROM records");
    if (all.Step() != SQLITE_ROW) return SqlError(db_, "count");
    c.written = all.Int(0);
  }
  Stmt q(db_, "SELECT state, COUNT(*) FROM records INDEXED BY records_open WHERE state <> 'written' GROUP BY state");
  if (!q.ok()) return SqlError(db_, "count");
  int rc;
  while ((rc = q.Step()) == SQLITE_ROW) {
    const int64_t n = q.Int(1);
    c.written -= n;
    switch (StateFromName(q.Text(0))) {
      case RecordState::kPending: c.pending += n; break;
      case RecordState::kRunning: c.running += n; break;
      case RecordState::kDone: c.done += n; break;
      case RecordState::kFailed: c.failed += n; break;
      case RecordState::kWritten: break;
    }
  }
  if (rc != SQLITE_DONE) return SqlError(db_, "count");
  return c;
}

Result<std::vector<RecordProgress>> ProgressDb::Failed() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt q(db_, "SELECT seq, id, line_no, error FROM records INDEXED BY records_open "
              "WHERE state <> 'written' AND state = 'failed' ORDER BY seq");
  if (!q.ok()) return SqlError(db_, "failed rows");
  std::vector<RecordProgress> out;
  int rc;
  while ((rc = q.Step()) == SQLITE_ROW) {
    out.push_back({.seq = q.Int(0), .id = q.Text(1), .line_no = int(q.Int(2)), .state = RecordState::kFailed,
                   .error = q.Text(3)});
  }
  if (rc != SQLITE_DONE) return SqlError(db_, "failed rows");
  return out;
}

Status ProgressDb::SaveRow(const RecordProgress& p, RecordState state) {
  std::lock_guard<std::mutex> lock(mu_);
  return SaveRowLocked(p, state);
}

Status ProgressDb::SaveRowLocked(const RecordProgress& p, RecordState state) {
  // Done: the line holds the answers, so the checkpoints are dropped with the same commit.
  const bool done = state == RecordState::kDone;
  Stmt up(db_,
          "UPDATE records SET state = ?, turns = ?, partial = ?, partial_segments = ?, continued = ?, restarted = ?, "
          "output = ? WHERE seq = ?");
  if (!up.ok()) return SqlError(db_, "update");
  up.Bind(1, std::string(RecordStateName(state)));
  up.Bind(2, done ? std::string("[]") : TurnsJson(p.turns));
  up.Bind(3, done ? std::string("[]") : json(p.partial).dump());
  up.Bind(4, done ? std::string("[]") : SegmentsJson(p.partial_segments).dump());
  up.Bind(5, int64_t(p.continued));
  up.Bind(6, int64_t(p.restarted));
  up.Bind(7, done ? p.output_line : std::string());
  up.Bind(8, p.seq);
  if (up.Step() != SQLITE_DONE) return SqlError(db_, "update " + p.id);
  if (sqlite3_changes(db_) != 1) return Status::Error("progress DB: no record '" + p.id + "'");
  return Status::Ok();
}

Status ProgressDb::SaveProgress(const RecordProgress& p) { return SaveRow(p, RecordState::kRunning); }

Status ProgressDb::MarkDone(const RecordProgress& p, const HiddenDumpFile* dump) {
  if (dump == nullptr) return SaveRow(p, RecordState::kDone);
  std::lock_guard<std::mutex> lock(mu_);
  MLA_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  Status s = SaveRowLocked(p, RecordState::kDone);
  if (s.ok()) {
    Stmt ins(db_, "INSERT OR REPLACE INTO hidden_dumps(seq, file, rows, bytes, hash) VALUES(?, ?, ?, ?, ?)");
    ins.Bind(1, p.seq);
    ins.Bind(2, dump->file);
    ins.Bind(3, dump->rows);
    ins.Bind(4, dump->bytes);
    ins.Bind(5, int64_t(dump->hash));
    if (ins.Step() != SQLITE_DONE) s = SqlError(db_, "store the hidden-state file of " + p.id);
  }
  if (!s.ok()) {
    (void)Exec("ROLLBACK");
    return s;
  }
  return Exec("COMMIT");
}

Result<std::vector<HiddenDumpRow>> ProgressDb::HiddenDumps() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt q(db_, "SELECT d.seq, r.id, r.state, d.file, d.rows, d.bytes, d.hash FROM hidden_dumps d "
              "JOIN records r ON r.seq = d.seq ORDER BY d.seq");
  if (!q.ok()) return SqlError(db_, "read hidden_dumps");
  std::vector<HiddenDumpRow> out;
  int rc;
  while ((rc = q.Step()) == SQLITE_ROW) {
    out.push_back({.seq = q.Int(0), .id = q.Text(1), .state = StateFromName(q.Text(2)),
                   .file = {.file = q.Text(3), .rows = q.Int(4), .bytes = q.Int(5), .hash = uint64_t(q.Int(6))}});
  }
  if (rc != SQLITE_DONE) return SqlError(db_, "read hidden_dumps");
  return out;
}

Status ProgressDb::ForgetHiddenDump(int64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt del(db_, "DELETE FROM hidden_dumps WHERE seq = ?");
  del.Bind(1, seq);
  if (del.Step() != SQLITE_DONE) return SqlError(db_, "forget a hidden-state file");
  return Status::Ok();
}

Status ProgressDb::MarkFailed(const RecordProgress& p) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt up(db_, "UPDATE records SET state = 'failed', error = ? WHERE seq = ?");
  up.Bind(1, p.error);
  up.Bind(2, p.seq);
  if (up.Step() != SQLITE_DONE) return SqlError(db_, "mark failed " + p.id);
  if (sqlite3_changes(db_) != 1) return Status::Error("progress DB: no record '" + p.id + "' to mark failed");
  return Status::Ok();
}

Result<int> ProgressDb::RetryFailed() {
  std::lock_guard<std::mutex> lock(mu_);
  // Through the open-rows index: the written rows (most of a resumed job) are not read.
  Stmt up(db_, "UPDATE records INDEXED BY records_open SET state = 'pending', error = NULL "
               "WHERE state <> 'written' AND state = 'failed'");
  if (up.Step() != SQLITE_DONE) return SqlError(db_, "retry failed records");
  return int(sqlite3_changes(db_));
}

Status ProgressDb::MarkWritten(std::span<const WrittenLine> lines) {
  if (lines.empty()) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  MLA_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  Stmt up(db_,
          "UPDATE records SET state = 'written', output = NULL, turns = '[]', partial = '[]', partial_segments = '[]', "
          "out_offset = ?, out_length = ?, out_hash = ? WHERE seq = ?");
  const WrittenLine* last = &lines[0];
  for (const WrittenLine& w : lines) {
    up.Reset();
    up.Bind(1, w.offset);
    up.Bind(2, w.length);
    up.Bind(3, int64_t(w.hash));
    up.Bind(4, w.seq);
    if (up.Step() != SQLITE_DONE || sqlite3_changes(db_) != 1) {
      (void)Exec("ROLLBACK");
      return SqlError(db_, "mark written");
    }
    if (w.offset > last->offset) last = &w;
  }
  const json mark{last->offset + last->length + 1, last->offset, int64_t(last->hash)};
  if (Status s = SetJobKey("output_mark", mark.dump()); !s.ok()) {
    (void)Exec("ROLLBACK");
    return s;
  }
  return Exec("COMMIT");
}

Result<OutputMark> ProgressDb::Mark() {
  std::lock_guard<std::mutex> lock(mu_);
  auto text = JobKey("output_mark");
  if (!text.ok()) return text.status();
  const json j = json::parse(*text, nullptr, false);
  if (!j.is_array() || j.size() != 3) return OutputMark{};
  return OutputMark{.end = j[0].get<int64_t>(), .last_offset = j[1].get<int64_t>(),
                    .last_hash = uint64_t(j[2].get<int64_t>())};
}

Result<OutputMark> ProgressDb::LastWrittenWithin(int64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  // Rare (the output lost lines): a scan of the written rows is fine here.
  Stmt q(db_, "SELECT out_offset, out_length, out_hash FROM records WHERE state = 'written' AND "
              "out_offset + out_length + 1 <= ? ORDER BY out_offset DESC LIMIT 1");
  q.Bind(1, size);
  const int rc = q.Step();
  if (rc == SQLITE_DONE) return OutputMark{};
  if (rc != SQLITE_ROW) return SqlError(db_, "last written line");
  return OutputMark{.end = q.Int(0) + q.Int(1) + 1, .last_offset = q.Int(0), .last_hash = uint64_t(q.Int(2))};
}

Result<int64_t> ProgressDb::ForgetWrittenFrom(int64_t end, const OutputMark& mark) {
  std::lock_guard<std::mutex> lock(mu_);
  MLA_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  Stmt up(db_, "UPDATE records SET state = 'pending', out_offset = NULL, out_length = NULL, out_hash = NULL "
               "WHERE state = 'written' AND out_offset >= ?");
  up.Bind(1, end);
  if (up.Step() != SQLITE_DONE) {
    (void)Exec("ROLLBACK");
    return SqlError(db_, "forget written");
  }
  const int64_t n = sqlite3_changes(db_);
  const json j{mark.end, mark.last_offset, int64_t(mark.last_hash)};
  if (Status s = SetJobKey("output_mark", j.dump()); !s.ok()) {
    (void)Exec("ROLLBACK");
    return s;
  }
  MLA_RETURN_IF_ERROR(Exec("COMMIT"));
  return n;
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

// Unit tests of the batch pieces that need no server: input parsing and ids, the progress DB,
// and the output file's reconciliation and ordering.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "batch/input_file.h"
#include "batch/output_writer.h"
#include "batch/progress_db.h"
#include "batch/reconcile.h"
#include "batch/records.h"
#include "support/run_binary.h"

namespace mlaserve::batch {
namespace {

using testing::TempDir;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(BatchRecords, ParsesTheThreeShapes) {
  auto chat = ParseRecordLine(R"({"id":"a","messages":[{"role":"system","content":"s"},{"role":"user","content":"q"}]})", 1);
  ASSERT_TRUE(chat.ok()) << chat.error();
  EXPECT_EQ(chat->shape, RecordShape::kChat);
  EXPECT_EQ(chat->answer_slots, std::vector<int>{2});

  auto share = ParseRecordLine(
      R"({"id":7,"conversations":[{"from":"human","value":"q1"},{"from":"gpt","value":"a1"},{"from":"human","value":"q2"},{"from":"gpt","value":"a2"}]})", 2);
  ASSERT_TRUE(share.ok()) << share.error();
  EXPECT_EQ(share->id, "7");
  EXPECT_EQ(share->shape, RecordShape::kShareGpt);
  EXPECT_EQ(share->answer_slots, (std::vector<int>{1, 3}));
  EXPECT_EQ(share->messages[1].role, "assistant");

  auto prompt = ParseRecordLine(R"({"prompt":"hi"})", 3);
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(prompt->shape, RecordShape::kPrompt);
  EXPECT_EQ(prompt->answer_slots, std::vector<int>{1});
}

TEST(BatchRecords, AutoIdIsStableAndContentBound) {
  auto a = ParseRecordLine(R"({"prompt":"hi","x":1})", 1);
  auto b = ParseRecordLine(R"({ "x": 1, "prompt": "hi" })", 9);  // same content, other spelling
  auto c = ParseRecordLine(R"({"prompt":"hi!","x":1})", 1);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->id, b->id);
  EXPECT_NE(a->id, c->id);
  EXPECT_EQ(a->id.rfind("auto-", 0), 0u);
  EXPECT_EQ(a->id.size(), 5u + 16u);
}

TEST(BatchRecords, RejectsWhatItCannotAnswer) {
  EXPECT_FALSE(ParseRecordLine("[1,2]", 1).ok());
  EXPECT_FALSE(ParseRecordLine(R"({"id":"x"})", 1).ok());
  EXPECT_FALSE(ParseRecordLine(R"({"messages":[{"role":"tool","content":"x"}]})", 1).ok());
  EXPECT_FALSE(ParseRecordLine(R"({"messages":[{"role":"assistant","content":"x"}]})", 1).ok());
  EXPECT_FALSE(ParseRecordLine(R"({"conversations":[{"from":"robot","value":"x"}]})", 1).ok());
  EXPECT_FALSE(ParseRecordLine(R"({"id":1.5,"prompt":"x"})", 1).ok());
  // A content part whose type is not a string is a problem for that line, not a crash.
  EXPECT_FALSE(ParseRecordLine(R"({"id":1,"messages":[{"role":"user","content":[{"type":5,"text":"hi"}]}]})", 1).ok());
  // Unsigned ids beyond int64 keep their value (no wrap onto another id).
  auto big = ParseRecordLine(R"({"id":18446744073709551615,"prompt":"x"})", 1);
  ASSERT_TRUE(big.ok()) << big.error();
  EXPECT_EQ(big->id, "18446744073709551615");
}

// The content hash of a file read in 1 MiB blocks: each block chained into the next, and any
// byte past the first block changes it.
TEST(BatchInput, FileHashChainsItsBlocksAndSeesEveryByte) {
  TempDir dir;
  const std::string path = dir.path() + "/big";
  std::string bytes(size_t(1 << 20) + 17, 'x');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = char('a' + i % 23);
  std::ofstream(path, std::ios::binary) << bytes;
  const std::string_view all(bytes);
  auto hash = HashFile(path);
  ASSERT_TRUE(hash.ok()) << hash.error();
  EXPECT_EQ(*hash, Hash64(all.substr(1 << 20), Hash64(all.substr(0, 1 << 20))));
  bytes[bytes.size() - 3] ^= 1;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  EXPECT_NE(*HashFile(path), *hash);
}

// The first pass over an input file: ids, byte offsets and hashes into the DB, problems and
// duplicates reported, and a record read back by its offset.
TEST(BatchInput, IndexesLinesByOffsetAndReadsThemBack) {
  TempDir dir;
  const std::string in = dir.path() + "/in.jsonl";
  const std::string text =
      "{\"id\":\"a\",\"prompt\":\"1\"}\n\n{oops\n{\"id\":\"a\",\"prompt\":\"2\"}\n{\"id\":\"b\",\"conversations\":"
      "[{\"from\":\"human\",\"value\":\"q\"},{\"from\":\"gpt\",\"value\":\"x\"},{\"from\":\"human\",\"value\":\"r\"}]}";
  std::ofstream(in) << text;  // no final newline
  auto db = ProgressDb::Open(dir.path() + "/p.db");
  ASSERT_TRUE(db.ok()) << db.error();
  auto summary = IndexInput(in, **db);
  ASSERT_TRUE(summary.ok()) << summary.error();
  EXPECT_EQ(summary->num_lines, 4);
  EXPECT_EQ(summary->num_records, 2);
  EXPECT_EQ(summary->answers, 3);
  EXPECT_EQ(summary->shapes[int(RecordShape::kShareGpt)], 1);
  auto problems = (*db)->Problems();
  ASSERT_TRUE(problems.ok());
  ASSERT_EQ(problems->size(), 2u);
  EXPECT_EQ((*problems)[0].line_no, 3);
  EXPECT_EQ((*problems)[1].line_no, 4);
  EXPECT_NE((*problems)[1].reason.find("first at line 1"), std::string::npos);
  auto rows = (*db)->LoadOpen(-1, 10);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[1].id, "b");
  EXPECT_EQ((*rows)[1].line_no, 5);
  auto file = InputFile::Open(in);
  ASSERT_TRUE(file.ok());
  auto record = (*file)->Read((*rows)[1]);
  ASSERT_TRUE(record.ok()) << record.error();
  EXPECT_EQ(record->answer_slots, (std::vector<int>{1, 3}));
  // A dry run finds the same problems without a DB.
  int found = 0;
  auto checked = CheckInput(in, [&](const InputProblem&) { ++found; });
  ASSERT_TRUE(checked.ok());
  EXPECT_EQ(found, 2);
  EXPECT_EQ(checked->num_records, 2);
}

TEST(BatchProgressDb, StoresProgressWithSegmentsAndRefusesAnotherJob) {
  TempDir dir;
  const std::string path = dir.path() + "/p.db";
  const std::vector<IndexedRecord> in = {{.id = "a", .line_no = 1}, {.id = "b", .line_no = 2}};
  {
    auto db = ProgressDb::Open(path);
    ASSERT_TRUE(db.ok()) << db.error();
    EXPECT_TRUE((*db)->created());
    ASSERT_TRUE((*db)->BindJob("in1", "set1", "s").ok());
    ASSERT_TRUE((*db)->AddRecords(in).ok());
    RecordProgress p{.seq = 1, .id = "b", .partial = {5, 6, 7}, .continued = 1};
    p.partial_segments = {{.tokens = 3, .kv_cache_dtype = "fp8_e4m3", .model = "m", .server_id = "srv-1"}};
    p.turns.push_back({.ids = {1, 2}, .segments = {{.tokens = 2, .kv_cache_dtype = "bf16", .server_id = "srv-0"}},
                       .finish_reason = "stop", .prompt_tokens = 4});
    ASSERT_TRUE((*db)->SaveProgress(p).ok());
    RecordProgress a{.seq = 0, .id = "a", .output_line = "{\"id\":\"a\"}"};
    ASSERT_TRUE((*db)->MarkDone(a).ok());
  }
  auto db = ProgressDb::Open(path);  // as after a kill: reopened from the file
  ASSERT_TRUE(db.ok());
  EXPECT_FALSE((*db)->created());
  EXPECT_TRUE((*db)->BindJob("in1", "set1", "s").ok());
  EXPECT_NE((*db)->BindJob("in2", "set1", "s").message().find("another input"), std::string::npos);
  EXPECT_NE((*db)->BindJob("in1", "set2", "s").message().find("other settings"), std::string::npos);
  auto rows = (*db)->LoadOpen(-1, 10);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].state, RecordState::kDone);
  EXPECT_EQ((*rows)[0].output_line, "{\"id\":\"a\"}");
  EXPECT_EQ((*rows)[1].state, RecordState::kRunning);
  EXPECT_EQ((*rows)[1].partial, (std::vector<TokenId>{5, 6, 7}));
  ASSERT_EQ((*rows)[1].partial_segments.size(), 1u);
  EXPECT_EQ((*rows)[1].partial_segments[0].kv_cache_dtype, "fp8_e4m3");
  EXPECT_EQ((*rows)[1].partial_segments[0].server_id, "srv-1");
  ASSERT_EQ((*rows)[1].turns.size(), 1u);
  EXPECT_EQ((*rows)[1].turns[0].ids, (std::vector<TokenId>{1, 2}));
  EXPECT_EQ((*rows)[1].turns[0].segments[0].tokens, 2);
  EXPECT_EQ((*rows)[1].continued, 1);
  // Written: the line leaves the DB; only where it is stays, and the row leaves the open set.
  const WrittenLine w{.seq = 0, .offset = 0, .length = 10, .hash = Hash64("{\"id\":\"a\"}")};
  ASSERT_TRUE((*db)->MarkWritten({&w, 1}).ok());
  rows = (*db)->LoadOpen(-1, 10);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].id, "b");
  EXPECT_EQ((*db)->Mark()->end, 11);
  EXPECT_EQ((*db)->Counts()->written, 1);
  EXPECT_EQ((*db)->Counts()->running, 1);
  EXPECT_EQ(Slurp(path).substr(0, 15), "SQLite format 3");
}

TEST(BatchProgressDb, RetryFailedSetsOnlyFailedRowsPendingKeepingTheirTokens) {
  TempDir dir;
  auto db = ProgressDb::Open(dir.path() + "/p.db");
  ASSERT_TRUE(db.ok()) << db.error();
  ASSERT_TRUE((*db)->BindJob("in", "set", "s").ok());
  const std::vector<IndexedRecord> in = {{.id = "a", .line_no = 1}, {.id = "b", .line_no = 2}, {.id = "c", .line_no = 3}};
  ASSERT_TRUE((*db)->AddRecords(in).ok());
  RecordProgress a{.seq = 0, .id = "a", .output_line = "{\"id\":\"a\"}"};
  ASSERT_TRUE((*db)->MarkDone(a).ok());
  const WrittenLine w{.seq = 0, .offset = 0, .length = 10, .hash = Hash64(a.output_line)};
  ASSERT_TRUE((*db)->MarkWritten({&w, 1}).ok());
  RecordProgress b{.seq = 1, .id = "b", .partial = {7, 8}, .error = "HTTP 400 too long"};
  b.partial_segments = {{.tokens = 2, .kv_cache_dtype = "bf16", .model = "m", .server_id = "srv-0"}};
  ASSERT_TRUE((*db)->SaveProgress(b).ok());
  ASSERT_TRUE((*db)->MarkFailed(b).ok());
  EXPECT_EQ((*db)->Failed()->size(), 1u);

  auto retried = (*db)->RetryFailed();
  ASSERT_TRUE(retried.ok()) << retried.error();
  EXPECT_EQ(*retried, 1);
  EXPECT_TRUE((*db)->Failed()->empty());
  const StateCounts counts = *(*db)->Counts();
  EXPECT_EQ(counts.written, 1);
  EXPECT_EQ(counts.pending, 2);
  EXPECT_EQ(counts.failed, 0);
  auto rows = (*db)->LoadOpen(-1, 10);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].id, "b");
  EXPECT_EQ((*rows)[0].state, RecordState::kPending);
  EXPECT_EQ((*rows)[0].partial, (std::vector<TokenId>{7, 8}));
  ASSERT_EQ((*rows)[0].partial_segments.size(), 1u);
  EXPECT_EQ((*rows)[0].partial_segments[0].server_id, "srv-0");
  EXPECT_EQ((*rows)[0].error, "");
  EXPECT_EQ(*(*db)->RetryFailed(), 0);
}

TEST(BatchSegments, MergeRunsOfOneServerAndSummariseFormats) {
  std::vector<Segment> segments;
  const Serving fp8{.kv_cache_dtype = "fp8_e4m3", .model = "m", .server_id = "srv-a"};
  const Serving bf16{.kv_cache_dtype = "bf16", .model = "m", .server_id = "srv-b"};
  AppendSegment(segments, fp8, 3);
  AppendSegment(segments, fp8, 2);  // the same server after a client kill: one segment
  AppendSegment(segments, bf16, 0);  // nothing generated: no segment
  AppendSegment(segments, bf16, 4);
  ASSERT_EQ(segments.size(), 2u);
  EXPECT_EQ(segments[0].tokens, 5);
  EXPECT_EQ(KvSummary(segments), "fp8_e4m3+bf16");
  EXPECT_EQ(KvSummary(std::span<const Segment>(segments).subspan(1)), "bf16");
}

TEST(BatchOutputWriter, WritesInExpectedOrderAndReportsWhere) {
  TempDir dir;
  const std::string path = dir.path() + "/out.jsonl";
  std::ofstream(path) << "{\"id\":\"x\"}\n";
  auto w = OutputWriter::Open(path, /*ordered=*/true);
  ASSERT_TRUE(w.ok()) << w.error();
  std::vector<WrittenLine> written;
  (*w)->set_on_written([&](const WrittenLine& line) {
    written.push_back(line);
    return Status::Ok();
  });
  for (int64_t seq : {0, 1, 2, 3}) (*w)->Expect(seq);
  ASSERT_TRUE((*w)->Offer(3, "{\"id\":\"d\"}").ok());
  ASSERT_TRUE((*w)->Offer(1, std::nullopt).ok());  // failed: skipped
  EXPECT_EQ(Slurp(path), "{\"id\":\"x\"}\n");    // 0 is not finished: nothing after it yet
  ASSERT_TRUE((*w)->Offer(0, "{\"id\":\"a\"}").ok());
  ASSERT_TRUE((*w)->Offer(2, "{\"id\":\"c\"}").ok());
  EXPECT_EQ(Slurp(path), "{\"id\":\"x\"}\n{\"id\":\"a\"}\n{\"id\":\"c\"}\n{\"id\":\"d\"}\n");
  ASSERT_EQ(written.size(), 3u);
  EXPECT_EQ(written[0].offset, 11);
  EXPECT_EQ(written[1].seq, 2);
  EXPECT_EQ(written[2].hash, Hash64("{\"id\":\"d\"}"));
  auto second = OutputWriter::Open(path, true);
  EXPECT_FALSE(second.ok());  // locked by the first
}

// Start-up reconciliation reads only past the DB's mark: a line of a done row is noted, a partial
// line cut; a file shorter than the mark sends the lost records back to pending; an edited file
// is refused.
TEST(BatchReconcile, NotesCutsForgetsAndRefusesWhatTheTailHolds) {
  TempDir dir;
  const std::string path = dir.path() + "/out.jsonl";
  auto db = ProgressDb::Open(path + ".progress.db");
  ASSERT_TRUE(db.ok());
  const std::vector<IndexedRecord> in = {{.id = "a", .line_no = 1}, {.id = "b", .line_no = 2}, {.id = "c", .line_no = 3}};
  ASSERT_TRUE((*db)->AddRecords(in).ok());
  const std::string a = R"({"id":"a"})", b = R"({"id":"b"})", c = R"({"id":"c"})";
  {
    auto w = OutputWriter::Open(path, /*ordered=*/false);
    ASSERT_TRUE(w.ok());
    (*w)->set_on_written([&](const WrittenLine& line) { return (*db)->MarkWritten({&line, 1}); });
    ASSERT_TRUE((*w)->Offer(0, a).ok());
    ASSERT_TRUE((*w)->Offer(1, b).ok());
  }
  ASSERT_TRUE((*db)->MarkDone({.seq = 2, .id = "c", .output_line = c}).ok());
  // Killed after appending c, before noting it, then during another append.
  std::ofstream(path, std::ios::app) << c << "\n{\"id\":\"d";
  const ReconcileOptions options;
  {
    auto w = OutputWriter::Open(path, false);
    ASSERT_TRUE(w.ok());
    auto report = Reconcile(**w, **db, options);
    ASSERT_TRUE(report.ok()) << report.error();
    EXPECT_EQ(report->noted, 1);
    EXPECT_EQ(report->adopted, 0);
    EXPECT_EQ(report->tail_lines, 1);
    EXPECT_GT(report->truncated_bytes, 0);
  }
  EXPECT_EQ(Slurp(path), a + "\n" + b + "\n" + c + "\n");
  EXPECT_EQ((*db)->Counts()->written, 3);

  // The file lost its last two lines: those records are generated again.
  std::ofstream(path, std::ios::trunc) << a << "\n";
  {
    auto w = OutputWriter::Open(path, false);
    ASSERT_TRUE(w.ok());
    auto report = Reconcile(**w, **db, options);
    ASSERT_TRUE(report.ok()) << report.error();
    EXPECT_EQ(report->lost, 2);
  }
  EXPECT_EQ((*db)->Counts()->pending, 2);
  EXPECT_EQ((*db)->Mark()->end, int64_t(a.size() + 1));

  // Another file at the path: refused.
  std::ofstream(path, std::ios::trunc) << R"({"id":"z"})" << "\n";
  auto w = OutputWriter::Open(path, false);
  ASSERT_TRUE(w.ok());
  auto report = Reconcile(**w, **db, options);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.error().find("not the one its progress DB wrote"), std::string::npos) << report.error();
}

}  // namespace
}  // namespace mlaserve::batch

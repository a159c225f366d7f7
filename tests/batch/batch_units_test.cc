// Unit tests of the batch pieces that need no server: input parsing and ids, the progress DB,
// and the output file's reconciliation and ordering.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "batch/output_writer.h"
#include "batch/progress_db.h"
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

TEST(BatchRecords, ReportsBadLinesAndDuplicatesWithLineNumbers) {
  const ParsedInput in = ParseInput("{\"id\":\"a\",\"prompt\":\"1\"}\n\n{oops\n{\"id\":\"a\",\"prompt\":\"2\"}\n{\"id\":\"b\",\"prompt\":\"3\"}");
  ASSERT_EQ(in.records.size(), 2u);
  EXPECT_EQ(in.records[0].source["prompt"], "1");  // the first wins
  EXPECT_EQ(in.records[1].line_no, 5);
  ASSERT_EQ(in.problems.size(), 2u);
  EXPECT_EQ(in.problems[0].line_no, 3);
  EXPECT_EQ(in.problems[1].line_no, 4);
  EXPECT_EQ(in.problems[1].id, "a");
  EXPECT_EQ(in.num_lines, 4);
}

TEST(BatchProgressDb, StoresProgressAndRefusesAnotherJob) {
  TempDir dir;
  const std::string path = dir.path() + "/p.db";
  const ParsedInput in = ParseInput("{\"id\":\"a\",\"prompt\":\"1\"}\n{\"id\":\"b\",\"prompt\":\"2\"}\n");
  {
    auto db = ProgressDb::Open(path);
    ASSERT_TRUE(db.ok()) << db.error();
    ASSERT_TRUE((*db)->BindJob("in1", "set1", "s").ok());
    ASSERT_TRUE((*db)->AddRecords(in.records).ok());
    RecordProgress p{.id = "b", .partial = {5, 6, 7}, .kv_formats = {"bf16"}, .continued = 1};
    p.turns.push_back({.ids = {1, 2}, .finish_reason = "stop", .prompt_tokens = 4});
    ASSERT_TRUE((*db)->SaveProgress(p).ok());
    RecordProgress a{.id = "a", .output_line = "{\"id\":\"a\"}"};
    ASSERT_TRUE((*db)->MarkDone(a).ok());
  }
  auto db = ProgressDb::Open(path);  // as after a kill: reopened from the file
  ASSERT_TRUE(db.ok());
  EXPECT_TRUE((*db)->BindJob("in1", "set1", "s").ok());
  EXPECT_NE((*db)->BindJob("in2", "set1", "s").message().find("another input"), std::string::npos);
  EXPECT_NE((*db)->BindJob("in1", "set2", "s").message().find("other settings"), std::string::npos);
  ASSERT_TRUE((*db)->AddRecords(in.records).ok());  // idempotent
  auto rows = (*db)->LoadAll();
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].state, RecordState::kDone);
  EXPECT_EQ((*rows)[0].output_line, "{\"id\":\"a\"}");
  EXPECT_EQ((*rows)[1].state, RecordState::kRunning);
  EXPECT_EQ((*rows)[1].partial, (std::vector<TokenId>{5, 6, 7}));
  ASSERT_EQ((*rows)[1].turns.size(), 1u);
  EXPECT_EQ((*rows)[1].turns[0].ids, (std::vector<TokenId>{1, 2}));
  EXPECT_EQ((*rows)[1].continued, 1);
  EXPECT_EQ(Slurp(path).substr(0, 15), "SQLite format 3");
}

TEST(BatchOutputWriter, WritesInInputOrderAndCutsAPartialLine) {
  TempDir dir;
  const std::string path = dir.path() + "/out.jsonl";
  std::ofstream(path) << "{\"id\":\"b\"}\n{\"id\":\"c\",\"tru";  // a killed run's partial line
  auto w = OutputWriter::Open(path, /*ordered=*/true, {"a", "b", "c", "d"});
  ASSERT_TRUE(w.ok()) << w.error();
  EXPECT_EQ((*w)->existing().size(), 1u);
  EXPECT_GT((*w)->truncated_bytes(), 0u);
  ASSERT_TRUE((*w)->Offer(3, "{\"id\":\"d\"}").ok());
  ASSERT_TRUE((*w)->Offer(2, "{\"id\":\"c\"}").ok());
  EXPECT_EQ(Slurp(path), "{\"id\":\"b\"}\n");  // a is not finished: nothing after it yet
  ASSERT_TRUE((*w)->Offer(1, "{\"id\":\"b\"}").ok());  // already in the file: not again
  ASSERT_TRUE((*w)->Offer(0, "{\"id\":\"a\"}").ok());
  EXPECT_EQ(Slurp(path), "{\"id\":\"b\"}\n{\"id\":\"a\"}\n{\"id\":\"c\"}\n{\"id\":\"d\"}\n");
  auto second = OutputWriter::Open(path, true, {"a"});
  EXPECT_FALSE(second.ok());  // locked by the first
}

}  // namespace
}  // namespace mlaserve::batch

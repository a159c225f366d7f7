// --incremental-streaming-output through the real server: streamed /generate events carry
// disjoint segments (the new text, output_ids and output logprob entries, as SGLang's
// tokenizer_manager slices them) that join to the non-streamed answer, and an event's size does
// not grow with its position. Without the flag the events stay cumulative. `mlaserve batch`, a
// client of the stream, writes the same answers from either kind of server.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "support/batch_job.h"
#include "support/run_binary.h"
#include "support/server_process.h"

namespace mlaserve {
namespace {

using nlohmann::json;
using testing::Get;
using testing::Post;
using testing::ServerProcess;
using testing::StreamEvents;

constexpr int kNewTokens = 48;

// A greedy request of kNewTokens tokens with two top logprobs per token; `extra` is merged in.
std::string Request(bool stream, const json& extra = json::object()) {
  json body{{"text", "ROMEO:"},
            {"stream", stream},
            {"return_logprob", true},
            {"top_logprobs_num", 2},
            {"sampling_params", {{"max_new_tokens", kNewTokens}, {"temperature", 0}}}};
  body.update(extra);
  return body.dump();
}

// The JSON events of a stream, checked to end with [DONE].
std::vector<json> JsonEvents(const std::vector<std::string>& events) {
  EXPECT_FALSE(events.empty());
  if (events.empty()) return {};
  EXPECT_EQ(events.back(), "[DONE]");
  std::vector<json> out;
  for (size_t i = 0; i + 1 < events.size(); ++i) out.push_back(json::parse(events[i]));
  return out;
}

// The segments of one generation joined: text, output_ids and output logprob entries.
struct Joined {
  std::string text;
  json output_ids = json::array();
  json token_logprobs = json::array();
  json top_logprobs = json::array();
};

void Join(const json& event, Joined& joined) {
  joined.text += event["text"].get<std::string>();
  for (const json& id : event["output_ids"]) joined.output_ids.push_back(id);
  for (const json& e : event["meta_info"]["output_token_logprobs"]) joined.token_logprobs.push_back(e);
  for (const json& e : event["meta_info"]["output_top_logprobs"]) joined.top_logprobs.push_back(e);
}

class IncrementalStreamTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess({"--incremental-streaming-output"}); }
  static void TearDownTestSuite() { delete server_; }
  static ServerProcess* server_;
};
ServerProcess* IncrementalStreamTest::server_ = nullptr;

TEST_F(IncrementalStreamTest, ReportedInServerInfo) {
  ASSERT_TRUE(server_->running()) << server_->log();
  EXPECT_EQ(json::parse(Get(*server_, "/get_server_info").body)["incremental_streaming_output"], true);
}

// Every event carries only what is new, the segments join to exactly the non-streamed answer,
// and the counts in meta_info stay cumulative (as SGLang's do).
TEST_F(IncrementalStreamTest, SegmentsJoinToTheWholeAnswer) {
  auto whole = Post(*server_, "/generate", Request(false));
  ASSERT_EQ(whole.status_code, 200) << whole.body;
  const json full = json::parse(whole.body);
  ASSERT_EQ(full["output_ids"].size(), size_t(kNewTokens));

  const std::vector<json> events = JsonEvents(StreamEvents(*server_, "/generate", Request(true)));
  ASSERT_GE(events.size(), size_t(kNewTokens) / 2) << "events must arrive while decoding, not at the end";
  Joined joined;
  size_t tokens_so_far = 0;
  for (const json& e : events) {
    const size_t n = e["output_ids"].size();
    EXPECT_EQ(e["meta_info"]["output_token_logprobs"].size(), n) << e.dump();
    EXPECT_EQ(e["meta_info"]["output_top_logprobs"].size(), n) << e.dump();
    tokens_so_far += n;
    EXPECT_EQ(e["meta_info"]["completion_tokens"], tokens_so_far) << e.dump();
    EXPECT_EQ(e["meta_info"]["prompt_tokens"], full["meta_info"]["prompt_tokens"]);
    Join(e, joined);
  }
  EXPECT_EQ(joined.text, full["text"]);
  EXPECT_EQ(joined.output_ids, full["output_ids"]);
  EXPECT_EQ(joined.token_logprobs, full["meta_info"]["output_token_logprobs"]);
  EXPECT_EQ(joined.top_logprobs, full["meta_info"]["output_top_logprobs"]);
  EXPECT_EQ(events.back()["meta_info"]["finish_reason"], full["meta_info"]["finish_reason"]);
}

// The size of an event follows the tokens it carries, not its position: late events are no
// larger than early ones (a cumulative stream's last event is many times its first).
TEST_F(IncrementalStreamTest, EventSizeDoesNotGrowWithPosition) {
  const std::vector<std::string> events = StreamEvents(*server_, "/generate", Request(true));
  ASSERT_GE(events.size(), size_t(kNewTokens) / 2);
  size_t max_size = 0, sum_size = 0;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    EXPECT_LE(json::parse(events[i])["output_ids"].size(), 2u) << events[i];
    max_size = std::max(max_size, events[i].size());
    sum_size += events[i].size();
  }
  const size_t first_size = events[0].size();
  EXPECT_LE(max_size, 2 * first_size) << "first event " << first_size << " bytes, largest " << max_size;
  EXPECT_LE(events[events.size() - 2].size(), 2 * first_size);
  // Every event of a cumulative stream repeats the previous ones, so its total grows with the
  // square of the length; here it is linear.
  EXPECT_LE(sum_size, (events.size() - 1) * 2 * first_size);
}

// A stop string is held back until it can no longer match, so no segment has to be taken back.
TEST_F(IncrementalStreamTest, StopStringsTrimLikeTheWholeAnswer) {
  const json stop{{"sampling_params", {{"max_new_tokens", kNewTokens}, {"temperature", 0}, {"stop", "king"}}}};
  auto whole = Post(*server_, "/generate", Request(false, stop));
  ASSERT_EQ(whole.status_code, 200) << whole.body;
  const json full = json::parse(whole.body);
  Joined joined;
  for (const json& e : JsonEvents(StreamEvents(*server_, "/generate", Request(true, stop)))) Join(e, joined);
  EXPECT_EQ(joined.text, full["text"]);
  EXPECT_EQ(joined.output_ids, full["output_ids"]);
  EXPECT_EQ(full["meta_info"]["finish_reason"]["matched"], "king") << full.dump();
  EXPECT_GT(joined.text.size(), 10u);
  EXPECT_EQ(joined.text.find("kin"), std::string::npos) << joined.text;
}

// A batch streams events with their `index`; each generation's segments join to its answer.
TEST_F(IncrementalStreamTest, BatchSegmentsJoinPerIndex) {
  const json batch{{"text", {"ROMEO:", "JULIET:"}}};
  auto whole = Post(*server_, "/generate", Request(false, batch));
  ASSERT_EQ(whole.status_code, 200) << whole.body;
  const json full = json::parse(whole.body);
  ASSERT_EQ(full.size(), 2u);
  std::vector<Joined> joined(2);
  for (const json& e : JsonEvents(StreamEvents(*server_, "/generate", Request(true, batch)))) {
    Join(e, joined.at(e["index"].get<size_t>()));
  }
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(joined[i].text, full[i]["text"]) << i;
    EXPECT_EQ(joined[i].output_ids, full[i]["output_ids"]) << i;
    EXPECT_EQ(joined[i].token_logprobs, full[i]["meta_info"]["output_token_logprobs"]) << i;
  }
}

// Without the flag every event carries the answer so far: each extends the one before, and the
// last is the whole answer.
TEST(CumulativeStream, EventsCarryTheAnswerSoFar) {
  ServerProcess server;
  ASSERT_TRUE(server.running()) << server.log();
  EXPECT_EQ(json::parse(Get(server, "/get_server_info").body)["incremental_streaming_output"], false);
  auto whole = Post(server, "/generate", Request(false));
  ASSERT_EQ(whole.status_code, 200) << whole.body;
  const json full = json::parse(whole.body);

  const std::vector<json> events = JsonEvents(StreamEvents(server, "/generate", Request(true)));
  ASSERT_GE(events.size(), 2u);
  std::string previous_text;
  size_t previous_ids = 0;
  for (const json& e : events) {
    const std::string text = e["text"].get<std::string>();
    EXPECT_EQ(text.compare(0, previous_text.size(), previous_text), 0) << text;
    const json& ids = e["output_ids"];
    EXPECT_GE(ids.size(), previous_ids);
    EXPECT_EQ(e["meta_info"]["output_token_logprobs"].size(), ids.size());
    EXPECT_EQ(e["meta_info"]["completion_tokens"], ids.size());
    previous_text = text;
    previous_ids = ids.size();
  }
  EXPECT_EQ(events.back()["text"], full["text"]);
  EXPECT_EQ(events.back()["output_ids"], full["output_ids"]);
  EXPECT_EQ(events.back()["meta_info"]["output_token_logprobs"], full["meta_info"]["output_token_logprobs"]);
  EXPECT_EQ(events.back()["meta_info"]["output_top_logprobs"], full["meta_info"]["output_top_logprobs"]);
}

// The batch client reads /get_server_info's incremental_streaming_output and joins the segments:
// its output lines are those it writes from a cumulative server, but for the server ids.
TEST(IncrementalStreamBatch, BatchWritesTheSameAnswersFromEitherServer) {
  testing::TempDir dir;
  const std::string in = dir.path() + "/in.jsonl";
  std::ofstream(in) << testing::MakeBatchInput(6);
  auto run = [&](const std::vector<std::string>& flags, const std::string& name) {
    ServerProcess server(flags);
    EXPECT_TRUE(server.running()) << server.log();
    const std::string out = dir.path() + "/" + name + ".jsonl", log = dir.path() + "/" + name + ".log";
    EXPECT_EQ(testing::WaitExit(testing::SpawnMlaserve(testing::BatchArgs(in, out, server.Url(""), 24, 2), log)), 0)
        << testing::ReadTextFile(log);
    return std::regex_replace(testing::ReadTextFile(out), std::regex(R"("server_id":"[^"]*")"), "\"server_id\":\"\"");
  };
  const std::string cumulative = run({}, "cumulative");
  EXPECT_EQ(testing::IdCounts(cumulative).size(), 6u) << cumulative;
  EXPECT_EQ(run({"--incremental-streaming-output"}, "incremental"), cumulative);
}

}  // namespace
}  // namespace mlaserve

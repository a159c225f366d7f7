// The batch run loop against real servers: an outage longer than --server-wait-timeout pauses
// the run (said when it starts and ends, its wall time in the summary) and fails nothing;
// failed records are retried on rerun; SIGINT / SIGTERM stop cleanly and a rerun finishes
// byte-identical; a server started with a relative --model-path serves the tokenizer to a
// client in another directory.
#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "support/batch_job.h"
#include "support/server_process.h"
#include "support/wait_for.h"

namespace mlaserve {
namespace {

using nlohmann::json;
using testing::BatchArgs;
using testing::IdCounts;
using testing::MakeBatchInput;
using testing::ReadTextFile;
using testing::ServerLaunch;
using testing::ServerProcess;
using testing::SpawnMlaserve;
using testing::TempDir;
using testing::WaitExit;
using testing::WaitFor;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

bool Contains(const std::string& path, const std::string& text) {
  return ReadTextFile(path).find(text) != std::string::npos;
}

// The largest "N/total done" a progress line of the log shows.
int DoneSoFar(const std::string& log) {
  const std::string text = ReadTextFile(log);
  static const std::regex re("batch: ([0-9]+)/[0-9]+ done");
  int most = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
    most = std::max(most, std::stoi((*it)[1]));
  }
  return most;
}

double SummarySeconds(const std::string& log, const std::string& before, const std::string& after) {
  std::smatch m;
  const std::regex re(before + "([0-9.]+) s" + after);
  return std::regex_search(log, m, re) ? std::stod(m[1]) : -1;
}

std::string Url(const ServerProcess& s) { return "http://127.0.0.1:" + std::to_string(s.port()); }

TEST(BatchOutage, LongerThanServerWaitTimeoutPausesTheRunAndFailsNothing) {
  TempDir dir;
  const std::string in = dir.path() + "/in.jsonl", out = dir.path() + "/out.jsonl", log = dir.path() + "/out.log";
  std::ofstream(in) << MakeBatchInput(16);
  auto server = std::make_unique<ServerProcess>();
  ASSERT_GT(server->port(), 0);
  const int port = server->port();
  std::vector<std::string> args = BatchArgs(in, out, Url(*server), 200, 4);
  args.insert(args.end(), {"--server-wait-timeout", "1", "--max-retries", "1", "--progress-interval", "0.1"});
  const pid_t client = SpawnMlaserve(args, log);
  ASSERT_TRUE(WaitFor([&] { return DoneSoFar(log) >= 1; })) << ReadTextFile(log);

  server->Signal(SIGKILL);
  server->Wait();
  const Clock::time_point killed = Clock::now();
  // Down longer than --server-wait-timeout: the client has said so, and said it again.
  ASSERT_TRUE(WaitFor([&] { return Contains(log, "no server answers /health"); })) << ReadTextFile(log);
  ASSERT_TRUE(WaitFor([&] { return Contains(log, "still no server answers /health"); })) << ReadTextFile(log);
  EXPECT_TRUE(WaitFor([&] { return Contains(log, "paused: no server for"); })) << ReadTextFile(log);
  server = std::make_unique<ServerProcess>(ServerLaunch{.port = port}, std::vector<std::string>{});
  ASSERT_EQ(server->port(), port);
  const double real_outage_s = SecondsSince(killed);  // to the restarted server's readiness
  ASSERT_EQ(WaitExit(client), 0) << ReadTextFile(log);

  const std::string text = ReadTextFile(log);
  const std::map<std::string, int> counts = IdCounts(ReadTextFile(out));
  EXPECT_EQ(counts.size(), 16u);
  for (const auto& [id, n] : counts) EXPECT_EQ(n, 1) << id;
  EXPECT_NE(text.find("16 done, 0 failed"), std::string::npos) << text;
  EXPECT_EQ(ReadTextFile(dir.path() + "/out.errors.jsonl"), "");
  EXPECT_NE(text.find("again after"), std::string::npos) << text;
  // The outage's wall time, once (not summed over the 4 waiting records): up to the restarted
  // server's readiness, plus at most one probe backoff (1 s).
  const double reported_s = SummarySeconds(text, "no server answered 1 times, for ", " \\(wall time\\)");
  EXPECT_GT(reported_s, real_outage_s - 0.5) << text;
  EXPECT_LT(reported_s, real_outage_s + 1.5) << text;
  std::fprintf(stderr, "[outage] real %.2f s (kill to restarted server ready), reported %.2f s\n%s", real_outage_s,
               reported_s, text.c_str());
}

TEST(BatchOutage, NoServerAtStartIsAWaitNotAnError) {
  int port = 0;
  {
    ServerProcess probe;  // a port that was just free, and is free again
    port = probe.port();
  }
  ASSERT_GT(port, 0);
  TempDir dir;
  const std::string in = dir.path() + "/in.jsonl", out = dir.path() + "/out.jsonl", log = dir.path() + "/out.log";
  std::ofstream(in) << MakeBatchInput(4);
  std::vector<std::string> args = BatchArgs(in, out, "http://127.0.0.1:" + std::to_string(port), 16, 2);
  args.insert(args.end(), {"--server-wait-timeout", "1"});
  const pid_t client = SpawnMlaserve(args, log);
  ASSERT_TRUE(WaitFor([&] { return Contains(log, "no server answers /health"); })) << ReadTextFile(log);
  ServerProcess server(ServerLaunch{.port = port}, {});
  ASSERT_EQ(server.port(), port);
  ASSERT_EQ(WaitExit(client), 0) << ReadTextFile(log);
  EXPECT_EQ(IdCounts(ReadTextFile(out)).size(), 4u);
}

TEST(BatchOutage, OneOfTwoEndpointsDownIsSaidAndDoesNotPauseTheRun) {
  ServerProcess a, b;
  ASSERT_GT(a.port(), 0);
  ASSERT_GT(b.port(), 0);
  TempDir dir;
  const std::string in = dir.path() + "/in.jsonl", out = dir.path() + "/out.jsonl", log = dir.path() + "/out.log";
  std::ofstream(in) << MakeBatchInput(16);
  std::vector<std::string> args = BatchArgs(in, out, Url(a), 200, 4);
  args.insert(args.end(), {"--endpoint", Url(b), "--progress-interval", "0.05"});
  const pid_t client = SpawnMlaserve(args, log);
  ASSERT_TRUE(WaitFor([&] { return DoneSoFar(log) >= 1; })) << ReadTextFile(log);
  b.Signal(SIGKILL);
  b.Wait();
  ASSERT_EQ(WaitExit(client), 0) << ReadTextFile(log);
  const std::string text = ReadTextFile(log);
  EXPECT_NE(text.find(Url(b) + " broke a request"), std::string::npos) << text;
  EXPECT_EQ(text.find("no server answers /health"), std::string::npos) << text;
  EXPECT_NE(text.find("16 done, 0 failed"), std::string::npos) << text;
  EXPECT_EQ(IdCounts(ReadTextFile(out)).size(), 16u);
}

TEST(BatchOutage, FailedRecordsAreRetriedOnRerunUnlessNoRetryFailed) {
  ServerProcess server;
  ASSERT_GT(server.port(), 0);
  TempDir dir;
  const std::string in = dir.path() + "/in.jsonl", out = dir.path() + "/out.jsonl";
  // A prompt longer than the model's context (2048): the server refuses it (400), a record error.
  std::string long_prompt;
  for (int i = 0; i < 3000; ++i) long_prompt += "word ";
  std::ofstream(in) << json{{"id", "ok"}, {"prompt", "Hail"}}.dump() << "\n"
                    << json{{"id", "too-long"}, {"prompt", long_prompt}}.dump() << "\n";
  const std::vector<std::string> args = BatchArgs(in, out, Url(server), 8, 2);
  EXPECT_EQ(WaitExit(SpawnMlaserve(args, dir.path() + "/1.log")), 1) << ReadTextFile(dir.path() + "/1.log");
  EXPECT_NE(ReadTextFile(dir.path() + "/out.errors.jsonl").find("too-long"), std::string::npos);

  EXPECT_EQ(WaitExit(SpawnMlaserve(args, dir.path() + "/2.log")), 1);
  const std::string rerun = ReadTextFile(dir.path() + "/2.log");
  EXPECT_NE(rerun.find("retrying 1 records that failed"), std::string::npos) << rerun;
  EXPECT_NE(rerun.find("this run: 0 done, 1 failed"), std::string::npos) << rerun;

  std::vector<std::string> keep = args;
  keep.push_back("--no-retry-failed");
  EXPECT_EQ(WaitExit(SpawnMlaserve(keep, dir.path() + "/3.log")), 1);
  EXPECT_NE(ReadTextFile(dir.path() + "/3.log").find("nothing to do"), std::string::npos)
      << ReadTextFile(dir.path() + "/3.log");
  EXPECT_EQ(IdCounts(ReadTextFile(out)).size(), 1u);
}

// A server and 16 records, and a client signalled mid-run.
class BatchSignals : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GT(server_.port(), 0);
    std::ofstream(in_) << MakeBatchInput(16);
  }
  std::vector<std::string> Args(const std::string& out) const {
    std::vector<std::string> args = BatchArgs(in_, out, Url(server_), 200, 4);
    args.insert(args.end(), {"--progress-interval", "0.05"});
    return args;
  }
  // Signals the client once it has finished a record (so checkpoints exist and work remains);
  // returns its exit code and how long it took to exit.
  static std::pair<int, double> SignalMidRun(const std::vector<std::string>& args, const std::string& log, int sig) {
    const pid_t client = SpawnMlaserve(args, log);
    EXPECT_TRUE(WaitFor([&] { return DoneSoFar(log) >= 1; })) << ReadTextFile(log);
    kill(client, sig);
    const Clock::time_point sent = Clock::now();
    const int rc = WaitExit(client);
    return {rc, SecondsSince(sent)};
  }

  ServerProcess server_;
  TempDir dir_;
  const std::string in_ = dir_.path() + "/in.jsonl";
};

TEST_F(BatchSignals, SigintCheckpointsSummarizesAndTheRerunIsByteIdentical) {
  const std::string ref = dir_.path() + "/ref.jsonl", out = dir_.path() + "/out.jsonl", log = dir_.path() + "/out.log";
  ASSERT_EQ(WaitExit(SpawnMlaserve(Args(ref), dir_.path() + "/ref.log")), 0);

  const auto [rc, exit_s] = SignalMidRun(Args(out), log, SIGINT);
  const std::string text = ReadTextFile(log);
  EXPECT_EQ(rc, 130) << text;
  EXPECT_LT(exit_s, 2.0) << text;
  EXPECT_NE(text.find("stopped by SIGINT"), std::string::npos) << text;
  EXPECT_NE(text.find("rerun the same command to resume"), std::string::npos) << text;
  EXPECT_NE(text.find("this run: "), std::string::npos) << text;
  const size_t lines_before = IdCounts(ReadTextFile(out)).size();
  EXPECT_LT(lines_before, 16u);

  const std::string rerun_log = dir_.path() + "/rerun.log";
  ASSERT_EQ(WaitExit(SpawnMlaserve(Args(out), rerun_log)), 0) << ReadTextFile(rerun_log);
  const std::map<std::string, int> counts = IdCounts(ReadTextFile(out));
  EXPECT_EQ(counts.size(), 16u);
  for (const auto& [id, n] : counts) EXPECT_EQ(n, 1) << id;
  EXPECT_EQ(ReadTextFile(out), ReadTextFile(ref));
  std::fprintf(stderr, "[sigint] exit %d after %.2f s, %zu of 16 lines before the rerun; rerun: %d records resumed\n%s",
               rc, exit_s, lines_before, testing::SummaryNumber(ReadTextFile(rerun_log), "wall time\\);"),
               text.c_str());
}

TEST_F(BatchSignals, SigtermExits143WithASummary) {
  const std::string log = dir_.path() + "/out.log";
  const auto [rc, exit_s] = SignalMidRun(Args(dir_.path() + "/out.jsonl"), log, SIGTERM);
  const std::string text = ReadTextFile(log);
  EXPECT_EQ(rc, 143) << text;
  EXPECT_LT(exit_s, 2.0) << text;
  EXPECT_NE(text.find("stopped by SIGTERM"), std::string::npos) << text;
  std::fprintf(stderr, "[sigterm] exit %d after %.2f s\n", rc, exit_s);
}

TEST(BatchServerTokenizer, RelativeModelPathServerAndAClientElsewhereWithoutTokenizer) {
  ServerProcess server(ServerLaunch{.model_path = "models/shakespeare-mla", .cwd = MLASERVE_SOURCE_DIR}, {});
  ASSERT_GT(server.port(), 0) << server.log();
  const json info = json::parse(testing::Get(server, "/get_model_info").body);
  EXPECT_EQ(info["model_path"], testing::BundledModelPath()) << info.dump();
  EXPECT_EQ(testing::Get(server, "/tokenizer_file/tokenizer.json").status_code, 200);
  EXPECT_EQ(testing::Get(server, "/tokenizer_file/config.json").status_code, 404);

  TempDir dir;
  const std::string in = dir.path() + "/in.jsonl";
  std::ofstream(in) << MakeBatchInput(6);
  // From the temp dir, where the relative path means nothing; no --tokenizer.
  const std::string log = dir.path() + "/fetched.log";
  ASSERT_EQ(WaitExit(SpawnMlaserve(BatchArgs("in.jsonl", "fetched.jsonl", Url(server), 24, 3), log, dir.path())), 0)
      << ReadTextFile(log);
  EXPECT_EQ(ReadTextFile(log).find("reading the tokenizer from the model_path"), std::string::npos) << ReadTextFile(log);
  // The same as with the model's tokenizer read from disk.
  std::vector<std::string> args = BatchArgs(in, dir.path() + "/local.jsonl", Url(server), 24, 3);
  args.insert(args.end(), {"--tokenizer", testing::BundledModelPath()});
  ASSERT_EQ(WaitExit(SpawnMlaserve(args, dir.path() + "/local.log")), 0) << ReadTextFile(dir.path() + "/local.log");
  EXPECT_EQ(IdCounts(ReadTextFile(dir.path() + "/fetched.jsonl")).size(), 6u);
  EXPECT_EQ(ReadTextFile(dir.path() + "/fetched.jsonl"), ReadTextFile(dir.path() + "/local.jsonl"));
}

}  // namespace
}  // namespace mlaserve

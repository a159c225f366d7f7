// The batch tool and deterministic inference (docs/batch.md, "Determinism"): against a server
// without --enable-deterministic-inference it warns, in one line, that a resumed record may
// differ from an uninterrupted run; against a deterministic server it does not; the flag itself
// is the server's with --endpoint. (In process it turns the mode on itself:
// BatchKill.InProcessEngineWritesWhatTheServerWrites checks its start-up line.)
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "support/batch_job.h"
#include "support/server_process.h"

namespace mlaserve {
namespace {

using nlohmann::json;
using testing::ReadTextFile;
using testing::ServerLaunch;
using testing::ServerProcess;
using testing::TempDir;

constexpr const char* kWarning = "batch: warning: not in deterministic mode";

size_t Occurrences(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

// One record of two tokens through `server`; returns the client's log.
std::string RunOneRecord(const ServerProcess& server, const std::string& dir) {
  const std::string in = dir + "/in.jsonl", out = dir + "/out.jsonl", log = dir + "/batch.log";
  std::ofstream(in) << testing::MakeBatchInput(1);
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port());
  EXPECT_EQ(testing::WaitExit(testing::SpawnMlaserve(testing::BatchArgs(in, out, url, 2, 1), log)), 0)
      << ReadTextFile(log);
  EXPECT_EQ(testing::IdCounts(ReadTextFile(out)).size(), 1u);
  return ReadTextFile(log);
}

TEST(BatchDeterminism, WarnsOnceAgainstANonDeterministicServerOnly) {
  ServerProcess fast(ServerLaunch{.deterministic = false}, {});
  ServerProcess exact(ServerLaunch{.deterministic = true}, {});
  ASSERT_GT(fast.port(), 0) << fast.log();
  ASSERT_GT(exact.port(), 0) << exact.log();
  EXPECT_EQ(json::parse(testing::Get(fast, "/get_server_info").body)["enable_deterministic_inference"], false);
  EXPECT_EQ(json::parse(testing::Get(exact, "/get_server_info").body)["enable_deterministic_inference"], true);

  TempDir a, b;
  const std::string against_fast = RunOneRecord(fast, a.path());
  EXPECT_EQ(Occurrences(against_fast, kWarning), 1u) << against_fast;
  EXPECT_NE(against_fast.find(std::to_string(fast.port()) + "; a record resumed mid-generation continues validly"),
            std::string::npos)
      << against_fast;
  const std::string against_exact = RunOneRecord(exact, b.path());
  EXPECT_EQ(Occurrences(against_exact, kWarning), 0u) << against_exact;
}

TEST(BatchDeterminism, TheFlagIsTheServersWithEndpoint) {
  TempDir dir;
  const std::string in = dir.path() + "/in.jsonl";
  std::ofstream(in) << testing::MakeBatchInput(1);
  auto r = testing::RunMlaserve("batch --input " + testing::ShellQuote(in) + " --output " +
                                testing::ShellQuote(dir.path() + "/out.jsonl") +
                                " --endpoint http://127.0.0.1:9 --enable-deterministic-inference");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--enable-deterministic-inference is the server's mode with --endpoint"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace mlaserve

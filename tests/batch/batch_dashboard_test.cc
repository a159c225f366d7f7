// `mlaserve batch --dashboard-port`: the run's page and data from the batch process itself,
// while it waits for a server (the data say so; the page in headless chromium says so, with no
// console errors), then the run completes once a server comes; and the data's arithmetic.
#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "batch/batch_dashboard.h"
#include "server/http_client.h"
#include "support/batch_job.h"
#include "support/server_process.h"
#include "support/wait_for.h"

namespace mlaserve {
namespace {

using nlohmann::json;
using testing::ReadTextFile;
using testing::ServerLaunch;
using testing::ServerProcess;
using testing::WaitFor;
using Clock = std::chrono::steady_clock;

TEST(BatchDashboard, ShowsTheWaitForAServerThenTheRunCompletes) {
  int port = 0;
  {
    ServerProcess probe;  // a port that was just free, and is free again
    port = probe.port();
  }
  ASSERT_GT(port, 0);
  testing::TempDir dir;
  const std::string in = dir.path() + "/in.jsonl", out = dir.path() + "/out.jsonl", log = dir.path() + "/out.log";
  std::ofstream(in) << testing::MakeBatchInput(4);
  std::vector<std::string> args = testing::BatchArgs(in, out, "http://127.0.0.1:" + std::to_string(port), 16, 2);
  args.insert(args.end(), {"--dashboard-port", "0"});
  const pid_t client = testing::SpawnMlaserve(args, log);
  struct KillUnlessReaped {  // a failed ASSERT must not leave the client waiting for a server forever
    pid_t pid;
    bool reaped = false;
    ~KillUnlessReaped() {
      if (!reaped) {
        kill(pid, SIGKILL);
        testing::WaitExit(pid);
      }
    }
  } guard{client};
  std::smatch m;
  const std::regex line("batch: dashboard on (http://127\\.0\\.0\\.1:[0-9]+)/dashboard");
  std::string text;
  ASSERT_TRUE(WaitFor([&] { text = ReadTextFile(log); return std::regex_search(text, m, line); })) << text;
  const std::string base = m[1];
  ASSERT_TRUE(WaitFor([&] { return ReadTextFile(log).find("no server answers /health") != std::string::npos; }))
      << ReadTextFile(log);
  json data;
  ASSERT_TRUE(WaitFor([&] {
    auto r = HttpClient().Request("GET", base + "/dashboard/data", "", {}, 10000);
    if (!r.ok() || r->status_code != 200) return false;
    data = json::parse(r->body);
    return data["down_for_s"].get<double>() > 0;
  }));
  EXPECT_EQ(data["kind"], "batch");
  EXPECT_EQ(data["done"], 0);
  EXPECT_TRUE(data["eta_s"].is_null()) << data.dump();  // paused: no rate to project from
  auto page = HttpClient().Request("GET", base + "/dashboard", "", {}, 10000);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->status_code, 200);
  EXPECT_NE(page->body.find("dashboardState"), std::string::npos);
  EXPECT_EQ(HttpClient().Request("GET", base + "/generate", "", {}, 10000)->status_code, 404);
  EXPECT_EQ(HttpClient().Request("POST", base + "/dashboard/data", "{}", {}, 10000)->status_code, 405);

  // The page in a browser, where one can be started (the skip says why; the rest of the test runs).
  const std::string modules = std::string(MLASERVE_SOURCE_DIR) + "/tests/node/node_modules/playwright-core";
  const auto r = std::filesystem::exists(modules) ? testing::RunNodeScript("dashboard.mjs", {"--batch", base})
                                                  : std::nullopt;
  if (!r || r->exit_code == 2) {
    std::fprintf(stderr, "BatchDashboard: the batch page was not opened in a browser: %s\n",
                 !r ? "node or playwright-core is missing (scripts/setup.sh installs them)" : r->out.c_str());
  } else {
    EXPECT_EQ(r->exit_code, 0) << r->out << r->err;
    EXPECT_NE(r->out.find("OK:"), std::string::npos) << r->out << r->err;
  }

  ServerProcess server(ServerLaunch{.port = port}, {});
  ASSERT_EQ(server.port(), port);
  const int exit_code = testing::WaitExit(client);
  guard.reaped = true;
  ASSERT_EQ(exit_code, 0) << ReadTextFile(log);
  EXPECT_EQ(testing::IdCounts(ReadTextFile(out)).size(), 4u);
}

// --dashboard-host without a port, or a port for a dry run, would be ignored: refused.
TEST(BatchDashboard, FlagsThatWouldBeIgnoredAreRefused) {
  auto r = testing::RunMlaserve("batch --input x.jsonl --output y.jsonl --endpoint http://127.0.0.1:1 --dashboard-host 0.0.0.0");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--dashboard-host needs --dashboard-port"), std::string::npos) << r.err;
  r = testing::RunMlaserve("batch --input x.jsonl --dry-run --dashboard-port 0");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("a --dry-run has no run to show"), std::string::npos) << r.err;
}

TEST(BatchDashboard, DataFromTheRunnersCounters) {
  batch::RunnerStats stats;
  stats.total = 10;
  stats.done = 4;
  stats.done_this_run = 2;
  stats.failed = 1;
  stats.running = 2;
  stats.outages = 1;
  stats.outage_ms = 2500;
  stats.provenance.Add({{.tokens = 30, .kv_cache_dtype = "fp8_e4m3", .server_id = "srv-a"},
                        {.tokens = 10, .kv_cache_dtype = "bf16", .server_id = "srv-b"}});
  stats.provenance.Add({{.tokens = 5, .kv_cache_dtype = "fp8_e4m3", .server_id = "srv-b"}});
  const auto now = Clock::now();
  json d = batch::BatchDashboardData(stats, now - std::chrono::seconds(10), now);
  EXPECT_EQ(d["left"], 5);
  EXPECT_NEAR(d["eta_s"].get<double>(), 25.0, 1e-6);  // 5 left at 2 per 10 s
  EXPECT_NEAR(d["outage_s"].get<double>(), 2.5, 1e-9);
  EXPECT_EQ(d["tokens_by_kv_format"], json({{"bf16", 10}, {"fp8_e4m3", 35}}));
  EXPECT_EQ(d["tokens_by_server"], json({{"srv-a", 30}, {"srv-b", 15}}));
  // During an outage: no ETA, and the outage so far counts.
  stats.down_since_ms = std::chrono::duration_cast<std::chrono::milliseconds>((now - std::chrono::seconds(3)).time_since_epoch()).count();
  d = batch::BatchDashboardData(stats, now - std::chrono::seconds(10), now);
  EXPECT_TRUE(d["eta_s"].is_null());
  EXPECT_NEAR(d["down_for_s"].get<double>(), 3.0, 1e-3);
  EXPECT_NEAR(d["outage_s"].get<double>(), 5.5, 1e-3);
}

}  // namespace
}  // namespace mlaserve

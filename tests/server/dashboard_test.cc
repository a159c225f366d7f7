// The live dashboard (GET /dashboard, /dashboard/data) on the real binary: the API key (header,
// or ?key= for the page alone), the data's fields and its requests table while a request runs
// (never the prompt's text), the latency window and the percentiles over it; and the page in a
// real browser (tests/node/dashboard.mjs: headless chromium via playwright-core) following
// /metrics under load with no console errors.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "server/http_client.h"
#include "server/recent_latencies.h"
#include "server/request_board.h"
#include "support/run_binary.h"
#include "support/server_process.h"
#include "support/wait_for.h"

namespace mlaserve {
namespace {

using nlohmann::json;
using testing::ServerProcess;

constexpr const char* kKey = "dash-key";

HttpResponse Get(const ServerProcess& server, const std::string& path, bool with_key) {
  std::vector<std::pair<std::string, std::string>> headers;
  if (with_key) headers.push_back({"Authorization", std::string("Bearer ") + kKey});
  auto r = HttpClient().Request("GET", server.Url(path), "", headers, 30000);
  EXPECT_TRUE(r.ok()) << r.error();
  return r.ok() ? *r : HttpResponse{};
}

TEST(Dashboard, KeyDataAndRequestsTable) {
  ServerProcess server({"--api-key", kKey, "--enable-metrics"});
  EXPECT_EQ(Get(server, "/dashboard", false).status_code, 401);
  EXPECT_EQ(Get(server, "/dashboard?key=wrong", false).status_code, 401);
  const HttpResponse page = Get(server, "/dashboard?key=dash%2Dkey", false);  // percent-encoded
  EXPECT_EQ(page.status_code, 200);
  EXPECT_NE(page.body.find("dashboardState"), std::string::npos);
  EXPECT_EQ(Get(server, "/dashboard", true).status_code, 200);
  EXPECT_EQ(Get(server, "/dashboard/data?key=dash-key", false).status_code, 401);  // the page's key is for the page

  const json idle = json::parse(Get(server, "/dashboard/data", true).body);
  for (const char* field : {"uptime_s", "kv_cache_dtype", "max_total_num_tokens", "num_running_reqs", "num_queue_reqs",
                            "num_used_tokens", "prompt_tokens_total", "generation_tokens_total", "cached_tokens_total",
                            "num_retracted_requests_total", "latency", "requests", "tp", "speculative_algorithm"}) {
    EXPECT_TRUE(idle.contains(field)) << field << " " << idle.dump();
  }
  EXPECT_EQ(idle["requests"]["total"], 0);
  EXPECT_EQ(idle["latency"]["requests"], 0);
  EXPECT_EQ(idle["max_total_num_tokens"], 8192);

  // A long streamed request, held open while the test looks: once its first tokens have arrived,
  // the table lists it decoding (its id, no text); the client then leaves (the request ends,
  // aborted), and the table empties while the latency window holds it.
  const std::string marker = "SECRET-PROMPT-TEXT";
  json during;
  const Status streamed = HttpClient().Stream(
      "POST", server.Url("/generate"),
      R"({"rid": "dash-1", "stream": true, "text": ")" + marker + R"( KING:", "sampling_params": )"
      R"({"max_new_tokens": 1900, "ignore_eos": true}})",
      {{"Authorization", std::string("Bearer ") + kKey}}, 60000, [&](std::string_view) {
        testing::WaitFor([&] {
          during = json::parse(Get(server, "/dashboard/data", true).body);
          return during["requests"]["total"] == 1 && during["requests"]["rows"][0]["state"] == "decoding";
        });
        return false;  // leave
      });
  EXPECT_TRUE(streamed.ok()) << streamed.message();
  ASSERT_EQ(during["requests"]["total"], 1) << during.dump();
  const json row = during["requests"]["rows"][0];
  EXPECT_EQ(row["rid"], "dash-1");
  EXPECT_EQ(row["state"], "decoding");
  EXPECT_GT(row["prompt_tokens"].get<int>(), 0);
  EXPECT_GT(row["completion_tokens"].get<int>(), 0);
  EXPECT_EQ(during.dump().find(marker), std::string::npos);
  json after;
  testing::WaitFor([&] {  // until the server has noticed the client left and the request ended
    after = json::parse(Get(server, "/dashboard/data", true).body);
    return after["requests"]["total"] == 0;
  });
  EXPECT_EQ(after["requests"]["total"], 0) << after.dump();
  EXPECT_EQ(after["latency"]["requests"], 1);
  EXPECT_GT(after["latency"]["ttft_p50_s"].get<double>(), 0.0);
}

// The charts shown only where enabled read real figures: speculative decoding's verify steps
// and accept length, and rank 0's collectives under --tp-size.
TEST(Dashboard, SpeculativeAndTensorParallelFigures) {
  const std::string body = R"({"text": "To be, or not to be, that is the question. To be, or not to be, that is",
                               "sampling_params": {"max_new_tokens": 64, "temperature": 0}})";
  {
    ServerProcess spec({"--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "4", "--decode-log-interval", "1"});
    ASSERT_EQ(HttpClient().Request("POST", spec.Url("/generate"), body, {}, 60000)->status_code, 200);
    const json d = json::parse(HttpClient().Request("GET", spec.Url("/dashboard/data"), "", {}, 10000)->body);
    EXPECT_EQ(d["speculative_algorithm"], "NGRAM");
    EXPECT_GT(d["spec_verify_steps_total"].get<int64_t>(), 0) << d.dump();
    EXPECT_TRUE(d["tp"].is_null());
  }
  ServerProcess tp(testing::ServerLaunch{.tp_ranks = 2}, {});
  ASSERT_TRUE(tp.running()) << tp.log();
  const json before = json::parse(HttpClient().Request("GET", tp.Url("/dashboard/data"), "", {}, 10000)->body);
  ASSERT_EQ(HttpClient().Request("POST", tp.Url("/generate"), body, {}, 60000)->status_code, 200);
  const json after = json::parse(HttpClient().Request("GET", tp.Url("/dashboard/data"), "", {}, 10000)->body);
  ASSERT_FALSE(after["tp"].is_null()) << after.dump();
  EXPECT_EQ(after["tp"]["size"], 2);
  EXPECT_GT(after["tp"]["rank0_collective_calls_total"].get<int64_t>(), before["tp"]["rank0_collective_calls_total"].get<int64_t>());
  EXPECT_GT(after["tp"]["rank0_bytes_received_total"].get<int64_t>(), before["tp"]["rank0_bytes_received_total"].get<int64_t>());
  // Every rank's received bytes, as rank 0 counts them: both ranks received something, rank 0's
  // own count is the one above.
  ASSERT_EQ(after["tp"]["bytes_received_total_by_rank"].size(), 2u) << after.dump();
  EXPECT_EQ(after["tp"]["bytes_received_total_by_rank"][0], after["tp"]["rank0_bytes_received_total"]);
  EXPECT_GT(after["tp"]["bytes_received_total_by_rank"][1].get<int64_t>(), 0);
  EXPECT_TRUE(after["speculative_algorithm"].is_null());
}

TEST(RecentLatencies, PercentilesOverTheWindowOnly) {
  RecentLatencies r;
  const auto now = RecentLatencies::Clock::now();
  r.Observe(now - std::chrono::seconds(400), 9.0, 9.0);  // outside a 300 s window
  for (int i = 1; i <= 100; ++i) r.Observe(now - std::chrono::seconds(1), 0.001 * i, i == 100 ? -1.0 : 0.01 * i);
  const LatencyPercentiles p = r.Over(now, std::chrono::seconds(300));
  EXPECT_EQ(p.count, 100);
  EXPECT_FLOAT_EQ(p.ttft_p50_s, 0.050f);
  EXPECT_FLOAT_EQ(p.ttft_p90_s, 0.090f);
  EXPECT_FLOAT_EQ(p.ttft_p99_s, 0.099f);
  EXPECT_FLOAT_EQ(p.tpot_p50_s, 0.50f);  // 99 requests had a TPOT: rank ceil(0.5 x 99) = 50
  EXPECT_FLOAT_EQ(p.tpot_p99_s, 0.99f);  // rank ceil(0.99 x 99) = 99
  // The ring keeps the newest kCapacity.
  for (int i = 0; i < RecentLatencies::kCapacity; ++i) r.Observe(now, 1.0, 1.0);
  EXPECT_EQ(r.Over(now, std::chrono::seconds(300)).count, RecentLatencies::kCapacity);
  EXPECT_FLOAT_EQ(r.Over(now, std::chrono::seconds(300)).ttft_p50_s, 1.0f);
}

TEST(RequestBoard, RowsOldestFirstAndRemoved) {
  RequestBoard board;
  const auto now = RequestBoard::Clock::now();
  auto a = board.Add("a", now - std::chrono::seconds(5));
  auto b = board.Add("b", now - std::chrono::seconds(9));
  a->completion_tokens = 3;
  size_t total = 0;
  auto rows = board.Rows(now, 10, &total);
  ASSERT_EQ(total, 2u);
  EXPECT_EQ(rows[0].rid, "b");
  EXPECT_STREQ(rows[0].state, "waiting");
  EXPECT_STREQ(rows[1].state, "decoding");
  EXPECT_EQ(board.Rows(now, 1, &total).size(), 1u);
  board.Remove(b);
  rows = board.Rows(now, 10, &total);
  EXPECT_EQ(total, 1u);
  EXPECT_EQ(rows[0].rid, "a");
}

// The page in headless chromium follows /metrics under load (dashboard.mjs says what it checks).
TEST(Dashboard, InARealBrowser) {
  const std::string modules = std::string(MLASERVE_SOURCE_DIR) + "/tests/node/node_modules/playwright-core";
  if (!std::filesystem::exists(modules)) GTEST_SKIP() << "playwright-core is missing (scripts/setup.sh installs it)";
  ServerProcess server({"--api-key", kKey, "--enable-metrics"});
  const auto r = testing::RunNodeScript("dashboard.mjs", {server.Url(""), kKey});
  if (!r) GTEST_SKIP() << "node is missing (scripts/setup.sh installs it)";
  if (r->exit_code == 2) GTEST_SKIP() << "no browser could be started: " << r->out << r->err;
  EXPECT_EQ(r->exit_code, 0) << r->out << r->err;
  EXPECT_NE(r->out.find("OK:"), std::string::npos) << r->out << r->err;
}

}  // namespace
}  // namespace mlaserve

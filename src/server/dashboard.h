// The live dashboard (GET /dashboard, docs/server.md "Dashboard"): one self-contained page (its
// script, styles and charts: hand-written SVG, no external assets, no network) that polls GET
// /dashboard/data every second and plots it. The data are what the server already keeps: the
// engine's stats snapshot (the same numbers /metrics renders), the requests in flight
// (RequestBoard: ids, ages, token counts, never text), the latencies of the requests finished in
// the last minutes (RecentLatencies) and, under --tp-size, rank 0's collective traffic. Reading
// them costs the engine one stats snapshot per poll.
#pragma once

#include <chrono>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "dist/mpi_group.h"
#include "engine/engine_types.h"
#include "server/recent_latencies.h"
#include "server/request_board.h"

namespace mlaserve {

// The window of the latency percentiles.
inline constexpr std::chrono::seconds kDashboardLatencyWindow{300};
// Rows of the requests table (the oldest first).
inline constexpr size_t kDashboardRequestRows = 50;

struct DashboardSources {
  const EngineStatsSnapshot& stats;
  const RequestBoard& board;
  const RecentLatencies& latencies;
  const nlohmann::json& server_info;      // /get_server_info's flags (kv_cache_dtype, speculative_algorithm)
  std::optional<dist::TpTraffic> tp;      // rank 0's, under --tp-size
  int tp_size = 1;
};

// GET /dashboard/data's body. `uptime_s`: seconds since the server started (the page's x axis).
nlohmann::json DashboardData(const DashboardSources& sources, std::chrono::steady_clock::time_point now,
                             double uptime_s);

// The page (dashboard_page.cc): HTML with its script and styles inline.
std::string_view DashboardPage();

}  // namespace mlaserve

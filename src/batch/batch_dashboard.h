// `mlaserve batch --dashboard-port N`: the data behind the run's live dashboard (the server's
// page, server/dashboard.h, draws a batch run's charts when the data say "kind": "batch"; the
// HTTP server that serves both is cli/batch.cc's), read from RunnerStats' counters (atomics the
// runner keeps anyway) and the provenance tally.
#pragma once

#include <chrono>

#include <nlohmann/json.hpp>

#include "batch/batch_runner.h"

namespace mlaserve::batch {

// GET /dashboard/data's body. `started`: when the dashboard started (the rate behind the ETA is
// this run's done records over the time since).
nlohmann::json BatchDashboardData(const RunnerStats& stats, std::chrono::steady_clock::time_point started,
                                  std::chrono::steady_clock::time_point now);

}  // namespace mlaserve::batch

// `simulate --plot FILE.svg`: the run's timeline as three stacked line charts (running
// requests, queued requests, KV token usage) over simulated time, hand-written SVG (no plotting
// library: Debian's would pull in Python). At most kSvgColumns points per chart: each column
// shows the largest value of the steps it covers, so a short peak stays visible.
#pragma once

#include <span>
#include <string>

#include "core/status.h"
#include "sim/virtual_run.h"

namespace mlaserve {

inline constexpr int kSvgColumns = 800;

std::string TimelineSvg(std::span<const TimelinePoint> timeline, const std::string& title);
Status WriteTimelineSvg(const std::string& path, std::span<const TimelinePoint> timeline, const std::string& title);

}  // namespace mlaserve

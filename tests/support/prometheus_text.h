// A strict reader of the Prometheus text exposition format (version 0.0.4), so that tests of
// /metrics fail where a Prometheus server would refuse the page. It checks the grammar
// (# HELP / # TYPE lines, metric and label names, label values with only the escapes \\, \" and
// \n, HELP text with only \\ and \n, float values including +Inf, -Inf and NaN, an optional
// integer timestamp, a final line feed) and, a little beyond what Prometheus enforces, the shape
// of each family: HELP and TYPE at most once and before the samples, a family's samples
// together, no repeated series, counters named *_total with non-negative values, histograms as
// *_bucket (an `le` label, cumulative, ending at le="+Inf" equal to *_count) plus *_sum and
// *_count for every label set.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace mlaserve::testing {

struct PromSample {
  std::string name;                                         // e.g. x_bucket for histogram x
  std::vector<std::pair<std::string, std::string>> labels;  // values unescaped, in page order
  double value = 0;

  const std::string* Label(std::string_view label_name) const;  // null when absent
};

struct PromFamily {
  std::string name;
  std::string type = "untyped";  // counter, gauge, histogram, summary or untyped
  std::string help;              // unescaped
  std::vector<PromSample> samples;
};

// The page's metric families in the order they first appear, or an error that names the line.
Result<std::vector<PromFamily>> ParsePrometheusText(std::string_view page);

// The family called `name`, or null.
const PromFamily* FindFamily(const std::vector<PromFamily>& families, std::string_view name);

}  // namespace mlaserve::testing

#include "batch/provenance_tally.h"

namespace mlaserve::batch {

void ProvenanceTally::Add(const std::vector<Segment>& segments) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Segment& s : segments) {
    mix_.tokens_by_kv_format[s.kv_cache_dtype.empty() ? "unknown" : s.kv_cache_dtype] += s.tokens;
    mix_.tokens_by_server[s.server_id.empty() ? "unknown" : s.server_id] += s.tokens;
  }
}

ProvenanceTally::Mix ProvenanceTally::Get() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mix_;
}

}  // namespace mlaserve::batch

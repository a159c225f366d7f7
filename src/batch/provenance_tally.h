// The provenance mix of a batch run, for its dashboard: the output tokens of the records done
// this run, by the KV cache format and by the server that generated them (their Segments).
// Added to once per done record; read by the dashboard's handler. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "batch/output_record.h"

namespace mlaserve::batch {

class ProvenanceTally {
 public:
  void Add(const std::vector<Segment>& segments);
  struct Mix {
    std::map<std::string, int64_t> tokens_by_kv_format;
    std::map<std::string, int64_t> tokens_by_server;
  };
  Mix Get() const;

 private:
  mutable std::mutex mu_;
  Mix mix_;
};

}  // namespace mlaserve::batch

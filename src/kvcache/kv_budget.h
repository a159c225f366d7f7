// How many tokens of KV cache the memory budget holds, the way SGLang sizes its pool:
//   rest = (device_memory - weights) - device_memory * (1 - mem_fraction_static)
//   max_total_num_tokens = rest / kv_bytes_per_token
// or --max-total-tokens directly. On the CPU backend "device memory" is --device-memory
// (default: the machine's physical memory). Computed once at start-up.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace mlaserve {

struct KvBudgetRequest {
  double device_memory_bytes = 0;   // 0: physical memory
  double mem_fraction_static = 0.88;
  double weight_bytes = 0;
  size_t kv_bytes_per_token = 0;    // all layers
  int64_t max_total_tokens = 0;     // > 0: use this instead of the memory arithmetic
  int page_size = 16;
  int min_tokens = 1;               // the budget must hold at least this many (one request)
};

struct KvBudget {
  int64_t max_total_num_tokens = 0;  // a whole number of pages
  double kv_bytes = 0;               // what the pool takes
  double device_memory_bytes = 0;
  std::string log_line;              // "max_total_num_tokens=..., ..." for the start-up log
};

Result<KvBudget> ComputeKvBudget(const KvBudgetRequest& request);

double PhysicalMemoryBytes();
// /proc/meminfo's MemAvailable in bytes (what the system can give without swapping: page cache
// counts, shared memory does not); 0 where it cannot be read (no /proc, no such line).
double AvailableMemoryBytes();

}  // namespace mlaserve

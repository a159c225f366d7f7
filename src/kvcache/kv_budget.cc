#include "kvcache/kv_budget.h"

#include <unistd.h>

#include <cstdio>

namespace mlaserve {

double PhysicalMemoryBytes() {
  return double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGE_SIZE));
}

double AvailableMemoryBytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return 0;
  char line[256];
  long long kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
    kib = 0;
  }
  std::fclose(f);
  return double(kib) * 1024.0;
}

Result<KvBudget> ComputeKvBudget(const KvBudgetRequest& r) {
  if (r.kv_bytes_per_token == 0 || r.page_size <= 0) return Status::Error("KV budget: bad pool shape");
  if (r.mem_fraction_static <= 0 || r.mem_fraction_static > 1) {
    return Status::Error("--mem-fraction-static must be in (0, 1], got " + std::to_string(r.mem_fraction_static));
  }
  KvBudget b;
  b.device_memory_bytes = r.device_memory_bytes > 0 ? r.device_memory_bytes : PhysicalMemoryBytes();
  char line[512];
  int64_t tokens;
  if (r.max_total_tokens > 0) {
    tokens = r.max_total_tokens;
    std::snprintf(line, sizeof line, "from --max-total-tokens");
  } else {
    const double rest = (b.device_memory_bytes - r.weight_bytes) -
                        b.device_memory_bytes * (1.0 - r.mem_fraction_static);
    tokens = rest > 0 ? int64_t(rest / double(r.kv_bytes_per_token)) : 0;
    std::snprintf(line, sizeof line,
                  "device_memory=%.2f GB x mem_fraction_static=%.2f - weights=%.2f GB",
                  b.device_memory_bytes / 1e9, r.mem_fraction_static, r.weight_bytes / 1e9);
  }
  tokens = tokens / r.page_size * r.page_size;
  if (tokens < r.min_tokens) {
    return Status::Error(std::string("the KV budget (") + line + ") holds " + std::to_string(tokens) +
                         " tokens at " + std::to_string(r.kv_bytes_per_token) +
                         " bytes each, fewer than one request needs (" + std::to_string(r.min_tokens) +
                         "): raise --mem-fraction-static, --device-memory or --max-total-tokens");
  }
  b.max_total_num_tokens = tokens;
  b.kv_bytes = double(tokens) * double(r.kv_bytes_per_token);
  char log[768];
  std::snprintf(log, sizeof log,
                "max_total_num_tokens=%lld, kv_bytes_per_token=%zu, kv_cache_size=%.3f GB (%s)",
                (long long)tokens, r.kv_bytes_per_token, b.kv_bytes / 1e9, line);
  b.log_line = log;
  return b;
}

}  // namespace mlaserve

// The servers a batch run talks to, shared by least-outstanding-requests: each request goes to
// the healthy endpoint with the fewest requests in flight. An endpoint whose request broke is
// marked down until a /health probe (WaitHealthy) sees it again, at which point what it serves
// is read afresh: a server restarted with another --kv-cache-dtype reports its new format.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "server/http_client.h"

namespace mlaserve::batch {

struct EndpointInfo {
  std::string base_url;           // "http://127.0.0.1:30000", no trailing '/'
  bool native = true;             // has SGLang's /generate (else: OpenAI chat only)
  std::string kv_format;          // /get_server_info's kv_cache_dtype; "unknown" if not reported
  std::string server_id;          // /get_server_info's server_id (one per server process), else host:port
  // /get_server_info's incremental_streaming_output (ours and SGLang's): each /generate stream
  // event carries only the new output_ids, not all so far.
  bool incremental_stream = false;
  // /get_server_info's enable_deterministic_inference (ours and SGLang's); nullopt: not reported.
  // Resume continues a record bit-identically only on a deterministic server.
  std::optional<bool> deterministic;
  std::string model_path;         // /get_model_info's; empty if not reported
  std::string tokenizer_path;     // /get_model_info's; empty if not reported
  std::string model_type;
  std::string served_model_name;
};

class EndpointPool {
 public:
  EndpointPool(std::vector<std::string> base_urls, HttpHeaders headers, int control_timeout_ms);

  // Waits (with backoff) until at least one endpoint is healthy, reading what each one serves.
  Status Discover(std::chrono::steady_clock::time_point deadline);

  // Picks an endpoint for one request and counts it in flight; Release when the request ends.
  size_t Acquire();
  void Release(size_t index, bool healthy);
  EndpointInfo info(size_t index) const;
  EndpointInfo first_healthy() const;
  // Whether every endpoint speaks SGLang's /generate (so any Acquire can continue a partial).
  bool all_native() const;

  // Probes every endpoint's /health with backoff until one answers 200 (true) or the deadline.
  bool WaitHealthy(std::chrono::steady_clock::time_point deadline);

  const HttpHeaders& headers() const { return headers_; }

  // With several endpoints, says when one stops answering and when it answers again (the run
  // as a whole pauses only when none answers: RunGate). Set before any request.
  void set_note(std::function<void(const std::string&)> note) { note_ = std::move(note); }

 private:
  struct Endpoint {
    EndpointInfo info;
    int outstanding = 0;
    bool up = false;
    bool seen_up = false;  // answered at least once (so going down is news)
  };
  bool Probe(size_t index);  // /health, then what it serves; updates the endpoint
  // Sets endpoint `index` up or down, noting a change; mu_ held.
  void SetUp(size_t index, bool up, const char* why);

  HttpClient client_;
  HttpHeaders headers_;
  int control_timeout_ms_;
  mutable std::mutex mu_;
  std::vector<Endpoint> endpoints_;
  std::function<void(const std::string&)> note_;
};

}  // namespace mlaserve::batch

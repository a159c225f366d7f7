#include "batch/endpoint_pool.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <thread>

namespace mlaserve::batch {

using nlohmann::json;

EndpointPool::EndpointPool(std::vector<std::string> base_urls, HttpHeaders headers, int control_timeout_ms)
    : headers_(std::move(headers)), control_timeout_ms_(control_timeout_ms) {
  for (std::string& url : base_urls) {
    while (!url.empty() && url.back() == '/') url.pop_back();
    endpoints_.push_back({.info = {.base_url = url}});
  }
}

bool EndpointPool::Probe(size_t index) {
  const std::string base = info(index).base_url;
  auto health = client_.Request("GET", base + "/health", "", headers_, control_timeout_ms_);
  if (!health.ok() || health->status_code != 200) {
    std::lock_guard<std::mutex> lock(mu_);
    SetUp(index, false, "does not answer /health");
    return false;
  }
  // Without a start-up id the address stands in: a restart on the same port then goes unseen,
  // but the KV format it reports is still read afresh.
  const size_t scheme = base.find("://");
  EndpointInfo fresh{.base_url = base, .kv_format = "unknown",
                     .server_id = scheme == std::string::npos ? base : base.substr(scheme + 3)};
  if (auto r = client_.Request("GET", base + "/get_model_info", "", headers_, control_timeout_ms_);
      r.ok() && r->status_code == 200) {
    const json j = json::parse(r->body, nullptr, false);
    if (j.is_object()) {
      fresh.model_path = j.value("model_path", "");
      fresh.tokenizer_path = j.value("tokenizer_path", "");
      fresh.model_type = j.value("model_type", "");
      fresh.served_model_name = j.value("served_model_name", "");
    }
  }
  if (auto r = client_.Request("GET", base + "/get_server_info", "", headers_, control_timeout_ms_);
      r.ok() && r->status_code == 200) {
    const json j = json::parse(r->body, nullptr, false);
    if (j.is_object()) {
      fresh.kv_format = j.value("kv_cache_dtype", "unknown");
      if (j.contains("server_id") && j["server_id"].is_string()) fresh.server_id = j["server_id"].get<std::string>();
      const auto incremental = j.find("incremental_streaming_output");
      fresh.incremental_stream = incremental != j.end() && incremental->is_boolean() && incremental->get<bool>();
      if (const auto deterministic = j.find("enable_deterministic_inference");
          deterministic != j.end() && deterministic->is_boolean()) {
        fresh.deterministic = deterministic->get<bool>();
      }
    }
  }
  // A server without SGLang's native API answers 404 (no route); ours answers 400 to "{}".
  auto gen = client_.Request("POST", base + "/generate", "{}", headers_, control_timeout_ms_);
  if (!gen.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    SetUp(index, false, "does not answer /generate");
    return false;
  }
  fresh.native = gen->status_code != 404;
  std::lock_guard<std::mutex> lock(mu_);
  endpoints_[index].info = fresh;
  SetUp(index, true, "answers again");
  return true;
}

void EndpointPool::SetUp(size_t index, bool up, const char* why) {
  Endpoint& e = endpoints_[index];
  if (e.up != up && e.seen_up && note_ && endpoints_.size() > 1) note_(e.info.base_url + " " + why);
  e.up = up;
  e.seen_up = e.seen_up || up;
}

Status EndpointPool::Discover(std::chrono::steady_clock::time_point deadline) {
  if (endpoints_.empty()) return Status::Error("no endpoint");
  if (WaitHealthy(deadline)) {
    for (size_t i = 0; i < endpoints_.size(); ++i) {
      if (!endpoints_[i].up) (void)Probe(i);
    }
    return Status::Ok();
  }
  std::string names;
  for (const Endpoint& e : endpoints_) names += (names.empty() ? "" : ", ") + e.info.base_url;
  return Status::Error("no endpoint answered /health in time (" + names + ")");
}

size_t EndpointPool::Acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  size_t best = 0;
  for (size_t i = 1; i < endpoints_.size(); ++i) {
    const Endpoint& a = endpoints_[i];
    const Endpoint& b = endpoints_[best];
    if (a.up != b.up ? a.up : a.outstanding < b.outstanding) best = i;
  }
  ++endpoints_[best].outstanding;
  return best;
}

void EndpointPool::Release(size_t index, bool healthy) {
  std::lock_guard<std::mutex> lock(mu_);
  --endpoints_[index].outstanding;
  if (!healthy) SetUp(index, false, "broke a request: avoided until /health answers");
}

EndpointInfo EndpointPool::info(size_t index) const {
  std::lock_guard<std::mutex> lock(mu_);
  return endpoints_[index].info;
}

bool EndpointPool::all_native() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Endpoint& e : endpoints_) {
    if (!e.info.native) return false;
  }
  return true;
}

EndpointInfo EndpointPool::first_healthy() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Endpoint& e : endpoints_) {
    if (e.up) return e.info;
  }
  return endpoints_.front().info;
}

bool EndpointPool::WaitHealthy(std::chrono::steady_clock::time_point deadline) {
  auto backoff = std::chrono::milliseconds(100);
  for (;;) {
    bool any = false;
    for (size_t i = 0; i < endpoints_.size(); ++i) any = Probe(i) || any;
    if (any) return true;
    if (std::chrono::steady_clock::now() + backoff > deadline) return false;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
  }
}

}  // namespace mlaserve::batch

#include "server/response_ids.h"

#include <utility>

#include "core/check.h"

namespace mlaserve {

ResponseIds::Registration::Registration(Registration&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)), id_(std::move(other.id_)) {}

ResponseIds::Registration::~Registration() {
  if (owner_ != nullptr) owner_->Unregister(id_);
}

ResponseIds::Registration ResponseIds::Register(std::string response_id, std::vector<std::string> rids) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool added = rids_.emplace(response_id, std::move(rids)).second;
  MLA_CHECK(added);
  return Registration(this, std::move(response_id));
}

std::vector<std::string> ResponseIds::Find(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = rids_.find(id);
  return it == rids_.end() ? std::vector<std::string>() : it->second;
}

void ResponseIds::Unregister(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  rids_.erase(id);
}

}  // namespace mlaserve

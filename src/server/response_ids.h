// The ids OpenAI clients hold for responses in flight, and the engine requests each one names.
// A response's id ("cmpl-...", "chatcmpl-...") covers all its choices, which run as engine
// requests "ID-0", "ID-1", ...; SGLang's users abort by the id they were given (SGLang's
// response id is its request's rid), so /abort_request looks ids up here as well as in the
// engine. Thread-safe: handlers register and abort from their own threads.
#pragma once

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace mlaserve {

class ResponseIds {
 public:
  // Keeps one response id registered while it lives (the handler's Drive); moving it moves the
  // registration.
  class Registration {
   public:
    Registration(Registration&& other) noexcept;
    Registration& operator=(Registration&&) = delete;
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;
    ~Registration();

   private:
    friend class ResponseIds;
    Registration(ResponseIds* owner, std::string id) : owner_(owner), id_(std::move(id)) {}
    ResponseIds* owner_;  // null once moved from
    std::string id_;
  };

  // `response_id` names `rids` until the returned registration is destroyed. Ids are
  // server-made and unique (request_id.h), so a second registration of one id is a bug.
  [[nodiscard]] Registration Register(std::string response_id, std::vector<std::string> rids);

  // The engine requests `id` names now: empty when it is no registered response id (a native
  // rid, a finished response, or a made-up id).
  std::vector<std::string> Find(const std::string& id) const;

 private:
  void Unregister(const std::string& id);

  mutable std::mutex mu_;
  std::unordered_map<std::string, std::vector<std::string>> rids_;  // response id -> engine rids
};

}  // namespace mlaserve

#include "support/batch_jobs.h"

#include <nlohmann/json.hpp>

namespace mlaserve::testing {

using nlohmann::json;

std::string BatchTestInput(int n) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    json j;
    j["id"] = "r" + std::to_string(i);
    if (i % 3 == 0) {
      j["prompt"] = "Speak of the king, number " + std::to_string(i);
    } else if (i % 3 == 1) {
      j["messages"] = json::array({{{"role", "user"}, {"content", "What news, good " + std::to_string(i) + "?"}}});
    } else {
      j["conversations"] = json::array({{{"from", "human"}, {"value", "Good morrow " + std::to_string(i)}},
                                        {{"from", "gpt"}, {"value", "old answer"}},
                                        {{"from", "human"}, {"value", "And then?"}},
                                        {{"from", "gpt"}, {"value", "old answer"}}});
    }
    out += j.dump() + "\n";
  }
  return out;
}

std::vector<std::string> BatchTestArgs(const std::string& in, const std::string& out, const std::string& url,
                                       int max_new_tokens, int concurrency) {
  return {"batch", "--input", in, "--output", out, "--endpoint", url, "--max-new-tokens", std::to_string(max_new_tokens),
          "--concurrency", std::to_string(concurrency), "--checkpoint-interval", "0.05", "--server-wait-timeout", "60",
          "--progress-interval", "1"};
}

}  // namespace mlaserve::testing

#include "support/batch_job.h"

#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

namespace mlaserve::testing {

using nlohmann::json;

std::string MakeBatchInput(int n) {
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

std::vector<std::string> BatchArgs(const std::string& in, const std::string& out, const std::string& url,
                                   int max_new_tokens, int concurrency) {
  return {"batch", "--input", in, "--output", out, "--endpoint", url, "--max-new-tokens", std::to_string(max_new_tokens),
          "--concurrency", std::to_string(concurrency), "--checkpoint-interval", "0.05", "--server-wait-timeout", "60",
          "--progress-interval", "1"};
}

std::map<std::string, int> IdCounts(const std::string& output) {
  std::map<std::string, int> counts;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) counts[json::parse(line)["id"].get<std::string>()]++;
  return counts;
}

int SummaryNumber(const std::string& log, const std::string& label) {
  std::smatch m;
  const std::regex re(label + " ([0-9]+)");
  return std::regex_search(log, m, re) ? std::stoi(m[1]) : -1;
}

}  // namespace mlaserve::testing

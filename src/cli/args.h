// Command-line flags: `--name value`, `--name=value`, or a bare `--switch`. A command reads the
// flags it knows; Finish() then reports the first unknown flag or unparsable value as one line.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"

namespace mlaserve::cli {

class Args {
 public:
  Args(int argc, char** argv);

  std::optional<std::string> Str(const std::string& name);
  std::string Str(const std::string& name, const std::string& fallback);
  int Int(const std::string& name, int fallback);
  int64_t Int64(const std::string& name, int64_t fallback);
  double Double(const std::string& name, double fallback);
  bool Switch(const std::string& name);  // present without a value
  // Every value given for a repeatable flag, in order.
  std::vector<std::string> All(const std::string& name);

  // Call after reading every flag: unknown flags and bad values become an error.
  Status Finish(const std::string& command) const;

 private:
  void Fail(const std::string& message);
  std::vector<std::pair<std::string, std::optional<std::string>>> given_;
  std::set<std::string> known_;
  std::string error_;
};

}  // namespace mlaserve::cli

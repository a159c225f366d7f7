// Runs the real mlaserve binary (MLASERVE_BINARY) in tests and captures what it printed.
#pragma once

#include <string>

namespace mlaserve::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// args is appended to the binary's path as written (shell-quoted by the caller).
CommandResult RunMlaserve(const std::string& args);

// A fresh empty directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ShellQuote(const std::string& s);

// A whole file's bytes ("" when it cannot be read).
std::string ReadTextFile(const std::string& path);

}  // namespace mlaserve::testing

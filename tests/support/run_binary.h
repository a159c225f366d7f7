// Runs the real mlaserve binary (MLASERVE_BINARY) in tests: a command whose output is captured,
// or a server that runs while the test talks to it.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

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

// `mlaserve serve` on the bundled model, an ephemeral port, --max-total-tokens 8192 and
// --served-model-name bard, plus `extra`. The constructor returns once the log says "ready to
// roll" (running()) or the process has exited, at most 30 s; the destructor stops it (SIGTERM).
class ServerProcess {
 public:
  explicit ServerProcess(std::vector<std::string> extra = {});
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int Wait();  // the exit code (128 + signal when killed)
  void Signal(int sig);
  int port() const { return port_; }
  bool running() const { return port_ > 0 && !exited_; }
  std::string log() const;  // its stderr so far
  std::string Url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }

 private:
  TempDir dir_;
  std::string log_;
  pid_t pid_ = -1;
  int port_ = 0;
  bool exited_ = false;
  int exit_status_ = 0;
};

}  // namespace mlaserve::testing

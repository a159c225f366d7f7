#include "support/run_binary.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

namespace mlaserve::testing {

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

namespace {
std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

CommandResult RunMlaserve(const std::string& args) {
  TempDir dir;
  const std::string out_path = dir.path() + "/out", err_path = dir.path() + "/err";
  const std::string command = ShellQuote(MLASERVE_BINARY) + " " + args + " >" +
                              ShellQuote(out_path) + " 2>" + ShellQuote(err_path) + " </dev/null";
  const int status = std::system(command.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadFile(out_path);
  r.err = ReadFile(err_path);
  return r;
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "mlaserve-test-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) std::abort();
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

ServerProcess::ServerProcess(std::vector<std::string> extra) {
  log_ = dir_.path() + "/server.log";
  std::vector<std::string> args = {MLASERVE_BINARY, "serve", "--model-path",
                                   std::string(MLASERVE_SOURCE_DIR) + "/models/shakespeare-mla",
                                   "--port", "0", "--max-total-tokens", "8192", "--served-model-name", "bard"};
  args.insert(args.end(), extra.begin(), extra.end());
  pid_ = fork();
  if (pid_ == 0) {
    FILE* f = std::freopen(log_.c_str(), "w", stderr);
    (void)f;
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::smatch m;
  const std::regex listening("listening on http://[^:]+:([0-9]+)");
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string log = ReadFile(log_);
    if (log.find("ready to roll") != std::string::npos && std::regex_search(log, m, listening)) {
      port_ = std::stoi(m[1]);
      return;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      exit_status_ = status;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

ServerProcess::~ServerProcess() {
  if (!exited_) {
    kill(pid_, SIGTERM);
    Wait();
  }
}

int ServerProcess::Wait() {
  if (!exited_) {
    waitpid(pid_, &exit_status_, 0);
    exited_ = true;
  }
  return WIFEXITED(exit_status_) ? WEXITSTATUS(exit_status_) : 128 + WTERMSIG(exit_status_);
}

void ServerProcess::Signal(int sig) { kill(pid_, sig); }

std::string ServerProcess::log() const { return ReadFile(log_); }

}  // namespace mlaserve::testing

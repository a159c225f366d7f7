#include "support/server_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "server/sse.h"

namespace mlaserve::testing {

std::string BundledModelPath() { return std::string(MLASERVE_SOURCE_DIR) + "/models/shakespeare-mla"; }

ServerProcess::ServerProcess(const ServerLaunch& launch, std::vector<std::string> extra) {
  log_ = dir_.path() + "/server.log";
  const std::string model = launch.model_path.empty() ? BundledModelPath() : launch.model_path;
  std::vector<std::string> args = {MLASERVE_BINARY, "serve", "--model-path", model, "--port", std::to_string(launch.port),
                                   "--max-total-tokens", "8192", "--served-model-name", "bard"};
  if (launch.deterministic) args.push_back("--enable-deterministic-inference");
  args.insert(args.end(), extra.begin(), extra.end());
  if (launch.tp_ranks > 1) {
    const std::string ranks = std::to_string(launch.tp_ranks);
    args.insert(args.begin(), {"--allow-run-as-root", "--oversubscribe", "-np", ranks});
    const std::vector<std::string> launcher = MpirunLauncher();
    args.insert(args.begin(), launcher.begin(), launcher.end());
    args.insert(args.end(), {"--tp-size", ranks});
  }
  pid_ = fork();
  if (pid_ == 0) {
    FILE* f = std::freopen(log_.c_str(), "w", stderr);
    (void)f;
    if (!launch.cwd.empty() && chdir(launch.cwd.c_str()) != 0) _exit(126);
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
    const std::string log = ReadTextFile(log_);
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
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling the log, not a wait for an event
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

bool ServerProcess::running() const {
  if (port_ <= 0 || exited_) return false;
  if (waitpid(pid_, &exit_status_, WNOHANG) == pid_) exited_ = true;
  return !exited_;
}

std::string ServerProcess::log() const { return ReadTextFile(log_); }

std::string ServerProcess::Url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + path;
}

HttpResponse Post(const ServerProcess& s, const std::string& path, const std::string& body, const HttpHeaders& headers) {
  auto r = HttpClient().Request("POST", s.Url(path), body, headers, 30000);
  EXPECT_TRUE(r.ok()) << r.error();
  return r.ok() ? *r : HttpResponse{};
}

HttpResponse Get(const ServerProcess& s, const std::string& path, const HttpHeaders& headers) {
  auto r = HttpClient().Request("GET", s.Url(path), "", headers, 30000);
  EXPECT_TRUE(r.ok()) << r.error();
  return r.ok() ? *r : HttpResponse{};
}

namespace {

// Polls /get_server_info until its `field` reaches count (30 s at most).
bool WaitForServerInfoCount(const ServerProcess& s, const char* field, int count) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = HttpClient().Request("GET", s.Url("/get_server_info"), "", {}, 5000);
    if (r.ok() && r->status_code == 200) {
      const nlohmann::json info = nlohmann::json::parse(r->body, nullptr, false);
      if (info.is_object() && info.value(field, 0) >= count) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace

bool WaitForRunningRequests(const ServerProcess& s, int count) {
  return WaitForServerInfoCount(s, "num_running_reqs", count);
}

bool WaitForQueuedRequests(const ServerProcess& s, int count) {
  return WaitForServerInfoCount(s, "num_queue_reqs", count);
}

std::vector<std::string> StreamEvents(const ServerProcess& s, const std::string& path, const std::string& body) {
  SseParser parser;
  std::vector<std::string> events;
  Status st = HttpClient().Stream("POST", s.Url(path), body, {}, 30000, [&](std::string_view piece) {
    parser.Feed(piece, [&](const SseEvent& e) { events.push_back(e.data); });
    return true;
  });
  EXPECT_TRUE(st.ok()) << st.message();
  return events;
}

}  // namespace mlaserve::testing

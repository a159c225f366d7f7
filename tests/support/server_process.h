// `mlaserve serve` as a child process on an ephemeral port, for tests that talk to the real
// server over loopback, and the small HTTP helpers they share.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "server/http_client.h"
#include "support/run_binary.h"

namespace mlaserve::testing {

// The bundled model, which every server test serves.
std::string BundledModelPath();

// Where and how a ServerProcess starts: a fixed port (to restart a killed server on the port a
// client keeps using), another --model-path (relative to cwd), another working directory.
struct ServerLaunch {
  int port = 0;             // 0: an ephemeral port
  std::string model_path;   // "": the bundled model, absolute
  std::string cwd;          // "": the test's
  // --enable-deterministic-inference: tests compare greedy outputs bit for bit across batch
  // compositions and chunkings, so their servers run in that mode unless a test says otherwise.
  bool deterministic = true;
  // > 1: `mpirun -np tp_ranks ... serve ... --tp-size tp_ranks` (tensor parallelism); the
  // process is mpirun, and rank 0 writes the log's server lines.
  int tp_ranks = 1;
};

// Starts `mlaserve serve --model-path <bundled> --port 0 --max-total-tokens 8192
// --served-model-name bard [--enable-deterministic-inference] <extra...>` and waits (up to 30 s) for "ready to roll" in its log,
// or for it to exit. The destructor sends SIGTERM and waits.
class ServerProcess {
 public:
  explicit ServerProcess(std::vector<std::string> extra = {}) : ServerProcess(ServerLaunch{}, std::move(extra)) {}
  ServerProcess(const ServerLaunch& launch, std::vector<std::string> extra);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int Wait();  // the exit code, or 128 + the signal that ended it
  void Signal(int sig);
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  bool running() const;  // started, and not exited as far as waitpid knows
  std::string log() const;
  std::string Url(const std::string& path) const;

 private:
  TempDir dir_;
  std::string log_;
  pid_t pid_ = -1;
  int port_ = 0;
  mutable bool exited_ = false;  // set by whichever of running() / Wait() reaps the child
  mutable int exit_status_ = 0;
};

// One request with a 30 s idle timeout; a transport failure is a test failure and an empty
// response (status 0).
HttpResponse Post(const ServerProcess& s, const std::string& path, const std::string& body,
                  const HttpHeaders& headers = {});
HttpResponse Get(const ServerProcess& s, const std::string& path, const HttpHeaders& headers = {});
// Polls /get_server_info until at least `count` requests are running (true), or 30 s pass. For
// tests that must act while a generation is in progress: a condition, not a guessed delay.
bool WaitForRunningRequests(const ServerProcess& s, int count = 1);
// True once at least `count` requests wait in the queue (num_queue_reqs), false after 30 s.
bool WaitForQueuedRequests(const ServerProcess& s, int count = 1);
// Streams a POST and returns the SSE data payloads.
std::vector<std::string> StreamEvents(const ServerProcess& s, const std::string& path, const std::string& body);

}  // namespace mlaserve::testing

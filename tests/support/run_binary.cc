#include "support/run_binary.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace mlaserve::testing {

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

CommandResult RunCommand(const std::string& command) {
  TempDir dir;
  const std::string out_path = dir.path() + "/out", err_path = dir.path() + "/err";
  const std::string line = command + " >" + ShellQuote(out_path) + " 2>" + ShellQuote(err_path) + " </dev/null";
  const int status = std::system(line.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadTextFile(out_path);
  r.err = ReadTextFile(err_path);
  return r;
}

CommandResult RunMlaserve(const std::string& args) { return RunCommand(ShellQuote(MLASERVE_BINARY) + " " + args); }

std::optional<CommandResult> RunNodeScript(const std::string& script, const std::vector<std::string>& args) {
  const std::string dir = std::string(MLASERVE_SOURCE_DIR) + "/tests/node";
  if (std::system("command -v node >/dev/null 2>&1") != 0 ||
      std::system(("test -d " + ShellQuote(dir + "/node_modules/openai")).c_str()) != 0) {
    return std::nullopt;
  }
  std::string command = "node " + ShellQuote(dir + "/" + script);
  for (const std::string& a : args) command += " " + ShellQuote(a);
  return RunCommand(command);
}

pid_t SpawnMlaserve(std::vector<std::string> args, const std::string& log, const std::string& cwd) {
  args.insert(args.begin(), MLASERVE_BINARY);
  const pid_t pid = fork();
  if (pid == 0) {
    if (!std::freopen(log.c_str(), "a", stderr) || !std::freopen(log.c_str(), "a", stdout)) _exit(126);
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

int WaitExit(pid_t pid, rusage* usage) {
  int status = 0;
  rusage ignored;
  wait4(pid, &status, 0, usage ? usage : &ignored);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
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

std::string MpirunPath() { return "/usr/bin/mpirun"; }

std::vector<std::string> MpirunLauncher() {
#if defined(__SANITIZE_ADDRESS__)
  const char* options = std::getenv("ASAN_OPTIONS");
  std::string value = options != nullptr ? options : "";
  if (!value.empty()) value += ":";
  return {"/usr/bin/env", "ASAN_OPTIONS=" + value + "detect_leaks=0", MpirunPath()};
#else
  return {MpirunPath()};
#endif
}

std::string MpirunMlaserve(int ranks, const std::string& args) {
  const std::string n = std::to_string(ranks);
  std::string launcher;
  for (const std::string& a : MpirunLauncher()) launcher += ShellQuote(a) + " ";
  return launcher + "--allow-run-as-root --oversubscribe -np " + n + " " + ShellQuote(MLASERVE_BINARY) + " " + args +
         " --tp-size " + n;
}

}  // namespace mlaserve::testing

// Runs the real mlaserve binary (MLASERVE_BINARY) in tests and captures what it printed.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace mlaserve::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// A shell command line, stdin from /dev/null.
CommandResult RunCommand(const std::string& command);
// args is appended to the binary's path as written (shell-quoted by the caller).
CommandResult RunMlaserve(const std::string& args);
// Runs tests/node/<script> with node and the given arguments (each shell-quoted here); nullopt
// when node or the npm packages scripts/setup.sh installs are missing (the caller skips).
std::optional<CommandResult> RunNodeScript(const std::string& script, const std::vector<std::string>& args);

// Starts the binary with `args` as a child, stdout and stderr appended to `log`, in `cwd` when
// given; for tests that signal it while it runs.
pid_t SpawnMlaserve(std::vector<std::string> args, const std::string& log, const std::string& cwd = "");
// Waits for a child: its exit code, or 128 + the signal that ended it. usage (optional)
// receives its resource use (ru_maxrss: peak RSS in KiB).
int WaitExit(pid_t pid, rusage* usage = nullptr);

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

// OpenMPI's launcher (scripts/setup.sh installs it), for tensor-parallel jobs.
std::string MpirunPath();
// The argv that starts mpirun: MpirunPath(), and in a sanitized build first `/usr/bin/env
// ASAN_OPTIONS=<the test's options>:detect_leaks=0`. The ranks inherit mpirun's environment, and
// OpenMPI dlcloses its plugins before exit, so LeakSanitizer's reports of what they keep (by
// design, MPI_Init to exit) have only `<unknown module>` frames that no suppression can name:
// ranks are checked for every error but leaks (docs/fuzzing.md).
std::vector<std::string> MpirunLauncher();
// `mpirun -np ranks <binary> <args> --tp-size ranks` as a shell command line, root allowed and
// oversubscription allowed (4 ranks run on this 2-core machine).
std::string MpirunMlaserve(int ranks, const std::string& args);

// A whole file's bytes ("" when it cannot be read).
std::string ReadTextFile(const std::string& path);

}  // namespace mlaserve::testing

// `mlaserve batch` runs in tests: the client as a child process (to kill or signal it), inputs
// mixing the three record shapes, and reading what it wrote and printed.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace mlaserve::testing {

// A child process running the mlaserve binary with `args`, stdout and stderr appended to `log`,
// in `cwd` when given.
pid_t SpawnMlaserve(std::vector<std::string> args, const std::string& log, const std::string& cwd = "");
// Waits for the child: its exit code, or 128 + the signal that ended it.
int WaitExit(pid_t pid);

// n records mixing the three shapes (ShareGPT ones with two assistant turns), ids r0, r1, ...
std::string MakeBatchInput(int n);
// batch arguments with short checkpoint and progress intervals.
std::vector<std::string> BatchArgs(const std::string& in, const std::string& out, const std::string& url,
                                   int max_new_tokens, int concurrency);
// How many output lines each id has.
std::map<std::string, int> IdCounts(const std::string& output);
// The number after `label ` in a log ("interruptions 3"), or -1.
int SummaryNumber(const std::string& log, const std::string& label);

}  // namespace mlaserve::testing

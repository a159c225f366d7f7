// `mlaserve batch` runs in tests: inputs mixing the three record shapes, the command line, and
// reading what it wrote and printed. The client runs as a child process (SpawnMlaserve in
// run_binary.h), to kill or signal it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "support/run_binary.h"

namespace mlaserve::testing {

// n JSONL records "r0".."r{n-1}" mixing the three shapes: prompts, chats, and ShareGPT
// conversations with two assistant turns.
std::string MakeBatchInput(int n);
// `batch` against `url` with quick checkpoints (0.05 s), a "still waiting" line every 60 s while
// no server answers, and a progress line every second.
std::vector<std::string> BatchArgs(const std::string& in, const std::string& out, const std::string& url,
                                   int max_new_tokens, int concurrency);
// How many output lines each id has.
std::map<std::string, int> IdCounts(const std::string& output);
// The number after `label ` in a log ("interruptions 3"), or -1.
int SummaryNumber(const std::string& log, const std::string& label);

}  // namespace mlaserve::testing

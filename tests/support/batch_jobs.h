// Inputs and command lines shared by the `mlaserve batch` tests that run the real binary.
#pragma once

#include <string>
#include <vector>

namespace mlaserve::testing {

// n JSONL records "r0".."r{n-1}" mixing the three shapes: prompts, chats, and ShareGPT
// conversations with two assistant turns.
std::string BatchTestInput(int n);

// `batch` against `url` with quick checkpoints (0.05 s), a 60 s wait for a server and a progress
// line every second.
std::vector<std::string> BatchTestArgs(const std::string& in, const std::string& out, const std::string& url,
                                       int max_new_tokens, int concurrency);

}  // namespace mlaserve::testing

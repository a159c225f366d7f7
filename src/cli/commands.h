// The subcommand table. Each command lives in its own file and returns the process exit code:
// 0 success, 1 runtime failure, 2 bad usage.
#pragma once

#include "cli/args.h"

namespace mlaserve::cli {

int RunGenerate(Args& args);
int RunScore(Args& args);
int RunBench(Args& args);
int RunInitRandom(Args& args);

struct Command {
  const char* name;
  int (*run)(Args&);
};

inline constexpr Command kCommands[] = {
    {"generate", RunGenerate},
    {"score", RunScore},
    {"bench", RunBench},
    {"init-random", RunInitRandom},
};

inline constexpr const char* kUsage =
    "usage: mlaserve COMMAND [--flag value ...]\n"
    "\n"
    "commands:\n"
    "  generate     --model-path DIR --prompt TEXT [--max-new-tokens N] [--temperature T]\n"
    "               [--top-p P] [--top-k K] [--seed S] [--chat] [--ignore-eos]\n"
    "  score        --model-path DIR (--text TEXT | --input-ids 1,2,3)\n"
    "               per-token log-probabilities and perplexity, as JSON\n"
    "  bench        --model-path DIR [--prompt-len N] [--decode-tokens N]\n"
    "               prefill/decode tokens/s and achieved memory bandwidth\n"
    "  init-random  --out DIR [--preset reference|tiny] [--config FILE] [--dtype bf16|f16|f32]\n"
    "               writes a randomly initialised checkpoint of any shape\n"
    "\n"
    "model flags (generate, score, bench): --threads N, --kernels auto|portable|avx2|avx512,\n"
    "  --context-length N, --max-batch-tokens N\n";

}  // namespace mlaserve::cli

// The subcommand table. Each command lives in its own file and returns the process exit code:
// 0 success, 1 runtime failure, 2 bad usage.
#pragma once

#include "cli/args.h"

namespace mlaserve::cli {

int RunServe(Args& args);
int RunGenerate(Args& args);
int RunScore(Args& args);
int RunBench(Args& args);
int RunBenchKernels(Args& args);
int RunInitRandom(Args& args);
int RunKvEval(Args& args);
int RunKvCalibrate(Args& args);
int RunPlan(Args& args);
int RunSimulate(Args& args);
int RunBenchOffline(Args& args);
int RunBenchServing(Args& args);
int RunBatch(Args& args);
int RunRenderChat(Args& args);
int RunQuantize(Args& args);
int RunWeightsEval(Args& args);

struct Command {
  const char* name;
  const char* summary;  // one line; `mlaserve COMMAND --help` lists the flags
  int (*run)(Args&);
  bool hidden = false;  // for tests; not listed in `mlaserve --help`
};

inline constexpr Command kCommands[] = {
    {"serve", "the OpenAI + SGLang-native HTTP server, with SGLang's flags", RunServe},
    {"generate", "one prompt: streamed text and a timing line", RunGenerate},
    {"score", "per-token log-probabilities and perplexity, as JSON", RunScore},
    {"bench", "prefill/decode tokens/s and achieved memory bandwidth", RunBench},
    {"bench-kernels", "the matmul kernels alone per weight format: decode bandwidth and compute rate", RunBenchKernels},
    {"init-random", "writes a randomly initialised checkpoint of any shape", RunInitRandom},
    {"quantize", "converts a bf16 checkpoint to fp8 block-scaled or int4 (compressed-tensors) weights", RunQuantize},
    {"weights-eval", "quality cost of fp8-block and int4-g32 weights against the dense checkpoint", RunWeightsEval},
    {"kv-eval", "quality cost of each KV cache format against the bf16 cache", RunKvEval},
    {"kv-calibrate", "per-layer KV maxima, for --kv-scales (plain fp8, nvfp4)", RunKvCalibrate},
    {"plan", "KV bytes per token per format, tokens that fit, requests decoding at once", RunPlan},
    {"simulate", "the real scheduler on a virtual clock: throughput, latencies and concurrency on a hardware profile",
     RunSimulate},
    {"bench-offline", "offline throughput of the continuous-batching engine (SGLang's flags)", RunBenchOffline},
    {"bench-serving", "TTFT, TPOT, ITL and throughput of a running server (SGLang's bench_serving)",
     RunBenchServing},
    {"batch", "exactly-once, resumable generation of a JSONL file (docs/batch.md)", RunBatch},
    {"render-chat", "renders chat templates from a JSON list of cases (for tests)", RunRenderChat, true},
};

}  // namespace mlaserve::cli

// The subcommand table. Each command lives in its own file and returns the process exit code:
// 0 success, 1 runtime failure, 2 bad usage.
#pragma once

#include "cli/args.h"

namespace mlaserve::cli {

int RunServe(Args& args);
int RunGenerate(Args& args);
int RunScore(Args& args);
int RunBench(Args& args);
int RunInitRandom(Args& args);
int RunKvEval(Args& args);
int RunKvCalibrate(Args& args);
int RunPlan(Args& args);
int RunBenchOffline(Args& args);
int RunBenchServing(Args& args);
int RunBatch(Args& args);

struct Command {
  const char* name;
  int (*run)(Args&);
};

inline constexpr Command kCommands[] = {
    {"serve", RunServe},
    {"generate", RunGenerate},
    {"score", RunScore},
    {"bench", RunBench},
    {"init-random", RunInitRandom},
    {"kv-eval", RunKvEval},
    {"kv-calibrate", RunKvCalibrate},
    {"plan", RunPlan},
    {"bench-offline", RunBenchOffline},
    {"bench-serving", RunBenchServing},
    {"batch", RunBatch},
};

inline constexpr const char* kUsage =
    "usage: mlaserve COMMAND [--flag value ...]\n"
    "\n"
    "commands:\n"
    "  serve        --model-path DIR [--host H] [--port 30000] [--kv-cache-dtype F] [--api-key K]\n"
    "               [--enable-metrics] [--served-model-name N] [--drain-timeout S] and SGLang's\n"
    "               scheduler flags: the OpenAI + SGLang-native HTTP server\n"
    "  generate     --model-path DIR --prompt TEXT [--max-new-tokens N] [--temperature T]\n"
    "               [--top-p P] [--top-k K] [--seed S] [--chat] [--ignore-eos]\n"
    "  score        --model-path DIR (--text TEXT | --input-ids 1,2,3)\n"
    "               per-token log-probabilities and perplexity, as JSON\n"
    "  bench        --model-path DIR [--prompt-len N] [--decode-tokens N]\n"
    "               prefill/decode tokens/s and achieved memory bandwidth\n"
    "  kv-eval      --model-path DIR [--data FILE] [--formats all|a,b] [--json OUT]\n"
    "               quality cost of each KV cache format against the bf16 cache\n"
    "  kv-calibrate --model-path DIR [--data FILE] --out FILE\n"
    "               per-layer KV maxima, for --kv-scales (plain fp8, nvfp4)\n"
    "  plan         --model-path DIR|config.json [--device-memory GB] [--mem-fraction-static F]\n"
    "               [--tp-size N] [--weights-gb GB] [--kv-budget-gb GB] [--avg-seq-len N]\n"
    "               KV bytes per token per format, tokens that fit, requests decoding at once\n"
    "  bench-offline --model-path DIR [--num-prompts N] [--random-input-len N]\n"
    "               [--random-output-len N] [--random-range-ratio R] [--dataset-path JSONL]\n"
    "               offline throughput of the continuous-batching engine (SGLang's flags)\n"
    "  bench-serving [--backend sglang|openai|openai-chat] [--base-url URL | --host H --port P]\n"
    "               [--model NAME] [--dataset-name random|jsonl] [--dataset-path JSONL]\n"
    "               [--num-prompts N] [--random-input-len N] [--random-output-len N]\n"
    "               [--random-range-ratio R] [--request-rate R|inf] [--max-concurrency C]\n"
    "               [--vocab-size N] [--warmup-requests N] [--seed S] [--output-file JSONL]\n"
    "               [--disable-ignore-eos] [--disable-progress]\n"
    "               TTFT, TPOT, ITL and throughput of a running server (SGLang's bench_serving)\n"
    "  batch        --input IN.jsonl --output OUT.jsonl (--endpoint URL ... | --model-path DIR)\n"
    "               [--concurrency N] [--max-new-tokens N] [--temperature T] [--seed S] [--unordered]\n"
    "               [--dry-run] [--errors FILE]: exactly-once, resumable generation (docs/batch.md)\n"
    "  init-random  --out DIR [--preset reference|tiny] [--config FILE] [--dtype bf16|f16|f32]\n"
    "               writes a randomly initialised checkpoint of any shape\n"
    "\n"
    "model flags (generate, score, bench, kv-eval, kv-calibrate): --threads N,\n"
    "  --kernels auto|portable|avx2|avx512, --context-length N, --max-batch-tokens N,\n"
    "  --kv-cache-dtype auto|bf16|fp16|fp32|fp8_e4m3|fp8_e5m2|fp8_ds_mla|fp4_e2m1|mxfp4|nvfp4,\n"
    "  --kv-scales FILE, --page-size N\n";

}  // namespace mlaserve::cli

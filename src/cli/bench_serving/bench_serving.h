// The parts of `mlaserve bench-serving` (cli/bench_serving.cc, the command), one idea per file:
// datasets.cc (prompts and arrival times from the seed), flags.cc, request.cc (one streamed
// request timed, and what the server says about itself), run_all.cc (arrivals, concurrency,
// progress), metrics.cc (SGLang's calculate_metrics) and report.cc (its result block and JSONL).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "core/status.h"
#include "server/http_client.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve::cli::bench_serving {

using Clock = std::chrono::steady_clock;

enum class Backend { kSglang, kOpenAi, kOpenAiChat };

// One prompt to send. Either token ids (sglang backend, random dataset, vocabulary known) or text.
struct BenchRequest {
  std::string text;
  std::vector<int64_t> input_ids;
  int prompt_len_estimate = 0;  // tokens: exact for ids, one per word for text
  int output_len = 0;           // max new tokens asked for
};

struct RequestResult {
  bool success = false;
  std::string error;
  double latency_s = 0;      // request sent -> last event received
  double ttft_s = 0;         // request sent -> first chunk carrying tokens
  std::vector<double> itl_s; // gaps between later token chunks
  int prompt_len = 0;        // from the server when it said, else the estimate
  int output_len = 0;        // from the server when it said, else token chunks seen
};

struct ServingFlags {
  std::string backend_name;
  Backend backend = Backend::kSglang;
  std::string base_url;
  std::string model;  // empty: ask the server
  std::string dataset_name;
  std::string dataset_path;
  int num_prompts = 0;
  int random_input_len = 0;
  int random_output_len = 0;
  double random_range_ratio = 0;
  int vocab_size = 0;  // 0: ask the server; unknown: send words instead of ids
  std::string tokenizer;          // sharegpt: the directory of the model's tokenizer
  int sharegpt_output_len = 0;   // 0: the completion's own length
  int sharegpt_context_len = 0;  // 0: no limit on prompt + output
  double request_rate = 0;  // requests/s; inf: all at once
  int max_concurrency = 0;  // 0: not set
  int warmup_requests = 0;
  uint64_t seed = 0;
  bool ignore_eos = true;
  bool disable_progress = false;
  std::string output_file;
};

// flags.cc: reads every flag; bad values and combinations are reported through args.Finish().
ServingFlags ReadServingFlags(Args& args);

// datasets.cc
std::vector<BenchRequest> RandomDataset(const ServingFlags& f);
// JSONL, one {"prompt": TEXT, "output_len"?: N} per line; the first num_prompts lines are used.
Result<std::vector<BenchRequest>> JsonlDataset(const ServingFlags& f);
// SGLang's ShareGPT sampling: a JSON array of {"conversations": [{"from", "value"}...]} (or
// "conversation"); those with at least two turns give (first turn: the prompt, second: the
// completion), taken in an order shuffled by the seed until num_prompts are kept; a pair is
// skipped when the prompt or the output counts fewer than 2 tokens, or prompt + output exceed
// sharegpt_context_len. output_len: the completion's token count, or sharegpt_output_len.
// Each request carries the prompt's text and its token ids (with the tokenizer's BOS).
Result<std::vector<BenchRequest>> ShareGptDataset(const ServingFlags& f, const Tokenizer& tokenizer);
// Seconds after the start at which each request is sent: exponential gaps (a Poisson process)
// drawn from the seed, or all zero for an infinite rate.
std::vector<double> ArrivalTimes(int num_requests, double request_rate, uint64_t seed);

// request.cc
std::string EndpointPath(Backend b);
// Sends one streaming request and times it.
RequestResult RunRequest(const HttpClient& client, const std::string& url, const HttpHeaders& headers,
                         const ServingFlags& f, const std::string& model, const BenchRequest& r);
// The first id in GET /v1/models, or "default" when the server does not say. An error only
// when the server cannot be reached at all.
Result<std::string> DiscoverModel(const HttpClient& client, const std::string& base_url, const HttpHeaders& headers);
// vocab_size from GET /get_model_info, or 0 when the server does not say. An error only when the
// server cannot be reached at all.
Result<int> DiscoverVocabSize(const HttpClient& client, const std::string& base_url, const HttpHeaders& headers);

// run_all.cc: sends every request at its arrival time, at most max_concurrency at once, and
// waits for all. results[i] belongs to requests[i]; *duration_s spans the first send to the
// last answer.
std::vector<RequestResult> RunAll(const HttpClient& client, const std::string& url, const HttpHeaders& headers,
                                  const ServingFlags& f, const std::string& model,
                                  const std::vector<BenchRequest>& requests, double* duration_s);

// metrics.cc: SGLang's calculate_metrics, over the successful requests.
struct Summary {  // in milliseconds
  double mean = 0, median = 0, std = 0, p95 = 0, p99 = 0, max = 0;
};
struct Metrics {
  int completed = 0;
  long long total_input = 0, total_output = 0;  // tokens
  double duration_s = 0;
  double concurrency = 0;  // sum of E2E latencies / duration
  Summary ttft, tpot, itl, e2e;
};
Metrics ComputeMetrics(const std::vector<RequestResult>& results, double duration_s);

// report.cc: SGLang's "Serving Benchmark Result" block on stdout, and one run as one JSON
// object with SGLang's key names (plus "failed").
void PrintMetrics(const ServingFlags& f, const Metrics& m);
nlohmann::json MetricsJson(const ServingFlags& f, const Metrics& m, int num_requests);

}  // namespace mlaserve::cli::bench_serving

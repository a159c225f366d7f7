// mlaserve bench-serving: like SGLang's bench_serving. Sends N streaming requests to a running
// server (SGLang's native /generate, or the OpenAI completions / chat endpoints), at a Poisson
// request rate or all at once, optionally capped at C in flight, and prints SGLang's "Serving
// Benchmark Result" block: throughput, TTFT, TPOT, ITL and end-to-end latency.
// Metric definitions follow SGLang's: TTFT is the time to the first chunk that carries tokens;
// ITL the gaps between later token chunks (for /generate, a gap spanning k tokens counts as k
// gaps of gap/k); TPOT (latency - TTFT) / (output tokens - 1); concurrency the sum of E2E
// latencies over the duration. Token counts come from the server (meta_info / usage) when it
// reports them, so no tokenizer is needed here.
// The parts live in cli/bench_serving/ (bench_serving.h lists them).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "cli/bench_serving/bench_serving.h"
#include "cli/commands.h"
#include "server/http_client.h"

namespace mlaserve::cli {

using bench_serving::Backend;
using bench_serving::BenchRequest;
using bench_serving::Metrics;
using bench_serving::RequestResult;
using bench_serving::ServingFlags;

int RunBenchServing(Args& args) {
  ServingFlags f = bench_serving::ReadServingFlags(args);
  if (auto exit_code = args.Finish()) return *exit_code;
  const HttpClient client;
  HttpHeaders headers = {{"Content-Type", "application/json"}};
  if (const char* key = std::getenv("OPENAI_API_KEY"); key != nullptr && *key != '\0') {
    headers.emplace_back("Authorization", std::string("Bearer ") + key);
  }

  std::string model = f.model;
  if (model.empty() && f.backend != Backend::kSglang) {
    auto discovered = bench_serving::DiscoverModel(client, f.base_url, headers);
    if (!discovered.ok()) return Fail("bench-serving", discovered.error());
    model = *discovered;
  }
  if (f.backend == Backend::kSglang && f.dataset_name == "random" && f.vocab_size == 0) {
    auto discovered = bench_serving::DiscoverVocabSize(client, f.base_url, headers);
    if (!discovered.ok()) return Fail("bench-serving", discovered.error());
    f.vocab_size = *discovered;
    if (f.vocab_size == 0) {
      std::fprintf(stderr, "bench-serving: the server did not report vocab_size (give --vocab-size N to send "
                           "random token ids); sending random words as text\n");
    }
  }

  std::vector<BenchRequest> requests;
  if (f.dataset_name == "jsonl") {
    auto loaded = bench_serving::JsonlDataset(f);
    if (!loaded.ok()) return Fail("bench-serving", loaded.error());
    requests = std::move(loaded).value();
  } else if (f.dataset_name == "sharegpt") {
    auto tokenizer = Tokenizer::FromDirectory(f.tokenizer);
    if (!tokenizer.ok()) return Fail("bench-serving", "--tokenizer: " + tokenizer.error());
    auto loaded = bench_serving::ShareGptDataset(f, *tokenizer);
    if (!loaded.ok()) return Fail("bench-serving", loaded.error());
    requests = std::move(loaded).value();
  } else {
    requests = bench_serving::RandomDataset(f);
  }
  const int num_requests = int(requests.size());
  long long planned_input = 0, planned_output = 0;
  for (const BenchRequest& r : requests) {
    planned_input += r.prompt_len_estimate;
    planned_output += r.output_len;
  }
  const std::string url = f.base_url + bench_serving::EndpointPath(f.backend);
  std::fprintf(stderr, "bench-serving: %d requests to %s%s; #input tokens ~%lld, #output tokens %lld\n",
               num_requests, url.c_str(), model.empty() ? "" : (" (model " + model + ")").c_str(), planned_input,
               planned_output);

  if (f.warmup_requests > 0) {
    std::fprintf(stderr, "bench-serving: starting warmup with %d sequences...\n", f.warmup_requests);
    BenchRequest warmup = requests[0];
    warmup.output_len = std::min(warmup.output_len, 32);
    for (int i = 0; i < f.warmup_requests; ++i) {
      RequestResult w = bench_serving::RunRequest(client, url, headers, f, model, warmup);
      if (!w.success) return Fail("bench-serving", "warmup request failed: " + w.error);
    }
  }

  double duration_s = 0;
  const std::vector<RequestResult> results =
      bench_serving::RunAll(client, url, headers, f, model, requests, &duration_s);
  const Metrics metrics = bench_serving::ComputeMetrics(results, duration_s);
  const auto first_failure = std::find_if(results.begin(), results.end(), [](const RequestResult& r) { return !r.success; });
  if (first_failure != results.end()) {
    std::fprintf(stderr, "bench-serving: %d of %d requests failed; first error: %s\n", num_requests - metrics.completed,
                 num_requests, first_failure->error.c_str());
  }
  bench_serving::PrintMetrics(f, metrics);
  if (!f.output_file.empty()) {
    std::ofstream out(f.output_file, std::ios::app);  // one line per run: SGLang's JSONL
    if (!(out << bench_serving::MetricsJson(f, metrics, num_requests).dump() << "\n")) {
      return Fail("bench-serving", f.output_file + ": cannot write");
    }
  }
  return metrics.completed == num_requests ? 0 : 1;
}

}  // namespace mlaserve::cli

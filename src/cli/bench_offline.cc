// mlaserve bench-offline: like SGLang's bench_offline_throughput. N requests (synthetic random
// lengths or a JSONL of prompts) are submitted at once to an in-process engine; prints request,
// input, output and total token throughput, peak running requests, retractions and the prefix
// cache hit rate.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/commands.h"
#include "cli/json_file.h"
#include "cli/engine_flags.h"
#include "cli/model_setup.h"
#include "engine/cpu_model_runner.h"
#include "core/log.h"
#include "engine/engine.h"
#include "engine/sampler.h"

namespace mlaserve::cli {
namespace {

struct Workload {
  std::vector<std::vector<TokenId>> prompts;
  std::vector<int> output_lens;
};

// Lengths uniform in [len * range_ratio, len], SGLang's random dataset rule.
int RandomLen(int len, double range_ratio, uint64_t seed, uint64_t i) {
  const int low = std::max(1, int(len * range_ratio));
  return low + int(CounterUniform(seed, i) * (len - low + 1));
}

}  // namespace

int RunBenchOffline(Args& args) {
  ModelFlags model_flags = ReadModelFlags(args, ForwardSize::kEngineStep);
  EngineOptions engine_options = ReadEngineFlags(args, model_flags);
  const int num_prompts = args.Int("num-prompts", 64, "requests", {.min = 1});
  const int input_len = args.Int("random-input-len", 256, "prompt tokens per request, at most", {.min = 1});
  const int output_len = args.Int("random-output-len", 256, "output tokens per request, at most", {.min = 1});
  const double range_ratio = args.Double("random-range-ratio", 1.0, "lengths are uniform in [len x ratio, len]",
                                         {.min = 0, .max = 1});
  const std::string dataset = args.Str("dataset-path", "",
                                       "JSONL of {\"prompt\", \"output_len\"} instead of random ids",
                                       {.value_name = "JSONL"});
  const uint64_t seed = uint64_t(args.Int64("seed", 1, "seed of the random lengths and ids"));
  const bool no_ignore_eos = args.Switch("no-ignore-eos", "stop requests at the end-of-sequence token");
  const std::string json_path = args.Str("result-json", "", "also write the results as JSON", {.value_name = "FILE"});
  if (auto exit_code = args.Finish()) return *exit_code;
  auto loaded = LoadModel(model_flags, /*need_tokenizer=*/!dataset.empty());
  if (!loaded.ok()) return Fail("bench-offline", loaded.error());
  Model& model = *loaded->model;
  const int vocab = model.config().vocab_size;

  Workload w;
  if (!dataset.empty()) {
    std::ifstream in(dataset);
    if (!in) return Fail("bench-offline", dataset + ": cannot open");
    std::string line;
    for (int line_no = 1; std::getline(in, line) && int(w.prompts.size()) < num_prompts; ++line_no) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.contains("prompt") || !j["prompt"].is_string()) {
        return Fail("bench-offline", dataset + ":" + std::to_string(line_no) + ": want {\"prompt\": ...}");
      }
      auto ids = loaded->tokenizer->Encode(j["prompt"].get<std::string>(), loaded->tokenizer->add_bos());
      if (!ids.ok()) return Fail("bench-offline", ids.error());
      w.prompts.push_back(std::move(ids).value());
      w.output_lens.push_back(j.contains("output_len") && j["output_len"].is_number_integer()
                                  ? j["output_len"].get<int>() : output_len);
    }
  } else {
    for (int i = 0; i < num_prompts; ++i) {
      const int n = RandomLen(input_len, range_ratio, seed, uint64_t(2 * i));
      std::vector<TokenId> ids(static_cast<size_t>(n));
      for (int t = 0; t < n; ++t) ids[size_t(t)] = TokenId(CounterUniform(seed + 1 + uint64_t(i), uint64_t(t)) * vocab);
      w.prompts.push_back(std::move(ids));
      w.output_lens.push_back(RandomLen(output_len, range_ratio, seed, uint64_t(2 * i + 1)));
    }
  }

  auto kv = CreateEngineKv(*loaded, model_flags.page_size);
  if (!kv.ok()) return Fail("bench-offline", kv.error());
  auto drafter = AttachDrafter(engine_options, *loaded, *kv);
  if (!drafter.ok()) return Fail("bench-offline", drafter.error());
  Log(LogLevel::kInfo, "[mlaserve] kv_cache_dtype=%s, %s", KvFormatName(loaded->kv_cache.kv_format),
      loaded->kv_budget.log_line.c_str());
  CpuModelRunner runner(model, *loaded->kernels, *kv->storage);
  Engine engine(runner, *kv->allocator, engine_options);

  std::mutex mu;
  int finished = 0, failed = 0;
  int64_t input_tokens = 0, output_tokens = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    GenerateRequest req;
    req.rid = "bench-" + std::to_string(i);
    req.input_ids = w.prompts[i];
    req.sampling.temperature = 0.0f;
    req.sampling.max_new_tokens = w.output_lens[i];
    req.sampling.ignore_eos = !no_ignore_eos;
    input_tokens += int64_t(req.input_ids.size());
    Status s = engine.Submit(std::move(req), [&](const OutputView& out) {
      if (!out.finished) return;
      std::lock_guard<std::mutex> lock(mu);
      ++finished;
      if (out.finish_reason == FinishReason::kAbort) ++failed;
      output_tokens += out.completion_tokens;
    });
    if (!s.ok()) return Fail("bench-offline", "request " + std::to_string(i) + ": " + s.message());
  }
  while (engine.Step()) {
  }
  const double duration = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const EngineStatsSnapshot stats = engine.stats();
  std::printf("\n====== Offline Throughput Benchmark Result =======\n");
  std::printf("%-40s %s\n", "KV cache dtype:", KvFormatName(loaded->kv_cache.kv_format));
  std::printf("%-40s %lld\n", "max_total_num_tokens:", (long long)stats.max_total_num_tokens);
  std::printf("%-40s %d\n", "Successful requests:", finished - failed);
  std::printf("%-40s %.2f\n", "Benchmark duration (s):", duration);
  std::printf("%-40s %lld\n", "Total input tokens:", (long long)input_tokens);
  std::printf("%-40s %lld\n", "Total generated tokens:", (long long)output_tokens);
  std::printf("%-40s %.2f\n", "Request throughput (req/s):", finished / duration);
  std::printf("%-40s %.2f\n", "Input token throughput (tok/s):", input_tokens / duration);
  std::printf("%-40s %.2f\n", "Output token throughput (tok/s):", output_tokens / duration);
  std::printf("%-40s %.2f\n", "Total token throughput (tok/s):", (input_tokens + output_tokens) / duration);
  std::printf("%-40s %lld\n", "Peak running requests:", (long long)stats.max_running_reqs_seen);
  std::printf("%-40s %lld\n", "Retractions:", (long long)stats.num_retracted_requests_total);
  std::printf("%-40s %.4f\n", "Cache hit rate:", stats.cache_hit_rate);
  // Speculative decoding, over the whole run: tokens appended per verify step of one request.
  const double accept_length =
      stats.spec_verify_steps_total > 0
          ? double(stats.spec_accepted_tokens_total + stats.spec_verify_steps_total) / double(stats.spec_verify_steps_total)
          : 0.0;
  if (engine_options.speculative()) {
    std::printf("%-40s %s, %d drafts per step\n", "Speculative algorithm:", engine_options.speculative_algorithm.c_str(),
                engine_options.num_draft_tokens);
    std::printf("%-40s %.2f\n", "Accept length:", accept_length);
  }
  std::printf("==================================================\n");
  if (!json_path.empty()) {
    nlohmann::json j{{"kv_cache_dtype", KvFormatName(loaded->kv_cache.kv_format)},
                     {"max_total_num_tokens", stats.max_total_num_tokens},
                     {"successful_requests", finished - failed},
                     {"duration_s", duration},
                     {"input_tokens", input_tokens},
                     {"output_tokens", output_tokens},
                     {"request_throughput", finished / duration},
                     {"output_throughput", output_tokens / duration},
                     {"total_throughput", (input_tokens + output_tokens) / duration},
                     {"peak_running_requests", stats.max_running_reqs_seen},
                     {"retractions", stats.num_retracted_requests_total},
                     {"cache_hit_rate", stats.cache_hit_rate},
                     {"speculative_algorithm", engine_options.speculative_algorithm},
                     {"accept_length", accept_length}};
    if (Status s = WriteJsonFile(json_path, j); !s.ok()) return Fail("bench-offline", s.message());
  }
  return failed == 0 && finished == int(w.prompts.size()) ? 0 : 1;
}

}  // namespace mlaserve::cli

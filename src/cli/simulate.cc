// mlaserve simulate: "what will this deployment do?" without a run. The real engine (scheduler,
// prefix cache, retraction, output processing) runs on a virtual clock; a cost-model runner
// (sim/simulated_runner.h) advances it by each step's predicted time on a hardware profile
// (sim/hardware_profile.h: a built-in GPU, a JSON file, or this host calibrated by measurement,
// cli/calibrate_host.h). The workload is bench-serving's (the same random lengths and arrival times
// for the same seed), and so is the report, followed by what the run did: KV capacity (as
// `plan` computes it), requests decoding at once, retractions, time to finish, and where the
// predicted time went. docs/simulate.md.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "cli/bench_serving/bench_serving.h"
#include "cli/calibrate_host.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/weight_source.h"
#include "core/log.h"
#include "engine/engine.h"
#include "kvcache/kv_budget.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "sim/batch_workload.h"
#include "sim/builtin_profiles.h"
#include "sim/simulated_runner.h"
#include "sim/step_cost.h"
#include "sim/timeline_svg.h"
#include "sim/virtual_run.h"

namespace mlaserve::cli {
namespace {

using json = nlohmann::json;

// --hardware: a built-in name, or a JSON file.
Result<HardwareProfile> ResolveProfile(const std::string& hardware) {
  for (const BuiltinProfile& b : BuiltinProfiles()) {
    if (b.name == hardware) return ParseHardwareProfile(json::parse(b.json), "built-in profile " + hardware);
  }
  if (std::filesystem::exists(hardware)) return LoadHardwareProfile(hardware);
  std::string names;
  for (const BuiltinProfile& b : BuiltinProfiles()) names += std::string(names.empty() ? "" : ", ") + std::string(b.name);
  return Status::Error("--hardware " + hardware + ": not a built-in profile (" + names +
                       ", this-host) nor a profile file");
}

// bench-serving's requests (the same lengths for the same flags and seed) at its arrival times,
// prompt ids folded below the simulated vocabulary.
std::vector<TimedRequest> TimedWorkload(const std::vector<bench_serving::BenchRequest>& requests,
                                        const bench_serving::ServingFlags& f) {
  const std::vector<double> arrivals = bench_serving::ArrivalTimes(int(requests.size()), f.request_rate, f.seed);
  std::vector<TimedRequest> out;
  for (size_t i = 0; i < requests.size(); ++i) {
    TimedRequest t{.output_len = requests[i].output_len, .arrival_s = arrivals[i]};
    for (int64_t id : requests[i].input_ids) t.prompt.push_back(TokenId(id % kSimulatedVocab));
    out.push_back(std::move(t));
  }
  return out;
}

void Row(const char* label, const std::string& value) { std::printf("%-40s %-10s\n", label, value.c_str()); }

std::string Format(const char* format, double v) {
  char buf[96];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

}  // namespace

int RunSimulate(Args& args) {
  // The model and its cache, as serve reads them (without loading weights).
  ModelFlags model_flags;
  model_flags.model_path = args.Str("model-path", "", "a model directory or its config.json (required)",
                                    {.value_name = "DIR|FILE"});
  model_flags.kv_cache_dtype = args.Str("kv-cache-dtype", "auto", "KV cache format (serve's names)");
  model_flags.page_size = args.Int("page-size", 16, "tokens per KV page", {.min = 1, .max = 4096});
  const double device_gb = args.Double("device-memory", 0.0, "memory per device, in GB",
                                       {.value_name = "GB", .shown_default = "the profile's memory_gb", .min = 0});
  model_flags.mem_fraction_static = args.Double("mem-fraction-static", 0.88,
                                                "fraction of the device memory for weights + KV", {.above = 0, .max = 1});
  model_flags.max_total_tokens = args.Int64("max-total-tokens", 0, "caps the KV pool's tokens",
                                            {.shown_default = "what the memory holds", .min = 0});
  const std::optional<int> context = args.OptInt("context-length", "longest sequence, prompt plus generated tokens",
                                                  {.shown_default = "max_position_embeddings", .min = 1});
  model_flags.tp_size = args.Int("tp-size", 1, "tensor-parallel devices (the profile's, each)", {.min = 1});
  model_flags.max_batch_tokens = args.OptInt("max-batch-tokens", "tokens one step holds",
                                             {.shown_default = "chunked-prefill-size + max-running-requests", .min = 1});
  if (context) model_flags.options.max_context = *context;
  EngineOptions options = ReadEngineFlags(args, model_flags);
  options.log_batches = false;
  // The hardware.
  const std::string hardware = args.Str("hardware", "", "a built-in profile (h100, h200, b200, mi300x), a profile "
                                        "JSON file, or this-host: calibrate this machine on --model-path's weights",
                                        {.value_name = "NAME|FILE"});
  const std::string write_profile = args.Str("write-profile", "", "--hardware this-host: write the calibrated "
                                             "profile here (reuse it with --hardware FILE)", {.value_name = "FILE"});
  const std::string print_profile = args.Str("print-profile", "", "print a built-in profile's JSON and exit",
                                             {.value_name = "NAME"});
  // The workload: bench-serving's flags.
  bench_serving::ServingFlags f;
  f.backend_name = "simulate";
  f.dataset_name = args.Str("dataset-name", "random", "where prompts come from (bench-serving's)",
                            {.choices = {"random", "sharegpt"}});
  f.dataset_path = args.Str("dataset-path", "", "sharegpt: ShareGPT's JSON array", {.value_name = "FILE"});
  f.sharegpt_output_len = args.Int("sharegpt-output-len", 0, "sharegpt: output tokens per request",
                                   {.shown_default = "the conversation's answer length", .min = 0});
  f.sharegpt_context_len = args.Int("sharegpt-context-len", 0, "sharegpt: skip pairs whose prompt + output exceed it",
                                    {.shown_default = "no limit", .min = 0});
  f.num_prompts = args.Int("num-prompts", 64, "requests", {.min = 1});
  f.random_input_len = args.Int("random-input-len", 256, "prompt tokens per request, at most", {.min = 1});
  f.random_output_len = args.Int("random-output-len", 256, "output tokens per request, at most", {.min = 1});
  f.random_range_ratio = args.Double("random-range-ratio", 1.0, "lengths are uniform in [len x ratio, len]",
                                     {.min = 0, .max = 1});
  f.request_rate = args.Double("request-rate", std::numeric_limits<double>::infinity(),
                               "requests per second, Poisson arrivals; inf: all at once", {.above = 0});
  const std::optional<int> max_concurrency = args.OptInt(
      "max-concurrency", "requests in flight at most (with --workload: conversations, batch's --concurrency); 0: no "
      "limit", {.shown_default = "no limit; with --workload 8, batch's default", .min = 0});
  f.seed = uint64_t(args.Int64("seed", 1, "seed of the random lengths, prompts and arrivals"));
  // Or the workload of a `mlaserve batch` run.
  BatchWorkloadOptions batch_workload;
  batch_workload.input_path = args.Str("workload", "", "simulate `mlaserve batch` on this input: every record's "
                                       "assistant turns regenerated in order", {.value_name = "BATCH_INPUT.jsonl"});
  batch_workload.lengths_from_path = args.Str("lengths-from", "", "--workload: take each turn's lengths from this "
                                              "batch output", {.value_name = "BATCH_OUTPUT.jsonl",
                                              .shown_default = "the input's own answers"});
  batch_workload.max_new_tokens = args.Int("max-new-tokens", 256, "--workload: tokens per answer at most (batch's)",
                                           {.min = 1});
  const std::string tokenizer_path = args.Str("tokenizer-path", "", "sharegpt and --workload: the tokenizer that "
                                              "counts tokens", {.value_name = "DIR", .shown_default = "the model's"});
  const std::string chat_template = args.Str("chat-template", "", "--workload: a Jinja chat template file",
                                             {.value_name = "FILE", .shown_default = "the model's"});
  const std::string plot = args.Str("plot", "", "draw running requests, queue and token usage over time",
                                    {.value_name = "FILE.svg"});
  const std::string output_file = args.Str("output-file", "", "append the results as one JSON line",
                                           {.value_name = "JSONL"});
  if (!options.speculative_algorithm.empty()) {
    args.Reject("--speculative-algorithm: simulate has no model of draft acceptance yet; simulate without it");
  }
  if (!print_profile.empty()) {
    for (const BuiltinProfile& b : BuiltinProfiles()) {
      if (b.name == print_profile) {
        if (auto exit_code = args.Finish()) return *exit_code;
        std::printf("%.*s\n", int(b.json.size()), b.json.data());
        return 0;
      }
    }
    args.Reject("--print-profile " + print_profile + ": not a built-in profile");
  }
  if (model_flags.model_path.empty()) args.Reject("--model-path (a model directory or config.json) is required");
  if (hardware.empty()) args.Reject("--hardware (h100, h200, b200, mi300x, a profile file, or this-host) is required");
  if (!write_profile.empty() && hardware != "this-host") args.Reject("--write-profile is for --hardware this-host");
  const bool batch_run = !batch_workload.input_path.empty();
  if (f.dataset_name == "sharegpt" && f.dataset_path.empty()) args.Reject("--dataset-name sharegpt needs --dataset-path");
  if (f.dataset_name != "sharegpt" && !f.dataset_path.empty()) args.Reject("--dataset-path needs --dataset-name sharegpt");
  // Each workload's own flags, refused by name with another workload (never accepted and ignored).
  const bool sharegpt = f.dataset_name == "sharegpt";
  for (const char* flag : {"dataset-name", "dataset-path", "num-prompts", "request-rate", "seed", "random-input-len",
                           "random-output-len", "random-range-ratio", "sharegpt-output-len", "sharegpt-context-len"}) {
    if (batch_run && args.WasGiven(flag)) {
      args.Reject("--" + std::string(flag) + ": --workload is the whole workload (batch sends every record at once)");
    }
  }
  for (const char* flag : {"max-new-tokens", "chat-template"}) {
    if (!batch_run && args.WasGiven(flag)) args.Reject("--" + std::string(flag) + " is for --workload");
  }
  if (!batch_run && !sharegpt && args.WasGiven("tokenizer-path")) {
    args.Reject("--tokenizer-path is for --dataset-name sharegpt and --workload (random prompts need no tokenizer)");
  }
  for (const char* flag : {"sharegpt-output-len", "sharegpt-context-len"}) {
    if (!batch_run && !sharegpt && args.WasGiven(flag)) args.Reject("--" + std::string(flag) + " is for --dataset-name sharegpt");
  }
  for (const char* flag : {"random-input-len", "random-output-len", "random-range-ratio"}) {
    if (sharegpt && args.WasGiven(flag)) args.Reject("--" + std::string(flag) + " is for --dataset-name random");
  }
  if (!batch_workload.lengths_from_path.empty() && !batch_run) args.Reject("--lengths-from needs --workload");
  f.max_concurrency = max_concurrency.value_or(batch_run ? 8 : 0);
  if (auto exit_code = args.Finish()) return *exit_code;
  f.vocab_size = kSimulatedVocab;  // prompts as ids below the simulated vocabulary

  auto config = LoadModelConfig(model_flags.model_path);
  if (!config.ok()) return Fail("simulate", config.error());
  const ModelConfig& c = *config;
  auto format = ParseKvCacheDtype(model_flags.kv_cache_dtype, c.torch_dtype);
  if (!format.ok()) return Fail("simulate", format.error());
  const WeightSource source = ReadWeightSource(model_flags.model_path, c);
  auto cost = StepCostModel::Create(c, source.tensors, *format, model_flags.tp_size);
  if (!cost.ok()) return Fail("simulate", cost.error());

  HardwareProfile profile;
  if (hardware == "this-host") {
    auto calibrated = CalibrateThisHost(model_flags, *cost, options);
    if (!calibrated.ok()) return Fail("simulate", "--hardware this-host: " + calibrated.error());
    profile = std::move(calibrated).value();
    if (!write_profile.empty()) {
      std::ofstream out(write_profile);
      if (!(out << HardwareProfileJson(profile).dump(2) << "\n")) return Fail("simulate", write_profile + ": cannot write");
    }
  } else {
    auto resolved = ResolveProfile(hardware);
    if (!resolved.ok()) return Fail("simulate", resolved.error());
    profile = std::move(resolved).value();
  }

  // The KV pool: SGLang's arithmetic on the device memory, as `plan` does it.
  const double device_bytes = (device_gb > 0 ? device_gb : profile.memory_gb) * 1e9;
  auto budget = ComputeKvBudget(KvBudgetRequest{.device_memory_bytes = device_bytes,
                                                .mem_fraction_static = model_flags.mem_fraction_static,
                                                .weight_bytes = cost->weight_bytes_per_rank(),
                                                .kv_bytes_per_token = cost->kv_bytes_per_token(),
                                                .max_total_tokens = model_flags.max_total_tokens,
                                                .page_size = model_flags.page_size});
  if (!budget.ok()) return Fail("simulate", budget.error());
  auto pool = PageAllocator::Create(model_flags.page_size, budget->max_total_num_tokens / model_flags.page_size);
  if (!pool.ok()) return Fail("simulate", pool.error());
  VirtualClock clock;
  const ModelRunnerInfo info{.vocab_size = kSimulatedVocab,
                             .hidden_size = c.hidden_size,
                             .max_batch_tokens = model_flags.options.max_batch_tokens,
                             .max_context = context.value_or(c.max_position_embeddings)};
  SimulatedRunner runner(*cost, profile, clock, info);
  Engine engine(runner, **pool, options, nullptr, clock);

  std::vector<TimedRequest> workload;
  if (batch_run || f.dataset_name == "sharegpt") {
    const std::string model_dir = std::filesystem::is_directory(model_flags.model_path)
                                      ? model_flags.model_path
                                      : std::filesystem::path(model_flags.model_path).parent_path().string();
    const std::string tokenizer_dir = tokenizer_path.empty() ? model_dir : tokenizer_path;
    auto tokenizer = Tokenizer::FromDirectory(tokenizer_dir);
    if (!tokenizer.ok()) {
      return Fail("simulate", "counting tokens needs the model's tokenizer (--tokenizer-path DIR): " + tokenizer.error());
    }
    if (batch_run) {
      auto ct = ChatTemplate::ForModel(tokenizer_dir, chat_template, *tokenizer, c.model_type);
      if (!ct.ok()) return Fail("simulate", ct.error());
      batch_workload.vocab_size = kSimulatedVocab;
      auto read = ReadBatchWorkload(batch_workload, *tokenizer, *ct);
      if (!read.ok()) return Fail("simulate", read.error());
      std::fprintf(stderr, "simulate: --workload %s: %lld records, %zu turns, %lld turns' lengths from --lengths-from, "
                   "%lld lines skipped%s%s; concurrency %d\n", batch_workload.input_path.c_str(),
                   (long long)read->records, read->requests.size(), (long long)read->turns_with_lengths,
                   (long long)read->skipped_lines, read->skipped_lines > 0 ? " (first: " : "",
                   read->skipped_lines > 0 ? (read->first_skipped + ")").c_str() : "", f.max_concurrency);
      workload = std::move(read->requests);
    } else {
      auto sampled = bench_serving::ShareGptDataset(f, *tokenizer);
      if (!sampled.ok()) return Fail("simulate", sampled.error());
      workload = TimedWorkload(*sampled, f);
    }
  } else {
    workload = TimedWorkload(bench_serving::RandomDataset(f), f);
  }
  std::fprintf(stderr, "simulate: %s on %d x %s (%s), kv_cache_dtype=%s, %s; %d requests\n", c.model_type.c_str(),
               model_flags.tp_size, profile.name.c_str(), profile.description.c_str(), KvFormatName(*format),
               budget->log_line.c_str(), int(workload.size()));
  auto run = RunOnVirtualClock(engine, clock, workload, f.max_concurrency, profile.request_latency_us * 1e-6);
  if (!run.ok()) return Fail("simulate", run.error());

  std::vector<bench_serving::RequestResult> results;
  for (const VirtualRequestResult& r : run->requests) {
    results.push_back({.success = r.success,
                       .error = r.error,
                       .latency_s = r.end_s - r.send_s,
                       .ttft_s = r.first_token_s,
                       .itl_s = r.itl_s,
                       .prompt_len = r.prompt_len,
                       .output_len = r.output_len});
  }
  const bench_serving::Metrics metrics = bench_serving::ComputeMetrics(results, run->duration_s);
  bench_serving::PrintMetrics(f, metrics);
  const EngineStatsSnapshot stats = engine.stats();
  const SimulatedRunner::Totals& totals = runner.totals();
  const StepTime& t = totals.time;
  const double share = t.total_s > 0 ? 100.0 / t.total_s : 0;
  std::printf("\n================ Simulated Engine ================\n");
  Row("Hardware profile:", profile.name + " x " + std::to_string(model_flags.tp_size));
  Row("KV cache dtype:", KvFormatName(*format));
  Row("max_total_num_tokens:", std::to_string(stats.max_total_num_tokens));
  Row("Weights per device (GB):", Format("%.2f", cost->weight_bytes_per_rank() / 1e9));
  Row("Peak running requests:", std::to_string(run->max_running));
  Row("Mean running requests:", Format("%.2f", run->mean_running));
  Row("Retracted requests:", std::to_string(stats.num_retracted_requests_total));
  Row("Engine steps:", std::to_string(totals.steps));
  Row("Mean step (ms):", Format("%.3f", totals.steps > 0 ? t.total_s / double(totals.steps) * 1e3 : 0.0));
  Row("Time to finish the workload (s):", Format("%.2f", run->duration_s));
  std::printf("Predicted time (share of all steps'): weights %.1f%%, products %.1f%%, KV %.1f%%, attention %.1f%%, "
              "collectives %.1f%%, overheads %.1f%% (memory and arithmetic terms are %s per phase)\n",
              t.weights_s * share, t.linear_s * share, t.kv_s * share, t.attention_s * share, t.comm_s * share,
              t.overhead_s * share, profile.combine == CostCombine::kMax ? "overlapped (max)" : "added");
  // Concurrency and token usage over time, in tenths of the run.
  std::printf("\n%-12s %10s %10s %12s\n", "time (s)", "running", "queued", "token usage");
  size_t point = 0;
  for (int tenth = 1; tenth <= 10 && !run->timeline.empty(); ++tenth) {
    const double until = run->timeline.back().t_s * tenth / 10;
    while (point + 1 < run->timeline.size() && run->timeline[point + 1].t_s <= until) ++point;
    const TimelinePoint& p = run->timeline[point];
    std::printf("%-12.2f %10d %10d %12.3f\n", p.t_s, p.running, p.queued, p.token_usage);
  }
  std::printf("==================================================\n");
  if (!plot.empty()) {
    const std::string title = c.model_type + " on " + std::to_string(model_flags.tp_size) + " x " + profile.name +
                              ", " + KvFormatName(*format) + " KV, " + std::to_string(workload.size()) + " requests";
    if (Status s = WriteTimelineSvg(plot, run->timeline, title); !s.ok()) return Fail("simulate", s.message());
  }
  if (!output_file.empty()) {
    json line = bench_serving::MetricsJson(f, metrics, int(workload.size()));
    line["hardware"] = profile.name;
    line["tp_size"] = model_flags.tp_size;
    line["kv_cache_dtype"] = KvFormatName(*format);
    line["max_total_num_tokens"] = stats.max_total_num_tokens;
    line["max_running_requests_seen"] = run->max_running;
    line["mean_running_requests"] = run->mean_running;
    line["retracted_requests"] = stats.num_retracted_requests_total;
    line["steps"] = totals.steps;
    std::ofstream out(output_file, std::ios::app);
    if (!(out << line.dump() << "\n")) return Fail("simulate", output_file + ": cannot write");
  }
  return metrics.completed == int(workload.size()) ? 0 : 1;
}

}  // namespace mlaserve::cli

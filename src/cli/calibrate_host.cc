#include "cli/calibrate_host.h"

#include <chrono>
#include <cstdio>
#include <ctime>

#include "cli/fma_peak.h"
#include "cli/read_bandwidth.h"
#include "cli/server_cost.h"
#include "core/cpu_features.h"
#include "core/log.h"
#include "engine/cpu_model_runner.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "sim/fit_profile.h"

namespace mlaserve::cli {
namespace {

// Records what each plan asks (the cost model's count) before the real runner executes it.
class CountingRunner final : public ModelRunner {
 public:
  CountingRunner(ModelRunner& inner, const StepCostModel& cost) : inner_(inner), cost_(cost) {}
  const ModelRunnerInfo& info() const override { return inner_.info(); }
  void ReserveLogitsRows(int rows) override { inner_.ReserveLogitsRows(rows); }
  Result<ModelRunnerOutput> Execute(const BatchPlan& plan) override {
    last_ = cost_.Work(plan);
    ++executed_;
    return inner_.Execute(plan);
  }
  int64_t executed() const { return executed_; }
  const StepWork& last() const { return last_; }

 private:
  ModelRunner& inner_;
  const StepCostModel& cost_;
  StepWork last_;
  int64_t executed_ = 0;
};

struct Phase {
  const char* what;
  int requests, prompt_len, output_len;
};

// ~25 s on the 3.9 GB reference shape on 2 cores; about a second on the bundled model.
constexpr Phase kPhases[] = {
    {"decode, 1 request", 1, 32, 40},
    {"decode, 8 requests", 8, 32, 24},
    {"prefill, 8 prompts of 256 tokens", 8, 256, 2},
    {"prefill, one prompt of 2,048 tokens", 1, 2048, 2},
    {"decode, 16 requests at ~800 tokens", 16, 768, 16},
};

constexpr int64_t kCalibrationPoolTokens = 65536;

}  // namespace

Result<HardwareProfile> CalibrateThisHost(ModelFlags flags, const StepCostModel& cost, const EngineOptions& options) {
  if (cost.tp_size() != 1) return Status::Error("this host is one device: calibrate with --tp-size 1");
  flags.max_total_tokens = flags.max_total_tokens > 0 ? std::min(flags.max_total_tokens, kCalibrationPoolTokens)
                                                      : kCalibrationPoolTokens;
  auto loaded = LoadModel(flags, /*need_tokenizer=*/false);
  if (!loaded.ok()) return loaded.status();
  Model& model = *loaded->model;
  auto kv = CreateEngineKv(*loaded, flags.page_size);
  if (!kv.ok()) return kv.status();
  const KernelSet& kernels = *loaded->kernels;

  // The rates, measured now.
  const double read_bps = MeasureReadBandwidth(model.pool(), size_t(256) << 20, 5);
  const FmaPeak fma = MeasureFmaPeak(model.pool(), kernels);
  const std::optional<FmaPeak> bf16 = MeasureBf16DotPeak(model.pool());
  const bool bf16_products = bf16 && kernels.bf16_min_tokens > 0;
  const double peak_flops = bf16_products ? bf16->all_threads_flops : fma.all_threads_flops;
  Log(LogLevel::kInfo, "[mlaserve] calibrating this host: read bandwidth %.1f GB/s, %s peak %.1f GFLOP/s (%s)",
      read_bps / 1e9, bf16_products ? "vdpbf16ps" : "fp32 FMA", peak_flops / 1e9, loaded->kernel_choice.c_str());

  // The real engine on the calibration workload, every step timed.
  CpuModelRunner cpu(model, kernels, *kv->storage);
  CountingRunner runner(cpu, cost);
  EngineOptions o = options;
  o.log_batches = false;
  Engine engine(runner, *kv->allocator, o);
  std::vector<MeasuredStep> steps;
  uint64_t seed = 0xca11b;
  auto run_phase = [&](const Phase& p, bool record) -> Status {
    // (A model with a short context takes the longest prompt it can.)
    const int prompt_len = std::min(p.prompt_len, model.max_context() - p.output_len);
    for (int r = 0; r < p.requests; ++r) {
      GenerateRequest req;
      req.rid = "calibrate-" + std::to_string(seed);
      for (int t = 0; t < prompt_len; ++t) {
        req.input_ids.push_back(TokenId(CounterUniform(seed, uint64_t(t)) * model.config().vocab_size));
      }
      ++seed;
      req.sampling.temperature = 0.0f;
      req.sampling.max_new_tokens = p.output_len;
      req.sampling.ignore_eos = true;
      MLA_RETURN_IF_ERROR(engine.Submit(std::move(req), [](const OutputView&) {}));
    }
    for (;;) {
      const int64_t before = runner.executed();
      const auto t0 = std::chrono::steady_clock::now();
      if (!engine.Step()) break;
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (record && runner.executed() > before) steps.push_back({runner.last(), seconds});
    }
    return Status::Ok();
  };
  MLA_RETURN_IF_ERROR(run_phase({"warm-up", 2, 64, 4}, false));  // first touches of weights and pages
  std::vector<size_t> phase_end;  // steps[phase_end[i - 1], phase_end[i]) are phase i's
  for (const Phase& p : kPhases) {
    MLA_RETURN_IF_ERROR(run_phase(p, true));
    phase_end.push_back(steps.size());
  }

  HardwareProfile rates;
  rates.name = "this-host";
  rates.memory_gb = PhysicalMemoryBytes() / 1e9;
  rates.memory_bandwidth_gbs = read_bps / 1e9;
  rates.bf16_tflops = peak_flops / 1e12;
  rates.fp8_tflops = 0;  // quantized weights run at the same products' rate here
  rates.combine = CostCombine::kMax;
  rates.efficiency = {.weights = 0.7, .kv = 0.7, .linear = 0.7, .attention = 0.5, .interconnect = 1.0};
  const ProfileFit fit = FitProfile(steps, rates, cost);
  HardwareProfile p = fit.profile;
  for (size_t i = 0, begin = 0; i < phase_end.size(); begin = phase_end[i++]) {
    double measured = 0, predicted = 0;
    for (size_t j = begin; j < phase_end[i]; ++j) {
      measured += steps[j].seconds;
      predicted += cost.Time(steps[j].work, p).total_s;
    }
    const double n = double(std::max<size_t>(1, phase_end[i] - begin));
    Log(LogLevel::kInfo, "[mlaserve] calibration phase \"%s\": %zu steps, mean %.3f ms measured, %.3f ms fitted",
        kPhases[i].what, phase_end[i] - begin, measured / n * 1e3, predicted / n * 1e3);
  }
  // What the HTTP server adds per step and per streamed chunk, measured against the in-process
  // profile.
  auto server = MeasureServerCost(flags, cost, p, options);
  if (!server.ok()) return Status::Error("measuring what the server adds: " + server.error());
  p.step_overhead_us += server->seconds_per_step * 1e6;
  p.per_logits_row_us += server->seconds_per_chunk * 1e6;
  p.request_latency_us = server->request_latency_s * 1e6;
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  p.description = CpuModelName() + ", " + std::to_string(model.pool().num_threads()) + " threads, " +
                  loaded->kernel_choice;
  char line[512];
  std::snprintf(line, sizeof line,
                "calibrated %s by `mlaserve simulate --hardware this-host` on %s: rates are that run's probes; "
                "efficiencies and overheads fitted to %zu engine steps (mean |error| %.1f%%, total %+.1f%%)",
                date, flags.model_path.c_str(), steps.size(), fit.mean_abs_rel_error * 100, fit.total_rel_error * 100);
  p.sources = {line};
  std::snprintf(line, sizeof line,
                "step_overhead_us and per_logits_row_us include what the HTTP server adds, %.1f us a step and %.1f "
                "us a streamed chunk, and request_latency_us is its latency to the engine: streaming requests to "
                "`mlaserve serve` decoded at a median TPOT of %.3f ms (1 request) and %.3f ms (%d) against %.3f and "
                "%.3f ms predicted in process",
                server->seconds_per_step * 1e6, server->seconds_per_chunk * 1e6, server->real_tpot_one_s * 1e3,
                server->real_tpot_many_s * 1e3, kServerCostRequests, server->predicted_tpot_one_s * 1e3,
                server->predicted_tpot_many_s * 1e3);
  p.sources.push_back(line);
  Log(LogLevel::kInfo,
      "[mlaserve] this host's profile: memory and arithmetic %s, memory efficiency %.2f, products %.2f, attention "
      "%.2f, step overhead %.0f us, "
      "%.1f us per logits row (of which the server's: %.0f us a step, %.1f us a chunk), request latency %.0f us; "
      "over %zu steps in process mean |error| %.1f%%, total %+.1f%%",
      p.combine == CostCombine::kMax ? "overlapped (max)" : "added (sum)", p.efficiency.weights, p.efficiency.linear,
      p.efficiency.attention, p.step_overhead_us, p.per_logits_row_us, server->seconds_per_step * 1e6, server->seconds_per_chunk * 1e6, p.request_latency_us, steps.size(),
      fit.mean_abs_rel_error * 100,
      fit.total_rel_error * 100);
  return p;
}

}  // namespace mlaserve::cli

#include "cli/server_cost.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cli/bench_serving/bench_serving.h"
#include "core/read_file.h"
#include "engine/engine.h"
#include "sim/simulated_runner.h"
#include "sim/virtual_run.h"

namespace mlaserve::cli {
namespace {

// `serve` on an ephemeral port, its log in a temporary directory; stopped (SIGTERM) and the
// directory removed by the destructor.
class ChildServer {
 public:
  ~ChildServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }

  Status Start(std::vector<std::string> args) {
    char dir[] = "/tmp/mlaserve-calibrate.XXXXXX";
    if (::mkdtemp(dir) == nullptr) return Status::Error("cannot create a temporary directory");
    dir_ = dir;
    const std::string log = dir_ + "/serve.log";
    args.insert(args.begin(), {"/proc/self/exe", "serve"});
    pid_ = ::fork();
    if (pid_ < 0) return Status::Error("cannot start the server (fork failed)");
    if (pid_ == 0) {
      if (std::freopen(log.c_str(), "w", stderr) == nullptr) _exit(126);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv("/proc/self/exe", argv.data());
      _exit(127);
    }
    // Ready: its log says so and where it listens (the weights load first: up to minutes).
    const std::regex listening("listening on http://[^:]+:([0-9]+)");
    for (int waited_ms = 0; waited_ms < 600000; waited_ms += 50) {
      auto text = ReadWholeFile(log);
      std::smatch m;
      if (text.ok() && text->find("ready to roll") != std::string::npos && std::regex_search(*text, m, listening)) {
        port_ = std::stoi(m[1]);
        return Status::Ok();
      }
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return Status::Error("the server exited: " + (text.ok() ? text->substr(text->rfind('\n', text->size() - 2) + 1)
                                                                : std::string("(no log)")));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling its log for the ready line
    }
    return Status::Error("the server was not ready within 10 minutes");
  }

  int port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string dir_;
};

}  // namespace

Result<ServerCost> MeasureServerCost(const ModelFlags& flags, const StepCostModel& cost,
                                         const HardwareProfile& in_process, const EngineOptions& options) {
  auto config = LoadModelConfig(flags.model_path);
  if (!config.ok()) return config.status();
  ChildServer server;
  std::vector<std::string> args = {"--model-path", flags.model_path, "--port", "0", "--kv-cache-dtype",
                                   flags.kv_cache_dtype, "--page-size", std::to_string(flags.page_size),
                                   "--max-total-tokens", std::to_string(flags.max_total_tokens),
                                   "--chunked-prefill-size", std::to_string(options.chunked_prefill_size),
                                   "--max-running-requests", std::to_string(options.max_running_requests)};
  if (flags.options.max_context > 0) {
    args.insert(args.end(), {"--context-length", std::to_string(flags.options.max_context)});
  }
  // (As given: both default to chunked-prefill-size + max-running-requests otherwise.)
  if (flags.max_batch_tokens) args.insert(args.end(), {"--max-batch-tokens", std::to_string(*flags.max_batch_tokens)});
  MLA_RETURN_IF_ERROR(server.Start(args));

  const HttpClient client;
  const HttpHeaders headers = {{"Content-Type", "application/json"}};
  // Mean TPOT of `n` streaming requests, `concurrency` at a time, for real and on the in-process
  // profile.
  struct Timing {
    double real_tpot_s = 0, predicted_tpot_s = 0, real_ttft_s = 0, predicted_ttft_s = 0;
  };
  auto measure = [&](int n, int concurrency, double request_rate, Timing& t) -> Status {
    bench_serving::ServingFlags f;
    f.backend_name = "sglang";
    f.backend = bench_serving::Backend::kSglang;
    f.base_url = "http://127.0.0.1:" + std::to_string(server.port());
    f.dataset_name = "random";
    f.num_prompts = n;
    f.random_input_len = 32;
    f.random_output_len = 96;
    f.random_range_ratio = 1.0;
    f.vocab_size = config->vocab_size;
    f.request_rate = request_rate;
    f.seed = 7 + uint64_t(n);
    f.max_concurrency = concurrency;
    f.disable_progress = true;
    const std::vector<bench_serving::BenchRequest> requests = bench_serving::RandomDataset(f);
    const std::string url = f.base_url + bench_serving::EndpointPath(f.backend);
    bench_serving::BenchRequest warmup = requests[0];
    warmup.output_len = 4;
    if (auto w = bench_serving::RunRequest(client, url, headers, f, "", warmup); !w.success) {
      return Status::Error("the server's warm-up request failed: " + w.error);
    }
    double duration_s = 0;
    const auto results = bench_serving::RunAll(client, url, headers, f, "", requests, &duration_s);
    const bench_serving::Metrics real = bench_serving::ComputeMetrics(results, duration_s);
    if (real.completed != n) return Status::Error("requests to the server failed");

    VirtualClock clock;
    SimulatedRunner runner(cost, in_process, clock,
                           ModelRunnerInfo{.hidden_size = config->hidden_size,
                                           .max_batch_tokens = flags.options.max_batch_tokens,
                                           .max_context = flags.options.max_context > 0
                                                              ? flags.options.max_context
                                                              : std::min(config->max_position_embeddings, 4096)});
    auto pool = PageAllocator::Create(flags.page_size, flags.max_total_tokens / flags.page_size);
    if (!pool.ok()) return pool.status();
    EngineOptions o = options;
    o.log_batches = false;
    Engine engine(runner, **pool, o, nullptr, clock);
    std::vector<TimedRequest> workload;
    const std::vector<double> arrivals = bench_serving::ArrivalTimes(n, request_rate, f.seed);
    for (const auto& r : requests) {
      TimedRequest timed{.output_len = r.output_len, .arrival_s = arrivals[workload.size()]};
      for (int64_t id : r.input_ids) timed.prompt.push_back(TokenId(id % kSimulatedVocab));
      workload.push_back(std::move(timed));
    }
    auto run = RunOnVirtualClock(engine, clock, workload, concurrency);
    if (!run.ok()) return run.status();
    std::vector<bench_serving::RequestResult> simulated;
    for (const VirtualRequestResult& r : run->requests) {
      simulated.push_back({.success = r.success, .latency_s = r.end_s - r.send_s, .ttft_s = r.first_token_s,
                           .output_len = r.output_len});
    }
    const bench_serving::Metrics predicted = bench_serving::ComputeMetrics(simulated, run->duration_s);
    // Medians: one slow request (the host is shared) must not set a cost for every step.
    t = {.real_tpot_s = real.tpot.median / 1e3, .predicted_tpot_s = predicted.tpot.median / 1e3,
         .real_ttft_s = real.ttft.median / 1e3, .predicted_ttft_s = predicted.ttft.median / 1e3};
    return Status::Ok();
  };
  ServerCost out;
  Timing one, many;
  // One at a time, at 2 requests/s: a small model's request takes milliseconds, so its server
  // idles between them as under a light load (its first steps after idling are slower, and a
  // server at a low request rate pays that on every request); a large model's run back to back.
  MLA_RETURN_IF_ERROR(measure(8, 1, 2.0, one));
  MLA_RETURN_IF_ERROR(measure(kServerCostRequests, 0, std::numeric_limits<double>::infinity(), many));
  out.real_tpot_one_s = one.real_tpot_s;
  out.predicted_tpot_one_s = one.predicted_tpot_s;
  out.real_tpot_many_s = many.real_tpot_s;
  out.predicted_tpot_many_s = many.predicted_tpot_s;
  // A request alone: what its first token takes beyond the steps is the latency to the intake.
  out.request_latency_s = std::max(0.0, one.real_ttft_s - one.predicted_ttft_s);
  // extra(n) = per_step + n x per_chunk, from the two decode batches.
  const double extra_one = out.real_tpot_one_s - out.predicted_tpot_one_s;
  const double extra_many = out.real_tpot_many_s - out.predicted_tpot_many_s;
  out.seconds_per_chunk = std::max(0.0, (extra_many - extra_one) / (kServerCostRequests - 1));
  out.seconds_per_step = std::max(0.0, extra_one - out.seconds_per_chunk);
  return out;
}

}  // namespace mlaserve::cli

// The real engine on a virtual clock: a request's times are exactly the predicted step times,
// arrivals move the clock when nothing runs, and the concurrency limit holds requests back.
#include <gtest/gtest.h>

#include <vector>

#include "engine/engine.h"
#include "sim/simulated_runner.h"
#include "sim/virtual_run.h"

namespace mlaserve {
namespace {

const std::string kConfigs = std::string(MLASERVE_SOURCE_DIR) + "/tests/fixtures/configs/";

class Sim {
 public:
  Sim() {
    auto c = LoadModelConfig(kConfigs + "deepseek-v3-fp8.json");
    EXPECT_TRUE(c.ok());
    config_ = *c;
    tensors_ = EstimateStoredTensors(config_);
    cost_ = std::move(StepCostModel::Create(config_, tensors_, KvFormat::kBF16, 8)).value();
    profile_ = {.name = "p", .memory_gb = 141, .memory_bandwidth_gbs = 4800, .bf16_tflops = 989, .fp8_tflops = 1979,
                .interconnect_gbs = 450, .collective_latency_us = 10};
    profile_.step_overhead_us = 1000;
    pool_ = std::move(PageAllocator::Create(16, 4096)).value();
    options_.log_batches = false;
    runner_.emplace(cost_, profile_, clock_, ModelRunnerInfo{.hidden_size = config_.hidden_size,
                                                             .max_batch_tokens = 4096, .max_context = 8192});
    engine_.emplace(*runner_, *pool_, options_, nullptr, clock_);
  }

  // The predicted seconds of one step running `sequences` (computed, new).
  double StepSeconds(const std::vector<std::pair<int, int>>& sequences) const {
    BatchPlan plan;
    for (auto [computed, fresh] : sequences) plan.Add({}, computed, std::vector<TokenId>(size_t(fresh), 1), false);
    return cost_.Time(cost_.Work(plan), profile_).total_s;
  }

  Result<VirtualRunResult> Run(const std::vector<TimedRequest>& w, int max_concurrency = 0) {
    return RunOnVirtualClock(*engine_, clock_, w, max_concurrency);
  }
  const Engine& engine() const { return *engine_; }

 private:
  ModelConfig config_;
  std::vector<StoredTensor> tensors_;
  StepCostModel cost_;
  HardwareProfile profile_;
  std::unique_ptr<PageAllocator> pool_;
  EngineOptions options_;
  VirtualClock clock_;
  std::optional<SimulatedRunner> runner_;
  std::optional<Engine> engine_;
};

std::vector<TokenId> Prompt(int len, int salt) {
  std::vector<TokenId> p;
  for (int i = 0; i < len; ++i) p.push_back(TokenId((i * 7 + salt * 131) % kSimulatedVocab));
  return p;
}

TEST(VirtualRun, ARequestsTimesAreItsPredictedSteps) {
  Sim sim;
  auto run = sim.Run({{.prompt = Prompt(300, 1), .output_len = 4, .arrival_s = 0}});
  ASSERT_TRUE(run.ok()) << run.error();
  const VirtualRequestResult& r = run->requests[0];
  ASSERT_TRUE(r.success);
  EXPECT_EQ(r.output_len, 4);
  EXPECT_EQ(r.prompt_len, 300);
  EXPECT_NEAR(r.first_token_s, sim.StepSeconds({{0, 300}}), 1e-9);
  ASSERT_EQ(r.itl_s.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(r.itl_s[size_t(i)], sim.StepSeconds({{300 + i, 1}}), 1e-9) << i;
  EXPECT_EQ(run->steps, 4);
  EXPECT_NEAR(run->duration_s, r.end_s - r.send_s, 1e-12);
  ASSERT_EQ(run->timeline.size(), 4u);
  EXPECT_EQ(run->timeline[0].running, 1);
  EXPECT_EQ(run->timeline.back().running, 0);
}

TEST(VirtualRun, ArrivalsMoveTheClockWhenNothingRuns) {
  Sim sim;
  auto run = sim.Run({{.prompt = Prompt(100, 1), .output_len = 3, .arrival_s = 0},
                      {.prompt = Prompt(100, 2), .output_len = 3, .arrival_s = 50}});
  ASSERT_TRUE(run.ok()) << run.error();
  const VirtualRequestResult& a = run->requests[0];
  const VirtualRequestResult& b = run->requests[1];
  EXPECT_DOUBLE_EQ(b.send_s, 50);
  EXPECT_NEAR(b.first_token_s, a.first_token_s, 1e-9) << "the same work, alone, takes the same time";
  EXPECT_NEAR(b.end_s - b.send_s, a.end_s - a.send_s, 1e-9);
  EXPECT_NEAR(run->duration_s, b.end_s, 1e-9);
  EXPECT_LT(run->mean_running, 0.01) << "idle for almost all of the 50 s";
}

TEST(VirtualRun, TheConcurrencyLimitHoldsRequestsBack) {
  Sim sim;
  std::vector<TimedRequest> w;
  for (int i = 0; i < 3; ++i) w.push_back({.prompt = Prompt(64, i), .output_len = 5, .arrival_s = 0});
  auto run = sim.Run(w, /*max_concurrency=*/1);
  ASSERT_TRUE(run.ok()) << run.error();
  EXPECT_EQ(run->max_running, 1);
  for (int i = 1; i < 3; ++i) {
    EXPECT_NEAR(run->requests[size_t(i)].send_s, run->requests[size_t(i - 1)].end_s, 1e-9) << i;
  }
  // All at once without a limit: one batch, so the last finishes well before 3 x one's time.
  Sim all;
  auto together = all.Run(w);
  ASSERT_TRUE(together.ok());
  EXPECT_EQ(together->max_running, 3);
  EXPECT_LT(together->duration_s, run->duration_s / 2);
}

// A conversation's second turn is sent when the first ends, in its slot, with the first turn's
// prompt and answer before its own tokens; the prefix cache holds them, so its prefill is short.
TEST(VirtualRun, ALaterTurnFollowsItsEarlierTurnInItsSlot) {
  Sim sim;
  const std::vector<TimedRequest> w = {
      {.prompt = Prompt(256, 1), .output_len = 32, .arrival_s = 0},                 // conversation A, turn 1
      {.prompt = Prompt(256, 2), .output_len = 8, .arrival_s = 0},                  // conversation B
      {.prompt = Prompt(20, 3), .output_len = 4, .arrival_s = 0, .follows = 0},     // A, turn 2
  };
  auto run = sim.Run(w, /*max_concurrency=*/1);
  ASSERT_TRUE(run.ok()) << run.error();
  const VirtualRequestResult &a1 = run->requests[0], &b = run->requests[1], &a2 = run->requests[2];
  ASSERT_TRUE(a1.success && b.success && a2.success);
  EXPECT_EQ(a2.prompt_len, 256 + 32 + 20);
  EXPECT_NEAR(a2.send_s, a1.end_s, 1e-9) << "sent when turn 1 ended";
  EXPECT_NEAR(b.send_s, a2.end_s, 1e-9) << "B waits for A's slot until A's last turn ends";
  const int64_t cached = sim.engine().stats().cached_tokens_total;
  EXPECT_GE(cached, 256 + 32 - 16) << "the earlier turn's prompt and answer, to a page";
  EXPECT_NEAR(a2.first_token_s, sim.StepSeconds({{int(cached), 256 + 32 + 20 - int(cached)}}), 1e-9);
  EXPECT_EQ(run->max_running, 1);
  // A follows that is not an earlier request, or a shared one, is refused.
  Sim bad;
  EXPECT_FALSE(bad.Run({{.prompt = Prompt(8, 1), .output_len = 2, .follows = 0}}).ok());
  EXPECT_FALSE(bad.Run({{.prompt = Prompt(8, 1), .output_len = 2},
                        {.prompt = Prompt(8, 2), .output_len = 2, .follows = 0},
                        {.prompt = Prompt(8, 3), .output_len = 2, .follows = 0}})
                   .ok());
}

}  // namespace
}  // namespace mlaserve

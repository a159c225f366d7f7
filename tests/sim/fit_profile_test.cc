// The this-host fit recovers a profile's efficiencies and overheads from steps it generated, in
// each regime the calibration workload covers (weight-bound decode, compute-bound prefill,
// attention-bound decode at long context).
#include <gtest/gtest.h>

#include <vector>

#include "sim/fit_profile.h"

namespace mlaserve {
namespace {

const std::string kConfigs = std::string(MLASERVE_SOURCE_DIR) + "/tests/fixtures/configs/";

BatchPlan Decodes(int sequences, int context) {
  BatchPlan plan;
  for (int i = 0; i < sequences; ++i) plan.Add({}, context, std::vector<TokenId>{1}, false);
  return plan;
}

BatchPlan Prefill(int tokens) {
  BatchPlan plan;
  plan.Add({}, 0, std::vector<TokenId>(size_t(tokens), 1), false);
  return plan;
}

TEST(FitProfile, RecoversTheProfileThatMadeTheSteps) {
  auto c = LoadModelConfig(kConfigs + "deepseek-v3.json");
  ASSERT_TRUE(c.ok());
  const std::vector<StoredTensor> tensors = EstimateStoredTensors(*c);
  auto cost = StepCostModel::Create(*c, tensors, KvFormat::kBF16, 1);
  ASSERT_TRUE(cost.ok());
  HardwareProfile truth{.name = "truth", .memory_gb = 2000, .memory_bandwidth_gbs = 80, .bf16_tflops = 0.9};
  truth.efficiency = {.weights = 0.8, .kv = 0.8, .linear = 0.6, .attention = 0.45, .interconnect = 1};
  truth.step_overhead_us = 300;
  truth.per_logits_row_us = 50;
  std::vector<MeasuredStep> steps;
  for (int b : {1, 2, 4, 8}) steps.push_back({cost->Work(Decodes(b, 64)), 0});
  for (int t : {256, 512, 1024}) steps.push_back({cost->Work(Prefill(t)), 0});
  for (int ctx : {2048, 8192, 32768}) steps.push_back({cost->Work(Decodes(16, ctx)), 0});
  for (MeasuredStep& s : steps) s.seconds = cost->Time(s.work, truth).total_s;

  HardwareProfile start = truth;
  start.efficiency = {.weights = 0.5, .kv = 0.5, .linear = 0.5, .attention = 0.5, .interconnect = 1};
  start.step_overhead_us = start.per_logits_row_us = 0;
  const ProfileFit fit = FitProfile(steps, start, *cost);
  EXPECT_NEAR(fit.profile.efficiency.weights, 0.8, 0.01);
  EXPECT_NEAR(fit.profile.efficiency.linear, 0.6, 0.01);
  EXPECT_NEAR(fit.profile.efficiency.attention, 0.45, 0.01);
  EXPECT_NEAR(fit.profile.step_overhead_us, 300, 10);
  EXPECT_NEAR(fit.profile.per_logits_row_us, 50, 2);
  EXPECT_LT(fit.mean_abs_rel_error, 1e-3);
  EXPECT_EQ(fit.profile.memory_bandwidth_gbs, 80) << "the rates are the ones given";
}

TEST(FitProfile, ANumberNoStepDependsOnKeepsItsStart) {
  auto c = LoadModelConfig(kConfigs + "deepseek-v3.json");
  ASSERT_TRUE(c.ok());
  const std::vector<StoredTensor> tensors = EstimateStoredTensors(*c);
  auto cost = StepCostModel::Create(*c, tensors, KvFormat::kBF16, 1);
  ASSERT_TRUE(cost.ok());
  // Arithmetic so fast that no step is bound by it: only the memory efficiency shows.
  HardwareProfile truth{.name = "t", .memory_gb = 2000, .memory_bandwidth_gbs = 80, .bf16_tflops = 1000};
  truth.efficiency.weights = truth.efficiency.kv = 0.7;
  std::vector<MeasuredStep> steps;
  for (int b : {1, 8, 32, 128}) {
    MeasuredStep s{cost->Work(Decodes(b, 16)), 0};
    s.seconds = cost->Time(s.work, truth).total_s;
    steps.push_back(s);
  }
  HardwareProfile start = truth;
  start.efficiency.attention = 0.33;
  start.efficiency.linear = 0.44;
  const ProfileFit fit = FitProfile(steps, start, *cost);
  EXPECT_NEAR(fit.profile.efficiency.weights, 0.7, 0.02);
  EXPECT_DOUBLE_EQ(fit.profile.efficiency.attention, 0.33);
  EXPECT_DOUBLE_EQ(fit.profile.efficiency.linear, 0.44);
}

}  // namespace
}  // namespace mlaserve

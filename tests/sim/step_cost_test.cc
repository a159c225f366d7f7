// The step cost model counts what a plan reads and computes: KV bytes exactly, attention in the
// cheaper of its two forms, the routed experts a batch touches, and tensor parallelism's split.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "sim/step_cost.h"

namespace mlaserve {
namespace {

const std::string kConfigs = std::string(MLASERVE_SOURCE_DIR) + "/tests/fixtures/configs/";

struct V3Checkpoint {
  ModelConfig config;
  std::vector<StoredTensor> tensors;
};

V3Checkpoint V3Fp8() {
  auto c = LoadModelConfig(kConfigs + "deepseek-v3-fp8.json");
  EXPECT_TRUE(c.ok()) << c.error();
  return {*c, EstimateStoredTensors(*c)};
}

// One sequence per (computed, new) pair; page tables are irrelevant to the count.
BatchPlan Plan(const std::vector<std::pair<int, int>>& sequences) {
  BatchPlan plan;
  for (auto [computed, fresh] : sequences) {
    plan.Add({}, computed, std::vector<TokenId>(size_t(fresh), 1), false);
  }
  return plan;
}

TEST(StepCost, KvBytesAreEveryContextReadOnceInItsFormat) {
  const V3Checkpoint s = V3Fp8();
  for (KvFormat f : {KvFormat::kBF16, KvFormat::kFP8E4M3}) {
    auto m = StepCostModel::Create(s.config, s.tensors, f, 1);
    ASSERT_TRUE(m.ok()) << m.error();
    const double per_token = double(KvRowBytes(f, s.config.kv_lora_rank, s.config.qk_rope_head_dim)) *
                             s.config.num_hidden_layers;
    EXPECT_EQ(double(m->kv_bytes_per_token()), per_token);
    const StepWork w = m->Work(Plan({{1000, 1}, {99, 1}, {0, 512}}));
    EXPECT_EQ(w.kv_bytes, (1001 + 100 + 512) * per_token);
    EXPECT_EQ(w.tokens, 514);
    EXPECT_EQ(w.logits_rows, 3);
  }
}

TEST(StepCost, DecodeAttentionIsTheAbsorbedFormAndPrefillTheCheaperOne) {
  const V3Checkpoint s = V3Fp8();
  const ModelConfig& c = s.config;
  auto m = StepCostModel::Create(c, s.tensors, KvFormat::kBF16, 1);
  ASSERT_TRUE(m.ok());
  // A decode token over 1,001 keys: scores over 576 values and sums over 512, per head.
  const double absorbed_pair = 2.0 * c.num_attention_heads * (c.kv_cache_dim() + c.kv_lora_rank);
  EXPECT_DOUBLE_EQ(m->Work(Plan({{1000, 1}})).attention_flops, c.num_hidden_layers * absorbed_pair * 1001);
  // A 4,096-token prompt: the MHA form is cheaper for 128 heads of 192 + 128 dimensions.
  const double pairs = 4096.0 * 4097 / 2;
  const double prefill = m->Work(Plan({{0, 4096}})).attention_flops;
  EXPECT_LT(prefill, c.num_hidden_layers * absorbed_pair * pairs);
  EXPECT_GT(prefill, c.num_hidden_layers * 2.0 * c.num_attention_heads * (c.qk_head_dim() + c.v_head_dim) * pairs);
}

TEST(StepCost, RoutedExpertsTouchedGrowWithTheBatchUpToAllOfThem) {
  const V3Checkpoint s = V3Fp8();
  auto m = StepCostModel::Create(s.config, s.tensors, KvFormat::kBF16, 1);
  ASSERT_TRUE(m.ok());
  std::vector<std::pair<int, int>> batch;
  double last = 0;
  for (int tokens : {1, 8, 64, 512}) {
    while (int(batch.size()) < tokens) batch.push_back({100, 1});
    const double bytes = m->Work(Plan(batch)).weight_bytes;
    EXPECT_GT(bytes, last) << tokens;
    last = bytes;
  }
  // 4,096 tokens touch practically every expert: all the weights but the embedding table.
  const double all = m->Work(Plan({{0, 4096}})).weight_bytes;
  EXPECT_LT(all, m->weight_bytes_per_rank());
  EXPECT_GT(all, 0.97 * m->weight_bytes_per_rank());
  // One token reads its 8 of 256 routed experts per layer: far less.
  EXPECT_LT(m->Work(Plan({{100, 1}})).weight_bytes, 0.2 * m->weight_bytes_per_rank());
}

TEST(StepCost, TensorParallelismSplitsHeadsAndWeightsButNotTheCache) {
  const V3Checkpoint s = V3Fp8();
  auto one = StepCostModel::Create(s.config, s.tensors, KvFormat::kBF16, 1);
  auto eight = StepCostModel::Create(s.config, s.tensors, KvFormat::kBF16, 8);
  ASSERT_TRUE(one.ok() && eight.ok());
  const BatchPlan plan = Plan({{2000, 1}, {3000, 1}});
  const StepWork w1 = one->Work(plan), w8 = eight->Work(plan);
  EXPECT_EQ(w8.kv_bytes, w1.kv_bytes);  // MLA's latent is replicated on every rank
  EXPECT_DOUBLE_EQ(w8.attention_flops * 8, w1.attention_flops);
  EXPECT_LT(eight->weight_bytes_per_rank(), one->weight_bytes_per_rank() / 6);
  EXPECT_GT(w8.comm_bytes, 0);
  EXPECT_GT(w8.comm_rounds, 0);
  EXPECT_EQ(w1.comm_bytes, 0);
  EXPECT_FALSE(StepCostModel::Create(s.config, s.tensors, KvFormat::kBF16, 3).ok()) << "3 does not divide 128 heads";
}

TEST(StepCost, TimeCombinesEachPhaseAsTheProfileSays) {
  const V3Checkpoint s = V3Fp8();
  auto m = StepCostModel::Create(s.config, s.tensors, KvFormat::kBF16, 1);
  ASSERT_TRUE(m.ok());
  HardwareProfile p{.name = "p", .memory_gb = 1000, .memory_bandwidth_gbs = 1000, .bf16_tflops = 100,
                    .fp8_tflops = 200};
  p.step_overhead_us = 100;
  p.per_logits_row_us = 10;
  const StepWork w = m->Work(Plan({{1000, 1}, {0, 300}}));
  p.combine = CostCombine::kMax;
  const StepTime t = m->Time(w, p);
  EXPECT_DOUBLE_EQ(t.weights_s, w.weight_bytes / 1e12);
  EXPECT_DOUBLE_EQ(t.linear_s, w.linear_flops / 200e12) << "fp8-block weights use the fp8 rate";
  EXPECT_DOUBLE_EQ(t.kv_s, w.kv_bytes / 1e12);
  EXPECT_DOUBLE_EQ(t.attention_s, w.attention_flops / 100e12);
  EXPECT_DOUBLE_EQ(t.overhead_s, (100 + 2 * 10) * 1e-6);
  EXPECT_DOUBLE_EQ(t.total_s, std::max(t.weights_s, t.linear_s) + std::max(t.kv_s, t.attention_s) + t.overhead_s);
  p.combine = CostCombine::kSum;
  p.efficiency.weights = 0.5;
  const StepTime sum = m->Time(w, p);
  EXPECT_DOUBLE_EQ(sum.weights_s, 2 * t.weights_s);
  EXPECT_DOUBLE_EQ(sum.total_s, sum.weights_s + sum.linear_s + sum.kv_s + sum.attention_s + sum.overhead_s);
}

}  // namespace
}  // namespace mlaserve

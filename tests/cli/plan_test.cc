// mlaserve plan reproduces the capacity arithmetic users do by hand (REFERENCE.md section 3).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "model/weight_bytes.h"
#include "support/run_binary.h"

namespace mlaserve {
namespace {

using testing::RunMlaserve;
using testing::ShellQuote;

const std::string kConfigs = std::string(MLASERVE_SOURCE_DIR) + "/tests/fixtures/configs/";

nlohmann::json Plan(const std::string& args) {
  testing::TempDir dir;
  auto r = RunMlaserve("plan " + args + " --json " + ShellQuote(dir.path() + "/plan.json"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("does not raise the number of requests decoding at once"), std::string::npos);
  nlohmann::json j;
  std::ifstream(dir.path() + "/plan.json") >> j;
  return j;
}

const nlohmann::json& Format(const nlohmann::json& plan, const std::string& name) {
  for (const auto& f : plan["formats"])
    if (f["format"] == name) return f;
  static nlohmann::json none;
  ADD_FAILURE() << name;
  return none;
}

TEST(Plan, DeepSeekV3BudgetOf159KBf16TokensHolds318KAtFp8) {
  // 159,000 tokens x 70,272 bytes = 11.173248 GB.
  auto plan = Plan("--model-path " + ShellQuote(kConfigs + "deepseek-v3.json") +
                   " --kv-budget-gb 11.173248 --avg-seq-len 4000");
  EXPECT_EQ(Format(plan, "bf16")["bytes_per_token_per_layer"], 1152);
  EXPECT_EQ(Format(plan, "bf16")["bytes_per_token"], 70272);
  EXPECT_EQ(Format(plan, "bf16")["max_total_num_tokens"], 159000);
  EXPECT_EQ(Format(plan, "fp8_e4m3")["bytes_per_token"], 35136);
  EXPECT_EQ(Format(plan, "fp8_e4m3")["max_total_num_tokens"], 318000);
  EXPECT_EQ(Format(plan, "fp8_ds_mla")["bytes_per_token"], 40016);
  EXPECT_EQ(Format(plan, "fp4_e2m1")["bytes_per_token"], 19764);
  EXPECT_EQ(Format(plan, "mxfp4")["bytes_per_token"], 18666);
  EXPECT_EQ(Format(plan, "nvfp4")["bytes_per_token"], 19764);
  // ~40 -> ~80 requests of ~4K tokens.
  EXPECT_NEAR(Format(plan, "bf16")["requests_at_avg_seq_len"].get<double>(), 39.75, 0.01);
  EXPECT_NEAR(Format(plan, "fp8_e4m3")["requests_at_avg_seq_len"].get<double>(), 79.5, 0.01);
}

TEST(Plan, MemoryArithmeticFollowsSglang) {
  // Kimi-K2 on 16 ranks of 141 GB: 141 * 0.88 - 1029 / 16 = 59.7675 GB per rank.
  auto plan = Plan("--model-path " + ShellQuote(kConfigs + "kimi-k2.json") +
                   " --device-memory 141 --tp-size 16 --weights-gb 1029");
  EXPECT_NEAR(plan["kv_budget_gb_per_rank"].get<double>(), 59.7675, 1e-9);
  EXPECT_EQ(Format(plan, "bf16")["max_total_num_tokens"], int64_t(59.7675e9 / 70272));
}

TEST(Plan, ErrorsAreOneLine) {
  auto r = RunMlaserve("plan --model-path " + ShellQuote(kConfigs + "deepseek-v3.json") +
                       " --device-memory 80 --weights-gb 700");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no memory left for the KV cache"), std::string::npos) << r.err;
  r = RunMlaserve("plan --model-path /nonexistent/config.json");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent/config.json"), std::string::npos) << r.err;
  r = RunMlaserve("plan --model-path " + ShellQuote(kConfigs + "deepseek-v3.json") + " --tp-size 0");
  EXPECT_EQ(r.exit_code, 2);
  // A --json file that cannot be written is an error naming it, not a silent success.
  r = RunMlaserve("plan --model-path " + ShellQuote(kConfigs + "deepseek-v3.json") +
                  " --device-memory 80 --tp-size 32 --json /nonexistent-dir/plan.json");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent-dir/plan.json: write failed"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace mlaserve

namespace mlaserve {
namespace {

// Weight bytes from the config alone, in the stored format the quantization_config names.
TEST(Plan, QuantizedCheckpointsCountTheirStoredBytes) {
  // Kimi-K2.5: int4 group-32 routed experts, the rest bf16: the published checkpoint is ~595 GB.
  auto k25 = Plan("--model-path " + testing::ShellQuote(kConfigs + "kimi-k2.5.json") + " --device-memory 2000");
  const double k25_gb = k25["weights_gb"].get<double>();
  EXPECT_GT(k25_gb, 585);
  EXPECT_LT(k25_gb, 600);
  EXPECT_NE(k25["weights_source"].get<std::string>().find("int4 group-32"), std::string::npos) << k25.dump();
  // DeepSeek-V3 in bf16, and with its published fp8 block quantization: about half.
  auto bf16 = Plan("--model-path " + testing::ShellQuote(kConfigs + "deepseek-v3.json") + " --device-memory 4000");
  auto fp8 = Plan("--model-path " + testing::ShellQuote(kConfigs + "deepseek-v3-fp8.json") + " --device-memory 4000");
  const double bf16_gb = bf16["weights_gb"].get<double>(), fp8_gb = fp8["weights_gb"].get<double>();
  EXPECT_GT(bf16_gb, 1300);  // 671B parameters at 2 bytes
  EXPECT_LT(fp8_gb, 0.51 * bf16_gb);
  EXPECT_GT(fp8_gb, 0.5 * bf16_gb);
  EXPECT_NE(fp8["weights_source"].get<std::string>().find("fp8 block-scaled"), std::string::npos) << fp8.dump();
}

TEST(Plan, IgnoreEntriesMatchNamesAndRegexesFromTheStart) {
  const QuantizationIgnoreList ignore({"lm_head", "re:.*self_attn.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"});
  EXPECT_TRUE(ignore.Ignores("lm_head"));
  EXPECT_TRUE(ignore.Ignores("language_model.model.layers.3.self_attn.q_a_proj"));
  EXPECT_TRUE(ignore.Ignores("model.layers.0.mlp.gate_proj"));
  EXPECT_FALSE(ignore.Ignores("model.layers.3.mlp.experts.7.gate_proj"));
  EXPECT_FALSE(ignore.Ignores("language_model.lm_head"));  // exact names match exactly
  EXPECT_FALSE(QuantizationIgnoreList({"re:self_attn"}).Ignores("model.layers.3.self_attn.o_proj"));  // anchored
}

}  // namespace
}  // namespace mlaserve

// mlaserve plan reproduces the capacity arithmetic users do by hand (REFERENCE.md section 3).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/safetensors.h"
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

namespace mlaserve {
namespace {

// --tp-size N: the weights each rank holds (model/tensor_parallel.h's split) and the
// communication model, checked against arithmetic done here from the checkpoint and the config.
const std::string kBundled = std::string(MLASERVE_SOURCE_DIR) + "/models/shakespeare-mla";

// The bundled checkpoint's bytes by what the split does with them, classified here by name.
// total: what is loaded; its MTP layer (model.layers.4.*, loaded only for NEXTN) is apart.
struct BundledBytes {
  double total = 0, replicated = 0, experts = 0, embedding = 0, mtp = 0;
};
BundledBytes ClassifyBundled() {
  auto ckpt = Checkpoint::Open(kBundled);
  EXPECT_TRUE(ckpt.ok());
  BundledBytes b;
  for (const auto& [name, t] : (*ckpt)->tensors()) {
    const double bytes = double(t.num_bytes);
    if (name.starts_with("model.layers.4.")) {
      b.mtp += bytes;
      continue;
    }
    b.total += bytes;
    if (name.find("embed_tokens") != std::string::npos) b.embedding += bytes;
    if (name.find("embed_tokens") != std::string::npos || name.find("norm") != std::string::npos ||
        name.find("q_a_proj") != std::string::npos || name.find("kv_a_proj_with_mqa") != std::string::npos ||
        name.ends_with("mlp.gate.weight") || name.ends_with("e_score_correction_bias")) {
      b.replicated += bytes;
    } else if (name.find(".mlp.experts.") != std::string::npos) {
      b.experts += bytes;
    }
  }
  EXPECT_EQ(double((*ckpt)->total_tensor_bytes()), b.total + b.mtp);
  EXPECT_GT(b.mtp, 0);
  return b;
}

TEST(PlanTp, OneRankHoldsTheWholeCheckpoint) {
  const BundledBytes b = ClassifyBundled();
  auto plan = Plan("--model-path " + testing::ShellQuote(kBundled) + " --device-memory 1");
  EXPECT_EQ(plan["weight_bytes_by_rank"], nlohmann::json::array({int64_t(b.total)}));
  EXPECT_NEAR(plan["weights_gb"].get<double>(), (b.total + b.mtp) / 1e9, 1e-12);  // the whole checkpoint
  EXPECT_EQ(plan["not_loaded_weight_bytes"], int64_t(b.mtp));
  EXPECT_NEAR(plan["kv_budget_gb_per_rank"].get<double>(), 0.88 - b.total / 1e9, 1e-12);
  EXPECT_FALSE(plan.contains("communication"));  // nothing to exchange
}

// The engine sizes its pool as plan does: the MTP layer it does not load (never read) does not
// count against the budget (Model::weight_bytes).
// Plan's bf16 pool is the engine's, with and without a speculative setting's memory (NEXTN: the
// MTP layer and one more latent layer per token; EAGLE3: the draft's files and its k and v).
TEST(PlanTp, OneRankPoolIsWhatTheEngineAllocates) {
  const std::string draft = std::string(MLASERVE_SOURCE_DIR) + "/models/shakespeare-mla-eagle3";
  int64_t previous = INT64_MAX;
  for (const std::string& speculative :
       {std::string(), std::string(" --speculative-algorithm NEXTN"),
        " --speculative-algorithm EAGLE3 --speculative-draft-model-path " + testing::ShellQuote(draft)}) {
    SCOPED_TRACE(speculative);
    auto plan = Plan("--model-path " + testing::ShellQuote(kBundled) + " --device-memory 1" + speculative);
    auto r = testing::RunMlaserve("bench-offline --model-path " + testing::ShellQuote(kBundled) +
                                  " --device-memory 1 --num-prompts 1 --random-input-len 4 --random-output-len 2" +
                                  speculative);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const size_t at = r.out.find("max_total_num_tokens:");
    ASSERT_NE(at, std::string::npos) << r.out;
    const int64_t engine_tokens = std::stoll(r.out.substr(at + std::strlen("max_total_num_tokens:")));
    const int64_t plan_tokens = Format(plan, "bf16")["max_total_num_tokens"].get<int64_t>();
    EXPECT_EQ(engine_tokens, plan_tokens / 16 * 16);  // whole pages of the default 16 tokens
    EXPECT_LT(plan_tokens, previous);  // each setting here costs more per token than the one before
    previous = plan_tokens;
  }
}

TEST(Plan, SpeculativeSettingsItCannotCountAreRefused) {
  const std::string model = " --model-path " + testing::ShellQuote(kBundled);
  const std::pair<std::string, std::string> cases[] = {
      {"--speculative-algorithm EAGLE3", "needs --speculative-draft-model-path"},
      {"--speculative-algorithm NEXTN --speculative-draft-model-path /x", "only used with --speculative-algorithm EAGLE3"},
      {"--speculative-algorithm NEXTN --tp-size 2", "not supported with tensor parallelism"},
      {"--speculative-algorithm NGRAM", "NGRAM"},
      {"--speculative-algorithm EAGLE3 --speculative-draft-model-path /nonexistent", "/nonexistent/config.json"},
  };
  for (const auto& [flags, message] : cases) {
    auto r = testing::RunMlaserve("plan" + model + " " + flags);
    EXPECT_NE(r.exit_code, 0) << flags;
    EXPECT_NE(r.err.find(message), std::string::npos) << flags << " -> " << r.err;
  }
  // A model without an MTP layer: one line naming it.
  auto r = testing::RunMlaserve("plan --model-path " +
                                testing::ShellQuote(std::string(MLASERVE_SOURCE_DIR) + "/tests/fixtures/tiny-v2") +
                                " --speculative-algorithm NEXTN");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("has no MTP layer"), std::string::npos) << r.err;
}

TEST(PlanTp, RanksHoldTheTotalPlusACopyOfTheReplicatedPartEach) {
  const BundledBytes b = ClassifyBundled();
  for (int n : {2, 4}) {
    SCOPED_TRACE(n);
    auto plan = Plan("--model-path " + testing::ShellQuote(kBundled) + " --device-memory 1 --tp-size " +
                     std::to_string(n));
    EXPECT_EQ(plan["replicated_weight_bytes"], int64_t(b.replicated));
    const auto& ranks = plan["weight_bytes_by_rank"];
    ASSERT_EQ(ranks.size(), size_t(n));
    int64_t sum = 0, largest = 0;
    for (const auto& r : ranks) {
      sum += r.get<int64_t>();
      largest = std::max(largest, r.get<int64_t>());
    }
    EXPECT_EQ(sum, int64_t(b.total + (n - 1) * b.replicated));
    // Every rank keeps the whole cache, so the job gets the fewest tokens: the largest rank's.
    EXPECT_NEAR(plan["kv_budget_gb_per_rank"].get<double>(), 0.88 - double(largest) / 1e9, 1e-12);
    const auto& bf16 = Format(plan, "bf16");
    int64_t fewest = INT64_MAX;
    for (const auto& t : bf16["max_total_num_tokens_by_rank"]) fewest = std::min(fewest, t.get<int64_t>());
    EXPECT_EQ(bf16["max_total_num_tokens"], fewest);
    EXPECT_EQ(fewest, int64_t((0.88e9 - double(largest)) / double(bf16["bytes_per_token"].get<int64_t>())));
  }
  // Two ranks split every sharded matrix of the bundled shape evenly (4 heads, rows in whole
  // 16-row units, 8 experts): each holds the replicated part and half of the rest.
  auto two = Plan("--model-path " + testing::ShellQuote(kBundled) + " --device-memory 1 --tp-size 2");
  for (const auto& r : two["weight_bytes_by_rank"]) {
    EXPECT_EQ(r.get<int64_t>(), int64_t(b.replicated + (b.total - b.replicated) / 2));
  }
  // A decode token reads, per rank: the replicated part but one embedding row (of 2048), half of
  // the sharded matrices, and of the rank's 4 experts per layer the top-2-of-8 share.
  const double sharded = b.total - b.replicated - b.experts;
  const double read = b.replicated - b.embedding + b.embedding / 2048 + sharded / 2 + (b.experts / 2) * 2 / 8;
  EXPECT_NEAR(two["communication"]["decode_read_bytes_per_token"].get<double>(), read, 1e-6);
}

TEST(PlanTp, CommunicationMatchesTheFormulas) {
  // DeepSeek-V3 on 8 nodes: hidden 7168, 128 heads x v_head_dim 128, intermediate 18432, one
  // shared expert of 2048, top-8, vocab 129280, 61 layers of which the first 3 dense.
  auto plan = Plan("--model-path " + testing::ShellQuote(kConfigs + "deepseek-v3-fp8.json") +
                   " --device-memory 141 --tp-size 8 --node-bandwidth-gbs 200 --network-gbs 25 --network-latency-us 5");
  const auto& comm = plan["communication"];
  const double gather = 4.0 * 7 / 8, reduce = 2 * 4.0 * 7 / 8;  // bytes received per fp32 value
  const double attention = gather * (128 * 128 + 7168), dense = gather * (18432 + 7168);
  const double moe = gather * (2048 + 7168 + 8 * 7168), lm_head = gather * 129280;
  const auto& exact = comm["exact_all_gather"];
  EXPECT_DOUBLE_EQ(exact["attention_bytes_per_layer"].get<double>(), attention);  // 82,432
  EXPECT_DOUBLE_EQ(exact["dense_mlp_bytes_per_layer"].get<double>(), dense);
  EXPECT_DOUBLE_EQ(exact["moe_bytes_per_layer"].get<double>(), moe);
  EXPECT_DOUBLE_EQ(exact["lm_head_bytes"].get<double>(), lm_head);
  EXPECT_DOUBLE_EQ(exact["prefill_bytes_per_token"].get<double>(), 61 * attention + 3 * dense + 58 * moe);
  EXPECT_DOUBLE_EQ(exact["decode_bytes_per_token"].get<double>(), 61 * attention + 3 * dense + 58 * moe + lm_head);
  EXPECT_EQ(exact["messages_per_step"], 61 * 2 + 3 * 2 + 58 * 3 + 1);
  const auto& all_reduce = comm["all_reduce"];
  EXPECT_DOUBLE_EQ(all_reduce["decode_bytes_per_token"].get<double>(), 2 * 61 * reduce * 7168 + lm_head);
  EXPECT_EQ(all_reduce["messages_per_step"], 2 * 61 + 1);
  // Compute: the busiest rank's decode reads at 200 GB/s; communication at 25 GB/s; they are
  // equal at bytes / compute time.
  const double read = comm["decode_read_bytes_per_token"].get<double>();
  const double compute_s = read / 200e9;
  EXPECT_DOUBLE_EQ(comm["decode_compute_ms_per_token"].get<double>(), compute_s * 1e3);
  const double bytes = exact["decode_bytes_per_token"].get<double>();
  EXPECT_DOUBLE_EQ(exact["decode_transfer_ms_per_token"].get<double>(), bytes / 25e9 * 1e3);
  EXPECT_DOUBLE_EQ(exact["break_even_network_gbs"].get<double>(), bytes / compute_s / 1e9);
  // Latency: 303 collectives of ceil(log2 8) = 3 rounds, 5 us each; the transfer gets the rest.
  const double latency_s = 303 * 3 * 5e-6;
  EXPECT_EQ(exact["latency_rounds_per_step"], 909);
  EXPECT_NEAR(exact["decode_latency_ms_per_step"].get<double>(), latency_s * 1e3, 1e-12);
  ASSERT_GT(compute_s, latency_s);
  EXPECT_NEAR(exact["break_even_network_gbs_with_latency"].get<double>(), bytes / (compute_s - latency_s) / 1e9, 1e-9);
  // A latency above the compute time leaves no bandwidth that keeps up.
  auto slow = Plan("--model-path " + testing::ShellQuote(kConfigs + "deepseek-v3-fp8.json") +
                   " --device-memory 141 --tp-size 8 --network-latency-us 1000");
  EXPECT_TRUE(slow["communication"]["exact_all_gather"]["break_even_network_gbs_with_latency"].is_null());
  // 8 ranks split V3's heads (16 x 192 q rows = 24 fp8 blocks) and rows in whole 128-row blocks,
  // 32 experts each: no scale row is held twice.
  int64_t sum = 0;
  for (const auto& r : plan["weight_bytes_by_rank"]) sum += r.get<int64_t>();
  EXPECT_EQ(sum, plan["loaded_weight_bytes"].get<int64_t>() + 7 * plan["replicated_weight_bytes"].get<int64_t>());
  EXPECT_NEAR(plan["loaded_weight_bytes"].get<double>(), plan["weights_gb"].get<double>() * 1e9, 1);
}

TEST(PlanTp, RanksShareTheFp8ScaleRowOfABlockTheirHeadsSplit) {
  // DeepSeek-V3 fp8 on 5 ranks: heads 0-25-51-76-102-128, q_b_proj rows 192 a head, so the
  // boundaries at 4800 and 9792 rows fall inside 128-row blocks (14592 and 19584 do not): both
  // neighbours hold that scale row, [12] f32 for 1536 columns, in each of 61 layers. kv_b_proj
  // (256 rows a head) and the row-split matrices (whole 128-row blocks) share none.
  auto plan = Plan("--model-path " + testing::ShellQuote(kConfigs + "deepseek-v3-fp8.json") +
                   " --device-memory 4000 --tp-size 5");
  int64_t sum = 0;
  for (const auto& r : plan["weight_bytes_by_rank"]) sum += r.get<int64_t>();
  const int64_t shared_scale_rows = 2 * 61;
  EXPECT_EQ(sum - plan["loaded_weight_bytes"].get<int64_t>() - 4 * plan["replicated_weight_bytes"].get<int64_t>(),
            shared_scale_rows * 12 * 4);
}

TEST(PlanTp, QuantizedCheckpointsSplitAsTheirConfigsEstimate) {
  // The bundled model quantized here: plan on the directory splits its real tensors (fp8 scales
  // with their rows, int4 packed values and scales with theirs); plan on its config.json splits
  // the estimate. They differ only in replicated bytes (the quantizer keeps the router bias in
  // f32 and weight_shape in int64, the estimate counts bf16 and int32), by the same on every rank.
  for (const char* weights : {"fp8-block", "int4-g32"}) {
    SCOPED_TRACE(weights);
    testing::TempDir dir;
    auto q = testing::RunMlaserve("quantize --weights " + std::string(weights) + " --model-path " +
                                  testing::ShellQuote(kBundled) + " --out " + testing::ShellQuote(dir.path()));
    ASSERT_EQ(q.exit_code, 0) << q.err;
    auto ckpt = Checkpoint::Open(dir.path());
    ASSERT_TRUE(ckpt.ok());
    for (int n : {1, 2, 4}) {
      SCOPED_TRACE(n);
      const std::string flags = " --device-memory 1 --tp-size " + std::to_string(n);
      auto real = Plan("--model-path " + testing::ShellQuote(dir.path()) + flags);
      auto estimate = Plan("--model-path " + testing::ShellQuote(dir.path() + "/config.json") + flags);
      EXPECT_EQ(real["weights_source"], "read from the checkpoint");
      if (n == 1) {  // everything but the MTP layer (loaded only for NEXTN)
        EXPECT_EQ(real["weight_bytes_by_rank"][0].get<int64_t>() + real["not_loaded_weight_bytes"].get<int64_t>(),
                  int64_t((*ckpt)->total_tensor_bytes()));
        EXPECT_GT(real["not_loaded_weight_bytes"].get<int64_t>(), 0);
      }
      const int64_t replicated_gap =
          real["replicated_weight_bytes"].get<int64_t>() - estimate["replicated_weight_bytes"].get<int64_t>();
      EXPECT_LT(std::abs(replicated_gap), 1000);
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(real["weight_bytes_by_rank"][r].get<int64_t>() - estimate["weight_bytes_by_rank"][r].get<int64_t>(),
                  replicated_gap);
      }
    }
  }
}

TEST(PlanTp, BandwidthFlagsMustBePositive) {
  for (const char* flag : {"--node-bandwidth-gbs 0", "--network-gbs -1", "--network-latency-us -1"}) {
    auto r = testing::RunMlaserve("plan --model-path " + testing::ShellQuote(kConfigs + "deepseek-v3.json") +
                                  " --tp-size 2 " + flag);
    EXPECT_EQ(r.exit_code, 2) << flag;
  }
  // Without ranks to talk to they would have no effect: refused rather than ignored.
  auto r = testing::RunMlaserve("plan --model-path " + testing::ShellQuote(kConfigs + "deepseek-v3.json") +
                                " --network-gbs 5");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--network-gbs is for the communication model of --tp-size above 1"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace mlaserve

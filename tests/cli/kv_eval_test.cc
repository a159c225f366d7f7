// kv-eval and the KV formats on the bundled model: every format generates, the fine-grained fp8
// is nearly free, and bad formats or scale files are one-line errors.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "support/run_binary.h"

namespace mlaserve {
namespace {

using testing::RunMlaserve;
using testing::ShellQuote;
using testing::TempDir;

const std::string kModel = ShellQuote(std::string(MLASERVE_SOURCE_DIR) + "/models/shakespeare-mla");

// Runs kv-eval on the bundled model with `flags`; its JSON report (null when it failed), and
// its table in *table.
nlohmann::json RunKvEval(const std::string& flags, std::string* table = nullptr) {
  TempDir dir;
  const std::string json = dir.path() + "/eval.json";
  auto r = RunMlaserve("kv-eval --model-path " + kModel + " " + flags + " --json " + ShellQuote(json));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (table != nullptr) *table = r.out;
  nlohmann::json j;
  if (r.exit_code == 0) std::ifstream(json) >> j;
  return j;
}

TEST(KvEval, EveryFormatIsMeasuredAgainstBf16) {
  std::string table;
  const nlohmann::json j = RunKvEval("--max-tokens 1024 --window 256 --num-prompts 4 --continuation-len 16", &table);
  ASSERT_TRUE(j.is_object());
  EXPECT_NE(table.find("| fp8_ds_mla |"), std::string::npos) << table;
  const double ref_ppl = j["formats"][0]["perplexity"].get<double>();
  EXPECT_GT(ref_ppl, 1.0);
  std::map<std::string, nlohmann::json> by_name;
  for (const auto& f : j["formats"]) by_name[f["format"].get<std::string>()] = f;
  for (const char* name : {"fp16", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla", "fp4_e2m1", "mxfp4", "nvfp4"}) {
    ASSERT_TRUE(by_name.count(name)) << name;
    const auto& f = by_name[name];
    // Every format still models the text (coherent, not garbage): within 25% of bf16.
    EXPECT_LT(f["perplexity"].get<double>(), ref_ppl * 1.25) << name;
    // Every format rounds differently from bf16, so its logits differ somewhere.
    EXPECT_GT(f["kl_mean"].get<double>(), 0.0) << name;
  }
  // fp4 loses enough to show (here: mean KL ~0.009, top-1 ~93%).
  EXPECT_GT(by_name["fp4_e2m1"]["kl_mean"].get<double>(), 1e-3);
  EXPECT_LT(by_name["fp4_e2m1"]["top1_agreement"].get<double>(), 0.99);
  // Fine-grained fp8 is nearly free; fp4 costs more than it.
  EXPECT_GT(by_name["fp8_ds_mla"]["top1_agreement"].get<double>(), 0.97);
  EXPECT_LT(by_name["fp8_ds_mla"]["kl_mean"].get<double>(), by_name["fp4_e2m1"]["kl_mean"].get<double>());
  EXPECT_EQ(by_name["fp8_ds_mla"]["bytes_per_token"].get<int>(), 4 * (128 + 4 + 64));
}

TEST(KvEval, Bf16AgainstItselfIsExact) {
  // Bit-exact across the two passes: deterministic mode.
  const nlohmann::json j = RunKvEval(
      "--formats bf16 --max-tokens 512 --window 256 --num-prompts 2 --continuation-len 8 "
      "--enable-deterministic-inference");
  ASSERT_TRUE(j.is_object());
  ASSERT_EQ(j["formats"].size(), 2u) << j.dump();
  const auto& same = j["formats"][1];
  EXPECT_EQ(same["format"], "bf16");
  EXPECT_EQ(same["perplexity"].get<double>(), j["formats"][0]["perplexity"].get<double>());
  EXPECT_EQ(same["kl_mean"].get<double>(), 0.0);
  EXPECT_EQ(same["kl_p99"].get<double>(), 0.0);
  EXPECT_EQ(same["top1_agreement"].get<double>(), 1.0);
  EXPECT_EQ(same["mean_identical_greedy_tokens"].get<double>(), 8.0);
}

TEST(KvEval, GenerateRunsWithEveryFormat) {
  for (const char* f : {"bf16", "fp16", "fp32", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla", "fp4_e2m1", "mxfp4", "nvfp4"}) {
    auto r = RunMlaserve("generate --model-path " + kModel + " --prompt 'KING RICHARD:' --max-new-tokens 24 --kv-cache-dtype " + f);
    ASSERT_EQ(r.exit_code, 0) << f << ": " << r.err;
    EXPECT_NE(r.err.find(std::string("kv_cache_dtype=") + f), std::string::npos) << r.err;
    EXPECT_GT(r.out.size(), 30u) << f;
  }
}

TEST(KvEval, CalibratedScalesAndErrors) {
  TempDir dir;
  const std::string scales = dir.path() + "/scales.json";
  auto r = RunMlaserve("kv-calibrate --model-path " + kModel + " --max-tokens 512 --out " + ShellQuote(scales));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = RunMlaserve("generate --model-path " + kModel + " --prompt 'ROMEO:' --max-new-tokens 8 --kv-cache-dtype fp8_e4m3 --kv-scales " + ShellQuote(scales));
  EXPECT_EQ(r.exit_code, 0) << r.err;

  // A scales file made for another shape.
  nlohmann::json j;
  std::ifstream(scales) >> j;
  j["num_hidden_layers"] = 61;
  std::ofstream(scales) << j.dump();
  r = RunMlaserve("generate --model-path " + kModel + " --prompt x --kv-cache-dtype fp8_e4m3 --kv-scales " + ShellQuote(scales));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("calibrated for 61 layers"), std::string::npos) << r.err;

  r = RunMlaserve("generate --model-path " + kModel + " --prompt x --kv-cache-dtype fp7");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("fp7"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  // A budget too small for even one request.
  r = RunMlaserve("generate --model-path " + kModel + " --prompt 'ROMEO:' --max-new-tokens 64 --max-total-tokens 32");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("fewer than this request needs"), std::string::npos) << r.err;
  r = RunMlaserve("generate --model-path " + kModel + " --prompt x --device-memory 0.001");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("KV budget"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace mlaserve

// The real binary on the bundled model: generate, score, and bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "support/run_binary.h"

namespace mlaserve {
namespace {

using testing::RunMlaserve;
using testing::ShellQuote;

const std::string kModel = ShellQuote(std::string(MLASERVE_SOURCE_DIR) + "/models/shakespeare-mla");

TEST(Cli, GenerateWritesTextAndTiming) {
  auto r = RunMlaserve("generate --model-path " + kModel +
                       " --prompt 'ROMEO:' --max-new-tokens 40 --temperature 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("ROMEO:", 0), 0u) << r.out;
  EXPECT_GT(r.out.size(), 60u) << r.out;
  EXPECT_NE(r.err.find("decode: 40 tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tokens/s"), std::string::npos) << r.err;

  // Greedy is deterministic, and the portable kernels produce the same text.
  auto again = RunMlaserve("generate --model-path " + kModel +
                           " --prompt 'ROMEO:' --max-new-tokens 40 --kernels portable");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out, r.out);

  // Sampling with a seed is reproducible; another seed gives other text.
  const std::string sampled = "generate --model-path " + kModel +
                              " --prompt 'JULIET:' --max-new-tokens 30 --temperature 0.9 --top-p 0.95 --top-k 50";
  auto s1 = RunMlaserve(sampled + " --seed 7"), s2 = RunMlaserve(sampled + " --seed 7"),
       s3 = RunMlaserve(sampled + " --seed 8");
  ASSERT_EQ(s1.exit_code, 0) << s1.err;
  EXPECT_EQ(s1.out, s2.out);
  EXPECT_NE(s1.out, s3.out);
}

TEST(Cli, ScoreMatchesSglangShape) {
  auto r = RunMlaserve("score --model-path " + kModel + " --text 'To be, or not to be'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const auto& ids = j["input_ids"];
  const auto& lp = j["token_logprobs"];
  ASSERT_GE(ids.size(), 3u);
  ASSERT_EQ(lp.size(), ids.size());
  EXPECT_TRUE(lp[0].is_null());
  double sum = 0;
  for (size_t i = 1; i < lp.size(); ++i) {
    ASSERT_TRUE(lp[i].is_number());
    EXPECT_LE(lp[i].get<double>(), 0.0);
    sum += lp[i].get<double>();
  }
  EXPECT_NEAR(j["perplexity"].get<double>(), std::exp(-sum / double(ids.size() - 1)), 1e-6);

  // The same ids given directly score the same.
  std::string id_list;
  for (size_t i = 0; i < ids.size(); ++i) id_list += (i ? "," : "") + std::to_string(ids[i].get<int>());
  auto by_ids = RunMlaserve("score --model-path " + kModel + " --input-ids " + id_list);
  ASSERT_EQ(by_ids.exit_code, 0) << by_ids.err;
  auto j2 = nlohmann::json::parse(by_ids.out);
  EXPECT_NEAR(j2["perplexity"].get<double>(), j["perplexity"].get<double>(), 1e-9);
}

TEST(Cli, BadArgumentsGiveOneLine) {
  struct Case {
    std::string args;
    std::string expected;
  };
  const Case cases[] = {
      {"frobnicate", "unknown command 'frobnicate'"},
      {"generate --model-path " + kModel, "--prompt is required"},
      {"generate --model-path " + kModel + " --prompt hi --temperature -1", "--temperature"},
      {"generate --model-path " + kModel + " --prompt hi --max-new-tokens lots", "--max-new-tokens must be an integer"},
      {"generate --model-path " + kModel + " --prompt hi --no-such-flag 3", "unknown flag --no-such-flag"},
      {"generate --model-path " + kModel + " --prompt hi --kernels sse9", "unknown kernels 'sse9'"},
      {"generate --model-path " + kModel + " --prompt hi --max-new-tokens 100000", "exceeds the context length"},
      {"score --model-path " + kModel + " --input-ids 1,x,3", "'x' is not a token id"},
      {"score --model-path " + kModel + " --input-ids 1,99999", "outside the vocabulary"},
      {"score --model-path " + kModel, "exactly one of --text or --input-ids"},
      {"generate --prompt hi", "--model-path is required"},
  };
  for (const Case& c : cases) {
    auto r = RunMlaserve(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << c.args << " -> " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << " -> " << r.err;
  }
}

TEST(Cli, InitRandomAndBenchRun) {
  testing::TempDir dir;
  auto r = RunMlaserve("init-random --preset tiny --set num_hidden_layers=2 --set q_lora_rank=null --out " +
                       ShellQuote(dir.path()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = RunMlaserve("bench --model-path " + ShellQuote(dir.path()) +
                  " --prompt-len 20 --decode-tokens 4 --bandwidth-buffer-mb 16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("decode: 4 tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("machine read bandwidth"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace mlaserve

// mlaserve simulate, the real binary: the report, the KV capacity `plan` computes, retraction
// when the pool is small, the plot, refused flags; and a small version of the validation
// (docs/simulate.md): the bundled model simulated on this host's calibrated profile beside the
// same workload run for real through the server and bench-serving.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/run_binary.h"
#include "support/server_process.h"

namespace mlaserve {
namespace {

using testing::RunMlaserve;
using testing::ShellQuote;

const std::string kConfigs = std::string(MLASERVE_SOURCE_DIR) + "/tests/fixtures/configs/";

nlohmann::json LastJsonLine(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) last = line;
  return nlohmann::json::parse(last, nullptr, false);
}

TEST(Simulate, ReportsAGpuDeploymentWithPlansCapacity) {
  testing::TempDir dir;
  const std::string out = dir.path() + "/sim.jsonl", svg = dir.path() + "/run.svg";
  const std::string model = ShellQuote(kConfigs + "deepseek-v3-fp8.json");
  auto r = RunMlaserve("simulate --model-path " + model + " --hardware h200 --tp-size 8 --num-prompts 50 "
                       "--random-input-len 500 --random-output-len 200 --output-file " + ShellQuote(out) +
                       " --plot " + ShellQuote(svg));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* line : {"Serving Benchmark Result", "Output token throughput (tok/s):", "Mean TPOT (ms):",
                           "Simulated Engine", "max_total_num_tokens:", "Peak running requests:",
                           "Time to finish the workload (s):", "token usage"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  }
  const nlohmann::json s = LastJsonLine(out);
  ASSERT_FALSE(s.is_discarded());
  EXPECT_EQ(s["completed"], 50);
  EXPECT_EQ(s["total_output_tokens"], 50 * 200);
  EXPECT_EQ(s["total_input_tokens"], 50 * 500);
  EXPECT_EQ(s["max_running_requests_seen"], 50);
  EXPECT_GT(s["output_throughput"].get<double>(), 0);
  EXPECT_EQ(s["hardware"], "h200");

  // The capacity is plan's for the same device, fraction and split (to a whole 16-token page).
  auto plan = RunMlaserve("plan --model-path " + model + " --device-memory 141 --tp-size 8 --json " +
                          ShellQuote(dir.path() + "/plan.json"));
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  nlohmann::json p;
  std::ifstream(dir.path() + "/plan.json") >> p;
  int64_t plan_tokens = -1;
  for (const auto& f : p["formats"]) {
    if (f["format"] == "bf16") plan_tokens = f["max_total_num_tokens"].get<int64_t>();
  }
  EXPECT_EQ(s["max_total_num_tokens"].get<int64_t>(), plan_tokens / 16 * 16);

  const std::string picture = testing::ReadTextFile(svg);
  EXPECT_EQ(picture.rfind("<svg", 0), 0u);
  size_t lines = 0;
  for (size_t at = picture.find("<polyline"); at != std::string::npos; at = picture.find("<polyline", at + 1)) ++lines;
  EXPECT_EQ(lines, 3u) << "running, queued, token usage";
}

TEST(Simulate, Fp8KvHoldsTwiceTheTokensAndASmallPoolRetracts) {
  testing::TempDir dir;
  const std::string out = dir.path() + "/sim.jsonl";
  const std::string base = "simulate --model-path " + ShellQuote(kConfigs + "deepseek-v3-fp8.json") +
                           " --hardware h200 --tp-size 8 --num-prompts 8 --random-input-len 100 "
                           "--random-output-len 300 --output-file " + ShellQuote(out);
  ASSERT_EQ(RunMlaserve(base).exit_code, 0);
  const int64_t bf16 = LastJsonLine(out)["max_total_num_tokens"].get<int64_t>();
  ASSERT_EQ(RunMlaserve(base + " --kv-cache-dtype fp8_e4m3").exit_code, 0);
  const int64_t fp8 = LastJsonLine(out)["max_total_num_tokens"].get<int64_t>();
  EXPECT_NEAR(double(fp8) / double(bf16), 2.0, 0.01);
  // 8 x 400 tokens in a 1,024-token pool: admitted on the future-token estimate, then retracted.
  auto r = RunMlaserve(base + " --max-total-tokens 1024");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json s = LastJsonLine(out);
  EXPECT_EQ(s["completed"], 8);
  EXPECT_GT(s["retracted_requests"].get<int64_t>(), 0) << r.out;
  EXPECT_EQ(s["total_output_tokens"], 8 * 300);
}

TEST(Simulate, RefusesWhatItDoesNotModelByName) {
  const std::string base = "simulate --model-path " + ShellQuote(kConfigs + "deepseek-v3-fp8.json") + " ";
  struct Case {
    std::string args, message;
  } cases[] = {
      {"--hardware h200 --bogus 1", "--bogus"},
      {"--hardware h200 --speculative-algorithm NEXTN", "--speculative-algorithm"},
      {"--hardware tpu9", "--hardware tpu9: not a built-in profile (h100, h200, b200, mi300x, this-host)"},
      {"--hardware h200 --write-profile x.json", "--write-profile is for --hardware this-host"},
      {"--num-prompts 4", "--hardware"},
      {"--hardware h200 --threads 2", "--threads"},
      {"--hardware h200 --dataset-name sharegpt", "--dataset-name sharegpt needs --dataset-path"},
      {"--hardware h200 --lengths-from out.jsonl", "--lengths-from needs --workload"},
      {"--hardware h200 --workload in.jsonl --num-prompts 4", "--num-prompts: --workload is the whole workload"},
      {"--hardware h200 --workload in.jsonl --seed 3", "--seed: --workload is the whole workload"},
      {"--hardware h200 --max-new-tokens 5", "--max-new-tokens is for --workload"},
      {"--hardware h200 --tokenizer-path dir", "--tokenizer-path is for --dataset-name sharegpt and --workload"},
      {"--hardware h200 --sharegpt-output-len 9", "--sharegpt-output-len is for --dataset-name sharegpt"},
      {"--hardware h200 --dataset-name sharegpt --dataset-path x.json --random-input-len 5",
       "--random-input-len is for --dataset-name random"},
  };
  for (const Case& c : cases) {
    auto r = RunMlaserve(base + c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
  }
  auto printed = RunMlaserve("simulate --print-profile h100");
  ASSERT_EQ(printed.exit_code, 0) << printed.err;
  EXPECT_FALSE(nlohmann::json::parse(printed.out, nullptr, false).is_discarded()) << printed.out;
}

// The validation in small: calibrate on the bundled model, simulate a workload, run it for real.
// Timing in the suite is not ours to assert (tests run side by side); the token counts must agree
// exactly. The full
// comparison and its targets are scripts/validate-simulate.sh's (docs/simulate.md).
TEST(Simulate, PredictsTheBundledModelsServerRun) {
  testing::TempDir dir;
  const std::string workload = " --num-prompts 8 --random-input-len 64 --random-output-len 24";
  const std::string sim = dir.path() + "/sim.jsonl", real = dir.path() + "/real.jsonl";
  auto simulated = RunMlaserve("simulate --model-path " + ShellQuote(testing::BundledModelPath()) +
                               " --hardware this-host --max-total-tokens 8192 --write-profile " +
                               ShellQuote(dir.path() + "/this-host.json") + workload + " --output-file " +
                               ShellQuote(sim));
  ASSERT_EQ(simulated.exit_code, 0) << simulated.err;
  EXPECT_NE(simulated.err.find("this host's profile"), std::string::npos) << simulated.err;
  testing::ServerLaunch launch;
  launch.deterministic = false;
  testing::ServerProcess server(launch, {});
  auto measured = RunMlaserve("bench-serving --port " + std::to_string(server.port()) + workload +
                              " --disable-progress --output-file " + ShellQuote(real));
  ASSERT_EQ(measured.exit_code, 0) << measured.err;
  const nlohmann::json s = LastJsonLine(sim), m = LastJsonLine(real);
  EXPECT_EQ(s["completed"], m["completed"]);
  EXPECT_EQ(s["total_input_tokens"], m["total_input_tokens"]);
  EXPECT_EQ(s["total_output_tokens"], m["total_output_tokens"]);
  const double predicted = s["output_throughput"].get<double>(), actual = m["output_throughput"].get<double>();
  std::printf("bundled model, 8 x (64 in, 24 out): output tok/s real %.1f, predicted %.1f\n", actual, predicted);
  // No bound on the ratio: the suite runs tests side by side on two cores, so the real run's speed is
  // the neighbours' as much as ours (CI once measured 642 tok/s beside a calibration that saw 2215).
  // Speed is checked by scripts/validate-simulate.sh, run alone; here the prediction must be a rate.
  EXPECT_TRUE(std::isfinite(predicted));
  EXPECT_GT(predicted, 0.0);
  // The profile written is one --hardware reads back.
  auto again = RunMlaserve("simulate --model-path " + ShellQuote(testing::BundledModelPath()) + " --hardware " +
                           ShellQuote(dir.path() + "/this-host.json") + " --max-total-tokens 8192" + workload);
  EXPECT_EQ(again.exit_code, 0) << again.err;
}

// Two ShareGPT conversations (a third has one turn and is skipped), simulated and sent for real by
// bench-serving with the same seed: the same requests, the same token counts.
TEST(Simulate, ShareGptIsSampledAsBenchServingSamplesIt) {
  testing::TempDir dir;
  const std::string data = dir.path() + "/sharegpt.json", sim = dir.path() + "/sim.jsonl",
                    real = dir.path() + "/real.jsonl";
  std::ofstream(data) << R"([
    {"id": "x", "conversations": [{"from": "human", "value": "Tell me of Rome, of Caesar and the senate."},
                                  {"from": "gpt", "value": "Friends, Romans, countrymen, lend me your ears."}]},
    {"id": "y", "conversations": [{"from": "human", "value": "Hi"}]},
    {"id": "z", "conversations": [{"from": "human", "value": "What is love? Tell me all of it."},
                                  {"from": "gpt", "value": "Love looks not with the eyes, but with the mind."}]}])";
  const std::string workload = " --dataset-name sharegpt --dataset-path " + ShellQuote(data) + " --num-prompts 5";
  auto simulated = RunMlaserve("simulate --model-path " + ShellQuote(testing::BundledModelPath()) +
                               " --hardware h200 --max-total-tokens 8192" + workload + " --output-file " + ShellQuote(sim));
  ASSERT_EQ(simulated.exit_code, 0) << simulated.err;
  testing::ServerProcess server;
  auto measured = RunMlaserve("bench-serving --port " + std::to_string(server.port()) + workload + " --tokenizer " +
                              ShellQuote(testing::BundledModelPath()) + " --disable-progress --output-file " +
                              ShellQuote(real));
  ASSERT_EQ(measured.exit_code, 0) << measured.err;
  const nlohmann::json s = LastJsonLine(sim), m = LastJsonLine(real);
  EXPECT_EQ(s["completed"], 2);
  EXPECT_EQ(m["completed"], 2);
  EXPECT_EQ(s["total_input_tokens"], m["total_input_tokens"]);
  EXPECT_EQ(s["total_output_tokens"], m["total_output_tokens"]);
  EXPECT_GT(s["total_output_tokens"].get<int>(), 10) << "the answers' own lengths";
  auto without = RunMlaserve("bench-serving --port " + std::to_string(server.port()) +
                             " --dataset-name sharegpt --dataset-path " + ShellQuote(data));
  EXPECT_NE(without.exit_code, 0);
  EXPECT_NE(without.err.find("--tokenizer DIR"), std::string::npos) << without.err;
}

// A batch run on the bundled model, then its workload simulated with the run's own lengths: every
// turn is a request (a later turn after its earlier one), and the token counts are the run's.
TEST(Simulate, ABatchWorkloadTakesItsLengthsFromTheRunsOutput) {
  testing::TempDir dir;
  const std::string input = dir.path() + "/in.jsonl", output = dir.path() + "/out.jsonl",
                    sim = dir.path() + "/sim.jsonl";
  std::ofstream(input) << R"({"id": "a", "messages": [{"role": "system", "content": "You are a poet."}, {"role": "user", "content": "Speak of the king."}, {"role": "assistant", "content": "The king is dead."}, {"role": "user", "content": "And the queen?"}]}
{"id": "b", "conversations": [{"from": "human", "value": "What light through yonder window breaks?"}, {"from": "gpt", "value": "It is the east."}]}
{"id": "c", "prompt": "To be or not to be"}
not a record
)";
  const std::string model = ShellQuote(testing::BundledModelPath());
  auto run = RunMlaserve("batch --model-path " + model + " --input " + ShellQuote(input) + " --output " +
                         ShellQuote(output) + " --max-new-tokens 12");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  int64_t prompt_tokens = 0, completion_tokens = 0, turns = 0;
  {
    std::ifstream in(output);
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json record = nlohmann::json::parse(line);
      for (const auto& t : record["turns"]) {
        prompt_tokens += t["prompt_tokens"].get<int64_t>();
        completion_tokens += t["completion_tokens"].get<int64_t>();
        ++turns;
      }
    }
  }
  ASSERT_EQ(turns, 4);
  auto simulated = RunMlaserve("simulate --model-path " + model + " --hardware h200 --max-total-tokens 8192 "
                               "--workload " + ShellQuote(input) + " --lengths-from " + ShellQuote(output) +
                               " --max-new-tokens 12 --output-file " + ShellQuote(sim));
  ASSERT_EQ(simulated.exit_code, 0) << simulated.err;
  EXPECT_NE(simulated.err.find("3 records, 4 turns, 4 turns' lengths from --lengths-from, 1 lines skipped"),
            std::string::npos) << simulated.err;
  const nlohmann::json s = LastJsonLine(sim);
  EXPECT_EQ(s["completed"], 4);
  EXPECT_EQ(s["total_input_tokens"], prompt_tokens);
  EXPECT_EQ(s["total_output_tokens"], completion_tokens);
  EXPECT_EQ(s["max_concurrency"], 8) << "batch's --concurrency default";
}

}  // namespace
}  // namespace mlaserve

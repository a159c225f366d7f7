// The real binary on the bundled model: generate, score, bad arguments, --help, and the flags
// SGLang command lines carry.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kvcache/kv_format.h"
#include "model/workspace.h"
#include "server/http_client.h"
#include "support/run_binary.h"
#include "support/server_process.h"

namespace mlaserve {
namespace {

using testing::RunMlaserve;
using testing::ShellQuote;

int Lines(const std::string& text) { return int(std::count(text.begin(), text.end(), '\n')); }

// A command line that must fail with `expected` in the one line it prints.
struct BadCommand {
  std::string args;
  std::string expected;
};

// exit_code 0: any failure.
void ExpectOneLineFailures(const std::vector<BadCommand>& commands, int exit_code) {
  for (const BadCommand& c : commands) {
    auto r = RunMlaserve(c.args);
    if (exit_code == 0) EXPECT_NE(r.exit_code, 0) << c.args;
    else EXPECT_EQ(r.exit_code, exit_code) << c.args;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << c.args << " -> " << r.err;
    EXPECT_EQ(Lines(r.err), 1) << c.args << " -> " << r.err;
  }
}

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
  ExpectOneLineFailures({
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
  }, /*exit_code=*/0);
}

// A tiny random MoE checkpoint (2 layers) written into `dir` by init-random.
bool InitTinyCheckpoint(const std::string& dir) {
  auto r = RunMlaserve("init-random --preset tiny --set num_hidden_layers=2 --set q_lora_rank=null --out " +
                       ShellQuote(dir));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0;
}

// The number after `label` in bench's output, or NaN.
double BenchFigure(const std::string& out, const std::string& label) {
  const size_t at = out.find(label);
  return at == std::string::npos ? std::nan("") : std::atof(out.c_str() + at + label.size());
}

TEST(Cli, InitRandomAndBenchRun) {
  testing::TempDir dir;
  ASSERT_TRUE(InitTinyCheckpoint(dir.path()));
  auto r = RunMlaserve("bench --model-path " + ShellQuote(dir.path()) +
                  " --prompt-len 20 --decode-tokens 4 --bandwidth-buffer-mb 16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("decode: 4 tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("machine read bandwidth"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fp32 FMA peak ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GFLOP/s all threads"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("prefill compute: "), std::string::npos) << r.out;
  // Against the peak of the arithmetic the prefill ran on (bf16 dot products where --kernels auto
  // chose them for this bf16 checkpoint).
  EXPECT_TRUE(r.out.find("% of the FMA peak") != std::string::npos ||
              r.out.find("% of the bf16 dot-product peak") != std::string::npos)
      << r.out;
  const double attention = BenchFigure(r.out, "attention share of decode step: ");
  EXPECT_GT(attention, 0.0) << r.out;
  EXPECT_LT(attention, 100.0) << r.out;
  // Attention over the cache against its own bound: a positive time, a bound it cannot beat.
  EXPECT_GT(BenchFigure(r.out, "decode attention over the KV cache: "), 0.0) << r.out;
  const size_t share_at = r.out.find("% of it");
  ASSERT_NE(share_at, std::string::npos) << r.out;
  const double share = std::stod(r.out.substr(r.out.rfind(' ', share_at - 1) + 1));
  EXPECT_GT(share, 0.0) << r.out;
  EXPECT_LE(share, 100.0) << r.out;
  EXPECT_EQ(r.out.find("per-step bound"), std::string::npos) << r.out;  // --batch's
  // The decode phase table: disjoint parts of the steps, so together no longer than the steps;
  // every phase ran.
  const double decode_s = BenchFigure(r.out, "decode: 4 tokens in ");
  auto phase_ms = [&](const char* phase) {
    const size_t at = r.out.find(phase);
    if (at == std::string::npos) return -1.0;
    const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
    const size_t ms_at = line.find(" ms ");
    return ms_at == std::string::npos ? -1.0 : std::stod(line.substr(line.rfind(' ', ms_at - 1) + 1));
  };
  double phases_ms = 0;
  for (const char* phase : {"  MLP products", "  attention projections", "  kv_b products", "  router (", "  lm_head",
                            "  attention over the KV cache"}) {
    const double ms = phase_ms(phase);
    EXPECT_GT(ms, 0.0) << phase << "\n" << r.out;
    phases_ms += ms;
  }
  EXPECT_LE(phases_ms, 1e3 * (decode_s + 0.0005) / 4 + 0.003) << r.out;  // within the printed roundings
  // The weight products' total: every phase but attention over the cache.
  EXPECT_NEAR(phase_ms("  weight products together"), phases_ms - phase_ms("  attention over the KV cache"), 0.004)
      << r.out;
  r = RunMlaserve("bench --model-path " + ShellQuote(dir.path()) + " --compare-model-path " + ShellQuote(dir.path()) +
                  " --prompt-len 20 --decode-tokens 2 --bandwidth-buffer-mb 16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("prefill of peak"), std::string::npos) << r.out;
  // Interleaved: each model's weight products over the same steps, no longer than that model's
  // own steps (the throughput table's decode tok/s): timings that leaked from one model's steps
  // into another's would break it. The same checkpoint twice: its folder's name, then (the same
  // name again) its path.
  const std::string labels[2] = {std::filesystem::path(dir.path()).filename().string(), dir.path()};
  // The two rows under the header line holding `header`, as whitespace-separated fields.
  const auto rows_under = [&](const std::string& header) {
    std::vector<std::vector<std::string>> rows;
    const size_t at = r.out.find(header);
    if (at == std::string::npos) return rows;
    std::istringstream lines(r.out.substr(r.out.rfind('\n', at) + 1));
    std::string line;
    std::getline(lines, line);  // the header
    for (int i = 0; i < 2 && std::getline(lines, line); ++i) {
      std::istringstream fields(line);
      std::vector<std::string> row;
      for (std::string f; fields >> f;) row.push_back(f);
      rows.push_back(row);
    }
    return rows;
  };
  const auto throughput = rows_under("prefill tok/s");  // weights, prefill tok/s, decode tok/s, ...
  const auto products = rows_under("ms/step");           // weights, ms/step, MB/step, GB/s, ...
  ASSERT_EQ(throughput.size(), 2u) << r.out;
  ASSERT_EQ(products.size(), 2u) << r.out;
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_GE(throughput[i].size(), 3u) << r.out;
    ASSERT_EQ(products[i].size(), 9u) << r.out;
    EXPECT_EQ(throughput[i][0], labels[i]) << r.out;
    EXPECT_EQ(products[i][0], labels[i]) << r.out;
    const double step_ms = 1e3 / std::stod(throughput[i][2]);
    const double products_ms = std::stod(products[i][1]);
    EXPECT_GT(products_ms, 0.0) << r.out;
    EXPECT_LE(products_ms, step_ms * 1.01 + 0.001) << r.out;  // within the printed roundings
    // The quickest step's products: positive, and no slower than the steps' mean.
    const double best_ms = std::stod(products[i][6]);
    EXPECT_GT(best_ms, 0.0) << r.out;
    EXPECT_LE(best_ms, products_ms + 0.001) << r.out;
    EXPECT_GT(std::stod(products[i][7]), 0.0) << r.out;  // best x
    EXPECT_GT(std::stod(products[i][8]), 0.0) << r.out;  // median x
    EXPECT_NE(r.out.find(labels[i] + ", decode step by phase"), std::string::npos) << r.out;
  }
}

// The prompt's phase table, from the fastest of --prefill-repeats runs: the phases' times together
// no longer than the prefill, the large ones timed at all, and every phase's FLOPs positive (the
// attention line gets the prompt's total less the others', so the others cannot overcount).
TEST(Cli, BenchPrefillPhasesOfTheFastestRun) {
  testing::TempDir dir;
  ASSERT_TRUE(InitTinyCheckpoint(dir.path()));
  auto r = RunMlaserve("bench --model-path " + ShellQuote(dir.path()) +
                       " --prompt-len 24 --decode-tokens 2 --prefill-repeats 3 --bandwidth-buffer-mb 16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("tokens/s (the fastest of 3 runs)"), std::string::npos) << r.out;
  const size_t prefill_at = r.out.find("prefill: 24 tokens in ");
  ASSERT_NE(prefill_at, std::string::npos) << r.out;
  const double prefill_s = 24 / BenchFigure(r.out.substr(prefill_at), " s = ");  // from tokens/s: more digits
  const size_t table = r.out.find("prefill by phase: ms, GFLOP, GFLOP/s, share of the ");
  ASSERT_NE(table, std::string::npos) << r.out;
  const std::string rows = r.out.substr(table);
  struct Row {
    const char* phase;
    bool timed;  // long enough on the tiny model to print a nonzero time
  };
  double ms_sum = 0;
  for (const Row& row : {Row{"  MLP products", true}, Row{"  attention projections", true},
                         Row{"  attention (kv_b products", true}, Row{"  router (", false},
                         Row{"  lm_head (each chunk's last token)", false}}) {
    const size_t at = rows.find(row.phase);
    ASSERT_NE(at, std::string::npos) << row.phase << "\n" << r.out;
    const std::string line = rows.substr(at, rows.find('\n', at) - at);
    const size_t ms_at = line.find(" ms "), gflop_at = line.find(" GFLOP ");
    ASSERT_NE(ms_at, std::string::npos) << line;
    ASSERT_NE(gflop_at, std::string::npos) << line;
    const double ms = std::stod(line.substr(line.rfind(' ', ms_at - 1) + 1));
    EXPECT_GE(ms, 0.0) << line;
    if (row.timed) {
      EXPECT_GT(ms, 0.0) << line;
    }
    EXPECT_GT(std::stod(line.substr(line.rfind(' ', gflop_at - 1) + 1)), 0.0) << line;
    ms_sum += ms;
  }
  EXPECT_LE(ms_sum, 1e3 * prefill_s * 1.001 + 0.003) << r.out;  // within the printed roundings
  EXPECT_NE(rows.find("  the rest ("), std::string::npos) << r.out;
  r = RunMlaserve("bench --model-path " + ShellQuote(dir.path()) + " --batch 2 --prefill-repeats 2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--prefill-repeats times one sequence's prompt"), std::string::npos) << r.err;
}

TEST(Cli, BenchBatchReportsThePerStepBoundAndTheAttentionShare) {
  testing::TempDir dir;
  ASSERT_TRUE(InitTinyCheckpoint(dir.path()));
  // 3 sequences of 40 tokens, packed into forward calls of 32: prompts straddle calls.
  auto r = RunMlaserve("bench --model-path " + ShellQuote(dir.path()) +
                  " --batch 3 --prompt-len 40 --decode-tokens 4 --max-batch-tokens 32 --bandwidth-buffer-mb 16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("prefill: 120 tokens (3 x 40)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("decode: 4 steps x 3 sequences"), std::string::npos) << r.out;
  // Counted from the router: at least one expert, at most 3 tokens x top-k of them.
  const double experts = BenchFigure(r.out, "routed experts per MoE layer and step: ");
  EXPECT_GE(experts, 1.0) << r.out;
  EXPECT_NE(r.out.find("counted from the router's choices"), std::string::npos) << r.out;
  const double of_bound = BenchFigure(r.out, "ms/step achieved, ");
  EXPECT_GT(of_bound, 0.0) << r.out;
  EXPECT_LE(of_bound, 100.0) << r.out;  // the bound is a lower limit on the step time
  const double attention = BenchFigure(r.out, "attention share of decode step: ");
  EXPECT_GT(attention, 0.0) << r.out;
  EXPECT_LT(attention, 100.0) << r.out;
  EXPECT_NE(r.out.find("fp32 FMA peak ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bf16 dot-product peak"), std::string::npos) << r.out;
  r = RunMlaserve("bench --model-path " + ShellQuote(dir.path()) + " --batch 2 --compare-model-path " +
                  ShellQuote(dir.path()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--batch above 1 benches one model"), std::string::npos) << r.err;
}

TEST(Cli, BenchKernelsTimesEveryWeightFormat) {
  auto r = RunMlaserve("bench-kernels --stream-mb 8 --bandwidth-buffer-mb 16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t kv_table = r.out.find("KV row codecs");
  ASSERT_NE(kv_table, std::string::npos) << r.out;
  const std::string matmul_tables = r.out.substr(0, kv_table), kv_rows = r.out.substr(kv_table);
  for (const char* format : {"bf16", "fp8-block", "int4-g32", "q8_0", "q6_k", "q4_k"}) {
    // One row in the streaming table, one in the compute table, one in the prefill product's
    // (and one in the bf16 dot-product table's prefill product where the CPU has AVX512-BF16).
    size_t rows = 0;
    for (size_t at = matmul_tables.find(std::string("\n") + format + " "); at != std::string::npos;
         at = matmul_tables.find(std::string("\n") + format + " ", at + 1)) {
      ++rows;
    }
    EXPECT_EQ(rows, CpuSupportsBf16Dot() ? 4u : 3u) << format << "\n" << r.out;
  }
  EXPECT_NE(matmul_tables.find("in registers / over packed activations"), std::string::npos) << r.out;
  // The streaming table times 1, 3 and 6 tokens (batch-1 decode, a routed expert's share at 32
  // and 64 requests): a column each.
  EXPECT_NE(matmul_tables.find("1, 3 and 6 tokens"), std::string::npos) << r.out;
  EXPECT_NE(matmul_tables.find("n=3"), std::string::npos) << r.out;
  // The KV codec table: a row per cache format, timing the portable codec at least.
  EXPECT_NE(kv_rows.find("portable"), std::string::npos) << r.out;
  for (KvFormat format : kAllKvFormats) {
    EXPECT_NE(kv_rows.find(std::string("\n") + KvFormatName(format) + " "), std::string::npos) << r.out;
  }
  EXPECT_NE(r.out.find("machine read bandwidth"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fp32 FMA peak: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("share of the one-thread FMA peak"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("vpdpbusd (int8 dot-product) peak: "), std::string::npos) << r.out;
  if (CpuSupportsInt8Dot()) {
    // An int8 table's GGUF and int4-g32 prefill rows are shares of the int8 peak, and say so.
    const auto k = RunMlaserve("bench-kernels --kernels avx512+int8 --stream-mb 8 --bandwidth-buffer-mb 16");
    ASSERT_EQ(k.exit_code, 0) << k.err;
    const size_t prefill = k.out.find("prefill product (avx512+int8)");
    ASSERT_NE(prefill, std::string::npos) << k.out;
    EXPECT_NE(k.out.find("rows marked (int8): of the one-thread vpdpbusd peak", prefill), std::string::npos) << k.out;
    for (const char* format : {"q8_0", "q6_k", "q4_k", "int4-g32"}) {
      const size_t row = k.out.find(std::string("\n") + format + " ", prefill);
      ASSERT_NE(row, std::string::npos) << format << "\n" << k.out;
      const std::string line = k.out.substr(row + 1, k.out.find('\n', row + 1) - row - 1);
      EXPECT_NE(line.find("(int8)"), std::string::npos) << line;
    }
    const size_t bf16_row = k.out.find("\nbf16 ", prefill);
    ASSERT_NE(bf16_row, std::string::npos) << k.out;
    EXPECT_EQ(k.out.substr(bf16_row + 1, k.out.find('\n', bf16_row + 1) - bf16_row - 1).find("(int8)"),
              std::string::npos);
  }
  // The measurement --kernels auto makes, a row per shape class.
  if (CpuSupportsBf16Dot()) {
    for (const char* shape_class : {"\n1 ", "\n2-16 ", "\n17-64 ", "\n65+ "}) {
      EXPECT_NE(r.out.find(shape_class), std::string::npos) << shape_class << "\n" << r.out;
    }
    EXPECT_NE(r.out.find("chosen from these: avx512"), std::string::npos) << r.out;
  }
  // The decode attention table: a row per KV format it times, and the bf16 kernels alone.
  const size_t attention = r.out.find("decode attention: one token over");
  ASSERT_NE(attention, std::string::npos) << r.out;
  for (const char* format : {"bf16", "fp8_ds_mla", "fp8_e4m3"}) {
    EXPECT_NE(r.out.find(std::string(" ") + format + " ", attention), std::string::npos) << format << "\n" << r.out;
  }
  if (CpuSupportsBf16Dot()) {
    EXPECT_NE(r.out.find("kernels alone, 16 heads", attention), std::string::npos) << r.out;
    const std::string widen = "WidenKvRowsBf16, one " + std::to_string(kKvTileRows) + "-row tile in cache: bf16 ";
    EXPECT_NE(r.out.find(widen, attention), std::string::npos) << r.out;
  }
  // --attention-only times that table alone: a flag of the others is refused, not ignored.
  r = RunMlaserve("bench-kernels --attention-only --stream-mb 8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--stream-mb has no effect with --attention-only"), std::string::npos) << r.err;
  // --choice-only times only the choice: the flags of the other tables are refused, not ignored.
  r = RunMlaserve("bench-kernels --choice-only --stream-mb 8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--stream-mb has no effect with --choice-only"), std::string::npos) << r.err;
  r = RunMlaserve("bench-kernels --kernels sse9");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("sse9"), std::string::npos) << r.err;
}

// The attention projections' table: bf16 and the GGUF formats over the same layers, a row each in
// the mean table and in the best-of table, every figure positive, each layer's rate between its
// products' and each product's quickest column no slower than its mean (the columns hold what their
// headers say).
TEST(Cli, BenchKernelsProjectionsTableAlternatesFormats) {
  auto r = RunMlaserve("bench-kernels --projections-only --stream-mb 32 --rounds 2 --bandwidth-buffer-mb 16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t table = r.out.find("attention projections at 1 token (the reference shape), 2 layers a format x 2 rounds");
  ASSERT_NE(table, std::string::npos) << r.out;
  const size_t best = r.out.find("best of each product's 4 timings", table);
  ASSERT_NE(best, std::string::npos) << r.out;
  // A row: name, then per product "us" and "GB/s" figures, then the layer's GB/s, share, ratio.
  struct Row {
    double us[3] = {}, gbs[3] = {}, together = 0.0, ratio = 0.0;
  };
  const auto row_of = [&](const char* format, size_t from) {
    Row row;
    const size_t at = r.out.find(std::string("\n") + format + " ", from);
    EXPECT_NE(at, std::string::npos) << format << "\n" << r.out;
    if (at == std::string::npos) return row;
    std::istringstream fields(r.out.substr(at + 1, r.out.find('\n', at + 1) - at - 1));
    std::string name, unit, share;
    fields >> name;
    for (int p = 0; p < 3; ++p) fields >> row.us[p] >> unit >> row.gbs[p] >> unit;
    fields >> row.together >> unit >> share >> row.ratio;
    EXPECT_FALSE(fields.fail()) << fields.str();
    return row;
  };
  for (const char* format : {"bf16", "q8_0", "q6_k", "q4_k"}) {
    const Row mean = row_of(format, table), quickest = row_of(format, best);
    for (const Row* row : {&mean, &quickest}) {
      // The layer's rate lies between its products' rates (their bytes over their times together).
      const auto [slowest, fastest] = std::minmax({row->gbs[0], row->gbs[1], row->gbs[2]});
      EXPECT_GT(slowest, 0.0) << format;
      EXPECT_GE(row->together, slowest - 0.01) << format;
      EXPECT_LE(row->together, fastest + 0.01) << format;
      EXPECT_GT(row->ratio, 0.0) << format;
    }
    // Each product's quickest timing is no slower than its mean (the tables hold what they say).
    for (int p = 0; p < 3; ++p) EXPECT_LE(quickest.us[p], mean.us[p] + 0.05) << format << " product " << p;
  }
  EXPECT_EQ(r.out.find("KV row codecs"), std::string::npos) << "the other tables ran too:\n" << r.out;
  r = RunMlaserve("bench-kernels --rounds 3");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--rounds needs --projections-only"), std::string::npos) << r.err;
  r = RunMlaserve("bench-kernels --projections-only --attention-only");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--attention-only has no effect with --projections-only"), std::string::npos) << r.err;
}

// The absorbed query and output table: a row per GGUF format with its six cells (one pass, the
// plain path and W_UV, from cache and from memory), each "us, GB/s, share"; nope = v, so every cell
// times the same bytes (a head's kv_b rows), and GB/s x us is the same in all six: the columns
// hold what their headers say. (Speeds are not asserted: the suite has no timed tests.)
TEST(Cli, BenchKernelsAbsorbedQueryTableTimesEachHeadsCopies) {
  auto r = RunMlaserve("bench-kernels --absorbed-query-only --stream-mb 8 --bandwidth-buffer-mb 16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t table = r.out.find("the absorbed query and output at 1 token, DeepSeek's kv_b (128 heads, nope 128, "
                                  "v 128, kv_lora 512), one thread");
  ASSERT_NE(table, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 layers a format from memory", table), std::string::npos) << r.out;
  for (const char* format : {"q8_0", "q6_k", "q4_k"}) {
    const size_t at = r.out.find(std::string("\n") + format + " ", table);
    ASSERT_NE(at, std::string::npos) << format << "\n" << r.out;
    std::istringstream fields(r.out.substr(at + 1, r.out.find('\n', at + 1) - at - 1));
    std::string name, unit, share;
    fields >> name;
    double first_kb = 0.0;
    for (int cell = 0; cell < 6; ++cell) {
      double us = 0.0, gbs = 0.0;
      fields >> us >> unit >> gbs >> unit >> share;
      ASSERT_FALSE(fields.fail()) << format << " cell " << cell << ": " << fields.str();
      EXPECT_GT(us, 0.0) << format << " cell " << cell;
      EXPECT_GT(gbs, 0.0) << format << " cell " << cell;
      const double kb = us * gbs;  // bytes a head, in KB
      if (cell == 0) first_kb = kb;
      EXPECT_NEAR(kb, first_kb, 0.01 * first_kb + 0.05) << format << " cell " << cell;
    }
  }
  EXPECT_EQ(r.out.find("KV row codecs"), std::string::npos) << "the other tables ran too:\n" << r.out;
  r = RunMlaserve("bench-kernels --absorbed-query-only --projections-only");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--projections-only has no effect with --absorbed-query-only"), std::string::npos) << r.err;
}

TEST(Cli, HelpListsEachCommandsFlagsAndExitsZero) {
  for (const char* command : {"serve", "generate", "score", "bench", "bench-kernels", "init-random", "kv-eval",
                              "kv-calibrate", "plan", "simulate", "bench-offline", "bench-serving", "batch"}) {
    for (const char* help : {"--help", "-h"}) {
      auto r = RunMlaserve(std::string(command) + " " + help);
      EXPECT_EQ(r.exit_code, 0) << command << " " << help << " -> " << r.err;
      EXPECT_EQ(r.out.rfind("usage: mlaserve " + std::string(command) + " ", 0), 0u) << r.out;
      EXPECT_EQ(r.err, "") << command;
    }
  }
  auto serve = RunMlaserve("serve --help");
  for (const char* flag : {"--model-path DIR", "--kv-cache-dtype", "--trust-remote-code", "--context-length",
                           "--max-batch-tokens", "--max-running-requests", "--port", "--dp ", "--dp-size",
                           "--tp ", "--hicache-size", "--enable-hierarchical-cache"}) {
    EXPECT_NE(serve.out.find(flag), std::string::npos) << flag << "\n" << serve.out;
  }
  // Defaults and accepted values come with each flag.
  EXPECT_NE(serve.out.find("tokens per KV page (default: 16; in [1, 4096])"), std::string::npos) << serve.out;
  EXPECT_NE(serve.out.find("(default: 30000; in [0, 65535])"), std::string::npos) << serve.out;

  auto generate = RunMlaserve("generate --help --no-such-flag");  // help wins over errors
  EXPECT_EQ(generate.exit_code, 0) << generate.err;
  for (const char* flag : {"--model-path", "--prompt", "--max-new-tokens", "--temperature", "--top-p", "--top-k",
                           "--seed", "--chat", "--ignore-eos", "--page-size", "--trust-remote-code"}) {
    EXPECT_NE(generate.out.find(flag), std::string::npos) << flag << "\n" << generate.out;
  }
  EXPECT_EQ(generate.out.find("--port"), std::string::npos) << generate.out;  // serve's, not generate's

  auto top = RunMlaserve("--help");
  EXPECT_EQ(top.exit_code, 0);
  EXPECT_NE(top.out.find("mlaserve COMMAND --help"), std::string::npos) << top.out;
}

// Flags that would be accepted and then ignored in a combination are refused in it.
TEST(Cli, FlagsWithNoEffectInACombinationAreRefused) {
  testing::TempDir dir;
  auto r = RunMlaserve("bench --model-path " + kModel + " --matmul-sweep --compare-model-path " + kModel);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--matmul-sweep"), std::string::npos) << r.err;
  r = RunMlaserve("batch --model-path " + kModel + " --tokenizer " + kModel + " --input " + ShellQuote(dir.path() + "/in") +
                  " --output " + ShellQuote(dir.path() + "/out.jsonl") + " --checkpoint-interval 0");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--tokenizer is for --endpoint runs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--checkpoint-interval"), std::string::npos) << r.err;
  r = RunMlaserve("batch --model-path " + kModel + " --request-timeout 5 --input " + ShellQuote(dir.path() + "/in") +
                  " --output " + ShellQuote(dir.path() + "/out.jsonl"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--request-timeout is for --endpoint runs"), std::string::npos) << r.err;
  r = RunMlaserve("kv-eval --model-path " + kModel + " --kv-cache-dtype fp8_e4m3 --max-total-tokens 100");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--kv-cache-dtype has no effect on kv-eval"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--max-total-tokens has no effect on kv-eval"), std::string::npos) << r.err;
}

TEST(Cli, UnknownAndRefusedFlagsAreAllReportedAtOnce) {
  // The report: each alone got the HiCache message, together only the first was named.
  auto r = RunMlaserve("serve --enable-hierarchical-cache --hicache-size 48 --model-path " + kModel);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--enable-hierarchical-cache is not supported"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--hicache-size is not supported"), std::string::npos) << r.err;
  EXPECT_EQ(Lines(r.err), 2) << r.err;

  r = RunMlaserve("serve --model-path " + kModel +
                  " --no-such-flag 1 --hicache-ratio 0.5 --also-unknown --speculative-algorithm EAGLE --page-size 0");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  for (const char* expected : {"unknown flag --no-such-flag", "unknown flag --also-unknown",
                               "--hicache-ratio is not supported",
                               "--speculative-algorithm EAGLE (EAGLE-1/2 drafts) is not implemented",
                               "--page-size must be in [1, 4096], got 0"}) {
    EXPECT_NE(r.err.find(expected), std::string::npos) << expected << " -> " << r.err;
  }
  EXPECT_EQ(Lines(r.err), 5) << r.err;

  r = RunMlaserve("generate --model-path " + kModel + " --bogus --top-p 2 --temperature=-1");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  for (const char* expected : {"unknown flag --bogus", "--top-p must be in (0, 1], got 2",
                               "--temperature must be >= 0, got -1", "--prompt is required"}) {
    EXPECT_NE(r.err.find(expected), std::string::npos) << expected << " -> " << r.err;
  }
  EXPECT_EQ(Lines(r.err), 4) << r.err;
}

TEST(Cli, ValuesOutsideAFlagsRangeAreRefused) {
  const std::string generate = "generate --model-path " + kModel + " --prompt hi ";
  const std::string serve = "serve --model-path " + kModel + " ";
  ExpectOneLineFailures({
      {generate + "--context-length 0", "--context-length must be >= 1, got 0"},
      {generate + "--context-length -5", "--context-length must be >= 1, got -5"},
      {generate + "--page-size 0", "--page-size must be in [1, 4096], got 0"},
      {generate + "--page-size -16", "--page-size must be in [1, 4096], got -16"},
      {generate + "--threads -1", "--threads must be >= 0, got -1"},
      {generate + "--mem-fraction-static 0", "--mem-fraction-static must be in (0, 1], got 0"},
      {serve + "--context-length 0", "--context-length must be >= 1, got 0"},
      {serve + "--port 70000", "--port must be in [0, 65535], got 70000"},
      {serve + "--max-running-requests 0", "--max-running-requests must be in [1, 1048576], got 0"},
      {serve + "--schedule-policy lifo", "--schedule-policy must be one of fcfs, lpm; got 'lifo'"},
      {"plan --model-path " + kModel + " --avg-seq-len 0", "--avg-seq-len must be >= 1, got 0"},
      {"bench-serving --num-prompts 0", "--num-prompts must be >= 1, got 0"},
  }, /*exit_code=*/2);
  // A given context length is used; absent, the model's default holds.
  auto r = RunMlaserve(generate + "--context-length 16 --max-new-tokens 40");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("exceeds the context length 16"), std::string::npos) << r.err;
  r = RunMlaserve(generate + "--max-new-tokens 40");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(Cli, ParallelismFlagsAcceptOnlyOne) {
  // --dp is SGLang's alias of --dp-size, as --tp is of --tp-size. A bad model path makes a run
  // whose flags pass fail later, at loading, with exit 1.
  const std::string serve = "serve --model-path /nonexistent/model ";
  for (const char* flag : {"--dp 2", "--dp-size 2"}) {
    auto r = RunMlaserve(serve + flag);
    EXPECT_EQ(r.exit_code, 2) << flag << " -> " << r.err;
    EXPECT_NE(r.err.find(std::string(flag) + " is not supported by mlaserve yet"), std::string::npos)
        << flag << " -> " << r.err;
  }
  // Tensor parallelism runs as an mpirun job (tests/dist); started directly, it says how: a
  // flag refusal like the others (exit 2, one line naming the flag as given), before any load.
  for (const std::string flag : {"--tp 4", "--tp-size 8"}) {
    auto r = RunMlaserve(serve + flag);
    EXPECT_EQ(r.exit_code, 2) << flag << " -> " << r.err;
    EXPECT_NE(r.err.find(flag + " runs as an MPI job: start it as `mpirun -np"), std::string::npos) << flag << " -> " << r.err;
    EXPECT_EQ(Lines(r.err), 1) << flag << " -> " << r.err;
  }
  // Reported with the other flag problems, all at once.
  const auto all = RunMlaserve("serve --tp 8 --kernels sse9 --page-size 0");
  EXPECT_EQ(all.exit_code, 2) << all.err;
  for (const char* expected : {"--tp 8 runs as an MPI job", "--kernels: unknown kernels 'sse9'",
                               "--page-size must be in [1, 4096], got 0", "--model-path is required"}) {
    EXPECT_NE(all.err.find(expected), std::string::npos) << expected << " -> " << all.err;
  }
  EXPECT_EQ(Lines(all.err), 4) << all.err;
  EXPECT_NE(RunMlaserve(serve + "--tp 2 --tp-size 4").err.find("--tp 2 and --tp-size 4 disagree"), std::string::npos);
  auto r = RunMlaserve(serve + "--dp 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--dp must be >= 1, got 0"), std::string::npos) << r.err;
  r = RunMlaserve(serve + "--dp 1 --dp-size 1 --tp 1 --tp-size 1");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/model"), std::string::npos) << r.err;
}

TEST(Cli, MaxBatchTokensBelowOneEngineStepIsRefused) {
  // serve, batch and bench-offline size each forward call for one engine step (a prefill chunk
  // plus a decode token per running request); a smaller --max-batch-tokens is refused, not
  // silently overridden.
  auto r = RunMlaserve("serve --model-path /nonexistent/model --max-batch-tokens 512");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--max-batch-tokens 512 is less than one engine step may forward"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("= 2304"), std::string::npos) << r.err;
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  r = RunMlaserve("serve --model-path /nonexistent/model --max-batch-tokens 512 --chunked-prefill-size 256 "
                  "--max-running-requests 256");
  EXPECT_EQ(r.exit_code, 1) << r.err;  // 512 = 256 + 256: the flags pass
  r = RunMlaserve("bench-offline --model-path /nonexistent/model --max-batch-tokens 100");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--max-batch-tokens 100 is less than"), std::string::npos) << r.err;
}

TEST(Cli, TrustRemoteCodeIsAcceptedAndLoggedAsNoEffect) {
  // A typical SGLang DeepSeek launch, with the no-op values of its parallelism flags.
  testing::ServerProcess server({"--trust-remote-code", "--tp", "1", "--dp", "1", "--max-batch-tokens", "3000"});
  ASSERT_TRUE(server.running()) << server.log();
  const std::string log = server.log();
  EXPECT_NE(log.find("[mlaserve] --trust-remote-code has no effect"), std::string::npos) << log;
  EXPECT_NE(log.find("context_len=2048"), std::string::npos) << log;  // the model's default
  auto info = HttpClient().Request("GET", server.Url("/get_server_info"), "", {}, 10000);
  ASSERT_TRUE(info.ok()) << info.error();
  EXPECT_EQ(nlohmann::json::parse(info->body)["max_batch_tokens"], 3000) << info->body;  // honoured

  auto r = RunMlaserve("generate --model-path " + kModel + " --prompt ROMEO: --max-new-tokens 2 --trust-remote-code");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("--trust-remote-code has no effect"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace mlaserve

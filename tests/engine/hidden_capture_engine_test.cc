// The engine delivers a capturing request's hidden states (GenerateRequest::capture_hidden_states):
// every position of the final sequence but the last, each row equal to what one forward pass over
// the whole sequence captures; prefill chunks that sample nothing deliver their rows with no new
// tokens; under speculative decoding only accepted positions are delivered; a retracted request
// delivers positions again, with the same values; capture with the radix cache on is refused.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "engine/cpu_model_runner.h"
#include "engine/drafter.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/sequence_runner.h"
#include "support/greedy_request.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve {
namespace {

constexpr auto Prompt = testing::RandomPrompt;

const std::string kModel = std::string(MLASERVE_SOURCE_DIR) + "/models/shakespeare-mla";

// What one request was delivered.
struct Captured {
  std::vector<TokenId> output;
  std::map<int, std::vector<float>> rows;  // position -> its last delivered row
  std::map<int, int> deliveries;           // position -> times delivered
  std::vector<int> first_positions;        // of each chunk with rows, in delivery order
  int chunks_with_rows_only = 0;           // rows but no new token
  int width = 0;
};

class HiddenCaptureEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto config = LoadModelConfig(kModel);
    ASSERT_TRUE(config.ok());
    layers_ = {1, 2, config->num_hidden_layers};
    auto m = Model::Load(kModel, ModelOptions{.max_batch_tokens = 256, .max_context = 512, .deterministic = true,
                                              .capture_layers = layers_});
    ASSERT_TRUE(m.ok()) << m.error();
    model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() { delete model_; }

  // Runs the requests on one engine (stepped here) until all finish.
  static std::map<std::string, Captured> Run(const std::vector<GenerateRequest>& requests, int64_t pool_tokens,
                                             int num_draft_tokens, EngineStatsSnapshot* stats = nullptr,
                                             double schedule_conservativeness = 1.0) {
    const ModelConfig& c = model_->config();
    auto storage = HostKvStorage::Create({.format = KvFormat::kBF16, .num_layers = c.num_hidden_layers,
                                          .latent_dim = c.kv_lora_rank, .rope_dim = c.qk_rope_head_dim,
                                          .page_size = 16, .num_pages = pool_tokens / 16});
    auto allocator = PageAllocator::Create(16, pool_tokens / 16);
    EXPECT_TRUE(storage.ok() && allocator.ok());
    NgramDrafter ngram;
    EngineOptions o;
    o.log_batches = false;
    o.disable_radix_cache = true;
    o.chunked_prefill_size = 8;
    o.schedule_conservativeness = schedule_conservativeness;
    o.drafter = num_draft_tokens > 0 ? &ngram : nullptr;
    o.num_draft_tokens = num_draft_tokens;
    CpuModelRunner runner(*model_, DefaultKernels(), **storage);
    Engine engine(runner, **allocator, o);
    std::map<std::string, Captured> out;
    for (const GenerateRequest& r : requests) {
      EXPECT_TRUE(engine.Submit(r, [&out](const OutputView& v) {
                    Captured& got = out[std::string(v.rid)];
                    got.output.insert(got.output.end(), v.new_token_ids.begin(), v.new_token_ids.end());
                    if (v.captured_rows.empty()) return;
                    got.width = v.captured_width;
                    got.first_positions.push_back(v.captured_first_position);
                    if (v.new_token_ids.empty() && !v.finished) ++got.chunks_with_rows_only;
                    const size_t w = size_t(v.captured_width);
                    for (size_t k = 0; k * w < v.captured_rows.size(); ++k) {
                      const int p = v.captured_first_position + int(k);
                      got.rows[p].assign(v.captured_rows.begin() + std::ptrdiff_t(k * w),
                                         v.captured_rows.begin() + std::ptrdiff_t((k + 1) * w));
                      ++got.deliveries[p];
                    }
                  }).ok());
    }
    int steps = 0;
    while (engine.Step()) EXPECT_LT(++steps, 100000);
    if (stats != nullptr) *stats = engine.stats();
    return out;
  }

  // The captured rows of one forward pass over `tokens`: [tokens, width].
  static std::vector<float> Reference(std::span<const TokenId> tokens) {
    auto runner = SequenceRunner::Create(*model_, DefaultKernels(), {.kv_format = KvFormat::kBF16});
    EXPECT_TRUE(runner.ok());
    EXPECT_TRUE((*runner)->Append(tokens).ok());
    const std::span<const float> rows = model_->captured_rows(int(tokens.size()));
    return {rows.begin(), rows.end()};
  }

  // Every position of prompt + output but the last, delivered (`once`: exactly once, in order),
  // equal to the one-pass reference.
  static void ExpectComplete(const GenerateRequest& r, const Captured& c, bool once) {
    std::vector<TokenId> sequence = r.input_ids;
    sequence.insert(sequence.end(), c.output.begin(), c.output.end());
    const int n = int(sequence.size());
    ASSERT_EQ(c.width, model_->captured_width());
    ASSERT_EQ(int(c.rows.size()), n - 1) << r.rid;
    EXPECT_EQ(c.rows.begin()->first, 0);
    EXPECT_EQ(c.rows.rbegin()->first, n - 2) << r.rid << ": the last token is never run";
    if (once) {
      for (const auto& [p, times] : c.deliveries) EXPECT_EQ(times, 1) << r.rid << " position " << p;
      EXPECT_TRUE(std::is_sorted(c.first_positions.begin(), c.first_positions.end())) << r.rid;
    }
    const std::vector<float> want = Reference(std::span(sequence).first(size_t(n - 1)));
    const size_t w = size_t(c.width);
    for (int p = 0; p < n - 1; ++p) {
      const std::vector<float>& got = c.rows.at(p);
      // Deterministic inference: the same bits however the position was batched or chunked.
      ASSERT_TRUE(std::equal(got.begin(), got.end(), want.begin() + std::ptrdiff_t(size_t(p) * w)))
          << r.rid << " position " << p;
    }
  }

  static GenerateRequest Capturing(GenerateRequest r) {
    r.capture_hidden_states = true;
    return r;
  }

  static Model* model_;
  static std::vector<int> layers_;
};
Model* HiddenCaptureEngineTest::model_ = nullptr;
std::vector<int> HiddenCaptureEngineTest::layers_;

TEST_F(HiddenCaptureEngineTest, EveryPositionButTheLastOnceWithTheOnePassValues) {
  auto tokenizer = Tokenizer::FromDirectory(kModel);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error();
  auto romeo = tokenizer->Encode("ROMEO:\n", /*add_bos=*/true);
  ASSERT_TRUE(romeo.ok());
  const std::vector<GenerateRequest> requests{
      Capturing(testing::Greedy("long-prompt", Prompt(30, 3), 12)),  // 4 prefill chunks of <= 8
      Capturing(testing::Greedy("romeo", *romeo, 60)),
      testing::Greedy("not-capturing", Prompt(20, 4), 10),
  };
  for (const int drafts : {0, 4}) {
    SCOPED_TRACE(drafts > 0 ? "speculative, 4 drafts" : "plain decoding");
    EngineStatsSnapshot stats;
    const std::map<std::string, Captured> got = Run(requests, 4096, drafts, &stats);
    ExpectComplete(requests[0], got.at("long-prompt"), /*once=*/true);
    ExpectComplete(requests[1], got.at("romeo"), /*once=*/true);
    EXPECT_TRUE(got.at("not-capturing").rows.empty());
    // The prompt's first three chunks sample nothing: their rows come without tokens.
    EXPECT_EQ(got.at("long-prompt").chunks_with_rows_only, 3);
    if (drafts > 0) {
      // Drafts were rejected too (and their rows never delivered: once per position above).
      EXPECT_GT(stats.spec_accepted_tokens_total, 0);
      EXPECT_LT(stats.spec_accepted_tokens_total, stats.spec_draft_tokens_total);
    }
  }
}

TEST_F(HiddenCaptureEngineTest, RetractedRequestsDeliverPositionsAgainWithTheSameValues) {
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 16; ++i) {
    requests.push_back(Capturing(testing::Greedy("r" + std::to_string(i), Prompt(24, 10 + i), 60)));
  }
  // 16 x 84 tokens in a pool of 512, over-admitted (low conservativeness): decode must retract.
  EngineStatsSnapshot stats;
  const std::map<std::string, Captured> got = Run(requests, 512, 0, &stats, 0.2);
  ASSERT_GT(stats.num_retracted_requests_total, 0);
  int redelivered = 0;
  for (const GenerateRequest& r : requests) {
    ExpectComplete(r, got.at(r.rid), /*once=*/false);
    for (const auto& [p, times] : got.at(r.rid).deliveries) redelivered += times > 1;
  }
  EXPECT_GT(redelivered, 0);
}

TEST_F(HiddenCaptureEngineTest, RefusedWithTheRadixCacheOnOrWithoutCaptureLayers) {
  const ModelConfig& c = model_->config();
  auto storage = HostKvStorage::Create({.format = KvFormat::kBF16, .num_layers = c.num_hidden_layers,
                                        .latent_dim = c.kv_lora_rank, .rope_dim = c.qk_rope_head_dim,
                                        .page_size = 16, .num_pages = 16});
  auto allocator = PageAllocator::Create(16, 16);
  ASSERT_TRUE(storage.ok() && allocator.ok());
  CpuModelRunner runner(*model_, DefaultKernels(), **storage);
  EngineOptions o;
  o.log_batches = false;  // radix cache on (the default)
  Engine engine(runner, **allocator, o);
  const Status cached = engine.Submit(Capturing(testing::Greedy("a", Prompt(8, 1), 4)), nullptr);
  ASSERT_FALSE(cached.ok());
  EXPECT_NE(cached.message().find("radix cache off"), std::string::npos) << cached.message();

  auto plain = Model::Load(kModel, ModelOptions{.max_batch_tokens = 64, .max_context = 256});
  ASSERT_TRUE(plain.ok());
  CpuModelRunner plain_runner(**plain, DefaultKernels(), **storage);
  EXPECT_EQ(plain_runner.info().captured_width, 0);
  o.disable_radix_cache = true;
  Engine plain_engine(plain_runner, **allocator, o);
  const Status none = plain_engine.Submit(Capturing(testing::Greedy("b", Prompt(8, 1), 4)), nullptr);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.message().find("without capture layers"), std::string::npos) << none.message();
}

}  // namespace
}  // namespace mlaserve

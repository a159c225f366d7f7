// Hidden-state capture (ModelOptions::capture_layers) on the bundled model: layer 0's rows are
// the embeddings, layer L's are what the final norm normalises (all_hidden_rows), capture leaves
// the logits bit-identical, a chunked prompt captures what one call does, and bad layer lists
// are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/sampler.h"
#include "support/greedy_request.h"
#include "engine/sequence_runner.h"
#include "model/model.h"

namespace mlaserve {
namespace {

constexpr auto Prompt = testing::RandomPrompt;

const std::string kModel = std::string(MLASERVE_SOURCE_DIR) + "/models/shakespeare-mla";

std::unique_ptr<Model> Load(std::vector<int> layers) {
  auto model = Model::Load(
      kModel, ModelOptions{.max_batch_tokens = 64, .max_context = 256, .deterministic = true,
                           .capture_layers = std::move(layers)});
  EXPECT_TRUE(model.ok()) << model.error();
  return model.ok() ? std::move(model).value() : nullptr;
}

TEST(HiddenCapture, RowsAreTheResidualStreamEnteringEachLayer) {
  auto config = LoadModelConfig(kModel);
  ASSERT_TRUE(config.ok());
  const int L = config->num_hidden_layers;
  const int64_t H = config->hidden_size;
  std::unique_ptr<Model> model = Load({0, 1, L});
  std::unique_ptr<Model> plain = Load({});
  ASSERT_TRUE(model && plain);
  EXPECT_EQ(model->captured_width(), 3 * H);
  EXPECT_EQ(plain->captured_width(), 0);
  EXPECT_TRUE(plain->captured_rows(20).empty());

  const std::vector<TokenId> tokens = Prompt(20, 7);
  auto runner = SequenceRunner::Create(*model, DefaultKernels(), {});
  ASSERT_TRUE(runner.ok());
  ASSERT_TRUE((*runner)->Append(tokens).ok());
  const std::span<const float> rows = model->captured_rows(20);
  ASSERT_EQ(rows.size(), size_t(20 * 3 * H));
  const std::vector<float> captured(rows.begin(), rows.end());
  const std::span<const float> normed = model->all_hidden_rows(20);

  std::vector<float> embed(static_cast<size_t>(H));
  for (int t = 0; t < 20; ++t) {
    // Slot 0, layer 0: the token's embedding, exactly.
    std::fill(embed.begin(), embed.end(), 0.0f);
    DefaultKernels().axpy_row(1.0f, model->weights().embed, tokens[size_t(t)], embed.data());
    const float* layer0 = captured.data() + size_t(t * 3 * H);
    for (int64_t i = 0; i < H; ++i) ASSERT_EQ(layer0[i], embed[size_t(i)]) << "token " << t;
    // Slot 2, layer L: rms_norm of it with the final norm is the final-normed row.
    const float* last = captured.data() + size_t((t * 3 + 2) * H);
    double sum_sq = 0;
    for (int64_t i = 0; i < H; ++i) sum_sq += double(last[i]) * last[i];
    const double inv = 1.0 / std::sqrt(sum_sq / double(H) + config->rms_norm_eps);
    for (int64_t i = 0; i < H; ++i) {
      const double want = double(last[i]) * inv * model->weights().final_norm[size_t(i)];
      ASSERT_NEAR(normed[size_t(t * H + i)], want, 1e-4 * (1 + std::fabs(want))) << "token " << t << " dim " << i;
    }
    // Slot 1 (layer 1) differs from the embedding: the first layer ran.
    const float* layer1 = captured.data() + size_t((t * 3 + 1) * H);
    EXPECT_FALSE(std::equal(layer1, layer1 + H, layer0));
  }

  // Capturing changes nothing the model computes.
  auto plain_runner = SequenceRunner::Create(*plain, DefaultKernels(), {});
  ASSERT_TRUE(plain_runner.ok());
  ASSERT_TRUE((*plain_runner)->Append(tokens).ok());
  EXPECT_TRUE(std::equal((*runner)->last_logits().begin(), (*runner)->last_logits().end(),
                         (*plain_runner)->last_logits().begin()));

  // Chunked (7 then 13 tokens): the second call captures rows 7.. of the one-call capture,
  // bit for bit (deterministic inference is chunk-invariant).
  (*runner)->Reset();
  ASSERT_TRUE((*runner)->Append(std::span(tokens).first(7)).ok());
  ASSERT_TRUE((*runner)->Append(std::span(tokens).subspan(7)).ok());
  const std::span<const float> tail = model->captured_rows(13);
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), captured.begin() + 7 * 3 * H));
}

TEST(HiddenCapture, LayerListsOutOfRangeOrNotIncreasingAreRefused) {
  auto config = LoadModelConfig(kModel);
  ASSERT_TRUE(config.ok());
  const int L = config->num_hidden_layers;
  for (const std::vector<int>& bad : {std::vector<int>{2, 2}, {3, 1}, {0, L + 1}, {-1}}) {
    auto model = Model::Load(kModel, ModelOptions{.max_batch_tokens = 16, .capture_layers = bad});
    ASSERT_FALSE(model.ok());
    EXPECT_NE(model.error().find("strictly increasing in [0, " + std::to_string(L) + "]"), std::string::npos)
        << model.error();
  }
}

}  // namespace
}  // namespace mlaserve

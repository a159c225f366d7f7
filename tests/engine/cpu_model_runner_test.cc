// The default ModelRunner on the bundled model: a plan of several sequences gives each the
// logits it gets alone, prompt-logprob sequences get a row per token, and the hidden states
// asked for are the rows lm_head multiplied.
#include "engine/cpu_model_runner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "engine/sampler.h"
#include "support/greedy_request.h"
#include "engine/sequence_runner.h"

namespace mlaserve {
namespace {

constexpr auto Prompt = testing::RandomPrompt;

const std::string kModel = std::string(MLASERVE_SOURCE_DIR) + "/models/shakespeare-mla";

// The bytes of num_pages pages in the model's KV shape.
std::unique_ptr<HostKvStorage> StorageFor(const ModelConfig& c, KvFormat format, int page_size, int64_t num_pages) {
  auto storage = HostKvStorage::Create({.format = format, .num_layers = c.num_hidden_layers,
                                        .latent_dim = c.kv_lora_rank, .rope_dim = c.qk_rope_head_dim,
                                        .page_size = page_size, .num_pages = num_pages});
  EXPECT_TRUE(storage.ok()) << storage.error();
  return std::move(storage).value();
}

TEST(CpuModelRunner, ExecutesAPlanAsEachSequenceRunsAlone) {
  auto model = Model::Load(kModel, ModelOptions{.max_batch_tokens = 128, .max_context = 256, .deterministic = true});
  ASSERT_TRUE(model.ok()) << model.error();
  const ModelConfig& c = (*model)->config();
  // The runner holds the bytes; the test, standing in for the scheduler, the page ids.
  std::unique_ptr<HostKvStorage> storage = StorageFor(c, KvFormat::kBF16, 16, 32);
  auto pages = PageAllocator::Create(16, 32);
  ASSERT_TRUE(pages.ok()) << pages.error();
  CpuModelRunner runner(**model, DefaultKernels(), *storage);
  EXPECT_EQ(runner.info().vocab_size, c.vocab_size);
  EXPECT_EQ(runner.info().max_batch_tokens, 128);
  EXPECT_EQ(runner.info().max_context, 256);
  runner.ReserveLogitsRows(16);

  const std::vector<TokenId> a = Prompt(20, 1), b = Prompt(9, 2);
  SequenceKv kv_a(**pages, 256), kv_b(**pages, 256);
  ASSERT_TRUE(kv_a.Reserve(int(a.size())).ok());
  ASSERT_TRUE(kv_b.Reserve(int(b.size())).ok());
  BatchPlan plan;
  plan.Add(kv_a.pages(), 0, a, /*all_logits=*/false);
  plan.Add(kv_b.pages(), 0, b, /*all_logits=*/true);
  plan.return_hidden_states = true;
  ASSERT_EQ(plan.num_logits_rows, 1 + 9);
  auto out = runner.Execute(plan);
  ASSERT_TRUE(out.ok()) << out.error();
  const size_t vocab = size_t(c.vocab_size);
  ASSERT_EQ(out->logits.size(), 10 * vocab);
  ASSERT_EQ(out->hidden_states.size(), (20 + 9) * size_t(c.hidden_size));  // every token's

  auto solo = [&](const std::vector<TokenId>& prompt) {
    auto r = SequenceRunner::Create(**model, DefaultKernels(), {.kv_format = KvFormat::kBF16});
    EXPECT_TRUE(r.ok());
    EXPECT_TRUE((*r)->Append(prompt).ok());
    return std::vector<float>((*r)->last_logits().begin(), (*r)->last_logits().end());
  };
  // Bitwise: the forward pass is batch-invariant.
  const std::vector<float> solo_a = solo(a), solo_b = solo(b);
  EXPECT_TRUE(std::equal(solo_a.begin(), solo_a.end(), out->logits.begin()));
  EXPECT_TRUE(std::equal(solo_b.begin(), solo_b.end(), out->logits.begin() + int64_t(9 * vocab)));
  for (float h : out->hidden_states) ASSERT_TRUE(std::isfinite(h));

  // A plan past the reserved rows is an error.
  BatchPlan big;
  big.Add(kv_a.pages(), 0, a, /*all_logits=*/true);
  EXPECT_FALSE(runner.Execute(big).ok());
}

bool RowIsZero(const KvHostRows& rows, int layer, PageId page, int row) {
  const std::byte* bytes = rows.PageRows(layer, page) + size_t(row) * rows.row_bytes();
  for (size_t i = 0; i < rows.row_bytes(); ++i) {
    if (bytes[i] != std::byte{0}) return false;
  }
  return true;
}

TEST(CpuModelRunner, WritesRowsIntoItsStorageAtThePlansPageIds) {
  // The runner never sees the allocator: it writes exactly the rows the plan's page ids name in
  // the storage it was given, in every layer, and nothing else; a page id outside the storage
  // is an error that writes nothing.
  auto model = Model::Load(kModel, ModelOptions{.max_batch_tokens = 64, .max_context = 64});
  ASSERT_TRUE(model.ok()) << model.error();
  const ModelConfig& c = (*model)->config();
  std::unique_ptr<HostKvStorage> storage = StorageFor(c, KvFormat::kFP8DsMla, 4, 8);
  CpuModelRunner runner(**model, DefaultKernels(), *storage);
  runner.ReserveLogitsRows(4);
  const KvHostRows rows = storage->HostRows();

  const std::vector<PageId> page_table = {6, 2};  // 7 tokens: rows 0-3 of page 6, 0-2 of page 2
  BatchPlan plan;
  plan.Add(page_table, 0, Prompt(7, 3), /*all_logits=*/false);
  ASSERT_TRUE(runner.Execute(plan).ok());
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    for (PageId page = 0; page < 8; ++page) {
      for (int r = 0; r < 4; ++r) {
        const bool written = (page == 6) || (page == 2 && r < 3);
        EXPECT_EQ(RowIsZero(rows, l, page, r), !written) << "layer " << l << " page " << page << " row " << r;
      }
    }
  }

  const std::vector<PageId> outside = {7, 8};  // page 8 does not exist
  BatchPlan bad;
  bad.Add(outside, 0, Prompt(6, 4), /*all_logits=*/false);
  auto out = runner.Execute(bad);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().find("outside the storage"), std::string::npos) << out.error();
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(RowIsZero(rows, 0, 7, r));  // validated before writing
}

}  // namespace
}  // namespace mlaserve

// The forward pass's parallel paths against its serial ones, bitwise: one Forward of 540 tokens
// (per-token work split over the pool, the MoE in blocks of 200 tokens, one MLP region
// with many tokens per expert) must give every token the logits that 25-token chunks give
// (per-token work on the calling thread, a few tokens per expert), with every kernel table.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/sequence_runner.h"
#include "model/model.h"
#include "support/kernel_tables.h"

namespace mlaserve {
namespace {

const std::string kModel = std::string(MLASERVE_SOURCE_DIR) + "/models/shakespeare-mla";

std::vector<float> AllLogits(Model& model, const KernelSet& kernels, const std::vector<TokenId>& ids) {
  const int vocab = model.config().vocab_size;
  std::vector<float> logits(ids.size() * size_t(vocab));
  auto created = SequenceRunner::Create(model, kernels, {.kv_format = KvFormat::kF32});
  EXPECT_TRUE(created.ok()) << created.error();
  if (!created.ok()) return logits;
  auto sink = [&](int first, int count, const float* rows) {
    std::copy(rows, rows + size_t(count) * size_t(vocab), logits.begin() + ptrdiff_t(first) * vocab);
  };
  SequenceRunner::LogitsSink sink_ref(sink);
  EXPECT_TRUE((*created)->Append(ids, &sink_ref).ok());
  return logits;
}

TEST(ForwardParallelPaths, ANegativeMoeBlockIsRefusedAtLoad) {
  auto model = Model::Load(kModel, ModelOptions{.max_batch_tokens = 32, .max_context = 256, .num_threads = 1,
                                                .moe_block_tokens = -1});
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.error().find("moe_block_tokens"), std::string::npos) << model.error();
}

TEST(ForwardParallelPaths, OneLongForwardEqualsSmallChunksBitwise) {
  constexpr int kTokens = 540;
  // Deterministic mode: otherwise the 540-token forward runs attention in the MHA form.
  auto whole = Model::Load(kModel, ModelOptions{.max_batch_tokens = kTokens, .max_context = 1024, .num_threads = 2,
                                                .deterministic = true, .moe_block_tokens = 200});
  auto chunked = Model::Load(kModel, ModelOptions{.max_batch_tokens = 25, .max_context = 1024, .num_threads = 2,
                                                  .deterministic = true});
  ASSERT_TRUE(whole.ok()) << whole.error();
  ASSERT_TRUE(chunked.ok()) << chunked.error();
  ASSERT_GT((*whole)->config().n_routed_experts, 0);
  ASSERT_GE(kTokens, (*whole)->parallel_tokens());
  ASSERT_LT(25, (*whole)->parallel_tokens());
  std::mt19937 rng(11);
  std::uniform_int_distribution<TokenId> id(0, (*whole)->config().vocab_size - 1);
  std::vector<TokenId> ids(kTokens);
  for (TokenId& t : ids) t = id(rng);
  for (const KernelSet* kernels : testing::RunnableKernelTables()) {
    SCOPED_TRACE(kernels->name);
    const std::vector<float> a = AllLogits(**whole, *kernels, ids);
    const std::vector<float> b = AllLogits(**chunked, *kernels, ids);
    ASSERT_EQ(a.size(), b.size());
    size_t differing = 0;
    for (size_t i = 0; i < a.size(); ++i) differing += a[i] != b[i];
    EXPECT_EQ(differing, 0u);
  }
}

}  // namespace
}  // namespace mlaserve

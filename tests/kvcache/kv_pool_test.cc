#include "kvcache/kv_pool.h"

#include <gtest/gtest.h>

#include <set>

#include "kvcache/sequence_kv.h"

namespace mlaserve {
namespace {

std::unique_ptr<KvPool> MakePool(KvFormat format, int64_t pages, int page_size = 4) {
  auto pool = KvPool::Create({.format = format, .num_layers = 3, .latent_dim = 64, .rope_dim = 16,
                              .page_size = page_size, .num_pages = pages});
  EXPECT_TRUE(pool.ok()) << pool.error();
  return std::move(pool).value();
}

TEST(KvPool, SizesComeFromTheFormat) {
  auto pool = MakePool(KvFormat::kFP8DsMla, 10);
  EXPECT_EQ(pool->row_bytes(), KvRowBytes(KvFormat::kFP8DsMla, 64, 16));
  EXPECT_EQ(pool->bytes_per_token(), 3 * pool->row_bytes());
  EXPECT_EQ(pool->capacity_tokens(), 40);
  EXPECT_EQ(pool->total_bytes(), 40 * pool->bytes_per_token());
  // Pages of different layers never overlap.
  std::set<const std::byte*> starts;
  for (int l = 0; l < 3; ++l)
    for (PageId p = 0; p < 10; ++p) starts.insert(pool->PageRows(l, p));
  EXPECT_EQ(starts.size(), 30u);
}

TEST(KvPool, SequencesReserveAndReleasePages) {
  auto pool = MakePool(KvFormat::kBF16, 5);
  {
    SequenceKv a(*pool, 100), b(*pool, 100);
    ASSERT_TRUE(a.Reserve(9).ok());  // 3 pages
    EXPECT_EQ(a.reserved_tokens(), 12);
    EXPECT_EQ(pool->num_free_pages(), 2);
    Status full = b.Reserve(9);
    EXPECT_FALSE(full.ok());
    EXPECT_NE(full.message().find("pool is full"), std::string::npos) << full.message();
    EXPECT_EQ(b.reserved_tokens(), 0);  // nothing taken on failure
    EXPECT_EQ(pool->num_free_pages(), 2);
    ASSERT_TRUE(b.Reserve(8).ok());
    EXPECT_EQ(pool->num_free_pages(), 0);
    // Rows of different positions are distinct and within their page.
    a.MarkComputed(9);
    EXPECT_NE(a.Row(0, 3), a.Row(0, 4));
    EXPECT_EQ(a.Row(1, 5) - a.Row(1, 4), ptrdiff_t(pool->row_bytes()));
    a.Release();
    EXPECT_EQ(pool->num_free_pages(), 3);
    EXPECT_EQ(a.num_tokens(), 0);
  }
  EXPECT_EQ(pool->num_free_pages(), 5);  // destructors give pages back
}

TEST(KvPool, ContextLimitAndBadOptions) {
  auto pool = MakePool(KvFormat::kBF16, 100);
  SequenceKv s(*pool, 10);
  Status s1 = s.Reserve(11);
  EXPECT_NE(s1.message().find("exceeds the context length 10"), std::string::npos) << s1.message();
  EXPECT_FALSE(KvPool::Create({.format = KvFormat::kBF16, .num_layers = 3, .latent_dim = 64,
                               .rope_dim = 16, .page_size = 0, .num_pages = 4}).ok());
  auto none = KvPool::Create({.format = KvFormat::kBF16, .num_layers = 3, .latent_dim = 64,
                              .rope_dim = 16, .page_size = 16, .num_pages = 0});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().find("holds no page"), std::string::npos) << none.error();
  EXPECT_FALSE(pool->SetTensorScales({1.0f, 2.0f}).ok());  // 3 layers
  EXPECT_FALSE(pool->SetTensorScales({1.0f, -2.0f, 1.0f}).ok());
  EXPECT_TRUE(pool->SetTensorScales({1.0f, 2.0f, 0.5f}).ok());
  EXPECT_EQ(pool->tensor_scale(1), 2.0f);
}

}  // namespace
}  // namespace mlaserve

// A sequence's page table on a page allocator: bookkeeping only, no storage anywhere.
#include "kvcache/sequence_kv.h"

#include <gtest/gtest.h>

#include <set>

namespace mlaserve {
namespace {

std::unique_ptr<PageAllocator> MakeAllocator(int64_t pages, int page_size = 4) {
  auto allocator = PageAllocator::Create(page_size, pages);
  EXPECT_TRUE(allocator.ok()) << allocator.error();
  return std::move(allocator).value();
}

TEST(SequenceKv, SequencesReserveAndReleasePages) {
  auto allocator = MakeAllocator(5);
  {
    SequenceKv a(*allocator, 100), b(*allocator, 100);
    ASSERT_TRUE(a.Reserve(9).ok());  // 3 pages
    EXPECT_EQ(a.reserved_tokens(), 12);
    EXPECT_EQ(allocator->num_free_pages(), 2);
    Status full = b.Reserve(9);
    EXPECT_FALSE(full.ok());
    EXPECT_NE(full.message().find("pool is full"), std::string::npos) << full.message();
    EXPECT_EQ(b.reserved_tokens(), 0);  // nothing taken on failure
    EXPECT_EQ(allocator->num_free_pages(), 2);
    ASSERT_TRUE(b.Reserve(8).ok());
    EXPECT_EQ(allocator->num_free_pages(), 0);
    // The two page tables never share a page.
    std::set<PageId> used(a.pages().begin(), a.pages().end());
    used.insert(b.pages().begin(), b.pages().end());
    EXPECT_EQ(used.size(), 5u);
    a.MarkComputed(9);
    EXPECT_EQ(a.num_tokens(), 9);
    a.Release();
    EXPECT_EQ(allocator->num_free_pages(), 3);
    EXPECT_EQ(a.num_tokens(), 0);
  }
  EXPECT_EQ(allocator->num_free_pages(), 5);  // destructors give pages back
}

TEST(SequenceKv, ContextLimit) {
  auto allocator = MakeAllocator(100);
  SequenceKv s(*allocator, 10);
  Status s1 = s.Reserve(11);
  EXPECT_NE(s1.message().find("exceeds the context length 10"), std::string::npos) << s1.message();
  EXPECT_EQ(allocator->num_free_pages(), 100);
}

}  // namespace
}  // namespace mlaserve

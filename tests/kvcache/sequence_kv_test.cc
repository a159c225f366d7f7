// A sequence's page table on a page allocator: bookkeeping only, no storage anywhere.
#include "kvcache/sequence_kv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

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

TEST(SequenceKv, TruncateDropsRowsAndReturnsWhollyDeadPages) {
  auto allocator = MakeAllocator(10);
  SequenceKv s(*allocator, 100);
  ASSERT_TRUE(s.Reserve(14).ok());  // 4 pages of 4
  s.MarkComputed(14);
  const std::vector<PageId> before(s.pages().begin(), s.pages().end());
  s.Truncate(9);  // positions [9, 14) were rejected drafts: page 3 is wholly past, page 2 is not
  EXPECT_EQ(s.num_tokens(), 9);
  EXPECT_EQ(s.reserved_tokens(), 12);
  EXPECT_EQ(allocator->num_free_pages(), 7);
  EXPECT_TRUE(std::equal(s.pages().begin(), s.pages().end(), before.begin()));
  s.Truncate(8);  // on a page boundary: the third page goes too
  EXPECT_EQ(s.reserved_tokens(), 8);
  EXPECT_EQ(allocator->num_free_pages(), 8);
  s.Truncate(8);  // nothing to drop
  EXPECT_EQ(allocator->num_free_pages(), 8);
  s.Release();
  EXPECT_EQ(allocator->num_free_pages(), 10);
}

TEST(SequenceKv, ReleasePagesPastKeepsTheRowsAndTheNextPositionsPage) {
  auto allocator = MakeAllocator(10);
  SequenceKv s(*allocator, 100);
  ASSERT_TRUE(s.Reserve(14).ok());  // 4 pages of 4: a look-ahead reservation
  s.MarkComputed(8);
  s.ReleasePagesPast(9);  // the decode token at position 8 keeps page 2; page 3 goes
  EXPECT_EQ(s.num_tokens(), 8);
  EXPECT_EQ(s.reserved_tokens(), 12);
  EXPECT_EQ(allocator->num_free_pages(), 7);
  s.ReleasePagesPast(8);  // only the rows: page 2 goes too
  EXPECT_EQ(s.reserved_tokens(), 8);
  EXPECT_EQ(allocator->num_free_pages(), 8);
  s.ReleasePagesPast(20);  // nothing past: nothing to free, nothing taken
  EXPECT_EQ(allocator->num_free_pages(), 8);
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

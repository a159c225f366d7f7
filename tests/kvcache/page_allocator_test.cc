// The page allocator alone: ids, no bytes.
#include "kvcache/page_allocator.h"

#include <gtest/gtest.h>

#include <set>

namespace mlaserve {
namespace {

TEST(PageAllocator, HandsOutEveryPageOnceThenNone) {
  auto created = PageAllocator::Create(/*page_size=*/4, /*num_pages=*/5);
  ASSERT_TRUE(created.ok()) << created.error();
  PageAllocator& pages = **created;
  EXPECT_EQ(pages.capacity_tokens(), 20);
  std::set<PageId> taken;
  for (int i = 0; i < 5; ++i) {
    std::optional<PageId> p = pages.Allocate();
    ASSERT_TRUE(p.has_value());
    EXPECT_GE(*p, 0);
    EXPECT_LT(*p, 5);
    taken.insert(*p);
    EXPECT_EQ(pages.num_free_pages(), 4 - i);
  }
  EXPECT_EQ(taken.size(), 5u);  // distinct
  EXPECT_FALSE(pages.Allocate().has_value());
  EXPECT_EQ(pages.num_free_pages(), 0);  // a failed Allocate changes nothing
  pages.Free(3);
  EXPECT_EQ(pages.num_free_pages(), 1);
  EXPECT_EQ(pages.Allocate(), std::optional<PageId>(3));  // the page given back is the one free
}

TEST(PageAllocator, FreshAllocatorHandsOutIdsInOrder) {
  // The engine's outputs do not depend on it, but the reference runs and logs are reproducible
  // only if the order is fixed.
  auto pages = PageAllocator::Create(16, 3);
  ASSERT_TRUE(pages.ok());
  EXPECT_EQ((*pages)->Allocate(), std::optional<PageId>(0));
  EXPECT_EQ((*pages)->Allocate(), std::optional<PageId>(1));
  EXPECT_EQ((*pages)->Allocate(), std::optional<PageId>(2));
}

TEST(PageAllocator, BadGeometryIsAnError) {
  EXPECT_FALSE(PageAllocator::Create(0, 4).ok());
  EXPECT_FALSE(PageAllocator::Create(4097, 4).ok());
  auto none = PageAllocator::Create(16, 0);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().find("holds no page"), std::string::npos) << none.error();
}

TEST(PageAllocatorDeathTest, FreeingAPageThatIsNotOursIsABug) {
  auto pages = PageAllocator::Create(4, 2);
  ASSERT_TRUE(pages.ok());
  EXPECT_DEATH((*pages)->Free(2), "check failed");// out of range
  EXPECT_DEATH((*pages)->Free(0), "check failed");// every page is free already
}

}  // namespace
}  // namespace mlaserve

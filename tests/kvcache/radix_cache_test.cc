#include "kvcache/radix_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "kvcache/sequence_kv.h"

namespace mlaserve {
namespace {

using Tokens = std::vector<TokenId>;

// Page ids (the allocator the cache returns pages to) and, standing in for KV rows, the token
// each position of each page was computed for: the cache never touches bytes, so the test keeps
// its own.
struct TestPool {
  std::unique_ptr<PageAllocator> allocator;
  std::vector<TokenId> stamped;  // [num_pages * page_size]

  PageAllocator& operator*() { return *allocator; }
  PageAllocator* operator->() { return allocator.get(); }
};

TestPool MakePool(int64_t num_pages, int page_size) {
  auto allocator = PageAllocator::Create(page_size, num_pages);
  EXPECT_TRUE(allocator.ok()) << allocator.error();
  return TestPool{.allocator = std::move(allocator).value(),
                  .stamped = std::vector<TokenId>(size_t(num_pages * page_size), -1)};
}

// "Computes" KV for page-aligned `tokens`: takes fresh pages and stamps each position with its
// token id, so a test can later see which tokens a page really holds.
std::vector<PageId> Compute(TestPool& pool, std::span<const TokenId> tokens) {
  const size_t page_size = size_t(pool->page_size());
  EXPECT_EQ(tokens.size() % page_size, 0u);
  std::vector<PageId> pages;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i % page_size == 0) {
      std::optional<PageId> page = pool->Allocate();
      EXPECT_TRUE(page.has_value());
      pages.push_back(*page);
    }
    pool.stamped[size_t(pages.back()) * page_size + i % page_size] = tokens[i];
  }
  return pages;
}

// Whether `pages` hold tokens[0, pages.size() * page_size), as stamped by Compute.
bool PagesHold(TestPool& pool, std::span<const PageId> pages, std::span<const TokenId> tokens) {
  const size_t page_size = size_t(pool->page_size());
  if (tokens.size() < pages.size() * page_size) return false;
  for (size_t i = 0; i < pages.size() * page_size; ++i) {
    if (pool.stamped[size_t(pages[i / page_size]) * page_size + i % page_size] != tokens[i]) return false;
  }
  return true;
}

Tokens Concat(const Tokens& a, const Tokens& b) {
  Tokens out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

TEST(RadixCache, MatchOnEmptyTree) {
  auto pool = MakePool(8, 4);
  RadixCache cache(*pool);
  const Tokens prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  RadixCache::MatchResult m = cache.MatchPrefix(prompt, int64_t(prompt.size()));
  EXPECT_EQ(m.num_tokens, 0);
  EXPECT_TRUE(m.pages.empty());
  EXPECT_EQ(m.node.node, 0);  // the root
  cache.Lock(m.node);  // locking the empty prefix protects nothing and is allowed
  cache.Unlock(m.node);
  EXPECT_EQ(cache.cached_pages(), 0);
  EXPECT_EQ(cache.num_nodes(), 0);
  EXPECT_EQ(cache.MatchPrefix({}, 0).num_tokens, 0);
  EXPECT_EQ(cache.Evict(5), 0);
}

TEST(RadixCache, MatchesWholePagesOnly) {
  auto pool = MakePool(16, 4);
  RadixCache cache(*pool);
  const Tokens seq = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const std::vector<PageId> pages = Compute(pool, seq);
  EXPECT_EQ(cache.Insert(seq, pages), 3);
  EXPECT_EQ(cache.cached_pages(), 3);
  EXPECT_EQ(cache.cached_tokens(), 12);
  EXPECT_EQ(pool->num_free_pages(), 13);

  auto match = [&](const Tokens& q, int64_t max_tokens) { return cache.MatchPrefix(q, max_tokens); };
  // Exact.
  RadixCache::MatchResult exact = match(seq, 12);
  EXPECT_EQ(exact.num_tokens, 12);
  EXPECT_EQ(exact.pages, pages);
  // SGLang's rule: keep at least one token to compute, which here costs the whole last page.
  EXPECT_EQ(match(seq, 11).num_tokens, 8);
  EXPECT_EQ(match(seq, 11).pages, std::vector<PageId>(pages.begin(), pages.begin() + 2));
  EXPECT_EQ(match(seq, 0).num_tokens, 0);
  EXPECT_EQ(match(seq, -3).num_tokens, 0);
  // Shorter: only whole pages of the query count.
  EXPECT_EQ(match({1, 2, 3, 4, 5, 6, 7, 8, 9}, 9).num_tokens, 8);
  EXPECT_EQ(match({1, 2, 3}, 3).num_tokens, 0);
  // Longer.
  const Tokens longer = Concat(seq, {13, 14, 15, 16, 17});
  EXPECT_EQ(match(longer, int64_t(longer.size())).num_tokens, 12);
  // Diverging inside a page: the match stops at the last whole shared page.
  EXPECT_EQ(match({1, 2, 3, 4, 5, 6, 7, 8, 9, 99, 11, 12}, 12).num_tokens, 8);
  EXPECT_EQ(match({1, 2, 3, 4, 5, 6, 99, 8, 9, 10, 11, 12}, 12).num_tokens, 4);
  EXPECT_EQ(match({1, 2, 3, 99}, 4).num_tokens, 0);
  EXPECT_EQ(match({99, 2, 3, 4}, 4).num_tokens, 0);
  // Matching changes nothing.
  EXPECT_EQ(cache.num_nodes(), 1);
  EXPECT_EQ(cache.cached_pages(), 3);
}

TEST(RadixCache, PageSizeOneMatchesEveryToken) {
  auto pool = MakePool(16, 1);
  RadixCache cache(*pool);
  const Tokens seq = {5, 6, 7, 8};
  EXPECT_EQ(cache.Insert(seq, Compute(pool, seq)), 4);
  EXPECT_EQ(cache.MatchPrefix(Tokens{5, 6, 9}, 3).num_tokens, 2);
  EXPECT_EQ(cache.MatchPrefix(seq, 3).num_tokens, 3);
}

TEST(RadixCache, InsertSplitsEdges) {
  auto pool = MakePool(32, 2);
  RadixCache cache(*pool);
  const Tokens a = {1, 2, 3, 4, 5, 6};
  const Tokens b = {1, 2, 3, 4, 7, 8};   // shares two pages with a
  const Tokens c = {1, 9, 9, 9};         // same first token as a, diverges inside the first page
  const std::vector<PageId> a_pages = Compute(pool, a);
  EXPECT_EQ(cache.Insert(a, a_pages), 3);
  EXPECT_EQ(cache.num_nodes(), 1);

  std::vector<PageId> b_pages = Compute(pool, b);
  EXPECT_EQ(cache.Insert(b, b_pages), 1);  // the two shared pages are a's
  EXPECT_EQ(cache.num_nodes(), 3);         // [1 2 3 4] -> {[5 6], [7 8]}
  EXPECT_EQ(cache.MatchPrefix(a, 6).pages, a_pages);
  RadixCache::MatchResult mb = cache.MatchPrefix(b, 6);
  EXPECT_EQ(mb.num_tokens, 6);
  EXPECT_EQ(mb.pages, (std::vector<PageId>{a_pages[0], a_pages[1], b_pages[2]}));

  EXPECT_EQ(cache.Insert(c, Compute(pool, c)), 2);
  EXPECT_EQ(cache.num_nodes(), 4);  // a sibling at the root sharing the first token
  EXPECT_EQ(cache.MatchPrefix(c, 4).num_tokens, 4);
  EXPECT_EQ(cache.MatchPrefix(a, 6).num_tokens, 6);

  // A key that ends inside an edge splits it; the copy of the prefix goes back to the pool.
  const int64_t free_before = pool->num_free_pages();
  EXPECT_EQ(cache.Insert(Tokens{1, 2}, Compute(pool, Tokens{1, 2})), 0);
  EXPECT_EQ(pool->num_free_pages(), free_before);
  EXPECT_EQ(cache.num_nodes(), 5);  // root -> {[1 2] -> [3 4] -> {[5 6], [7 8]}, [1 9 9 9]}
  EXPECT_EQ(cache.MatchPrefix(b, 6).num_tokens, 6);
  EXPECT_EQ(cache.cached_pages(), 6);
  EXPECT_EQ(pool->num_free_pages() + cache.cached_pages(), pool->num_pages());
}

TEST(RadixCache, DuplicateInsertReturnsTheCopiesToThePool) {
  auto pool = MakePool(16, 4);
  RadixCache cache(*pool);
  const Tokens seq = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<PageId> first = Compute(pool, seq);
  EXPECT_EQ(cache.Insert(seq, first), 2);
  // Another request computed the same prompt at the same time.
  const std::vector<PageId> second = Compute(pool, seq);
  EXPECT_EQ(pool->num_free_pages(), 12);
  EXPECT_EQ(cache.Insert(seq, second), 0);
  EXPECT_EQ(pool->num_free_pages(), 14);
  EXPECT_EQ(cache.cached_pages(), 2);
  EXPECT_EQ(cache.MatchPrefix(seq, 8).pages, first);
  // A longer duplicate: the shared pages go back, the new one is adopted.
  const Tokens longer = Concat(seq, {9, 10, 11, 12});
  const std::vector<PageId> third = Compute(pool, longer);
  EXPECT_EQ(cache.Insert(longer, third), 1);
  EXPECT_EQ(pool->num_free_pages(), 13);
  EXPECT_EQ(cache.MatchPrefix(longer, 12).pages,
            (std::vector<PageId>{first[0], first[1], third[2]}));
}

TEST(RadixCache, BorrowedPrefixPagesAreRecognisedNotFreed) {
  auto pool = MakePool(16, 4);
  RadixCache cache(*pool);
  const Tokens prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(cache.Insert(prompt, Compute(pool, prompt)), 2);
  const Tokens full = Concat(prompt, {9, 10, 11, 12});
  RadixCache::MatchResult m = cache.MatchPrefix(full, int64_t(full.size()) - 1);
  ASSERT_EQ(m.num_tokens, 8);
  cache.Lock(m.node);
  std::vector<PageId> pages = m.pages;
  const std::vector<PageId> computed = Compute(pool, Tokens{9, 10, 11, 12});
  pages.push_back(computed[0]);
  EXPECT_EQ(cache.Insert(full, pages), 1);
  cache.Unlock(m.node);
  EXPECT_EQ(cache.cached_pages(), 3);
  EXPECT_EQ(pool->num_free_pages(), 13);
  EXPECT_TRUE(PagesHold(pool, cache.MatchPrefix(full, 12).pages, full));
}

TEST(RadixCache, LockPreventsEvictionUnlockAllowsIt) {
  auto pool = MakePool(16, 4);
  RadixCache cache(*pool);
  const Tokens seq = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  cache.Insert(seq, Compute(pool, seq));
  RadixCache::MatchResult m = cache.MatchPrefix(seq, 11);  // ends inside the edge
  cache.Lock(m.node);
  cache.Lock(m.node);  // two requests share it
  EXPECT_EQ(cache.locked_pages(), 3);  // the whole edge holding the match
  EXPECT_EQ(cache.evictable_pages(), 0);
  EXPECT_EQ(cache.Evict(10), 0);
  cache.Unlock(m.node);
  EXPECT_EQ(cache.Evict(10), 0);
  EXPECT_TRUE(PagesHold(pool, m.pages, seq));
  cache.Unlock(m.node);
  EXPECT_EQ(cache.locked_pages(), 0);
  EXPECT_EQ(cache.evictable_pages(), 3);
  EXPECT_EQ(cache.Evict(10), 3);
  EXPECT_EQ(cache.cached_pages(), 0);
  EXPECT_EQ(pool->num_free_pages(), 16);
}

TEST(RadixCache, LockingADeepNodeProtectsItsAncestorsOnly) {
  auto pool = MakePool(16, 1);
  RadixCache cache(*pool);
  cache.Insert(Tokens{1, 2, 3}, Compute(pool, Tokens{1, 2, 3}));
  cache.Insert(Tokens{1, 2, 4, 5}, Compute(pool, Tokens{1, 2, 4, 5}));  // [1 2] -> {[3], [4 5]}
  RadixCache::MatchResult m = cache.MatchPrefix(Tokens{1, 2, 4, 5}, 4);
  cache.Lock(m.node);
  EXPECT_EQ(cache.locked_pages(), 4);
  EXPECT_EQ(cache.evictable_pages(), 1);
  EXPECT_EQ(cache.Evict(100), 1);  // only [3]
  EXPECT_EQ(cache.MatchPrefix(Tokens{1, 2, 3}, 3).num_tokens, 2);
  cache.Unlock(m.node);
  EXPECT_EQ(cache.Evict(100), 4);
}

TEST(RadixCache, EvictsLeastRecentlyUsedFirst) {
  auto pool = MakePool(16, 2);
  RadixCache cache(*pool);
  const Tokens a = {1, 1, 1, 1}, b = {2, 2, 2, 2}, c = {3, 3, 3, 3};
  cache.Insert(a, Compute(pool, a));
  cache.Insert(b, Compute(pool, b));
  cache.Insert(c, Compute(pool, c));
  // Use a again: b is now the least recently used, then c.
  RadixCache::MatchResult m = cache.MatchPrefix(a, 4);
  cache.Lock(m.node);
  cache.Unlock(m.node);
  EXPECT_EQ(cache.Evict(2), 2);
  EXPECT_EQ(cache.MatchPrefix(b, 4).num_tokens, 0);
  EXPECT_EQ(cache.MatchPrefix(a, 4).num_tokens, 4);
  EXPECT_EQ(cache.MatchPrefix(c, 4).num_tokens, 4);
  // Insert also counts as a use: re-inserting c makes a the oldest.
  cache.Insert(c, Compute(pool, c));
  // Only one page needed: the tail of the oldest leaf goes, its front stays matchable.
  EXPECT_EQ(cache.Evict(1), 1);
  EXPECT_EQ(cache.MatchPrefix(a, 4).num_tokens, 2);
  EXPECT_EQ(cache.MatchPrefix(c, 4).num_tokens, 4);
  EXPECT_EQ(pool->num_free_pages() + cache.cached_pages(), pool->num_pages());
}

TEST(RadixCache, EvictionCascadesToParents) {
  auto pool = MakePool(16, 2);
  RadixCache cache(*pool);
  const Tokens a = {1, 2, 3, 4}, b = {1, 2, 5, 6}, d = {7, 7};
  cache.Insert(a, Compute(pool, a));
  cache.Insert(b, Compute(pool, b));  // [1 2] -> {[3 4], [5 6]}
  cache.Insert(d, Compute(pool, d));  // the most recent
  EXPECT_EQ(cache.num_nodes(), 4);
  // Both leaves under [1 2] are older than d; once they are gone, [1 2] is a leaf older than d.
  EXPECT_EQ(cache.Evict(3), 3);
  EXPECT_EQ(cache.num_nodes(), 1);
  EXPECT_EQ(cache.MatchPrefix(a, 4).num_tokens, 0);
  EXPECT_EQ(cache.MatchPrefix(d, 2).num_tokens, 2);
  EXPECT_EQ(cache.Evict(3), 1);
  EXPECT_EQ(pool->num_free_pages(), 16);
}

TEST(RadixCache, ResetRefusesWhileLocked) {
  auto pool = MakePool(16, 4);
  RadixCache cache(*pool);
  const Tokens a = {1, 2, 3, 4}, b = {5, 6, 7, 8};
  cache.Insert(a, Compute(pool, a));
  cache.Insert(b, Compute(pool, b));
  RadixCache::MatchResult m = cache.MatchPrefix(a, 4);
  cache.Lock(m.node);
  Status refused = cache.Reset();
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("locked"), std::string::npos) << refused.message();
  EXPECT_EQ(cache.cached_pages(), 2);  // nothing changed
  cache.Unlock(m.node);
  EXPECT_TRUE(cache.Reset().ok());
  EXPECT_EQ(cache.cached_pages(), 0);
  EXPECT_EQ(cache.num_nodes(), 0);
  EXPECT_EQ(pool->num_free_pages(), 16);
  // The tree is usable again.
  EXPECT_EQ(cache.Insert(a, Compute(pool, a)), 1);
  EXPECT_EQ(cache.MatchPrefix(a, 4).num_tokens, 4);
}

TEST(RadixCache, DestructorReturnsCachedPages) {
  auto pool = MakePool(8, 4);
  {
    RadixCache cache(*pool);
    cache.Insert(Tokens{1, 2, 3, 4, 5, 6, 7, 8}, Compute(pool, Tokens{1, 2, 3, 4, 5, 6, 7, 8}));
    EXPECT_EQ(pool->num_free_pages(), 6);
  }
  EXPECT_EQ(pool->num_free_pages(), 8);
}

TEST(RadixCacheDeathTest, MisuseIsACheckFailure) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto pool = MakePool(8, 1);
  RadixCache cache(*pool);
  cache.Insert(Tokens{1, 2}, Compute(pool, Tokens{1, 2}));
  RadixCache::MatchResult m = cache.MatchPrefix(Tokens{1, 2}, 2);
  EXPECT_DEATH(cache.Unlock(m.node), "check failed");  // unlock below zero
  EXPECT_EQ(cache.Evict(2), 2);
  EXPECT_DEATH(cache.Lock(m.node), "check failed");  // stale handle: the node was evicted
  cache.Insert(Tokens{5, 6, 7}, Compute(pool, Tokens{5, 6, 7}));
  RadixCache::MatchResult trimmed = cache.MatchPrefix(Tokens{5, 6, 7}, 3);
  EXPECT_EQ(cache.Evict(1), 1);  // frees the page holding 7, which `trimmed` names
  EXPECT_DEATH(cache.Lock(trimmed.node), "check failed");
  EXPECT_EQ(cache.MatchPrefix(Tokens{5, 6, 7}, 3).num_tokens, 2);
  // A page given twice.
  std::vector<PageId> pages = Compute(pool, Tokens{3});
  pages.push_back(pages[0]);
  EXPECT_DEATH(cache.Insert(Tokens{3, 4}, pages), "check failed");
  // Keys and pages must be page-aligned and agree.
  EXPECT_DEATH(cache.Insert(Tokens{3, 4}, std::span<const PageId>(pages).first(1)), "check failed");
}

// ---- SequenceKv with a borrowed prefix ----

TEST(RadixCache, SequenceWithAdoptedPrefixReleasesOnlyItsOwnPages) {
  auto pool = MakePool(16, 4);
  RadixCache cache(*pool);
  const Tokens prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};

  // Request 1 computes everything, finishes after 3 output tokens: 13 positions written.
  const Tokens out1 = Concat(prompt, {11, 12, 13});
  {
    SequenceKv seq(*pool, 64);
    EXPECT_EQ(cache.MatchPrefix(prompt, int64_t(prompt.size()) - 1).num_tokens, 0);
    ASSERT_TRUE(seq.Reserve(13).ok());
    seq.MarkComputed(13);
    EXPECT_EQ(pool->num_free_pages(), 12);
    const int full_pages = seq.num_tokens() / pool->page_size();
    std::span<const PageId> pages = seq.HandOverPages(full_pages);
    EXPECT_EQ(cache.Insert(std::span<const TokenId>(out1).first(12), pages), 3);
    seq.Release();  // the partial last page
    EXPECT_EQ(pool->num_free_pages(), 13);
  }

  // Request 2 shares 9 prompt tokens: it borrows two pages and computes the rest.
  const Tokens prompt2 = {1, 2, 3, 4, 5, 6, 7, 8, 9, 20, 21, 22};
  SequenceKv seq(*pool, 64);
  RadixCache::MatchResult m = cache.MatchPrefix(prompt2, int64_t(prompt2.size()) - 1);
  ASSERT_EQ(m.num_tokens, 8);
  cache.Lock(m.node);
  ASSERT_TRUE(seq.AdoptPrefix(m.pages, int(m.num_tokens)).ok());
  EXPECT_EQ(seq.num_tokens(), 8);
  EXPECT_EQ(seq.num_borrowed_pages(), 2);
  EXPECT_EQ(seq.reserved_tokens(), 8);
  ASSERT_TRUE(seq.Reserve(6).ok());  // 4 prompt tokens + 2 outputs -> 14 positions, 4 pages
  EXPECT_EQ(pool->num_free_pages(), 11);
  EXPECT_EQ(seq.pages()[5 / 4], m.pages[1]);  // position 5 reads the cache's second page

  // Retracted: only its own two pages go back; the cached prefix stays.
  seq.Release();
  EXPECT_EQ(seq.num_borrowed_pages(), 0);
  EXPECT_EQ(pool->num_free_pages(), 13);
  EXPECT_EQ(cache.cached_pages(), 3);
  EXPECT_EQ(cache.MatchPrefix(out1, 12).num_tokens, 12);

  // Rerun and finish: hand the full pages to the cache, release the partial last one.
  ASSERT_TRUE(seq.AdoptPrefix(m.pages, int(m.num_tokens)).ok());
  ASSERT_TRUE(seq.Reserve(6).ok());
  std::vector<PageId> own(seq.pages().begin() + 2, seq.pages().end());
  seq.MarkComputed(6);  // positions 8..13
  const Tokens out2 = Concat(prompt2, {23, 24});
  std::span<const PageId> pages = seq.HandOverPages(3);
  EXPECT_EQ(cache.Insert(std::span<const TokenId>(out2).first(12), pages), 1);
  cache.Unlock(m.node);
  seq.Release();
  EXPECT_EQ(pool->num_free_pages(), 12);
  EXPECT_EQ(cache.cached_pages(), 4);
  RadixCache::MatchResult m2 = cache.MatchPrefix(out2, 12);
  EXPECT_EQ(m2.pages, (std::vector<PageId>{m.pages[0], m.pages[1], own[0]}));
  EXPECT_TRUE(cache.Reset().ok());
  EXPECT_EQ(pool->num_free_pages(), 16);
}

TEST(RadixCache, AdoptPrefixRejectsMisuse) {
  auto pool = MakePool(16, 4);
  std::vector<PageId> pages = {*pool->Allocate(), *pool->Allocate()};
  SequenceKv seq(*pool, 6);
  EXPECT_FALSE(seq.AdoptPrefix(pages, 7).ok());  // two pages hold 8 tokens
  Status too_long = seq.AdoptPrefix(pages, 8);
  EXPECT_NE(too_long.message().find("context length 6"), std::string::npos) << too_long.message();
  SequenceKv busy(*pool, 64);
  ASSERT_TRUE(busy.Reserve(1).ok());
  EXPECT_FALSE(busy.AdoptPrefix(pages, 8).ok());
  EXPECT_EQ(busy.num_borrowed_pages(), 0);
  SequenceKv ok(*pool, 64);
  ASSERT_TRUE(ok.AdoptPrefix(pages, 8).ok());
  EXPECT_EQ(pool->num_free_pages(), 13);
  ok.Release();
  EXPECT_EQ(pool->num_free_pages(), 13);  // borrowed pages are not the sequence's to free
}

// ---- Randomized comparison with a naive reference ----

// The naive model: the set of cached prefixes, one per cached page (the tokens up to and
// including that page). A match is the longest page-aligned prefix of the query in the set.
struct NaiveCache {
  int page_size;
  std::set<Tokens> prefixes;

  int64_t Match(const Tokens& q, int64_t max_tokens) const {
    const int64_t limit = std::clamp<int64_t>(max_tokens, 0, int64_t(q.size()));
    int64_t matched = 0;
    for (int64_t end = page_size; end <= limit; end += page_size) {
      if (!prefixes.contains(Tokens(q.begin(), q.begin() + end))) break;
      matched = end;
    }
    return matched;
  }
  void Insert(const Tokens& seq) {
    for (size_t end = size_t(page_size); end <= seq.size(); end += size_t(page_size))
      prefixes.insert(Tokens(seq.begin(), seq.begin() + ptrdiff_t(end)));
  }
};

struct RunningRequest {
  Tokens tokens;  // the full sequence it will insert at finish, page-aligned
  RadixCache::MatchResult match;
};

void RunRandomized(int page_size, uint32_t seed) {
  SCOPED_TRACE("page_size " + std::to_string(page_size));
  constexpr int64_t kPoolPages = 40;
  auto pool = MakePool(kPoolPages, page_size);
  RadixCache cache(*pool);
  NaiveCache naive{.page_size = page_size};
  std::vector<Tokens> history;
  std::vector<RunningRequest> running;
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };

  // Sequences share prefixes often: half extend a page-aligned prefix of an earlier one.
  auto make_sequence = [&] {
    Tokens seq;
    if (!history.empty() && uniform(0, 1) == 0) {
      const Tokens& base = history[size_t(uniform(0, int(history.size()) - 1))];
      seq.assign(base.begin(), base.begin() + uniform(0, int(base.size())));
    }
    const size_t length = size_t(uniform(1, 6) * page_size);
    while (seq.size() < length || seq.size() % size_t(page_size) != 0) seq.push_back(uniform(0, 2));
    history.push_back(seq);
    return seq;
  };
  // Evicts like the engine under memory pressure; the naive model then keeps the prefixes the
  // cache still holds, which must be exactly `freed` fewer.
  auto evict = [&](int64_t wanted) {
    const int64_t evictable = cache.evictable_pages();
    const int64_t freed = cache.Evict(wanted);
    EXPECT_EQ(freed, std::min(wanted, evictable));
    std::set<Tokens> kept;
    for (const Tokens& p : naive.prefixes) {
      if (cache.MatchPrefix(p, int64_t(p.size())).num_tokens == int64_t(p.size())) kept.insert(p);
    }
    EXPECT_EQ(int64_t(naive.prefixes.size() - kept.size()), freed);
    naive.prefixes = std::move(kept);
  };
  // Takes pages for tokens[from_page * page_size, end) from the pool, evicting if needed.
  auto compute = [&](const Tokens& tokens, size_t from_page) -> std::optional<std::vector<PageId>> {
    const int64_t needed = int64_t(tokens.size() / size_t(page_size) - from_page);
    if (pool->num_free_pages() < needed) evict(needed - pool->num_free_pages());
    if (pool->num_free_pages() < needed) return std::nullopt;
    return Compute(pool, std::span<const TokenId>(tokens).subspan(from_page * size_t(page_size)));
  };
  auto finish = [&](const RunningRequest& r) {
    std::optional<std::vector<PageId>> rest = compute(r.tokens, r.match.pages.size());
    if (rest) {
      std::vector<PageId> pages = r.match.pages;
      pages.insert(pages.end(), rest->begin(), rest->end());
      const int64_t expected_new = int64_t(pages.size()) - naive.Match(r.tokens, int64_t(r.tokens.size())) / page_size;
      EXPECT_EQ(cache.Insert(r.tokens, pages), expected_new);
      naive.Insert(r.tokens);
    }
    cache.Unlock(r.match.node);
  };

  for (int step = 0; step < 4000; ++step) {
    const int op = uniform(0, 99);
    if (op < 45) {  // a request arrives: match, lock, and maybe finish at once
      RunningRequest r{.tokens = make_sequence(), .match = {}};
      const int64_t max_tokens = int64_t(r.tokens.size()) - uniform(0, 1);
      r.match = cache.MatchPrefix(r.tokens, max_tokens);
      ASSERT_EQ(r.match.num_tokens, naive.Match(r.tokens, max_tokens));
      ASSERT_EQ(int64_t(r.match.pages.size()) * page_size, r.match.num_tokens);
      ASSERT_TRUE(PagesHold(pool, r.match.pages, r.tokens));
      cache.Lock(r.match.node);
      if (uniform(0, 2) == 0) {
        running.push_back(std::move(r));
      } else {
        finish(r);
      }
    } else if (op < 60 && !running.empty()) {  // a running request finishes
      const size_t i = size_t(uniform(0, int(running.size()) - 1));
      ASSERT_TRUE(PagesHold(pool, running[i].match.pages, running[i].tokens));  // still locked
      finish(running[i]);
      running.erase(running.begin() + ptrdiff_t(i));
    } else if (op < 75) {  // a request computed without looking at the cache: a duplicate
      const Tokens seq = make_sequence();
      if (std::optional<std::vector<PageId>> pages = compute(seq, 0)) {
        const int64_t expected_new = int64_t(pages->size()) - naive.Match(seq, int64_t(seq.size())) / page_size;
        EXPECT_EQ(cache.Insert(seq, *pages), expected_new);
        naive.Insert(seq);
      }
    } else if (op < 98) {  // memory pressure
      evict(uniform(0, 8));
      for (const RunningRequest& r : running) {
        ASSERT_EQ(cache.MatchPrefix(r.tokens, r.match.num_tokens).num_tokens, r.match.num_tokens);
      }
    } else {  // flush_cache
      Status flushed = cache.Reset();
      ASSERT_EQ(flushed.ok(), cache.locked_pages() == 0);
      if (flushed.ok()) naive.prefixes.clear();
    }

    // Every page is in exactly one place: free in the pool or cached (the test keeps none
    // between steps), and the cache holds exactly one page per naive prefix.
    ASSERT_EQ(pool->num_free_pages() + cache.cached_pages(), kPoolPages) << "step " << step;
    ASSERT_EQ(cache.cached_pages(), int64_t(naive.prefixes.size())) << "step " << step;
    ASSERT_EQ(cache.evictable_pages() + cache.locked_pages(), cache.cached_pages());
    bool any_locked_pages = false;
    for (const RunningRequest& r : running) any_locked_pages |= r.match.num_tokens > 0;
    ASSERT_EQ(cache.locked_pages() > 0, any_locked_pages) << "step " << step;
    if (step % 25 == 0) {
      std::set<PageId> distinct;
      for (const Tokens& p : naive.prefixes) {
        RadixCache::MatchResult m = cache.MatchPrefix(p, int64_t(p.size()));
        ASSERT_TRUE(PagesHold(pool, m.pages, p));
        distinct.insert(m.pages.back());
      }
      ASSERT_EQ(distinct.size(), naive.prefixes.size());
    }
  }
  for (const RunningRequest& r : running) cache.Unlock(r.match.node);
  EXPECT_EQ(cache.locked_pages(), 0);
  EXPECT_TRUE(cache.Reset().ok());
  EXPECT_EQ(pool->num_free_pages(), kPoolPages);
}

TEST(RadixCache, RandomizedAgainstNaiveReference) {
  RunRandomized(/*page_size=*/1, 11);
  RunRandomized(/*page_size=*/2, 22);
  RunRandomized(/*page_size=*/4, 33);
}

}  // namespace
}  // namespace mlaserve

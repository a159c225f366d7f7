// The prompt-lookup drafter: the longest suffix (3 tokens down to 1) that occurred before, its
// most recent occurrence, and what followed it, bounded by the caller's buffer.
#include "engine/drafter.h"

#include <gtest/gtest.h>

#include <vector>

namespace mlaserve {
namespace {

std::vector<TokenId> Propose(NgramDrafter& drafter, const std::vector<TokenId>& history, int k) {
  std::vector<TokenId> draft(size_t(k), -1);
  const int n = drafter.Lookup(history, draft);
  EXPECT_GE(n, 0);
  EXPECT_LE(n, k);
  draft.resize(size_t(n));
  return draft;
}

TEST(NgramDrafterTest, CopiesWhatFollowedTheLongestEarlierMatch) {
  NgramDrafter drafter;
  // "1 2 3" occurred at 0: what followed it, as far as the buffer and the history go.
  EXPECT_EQ(Propose(drafter, {1, 2, 3, 4, 1, 2, 3}, 3), (std::vector<TokenId>{4, 1, 2}));
  EXPECT_EQ(Propose(drafter, {1, 2, 3, 4, 1, 2, 3}, 8), (std::vector<TokenId>{4, 1, 2, 3}));
  // A 3-gram match wins over a more recent 1-gram one ("3" alone last occurred at 5).
  EXPECT_EQ(Propose(drafter, {7, 8, 3, 9, 9, 3, 5, 7, 8, 3}, 2), (std::vector<TokenId>{9, 9}));
}

TEST(NgramDrafterTest, TakesTheMostRecentOccurrenceAndFallsBackToShorterSuffixes) {
  NgramDrafter drafter;
  // "5 6" occurs at 0 and at 3; "7 5 6" never before: the later "5 6" is followed by 7 5.
  EXPECT_EQ(Propose(drafter, {5, 6, 9, 5, 6, 7, 5, 6}, 2), (std::vector<TokenId>{7, 5}));
  // Only "3" recurs.
  EXPECT_EQ(Propose(drafter, {1, 2, 3, 9, 3}, 4), (std::vector<TokenId>{9, 3}));
  // A repeated token drafts itself.
  EXPECT_EQ(Propose(drafter, {4, 4, 4, 4}, 3), (std::vector<TokenId>{4}));
}

TEST(NgramDrafterTest, ProposesNothingWithoutAMatchOrRoom) {
  NgramDrafter drafter;
  EXPECT_TRUE(Propose(drafter, {1, 2, 3, 4, 5}, 3).empty());
  EXPECT_TRUE(Propose(drafter, {1}, 3).empty());
  EXPECT_TRUE(Propose(drafter, {1, 1, 1}, 0).empty());
  // With min_ngram 2 a lone recurring token is not enough.
  NgramDrafter pairs(/*min_ngram=*/2, /*max_ngram=*/3);
  EXPECT_TRUE(Propose(pairs, {1, 2, 3, 9, 3}, 4).empty());
  EXPECT_EQ(Propose(pairs, {1, 2, 3, 9, 2, 3}, 4), (std::vector<TokenId>{9, 2, 3}));
}

// The scan covers the last kLookbackTokens tokens only: a match just inside is found, one just
// outside is not.
TEST(NgramDrafterTest, LooksBackAFixedWindow) {
  NgramDrafter drafter;
  const int window = NgramDrafter::kLookbackTokens;
  for (int gap : {window - 4, window + 4}) {
    std::vector<TokenId> tokens = {7, 8};  // the match, then filler, then the suffix 7
    tokens.resize(size_t(gap), 1);
    tokens.push_back(2);  // no filler token repeats the suffix
    tokens.push_back(7);
    const std::vector<TokenId> draft = Propose(drafter, tokens, 2);
    if (gap < window) {
      EXPECT_EQ(draft, (std::vector<TokenId>{8, 1})) << gap;
    } else {
      EXPECT_TRUE(draft.empty()) << gap;
    }
  }
}

}  // namespace
}  // namespace mlaserve

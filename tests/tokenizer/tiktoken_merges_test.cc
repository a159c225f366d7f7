// The merge a byte-level BPE file writes for each tiktoken token (LastTiktokenCut): the cut that
// tiktoken's own merging, lowest rank first, reaches last.
#include "tokenizer/tiktoken_merges.h"

#include <gtest/gtest.h>

namespace mlaserve {
namespace {

using Cut = std::vector<std::string>;

TEST(TiktokenMerges, TheLastCutTiktokenReaches) {
  // Bytes a, b, c, x, y, z: ranks 0..5.
  std::unordered_map<std::string, int64_t> ranks = {{"a", 0}, {"b", 1}, {"c", 2}, {"x", 3}, {"y", 4}, {"z", 5}};
  ranks["ab"] = 6;
  ranks["bc"] = 7;
  ranks["abc"] = 8;
  EXPECT_EQ(LastTiktokenCut("abc", 8, ranks), (Cut{"ab", "c"}));  // "ab" (6) merges before "bc" (7)
  ranks["bc"] = 5;  // now "bc" first
  ranks["ab"] = 7;
  EXPECT_EQ(LastTiktokenCut("abc", 8, ranks), (Cut{"a", "bc"}));
  // Two bytes: the bytes themselves, whatever the ranks.
  EXPECT_EQ(LastTiktokenCut("xz", 9, ranks), (Cut{"x", "z"}));
  // Only merges below the token's own rank count: "abca" (rank 6) merges "ca" (2), then "ab" (7)
  // is past its rank and "bca" no token: three parts, no cut.
  ranks["ca"] = 2;
  EXPECT_EQ(LastTiktokenCut("abca", 6, ranks), (Cut{}));
  // A token no merges reach: three parts left.
  EXPECT_EQ(LastTiktokenCut("xyz", 10, ranks), (Cut{}));
  // Ties at one rank (the same pair twice): the leftmost merges first.
  ranks = {{"a", 0}, {"aa", 1}, {"aaa", 2}};
  EXPECT_EQ(LastTiktokenCut("aaa", 2, ranks), (Cut{"aa", "a"}));
}

}  // namespace
}  // namespace mlaserve

#include "engine/drafter.h"

#include <algorithm>

#include "core/check.h"

namespace mlaserve {

NgramDrafter::NgramDrafter(int min_ngram, int max_ngram) : min_ngram_(min_ngram), max_ngram_(max_ngram) {
  MLA_CHECK(min_ngram_ >= 1 && min_ngram_ <= max_ngram_);
}

int NgramDrafter::Lookup(std::span<const TokenId> tokens, std::span<TokenId> draft) const {
  const int len = int(tokens.size());
  if (draft.empty()) return 0;
  for (int n = std::min(max_ngram_, len - 1); n >= min_ngram_; --n) {
    const std::span<const TokenId> suffix = tokens.last(size_t(n));
    // Candidate occurrences start at `start` and end before the suffix's own start + n - 1,
    // so at least one token follows each; the most recent one wins. Only the last
    // kLookbackTokens are searched: the scan runs per request per step on the engine thread.
    for (int start = len - n - 1; start >= std::max(0, len - kLookbackTokens); --start) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
      const int follow = start + n;
      const int count = std::min(int(draft.size()), len - follow);
      std::copy_n(tokens.begin() + follow, count, draft.begin());
      return count;
    }
  }
  return 0;
}

}  // namespace mlaserve

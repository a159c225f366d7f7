// One sequence's share of the paged KV cache: its page table and how many positions are written.
// Position p of layer l lives in row (p % page_size) of page pages()[p / page_size] of whatever
// KvStorage the runner holds (kv_storage.h); this is bookkeeping only and never touches bytes.
// Ownership: a SequenceKv owns the pages it reserved (returns them to the allocator on Release or
// destruction); the allocator must outlive it. It may also start from a borrowed prefix
// (AdoptPrefix): the first num_borrowed_pages() pages belong to someone else (the radix cache,
// locked by the engine for as long as the sequence reads them); they are full, read-only and
// never freed here. The forward pass sees only the page table (pages()) and writes rows for the
// new positions, which Reserve must have covered (always past the borrowed prefix); whoever
// planned the call then records them with MarkComputed. The model never advances a sequence.
#pragma once

#include <span>
#include <vector>

#include "core/status.h"
#include "kvcache/page_allocator.h"

namespace mlaserve {

class SequenceKv {
 public:
  // max_tokens bounds the page table, reserved here so Reserve never allocates.
  SequenceKv(PageAllocator& allocator, int max_tokens);
  ~SequenceKv() { Release(); }
  SequenceKv(const SequenceKv&) = delete;
  SequenceKv& operator=(const SequenceKv&) = delete;

  // Makes room for `additional_tokens` past num_tokens(), taking pages from the allocator. On error
  // (no free page, or past max_tokens) nothing changes.
  Status Reserve(int additional_tokens);
  // Returns every page it owns to the allocator (not the borrowed ones); the sequence becomes empty.
  void Release();

  // Starts an empty sequence from a cached prefix: `pages` are full pages holding positions
  // [0, num_tokens), num_tokens == pages.size() * page_size. They are borrowed (see above): the
  // lender must keep them alive until Release. On error nothing changes.
  Status AdoptPrefix(std::span<const PageId> pages, int num_tokens);
  // At request finish: the sequence stops owning its first num_pages pages, and ownership of the
  // ones it owned ([num_borrowed_pages(), num_pages)) passes to the caller, typically to
  // RadixCache::Insert, which also recognises the borrowed ones as its own. Returns the ids of
  // all num_pages pages (borrowed and handed over), a view valid until the next Reserve,
  // Release or AdoptPrefix. Release afterwards frees only the pages past num_pages.
  [[nodiscard]] std::span<const PageId> HandOverPages(int num_pages);
  // Pages at the front of pages() that this sequence does not own.
  int num_borrowed_pages() const { return num_borrowed_pages_; }

  int num_tokens() const { return num_tokens_; }
  // Rows for the next `num_new_tokens` positions were written (they must be reserved).
  void MarkComputed(int num_new_tokens);
  // Speculative rollback: rows at positions [num_tokens, num_tokens()) are dead (rejected
  // drafts); the owned pages wholly past the new length go back to the allocator. num_tokens
  // must not cut into the borrowed prefix (checked).
  void Truncate(int num_tokens);
  // Returns the owned pages wholly past the first `tokens` positions (tokens >= num_tokens()):
  // a reservation made ahead and not needed (speculative decoding's look-ahead).
  void ReleasePagesPast(int tokens);
  int reserved_tokens() const { return int(pages_.size()) * allocator_.page_size(); }
  int max_tokens() const { return max_tokens_; }
  std::span<const PageId> pages() const { return pages_; }
  PageAllocator& allocator() const { return allocator_; }

 private:
  PageAllocator& allocator_;
  int max_tokens_;
  int num_tokens_ = 0;
  int num_borrowed_pages_ = 0;  // pages_[0, num_borrowed_pages_) are not ours to free
  std::vector<PageId> pages_;
};

}  // namespace mlaserve

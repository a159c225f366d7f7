// One sequence's view of the paged KV pool: its page table and how many positions are written.
// Position p of layer l lives in row (p % page_size) of page pages()[p / page_size].
// Ownership: a SequenceKv owns its pages (returns them to the pool on Release or destruction);
// the pool must outlive it. The forward pass borrows it for one call: it writes rows for the new
// positions (which Reserve must have covered) and then advances num_tokens.
#pragma once

#include <span>
#include <vector>

#include "core/status.h"
#include "kvcache/kv_pool.h"

namespace mlaserve {

class SequenceKv {
 public:
  // max_tokens bounds the page table, reserved here so Reserve never allocates.
  SequenceKv(KvPool& pool, int max_tokens);
  ~SequenceKv() { Release(); }
  SequenceKv(const SequenceKv&) = delete;
  SequenceKv& operator=(const SequenceKv&) = delete;

  // Makes room for `additional_tokens` past num_tokens(), taking pages from the pool. On error
  // (pool exhausted, or past max_tokens) nothing changes.
  Status Reserve(int additional_tokens);
  // Returns every page to the pool; the sequence becomes empty.
  void Release();
  // Forgets positions past n (keeps the pages).
  void Truncate(int n);

  int num_tokens() const { return num_tokens_; }
  void set_num_tokens(int n) { num_tokens_ = n; }
  int reserved_tokens() const { return int(pages_.size()) * pool_.page_size(); }
  int max_tokens() const { return max_tokens_; }
  std::span<const PageId> pages() const { return pages_; }
  KvPool& pool() const { return pool_; }

  // The row of `position` in `layer`.
  std::byte* Row(int layer, int position) const {
    const int page_size = pool_.page_size();
    return pool_.PageRows(layer, pages_[size_t(position / page_size)]) +
           size_t(position % page_size) * pool_.row_bytes();
  }

 private:
  KvPool& pool_;
  int max_tokens_;
  int num_tokens_ = 0;
  std::vector<PageId> pages_;
};

}  // namespace mlaserve

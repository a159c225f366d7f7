// Page bookkeeping for the paged KV cache: which page ids are free. A page id names the same
// page in every layer; the allocator knows nothing of bytes, formats or where a page lives (the
// runner side's KvStorage, kv_storage.h, does). The scheduler side owns the allocator: its
// SequenceKv page tables and the radix cache take pages from it and give them back, and a plan
// carries only ids, which index the storage.
// Pages are handed out and taken back in O(1) without allocating: a free stack, reserved once.
// Not thread-safe: Allocate/Free are called from the engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/status.h"

namespace mlaserve {

using PageId = int32_t;

// page_size in [1, 4096] and num_pages in [1, 2^31): the geometry allocator and storage share.
Status ValidatePageGeometry(int page_size, int64_t num_pages);

class PageAllocator {
 public:
  // Pages [0, num_pages) of page_size tokens each, all free. page_size in [1, 4096]; num_pages
  // at least 1 (a budget that holds no page is an error, reported as one line).
  static Result<std::unique_ptr<PageAllocator>> Create(int page_size, int64_t num_pages);
  PageAllocator(const PageAllocator&) = delete;
  PageAllocator& operator=(const PageAllocator&) = delete;

  int page_size() const { return page_size_; }
  int64_t num_pages() const { return num_pages_; }
  int64_t capacity_tokens() const { return num_pages_ * page_size_; }

  // A free page, now in use by the caller; nullopt when none is free (nothing changes).
  std::optional<PageId> Allocate();
  // Gives back a page that Allocate handed out and that is not free already.
  void Free(PageId page);
  int64_t num_free_pages() const { return int64_t(free_pages_.size()); }

 private:
  PageAllocator(int page_size, int64_t num_pages);

  int page_size_;
  int64_t num_pages_;
  std::vector<PageId> free_pages_;  // stack; capacity num_pages, reserved at creation
};

}  // namespace mlaserve

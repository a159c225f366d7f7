#include "kvcache/page_allocator.h"

#include <string>

#include "core/check.h"

namespace mlaserve {

PageAllocator::PageAllocator(int page_size, int64_t num_pages) : page_size_(page_size), num_pages_(num_pages) {
  free_pages_.reserve(size_t(num_pages));
  // Page 0 on top: pages are handed out in id order from a fresh allocator.
  for (int64_t i = num_pages - 1; i >= 0; --i) free_pages_.push_back(PageId(i));
}

Status ValidatePageGeometry(int page_size, int64_t num_pages) {
  if (page_size <= 0 || page_size > 4096) {
    return Status::Error("--page-size must be between 1 and 4096, got " + std::to_string(page_size));
  }
  if (num_pages <= 0 || num_pages > (int64_t(1) << 31) - 1) {
    return Status::Error("KV pool: the budget holds no page of " + std::to_string(page_size) + " tokens");
  }
  return Status::Ok();
}

Result<std::unique_ptr<PageAllocator>> PageAllocator::Create(int page_size, int64_t num_pages) {
  MLA_RETURN_IF_ERROR(ValidatePageGeometry(page_size, num_pages));
  return std::unique_ptr<PageAllocator>(new PageAllocator(page_size, num_pages));
}

std::optional<PageId> PageAllocator::Allocate() {
  if (free_pages_.empty()) return std::nullopt;
  const PageId page = free_pages_.back();
  free_pages_.pop_back();
  return page;
}

void PageAllocator::Free(PageId page) {
  MLA_CHECK(page >= 0 && page < num_pages_);
  MLA_CHECK(free_pages_.size() < size_t(num_pages_));
  free_pages_.push_back(page);
}

}  // namespace mlaserve

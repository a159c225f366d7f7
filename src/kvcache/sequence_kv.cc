#include "kvcache/sequence_kv.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace mlaserve {

SequenceKv::SequenceKv(PageAllocator& allocator, int max_tokens) : allocator_(allocator), max_tokens_(max_tokens) {
  pages_.reserve(size_t((max_tokens + allocator.page_size() - 1) / allocator.page_size()));
}

Status SequenceKv::Reserve(int additional_tokens) {
  const int needed_tokens = num_tokens_ + additional_tokens;
  if (needed_tokens > max_tokens_) {
    return Status::Error("sequence of " + std::to_string(needed_tokens) +
                         " tokens exceeds the context length " + std::to_string(max_tokens_));
  }
  const size_t needed_pages = size_t((needed_tokens + allocator_.page_size() - 1) / allocator_.page_size());
  if (needed_pages <= pages_.size()) return Status::Ok();
  if (int64_t(needed_pages - pages_.size()) > allocator_.num_free_pages()) {
    return Status::Error("KV cache pool is full: " + std::to_string(needed_pages - pages_.size()) +
                         " more pages needed, " + std::to_string(allocator_.num_free_pages()) + " free");
  }
  while (pages_.size() < needed_pages) pages_.push_back(*allocator_.Allocate());
  return Status::Ok();
}

void SequenceKv::Release() {
  for (size_t i = size_t(num_borrowed_pages_); i < pages_.size(); ++i) allocator_.Free(pages_[i]);
  pages_.clear();  // keeps the capacity reserved at construction
  num_borrowed_pages_ = 0;
  num_tokens_ = 0;
}

void SequenceKv::MarkComputed(int num_new_tokens) {
  MLA_CHECK(num_new_tokens >= 0 && num_tokens_ + num_new_tokens <= reserved_tokens());
  num_tokens_ += num_new_tokens;
}

void SequenceKv::Truncate(int num_tokens) {
  const int page_size = allocator_.page_size();
  MLA_CHECK(num_tokens >= num_borrowed_pages_ * page_size && num_tokens <= num_tokens_);
  num_tokens_ = num_tokens;
  const size_t keep_pages = size_t((num_tokens + page_size - 1) / page_size);
  while (pages_.size() > keep_pages) {
    allocator_.Free(pages_.back());
    pages_.pop_back();
  }
}

void SequenceKv::ReleasePagesPast(int tokens) {
  const int page_size = allocator_.page_size();
  MLA_CHECK(tokens >= num_tokens_);
  const size_t keep_pages = std::max(size_t(num_borrowed_pages_), size_t((tokens + page_size - 1) / page_size));
  while (pages_.size() > keep_pages) {
    allocator_.Free(pages_.back());
    pages_.pop_back();
  }
}

Status SequenceKv::AdoptPrefix(std::span<const PageId> pages, int num_tokens) {
  if (num_tokens_ != 0 || !pages_.empty()) {
    return Status::Error("a cached prefix can only start an empty sequence");
  }
  if (int64_t(num_tokens) != int64_t(pages.size()) * allocator_.page_size()) {
    return Status::Error("a cached prefix of " + std::to_string(pages.size()) + " pages holds " +
                         std::to_string(pages.size() * size_t(allocator_.page_size())) + " tokens, not " +
                         std::to_string(num_tokens));
  }
  if (num_tokens > max_tokens_) {
    return Status::Error("cached prefix of " + std::to_string(num_tokens) +
                         " tokens exceeds the context length " + std::to_string(max_tokens_));
  }
  pages_.assign(pages.begin(), pages.end());  // within the reserved capacity: no allocation
  num_borrowed_pages_ = int(pages.size());
  num_tokens_ = num_tokens;
  return Status::Ok();
}

std::span<const PageId> SequenceKv::HandOverPages(int num_pages) {
  MLA_CHECK(num_pages >= 0 && size_t(num_pages) <= pages_.size());
  num_borrowed_pages_ = std::max(num_borrowed_pages_, num_pages);
  return std::span<const PageId>(pages_).first(size_t(num_pages));
}

}  // namespace mlaserve

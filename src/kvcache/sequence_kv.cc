#include "kvcache/sequence_kv.h"

#include <algorithm>

namespace mlaserve {

SequenceKv::SequenceKv(KvPool& pool, int max_tokens) : pool_(pool), max_tokens_(max_tokens) {
  pages_.reserve(size_t((max_tokens + pool.page_size() - 1) / pool.page_size()));
}

Status SequenceKv::Reserve(int additional_tokens) {
  const int needed_tokens = num_tokens_ + additional_tokens;
  if (needed_tokens > max_tokens_) {
    return Status::Error("sequence of " + std::to_string(needed_tokens) +
                         " tokens exceeds the context length " + std::to_string(max_tokens_));
  }
  const size_t needed_pages = size_t((needed_tokens + pool_.page_size() - 1) / pool_.page_size());
  if (needed_pages <= pages_.size()) return Status::Ok();
  if (int64_t(needed_pages - pages_.size()) > pool_.num_free_pages()) {
    return Status::Error("KV cache pool is full: " + std::to_string(needed_pages - pages_.size()) +
                         " more pages needed, " + std::to_string(pool_.num_free_pages()) + " free");
  }
  while (pages_.size() < needed_pages) pages_.push_back(*pool_.Allocate());
  return Status::Ok();
}

void SequenceKv::Release() {
  for (PageId p : pages_) pool_.Free(p);
  pages_.clear();
  num_tokens_ = 0;
}

void SequenceKv::Truncate(int n) { num_tokens_ = std::min(num_tokens_, std::max(0, n)); }

}  // namespace mlaserve

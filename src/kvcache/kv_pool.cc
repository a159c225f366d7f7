#include "kvcache/kv_pool.h"

#include <sys/mman.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "core/check.h"

namespace mlaserve {

KvPool::KvPool(const KvPoolOptions& options, size_t row_bytes)
    : options_(options),
      row_bytes_(row_bytes),
      page_bytes_(row_bytes * size_t(options.page_size)),
      total_bytes_(page_bytes_ * size_t(options.num_pages) * size_t(options.num_layers)),
      tensor_scales_(size_t(options.num_layers), 1.0f) {}

Result<std::unique_ptr<KvPool>> KvPool::Create(const KvPoolOptions& o) {
  if (o.num_layers <= 0 || o.latent_dim <= 0 || o.rope_dim <= 0) {
    return Status::Error("KV pool: layers and dims must be positive");
  }
  if (o.page_size <= 0 || o.page_size > 4096) {
    return Status::Error("--page-size must be between 1 and 4096, got " + std::to_string(o.page_size));
  }
  if (o.num_pages <= 0 || o.num_pages > (int64_t(1) << 31) - 1) {
    return Status::Error("KV pool: the budget holds no page of " + std::to_string(o.page_size) +
                         " tokens");
  }
  MLA_RETURN_IF_ERROR(ValidateKvFormatDims(o.format, o.latent_dim, o.rope_dim));
  std::unique_ptr<KvPool> pool(new KvPool(o, KvRowBytes(o.format, o.latent_dim, o.rope_dim)));
  // One anonymous mapping: pages are backed by memory as they are first written, and the
  // budget is fixed here, once.
  void* p = ::mmap(nullptr, pool->total_bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return Status::Error("KV pool: cannot reserve " + std::to_string(pool->total_bytes_) +
                         " bytes: " + std::strerror(errno));
  }
  pool->storage_ = static_cast<std::byte*>(p);
  pool->free_pages_.reserve(size_t(o.num_pages));
  for (int64_t i = o.num_pages - 1; i >= 0; --i) pool->free_pages_.push_back(PageId(i));
  return pool;
}

KvPool::~KvPool() {
  if (storage_ != nullptr) ::munmap(storage_, total_bytes_);
}

Status KvPool::SetTensorScales(const std::vector<float>& scales) {
  if (scales.size() != tensor_scales_.size()) {
    return Status::Error("KV scales: " + std::to_string(scales.size()) + " layers given, the model has " +
                         std::to_string(tensor_scales_.size()));
  }
  for (float s : scales) {
    if (!(s > 0.0f) || !std::isfinite(s)) return Status::Error("KV scales must be positive and finite");
  }
  tensor_scales_ = scales;
  return Status::Ok();
}

std::optional<PageId> KvPool::Allocate() {
  if (free_pages_.empty()) return std::nullopt;
  PageId page = free_pages_.back();
  free_pages_.pop_back();
  return page;
}

void KvPool::Free(PageId page) {
  MLA_CHECK(page >= 0 && page < options_.num_pages);
  MLA_CHECK(free_pages_.size() < size_t(options_.num_pages));
  free_pages_.push_back(page);
}

}  // namespace mlaserve

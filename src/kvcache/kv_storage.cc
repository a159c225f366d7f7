#include "kvcache/kv_storage.h"

#include <sys/mman.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <string>

#include "core/check.h"

namespace mlaserve {

const char* PageLocationName(PageLocation location) {
  switch (location) {
    case PageLocation::kDevice: return "device";
    case PageLocation::kHost: return "host";
    case PageLocation::kDisk: return "disk";
  }
  return "?";
}

HostKvStorage::HostKvStorage(const KvStorageShape& shape, size_t row_bytes)
    : shape_(shape),
      row_bytes_(row_bytes),
      total_bytes_(row_bytes * size_t(shape.page_size) * size_t(shape.num_pages) * size_t(shape.num_layers)),
      tensor_scales_(size_t(shape.num_layers), 1.0f) {}

Result<std::unique_ptr<HostKvStorage>> HostKvStorage::Create(const KvStorageShape& s) {
  if (s.num_layers <= 0 || s.latent_dim <= 0 || s.rope_dim <= 0) {
    return Status::Error("KV storage: layers and dims must be positive");
  }
  MLA_RETURN_IF_ERROR(ValidatePageGeometry(s.page_size, s.num_pages));
  MLA_RETURN_IF_ERROR(ValidateKvFormatDims(s.format, s.latent_dim, s.rope_dim));
  std::unique_ptr<HostKvStorage> storage(new HostKvStorage(s, KvRowBytes(s.format, s.latent_dim, s.rope_dim)));
  // One anonymous mapping: pages are backed by memory as they are first written (with 2 MB pages
  // where the kernel gives them, 2 MB at a time), and the budget is fixed here, once.
  void* p = ::mmap(nullptr, storage->total_bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return Status::Error("KV storage: cannot reserve " + std::to_string(storage->total_bytes_) +
                         " bytes: " + std::strerror(errno));
  }
  // 2 MB pages where the kernel gives them (advice: refused or ignored, the memory still works):
  // decode reads every cached row of every running sequence each step, hundreds of MB at 32 x 4K,
  // and with 4 KB pages each 4 KB of rows costs a TLB miss.
  ::madvise(p, storage->total_bytes_, MADV_HUGEPAGE);
  storage->bytes_ = static_cast<std::byte*>(p);
  return storage;
}

HostKvStorage::~HostKvStorage() {
  if (bytes_ != nullptr) ::munmap(bytes_, total_bytes_);
}

PageLocation HostKvStorage::location(PageId page) const {
  MLA_CHECK(page >= 0 && page < shape_.num_pages);
  return PageLocation::kHost;
}

Status HostKvStorage::SetTensorScales(const std::vector<float>& scales) {
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

}  // namespace mlaserve

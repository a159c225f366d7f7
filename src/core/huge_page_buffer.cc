#include "core/huge_page_buffer.h"

#include <sys/mman.h>

#include <cstdint>
#include <utility>

namespace mlaserve {

HugePageBuffer::~HugePageBuffer() { Release(); }

HugePageBuffer::HugePageBuffer(HugePageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

void HugePageBuffer::Release() {
  if (data_ != nullptr) ::munmap(data_, mapped_);
  data_ = nullptr;
  size_ = mapped_ = 0;
}

bool HugePageBuffer::Assign(size_t bytes) {
  Release();
  if (bytes == 0) return true;
  mapped_ = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  // Map 2 MB more than needed and trim to a 2 MB boundary: a huge page needs an aligned range.
  void* raw = ::mmap(nullptr, mapped_ + kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    mapped_ = 0;
    return false;
  }
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (aligned > start) ::munmap(raw, aligned - start);
  const uintptr_t end = aligned + mapped_, raw_end = start + mapped_ + kHugePageBytes;
  if (raw_end > end) ::munmap(reinterpret_cast<void*>(end), raw_end - end);
  data_ = reinterpret_cast<std::byte*>(aligned);
  size_ = bytes;
  ::madvise(data_, mapped_, MADV_HUGEPAGE);  // advice: refused or ignored, the memory still works
  return true;  // anonymous memory is zero-filled
}

}  // namespace mlaserve

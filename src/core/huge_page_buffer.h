// A zero-filled block of memory the kernel is asked to back with transparent huge pages (2 MB):
// for the packed weights a decode step streams (hundreds of MB per token, where 4 KB pages would
// cost a TLB miss every 4 KB). Where the system refuses (THP "never", or no 2 MB pages free) it is
// ordinary memory. Owns its memory; not copyable.
#pragma once

#include <cstddef>

namespace mlaserve {

class HugePageBuffer {
 public:
  static constexpr size_t kHugePageBytes = size_t(2) << 20;

  HugePageBuffer() = default;
  ~HugePageBuffer();
  HugePageBuffer(HugePageBuffer&& other) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& other) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  // Replaces the contents with `bytes` zero bytes, 2 MB aligned (huge pages asked for before the
  // first touch, so that they are granted at fault time). Returns false if memory ran out (the
  // buffer is then empty).
  [[nodiscard]] bool Assign(size_t bytes);

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void Release();

  std::byte* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;  // bytes mapped (size_ rounded up to 2 MB)
};

}  // namespace mlaserve

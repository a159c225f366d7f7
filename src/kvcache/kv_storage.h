// KV storage: the bytes of the paged KV cache, apart from the bookkeeping of which page belongs
// to whom (PageAllocator, page_allocator.h). The runner side owns a storage (whoever constructs
// the ModelRunner, or SequenceRunner), the scheduler side its allocator; the two share only page
// ids and the geometry (page_size, num_pages), so one can change without the other.
// A storage knows, per page, where the page lives (PageLocation) and how its rows are laid out:
// one row is one token's [c_kv | k_pe] of one layer in the storage's KvFormat
// (kvcache/kv_format.h), and one page of one layer is page_size rows, the unit attention
// dequantizes as a tile.
#pragma once

#include <atomic>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "kvcache/kv_format.h"
#include "kvcache/page_allocator.h"

namespace mlaserve {

// Where a page's rows are. Only host memory exists today; a GPU runner's pages are kDevice and
// a host or disk tier holds evicted prefix pages (kHost, kDisk) that are copied in before use.
enum class PageLocation : uint8_t { kDevice, kHost, kDisk };
const char* PageLocationName(PageLocation location);

struct KvStorageShape {
  KvFormat format = KvFormat::kBF16;
  int num_layers = 0;
  int latent_dim = 0;  // kv_lora_rank
  int rope_dim = 0;    // qk_rope_head_dim
  int page_size = 16;  // tokens per page
  int64_t num_pages = 0;
};

// A borrowed view of rows this CPU can read and write, resolved once per forward call
// (KvStorage::HostRows), so finding a row is inline arithmetic, never a call per row. Valid for
// as long as the storage and only for pages whose location is kHost.
//   layout: [num_layers][num_pages][page_size][row_bytes]
class KvHostRows {
 public:
  KvHostRows() = default;  // empty: the storage has no host-addressable rows
  KvHostRows(std::byte* base, const KvStorageShape& shape, size_t row_bytes, std::span<const float> tensor_scales)
      : base_(base),
        format_(shape.format),
        latent_dim_(shape.latent_dim),
        rope_dim_(shape.rope_dim),
        page_size_(shape.page_size),
        num_pages_(size_t(shape.num_pages)),
        row_bytes_(row_bytes),
        page_bytes_(row_bytes * size_t(shape.page_size)),
        tensor_scales_(tensor_scales) {}

  bool empty() const { return base_ == nullptr; }
  KvFormat format() const { return format_; }
  int page_size() const { return page_size_; }
  size_t row_bytes() const { return row_bytes_; }
  // Per-layer per-tensor scale the rows were quantized with (plain fp8's k_scale, nvfp4's
  // global scale); 1.0 unless set.
  float tensor_scale(int layer) const { return tensor_scales_[size_t(layer)]; }

  // [page_size, row_bytes] rows of `page` in `layer`.
  std::byte* PageRows(int layer, PageId page) const {
    return base_ + (size_t(layer) * num_pages_ + size_t(page)) * page_bytes_;
  }
  // The row of `position` in `layer` for a sequence whose page table is `pages`: row
  // (position % page_size) of page pages[position / page_size].
  std::byte* Row(int layer, std::span<const PageId> pages, int position) const {
    return PageRows(layer, pages[size_t(position / page_size_)]) + size_t(position % page_size_) * row_bytes_;
  }

  // Quantizes `values` ([latent_dim + rope_dim] fp32) into the row of `position` in `layer`.
  void WriteRow(int layer, std::span<const PageId> pages, int position, const float* values) const {
    QuantizeKvRow(format_, values, latent_dim_, rope_dim_, tensor_scale(layer), Row(layer, pages, position));
  }
  // Dequantizes rows [position, position + num_rows) of `layer` into out ([num_rows, latent_dim
  // + rope_dim] fp32); they must lie in one page (attention's tile never crosses one).
  void ReadRows(int layer, std::span<const PageId> pages, int position, int num_rows, float* out) const {
    DequantizeKvRows(format_, Row(layer, pages, position), num_rows, row_bytes_, latent_dim_, rope_dim_,
                     tensor_scale(layer), out);
  }

 private:
  std::byte* base_ = nullptr;
  KvFormat format_ = KvFormat::kBF16;
  int latent_dim_ = 0;
  int rope_dim_ = 0;
  int page_size_ = 1;
  size_t num_pages_ = 0;
  size_t row_bytes_ = 0;
  size_t page_bytes_ = 0;
  std::span<const float> tensor_scales_;  // [num_layers]
};

// The bytes behind page ids. Implementations: HostKvStorage (below); later a device storage
// (its HostRows empty, its kernels reading device pages) or a tiered one. Sized once, never
// grown. Calls are per forward or per page, never per row: hot loops use a KvHostRows view.
// Not thread-safe; rows are written by the runner's forward only.
class KvStorage {
 public:
  virtual ~KvStorage() = default;

  // Unique in this process (a tensor-parallel job's workers mirror each storage by it).
  uint64_t uid() const { return uid_; }

  virtual const KvStorageShape& shape() const = 0;
  // KvRowBytes(format, latent_dim, rope_dim): one token of one layer.
  virtual size_t row_bytes() const = 0;
  // Where page `page` (in [0, num_pages)) lives now.
  virtual PageLocation location(PageId page) const = 0;
  // The rows of every kHost page, for computing on this CPU; empty when the storage has none.
  virtual KvHostRows HostRows() = 0;

  // What one token costs across all layers.
  size_t bytes_per_token() const { return row_bytes() * size_t(shape().num_layers); }

 private:
  static uint64_t NextUid() {
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
  }
  const uint64_t uid_ = NextUid();
};

// Every page in host memory: one anonymous mapping of [num_layers][num_pages][page_size]
// [row_bytes], reserved once (pages are backed as they are first written, 2 MB at a time where
// transparent huge pages are granted), plus the per-layer tensor scales of the format.
class HostKvStorage final : public KvStorage {
 public:
  // Errors (one line): non-positive layers or dims, dims the format cannot hold, a page size
  // outside [1, 4096], no page, or a mapping the system refuses.
  static Result<std::unique_ptr<HostKvStorage>> Create(const KvStorageShape& shape);
  ~HostKvStorage() override;
  HostKvStorage(const HostKvStorage&) = delete;
  HostKvStorage& operator=(const HostKvStorage&) = delete;

  const KvStorageShape& shape() const override { return shape_; }
  size_t row_bytes() const override { return row_bytes_; }
  PageLocation location(PageId page) const override;
  KvHostRows HostRows() override { return KvHostRows(bytes_, shape_, row_bytes_, tensor_scales_); }
  size_t total_bytes() const { return total_bytes_; }

  // One positive finite scale per layer; on error nothing changes.
  Status SetTensorScales(const std::vector<float>& scales);
  float tensor_scale(int layer) const { return tensor_scales_[size_t(layer)]; }

 private:
  HostKvStorage(const KvStorageShape& shape, size_t row_bytes);

  KvStorageShape shape_;
  size_t row_bytes_;
  size_t total_bytes_;
  std::byte* bytes_ = nullptr;        // anonymous mapping of total_bytes_
  std::vector<float> tensor_scales_;  // [num_layers]
};

}  // namespace mlaserve

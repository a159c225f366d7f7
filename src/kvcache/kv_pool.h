// The paged KV pool: storage for the absorbed-MLA cache of every sequence, in one format, sized
// once at start-up from the memory budget and never grown.
//   layout: [num_layers][num_pages][page_size][row_bytes]
// where a row is one token's [c_kv | k_pe] in the pool's KvFormat (kvcache/kv_format.h), so one
// page of one layer is page_size contiguous rows: the unit attention dequantizes as a tile.
// Pages are handed out and taken back by id in O(1) without allocating. The pool does not know
// which sequence owns a page: SequenceKv (sequence_kv.h) keeps the page tables.
// Not thread-safe: Allocate/Free are called from the engine thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/status.h"
#include "kvcache/kv_format.h"

namespace mlaserve {

using PageId = int32_t;

struct KvPoolOptions {
  KvFormat format = KvFormat::kBF16;
  int num_layers = 0;
  int latent_dim = 0;  // kv_lora_rank
  int rope_dim = 0;    // qk_rope_head_dim
  int page_size = 16;  // tokens per page
  int64_t num_pages = 0;
};

class KvPool {
 public:
  static Result<std::unique_ptr<KvPool>> Create(const KvPoolOptions& options);
  ~KvPool();
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  const KvPoolOptions& options() const { return options_; }
  KvFormat format() const { return options_.format; }
  int page_size() const { return options_.page_size; }
  int64_t num_pages() const { return options_.num_pages; }
  int64_t capacity_tokens() const { return options_.num_pages * options_.page_size; }
  size_t row_bytes() const { return row_bytes_; }
  // What one token costs across all layers.
  size_t bytes_per_token() const { return row_bytes_ * size_t(options_.num_layers); }
  size_t total_bytes() const { return total_bytes_; }

  // [page_size, row_bytes] rows of `page` in `layer`.
  std::byte* PageRows(int layer, PageId page) {
    return storage_ + (size_t(layer) * size_t(options_.num_pages) + size_t(page)) * page_bytes_;
  }
  const std::byte* PageRows(int layer, PageId page) const {
    return storage_ + (size_t(layer) * size_t(options_.num_pages) + size_t(page)) * page_bytes_;
  }

  // The row of `position` in `layer` for a sequence whose page table is `pages`: row
  // (position % page_size) of page pages[position / page_size].
  std::byte* Row(int layer, std::span<const PageId> pages, int position) {
    return PageRows(layer, pages[size_t(position / options_.page_size)]) +
           size_t(position % options_.page_size) * row_bytes_;
  }
  const std::byte* Row(int layer, std::span<const PageId> pages, int position) const {
    return PageRows(layer, pages[size_t(position / options_.page_size)]) +
           size_t(position % options_.page_size) * row_bytes_;
  }

  // Per-layer per-tensor scale (plain fp8's k_scale, nvfp4's global scale); 1.0 by default.
  float tensor_scale(int layer) const { return tensor_scales_[size_t(layer)]; }
  Status SetTensorScales(const std::vector<float>& scales);

  std::optional<PageId> Allocate();
  void Free(PageId page);
  int64_t num_free_pages() const { return int64_t(free_pages_.size()); }

 private:
  KvPool(const KvPoolOptions& options, size_t row_bytes);

  KvPoolOptions options_;
  size_t row_bytes_;
  size_t page_bytes_;
  size_t total_bytes_;
  std::byte* storage_ = nullptr;       // anonymous mapping of total_bytes_
  std::vector<PageId> free_pages_;     // stack; capacity num_pages, reserved at creation
  std::vector<float> tensor_scales_;   // [num_layers]
};

}  // namespace mlaserve

// Absorbed MLA decode attention over cache rows held as bf16, heads in vector lanes: the layouts
// of KernelSet's softmax_columns / latent_pack_query / latent_scores / latent_sum, and their
// plain reference (latent_attention_reference.cc) that tests compare the bf16 tables' kernels
// (latent_attention_avx512bf16.cc) with.
//
// One tile of n cache rows (n <= kKvTileRows) for every head of one query token:
//   scores[n, hp]  = rows @ q^T             latent_scores (bf16 x bf16 dot products)
//   p[n, hp]       = online softmax step    softmax_columns (per column: a head)
//   o[heads, L]    = o * corr + p^T @ rows  latent_sum (p rounded to bf16; bf16 x bf16 products
//                                           of row pairs, fp32 sums, over the rows' first L values;
//                                           corr nullptr: o = p^T @ rows, o not read)
// hp = LatentHeadsPadded(heads): scores and p hold whole vectors of heads; the padded heads'
// queries are zero and their columns are never read back into o.
#pragma once

#include <cstdint>

namespace mlaserve {

// The next tile's rows, fetched into L2 while this tile computes: a row is a short stream of ~18
// lines whose latency the hardware prefetcher would not hide. latent_scores and then latent_sum
// take turns over one RowPrefetch: each issues lines row by row from `issued` and advances it,
// latent_scores one line per step of its inner loop (at 16 heads about two thirds of a bf16
// tile's lines; with more heads, or fp8_ds_mla's shorter rows, all of them within the scores),
// latent_sum the rest spread evenly over its blocks (every line issued when it returns). So the
// fetch runs at a steady pace instead of bursting ahead of latent_sum's blocks, which filled
// the core's miss buffers and stalled the loads that hit L2 (in the model the kernels ran at
// about half their in-cache speed). A row that does not start a line crosses one line more than
// its length fills: every row's lines are counted with that one, the last one fetched at the
// row's last byte (RowLinePacer; for a row that starts a line, a second fetch of its last line).
struct RowPrefetch {
  const uint16_t* const* rows = nullptr;  // [count]
  int64_t count = 0;
  int64_t bytes = 0;   // of each row
  int64_t issued = 0;  // lines issued so far, row-major over rows (the kernels advance it)
  // The most lines a row can cross: its length's own, one more where it does not start a line.
  int64_t lines_per_row() const { return bytes > 0 ? (bytes + 62) / 64 + 1 : 0; }
  int64_t lines() const { return count * lines_per_row(); }
};

// A RowPrefetch's lines one at a time, row by row from its `issued`: Step() hands the next
// line's address to fetch (line k of a row at byte min(64 k, bytes - 1): from the row's first
// byte to its last in steps of at most 64, so every line the row crosses, however aligned);
// Finish() writes the progress back. The kernels' fetch is a prefetch into L2.
template <class Fetch>
class RowLinePacer {
 public:
  explicit RowLinePacer(const RowPrefetch& next, Fetch fetch = Fetch())
      : fetch_(fetch), rows_(next.rows), count_(next.count), last_byte_(next.bytes - 1),
        per_row_(next.lines_per_row()) {
    if (per_row_ > 0) {
      row_ = next.issued / per_row_;
      line_ = next.issued % per_row_;
    } else {
      row_ = count_;
    }
  }
  // Fetches the next line, if any is left.
  void Step() {
    if (row_ < count_) {
      const int64_t offset = line_ * 64 < last_byte_ ? line_ * 64 : last_byte_;
      fetch_(reinterpret_cast<const char*>(rows_[row_]) + offset);
      if (++line_ == per_row_) {
        line_ = 0;
        ++row_;
      }
    }
  }
  // Fetches every line left (a tile's rows at once: the first tile of a run, which no kernel
  // before it fetches).
  void StepAll() {
    while (row_ < count_) Step();
  }
  void Finish(RowPrefetch& next) const {
    const int64_t issued = row_ * per_row_ + line_;
    next.issued = issued < next.lines() ? issued : next.lines();
  }

 private:
  Fetch fetch_;
  const uint16_t* const* rows_;
  int64_t count_, last_byte_, per_row_;
  int64_t row_ = 0, line_ = 0;  // the next line: line_ of rows_[row_]
};

// The kernels' fetch: a line into L2 (prefetcht1).
struct PrefetchIntoL2 {
  void operator()(const char* address) const { __builtin_prefetch(address, 0, 2); }
};

// The kernels' limits: latent_sum's rows (a tile) and padded heads (MLA models have up to 128),
// latent_pack_query's row length (stack scratch).
inline constexpr int64_t kLatentSumMaxRows = 128;  // a tile (model/workspace.h kKvTileRows)
inline constexpr int64_t kLatentSumMaxHeads = 256;
inline constexpr int64_t kLatentMaxRowDim = 4096;

inline constexpr int64_t LatentHeadsPadded(int64_t heads) { return (heads + 15) / 16 * 16; }
// uint32 words of a packed query (latent_pack_query): every padded head's bf16 pairs.
inline constexpr int64_t LatentQueryWords(int64_t heads, int64_t row_dim) {
  return LatentHeadsPadded(heads) * row_dim / 2;
}
// The shapes the bf16 kernels take: row_dim whole quads of values (8-byte broadcasts) up to
// kLatentMaxRowDim, L whole 32-value blocks, at most kLatentSumMaxHeads heads once padded.
inline constexpr bool LatentShapeOk(int64_t row_dim, int64_t latent_dim, int64_t heads) {
  return row_dim % 4 == 0 && row_dim <= kLatentMaxRowDim && latent_dim % 32 == 0 && latent_dim <= row_dim &&
         (heads + 15) / 16 * 16 <= kLatentSumMaxHeads;
}

// Packed query layout: for each group g of 16 heads and each quad d of dimensions [4d, 4d + 4),
// two vectors of 16 uint32 words, v = 0 for heads 16g + [0, 8), v = 1 for 16g + [8, 16): word
// 2j + e of vector v is the bf16 pair (dims 4d + 2e, 4d + 2e + 1) of head 16g + 8v + j (low half:
// the even dimension). An 8-byte broadcast of a row's quad d then lines each head's two pairs up
// with its two words, so one vdpbf16ps multiplies four dimensions of eight heads.
inline constexpr int64_t LatentQueryIndex(int64_t row_dim, int64_t head, int64_t dim_pair) {
  const int64_t g = head / 16, v = (head % 16) / 8, j = head % 8, d = dim_pair / 2, e = dim_pair % 2;
  return ((g * (row_dim / 4) + d) * 2 + v) * 16 + 2 * j + e;
}

// The references: scalar, in the order of the bf16 kernels' sums (latent_scores: each head's two
// chains of pairs; latent_sum: row pairs in order), equal to the kernels within the rounding of
// how a vdpbf16ps adds its two products to its accumulator. They fetch nothing (`next` unread).
void LatentPackQueryReference(const float* q, int64_t heads, int64_t row_dim, uint32_t* q_pack);
void LatentScoresReference(const uint32_t* q_pack, int64_t hp, const uint16_t* const* rows, int64_t n,
                           int64_t row_dim, float* scores, RowPrefetch& next);
void LatentSumReference(const float* p, int64_t hp, int64_t heads, const float* corr, const uint16_t* const* rows,
                        int64_t n, int64_t latent_dim, float* o, RowPrefetch& next);

namespace avx512bf16 {
// The bf16 tables' kernels (latent_attention_avx512bf16.cc): only where CpuSupportsBf16Dot().
void LatentPackQuery(const float* q, int64_t heads, int64_t row_dim, uint32_t* q_pack);
void LatentScores(const uint32_t* q_pack, int64_t hp, const uint16_t* const* rows, int64_t n, int64_t row_dim,
                  float* scores, RowPrefetch& next);
void LatentSum(const float* p, int64_t hp, int64_t heads, const float* corr, const uint16_t* const* rows, int64_t n,
               int64_t latent_dim, float* o, RowPrefetch& next);
}  // namespace avx512bf16

}  // namespace mlaserve

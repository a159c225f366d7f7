// bench-kernels' decode attention table: one query token's absorbed attention over a layer's long
// context (its splits in work items as the model makes them: AttendLatentSplits), per kernel
// table, KV format and head count, on one thread and on the pool, against the compute bound of
// its products at the threads' peak; then each heads-in-lanes kernel alone on one tile that stays in L1/L2.
#include "cli/bench_decode_attention.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <limits>
#include <numeric>
#include <vector>

#include "cli/best_seconds.h"
#include "kernels/latent_attention.h"
#include "kvcache/kv_storage.h"
#include "kvcache/kv_widen_bf16.h"
#include "model/mla_decode_attention.h"

namespace mlaserve::cli {
namespace {

constexpr int kLatent = 512, kRope = 64, kRowDim = kLatent + kRope;
constexpr int kContext = 4096, kPageSize = 16;
// Layers of the cache, each attended once per round in turn: 37 MB of bf16 rows, more than the
// last-level cache, so that rows come from memory as a model's do.
constexpr int kLayers = 8;

// kLayers layers of kContext random rows in `format`, pages in order.
struct Cache {
  std::unique_ptr<HostKvStorage> storage;
  std::vector<PageId> pages;
};

Cache RandomCache(KvFormat format, std::mt19937& rng) {
  const int num_pages = kContext / kPageSize;
  auto storage = HostKvStorage::Create(
      {.format = format, .num_layers = kLayers, .latent_dim = kLatent, .rope_dim = kRope, .page_size = kPageSize,
       .num_pages = num_pages});
  Cache cache{.storage = std::move(storage).value(), .pages = std::vector<PageId>(size_t(num_pages))};
  std::iota(cache.pages.begin(), cache.pages.end(), PageId(0));
  std::normal_distribution<float> normal;
  std::vector<float> row(kRowDim);
  const KvHostRows rows = cache.storage->HostRows();
  for (int layer = 0; layer < kLayers; ++layer) {
    for (int p = 0; p < kContext; ++p) {
      for (float& x : row) x = normal(rng);
      rows.WriteRow(layer, cache.pages, p, row.data());
    }
  }
  return cache;
}

// The per-thread scratch AttendLatentSplits takes (workspace.cc's sizes for `heads`).
struct Scratch {
  explicit Scratch(int heads)
      : tile(size_t(kKvTileRows) * kRowDim),
        q_t(size_t(kRowDim) * ScoreColumns(heads)),
        scores(size_t(kKvTileRows) * ScoreColumns(heads)),
        probs(size_t(heads) * kKvTileRows),
        stats(size_t(3 * ScoreColumns(heads))) {}
  LatentScratch view() {
    return {.tile = tile.data(), .q_t = q_t.data(), .scores = scores.data(), .probs = probs.data(),
            .stats = stats.data()};
  }
  std::vector<float> tile, q_t, scores, probs, stats;
};

}  // namespace

void PrintDecodeAttentionTable(const std::vector<const KernelSet*>& tables, ThreadPool& pool, const FmaPeak& fma,
                               const std::optional<FmaPeak>& bf16, std::mt19937& rng) {
  std::printf("\ndecode attention: one token over a %d-position context of a layer (%d + %d values a row, %d-row "
              "pages; %d layers in turn, from memory), its splits (%d positions at 16 heads, %d at 128) in work items of "
              "SplitsPerItem splits taken by the threads as the model takes them, then the merge; per "
              "layer: GFLOP/s, share of the bound at the threads' peak of the products taken (bf16 dot "
              "products, else FMA)\n",
              kContext, kLatent, kRope, kPageSize, kLayers,
              LatentAttentionShape{.heads = 16, .latent_dim = kLatent, .rope_dim = kRope}.split_rows(kContext),
              LatentAttentionShape{.heads = 128, .latent_dim = kLatent, .rope_dim = kRope}.split_rows(kContext));
  std::printf("%-16s %-11s %6s %8s %9s %9s %9s %8s\n", "kernels", "kv format", "heads", "threads", "ms", "GFLOP/s",
              "KV GB/s", "of bound");
  std::normal_distribution<float> normal;
  for (KvFormat format : {KvFormat::kBF16, KvFormat::kFP8DsMla, KvFormat::kFP8E4M3}) {
    const Cache cache = RandomCache(format, rng);
    const KvHostRows rows = cache.storage->HostRows();
    for (int heads : {16, 128}) {
      const LatentAttentionShape shape{.heads = heads, .latent_dim = kLatent, .rope_dim = kRope, .gemm_scores = true};
      std::vector<float> q(size_t(heads) * kRowDim);
      for (float& x : q) x = normal(rng) * 0.05f;
      std::vector<Scratch> scratch;
      for (int t = 0; t < pool.num_threads(); ++t) scratch.emplace_back(heads);
      const int splits = shape.num_splits(kContext);
      std::vector<float> split_o(size_t(splits) * heads * kLatent), split_stats(size_t(splits) * heads * 2);
      std::vector<float> out(size_t(heads) * kLatent);
      for (const KernelSet* k : tables) {
        for (bool all_threads : {false, true}) {
          // Items of `group` splits (the last one fewer), as the model makes them.
          const int group = SplitsPerItem(splits, all_threads ? pool.num_threads() : 1);
          const int items = (splits + group - 1) / group;
          // As the model: a thread packs the layer's query for its first item of the layer only.
          auto attend = [&](int layer, int item, int thread, bool query_packed) {
            const int first = item * group;
            AttendLatentSplits(*k, rows, layer, cache.pages, kContext, first, std::min(group, splits - first), shape,
                               q.data(), 0.07f, scratch[size_t(thread)].view(), query_packed,
                               split_o.data() + size_t(first) * heads * kLatent,
                               split_stats.data() + size_t(first) * heads * 2);
          };
          const double s = BestSeconds(3, [&] {
            for (int layer = 0; layer < kLayers; ++layer) {
              if (all_threads) {
                std::atomic<int> next{0};
                pool.RunOnAll([&](int thread) {
                  bool packed = false;
                  for (int i = next.fetch_add(1); i < items; i = next.fetch_add(1), packed = true) {
                    attend(layer, i, thread, packed);
                  }
                });
                pool.ParallelFor(heads, 1, [&](int64_t begin, int64_t end) {
                  for (int64_t h = begin; h < end; ++h) {
                    MergeLatentSplits(*k, shape, int(h), splits, split_o.data(), split_stats.data(),
                                      out.data() + size_t(h) * kLatent);
                  }
                });
              } else {
                for (int i = 0; i < items; ++i) attend(layer, i, 0, /*query_packed=*/i > 0);
                for (int h = 0; h < heads; ++h) {
                  MergeLatentSplits(*k, shape, h, splits, split_o.data(), split_stats.data(),
                                    out.data() + size_t(h) * kLatent);
                }
              }
            }
          }) / kLayers;
          const double score_flops = 2.0 * heads * kContext * kRowDim, sum_flops = 2.0 * heads * kContext * kLatent;
          const FmaPeak& peak = LatentRowsInBf16(*k, format, shape) && bf16 ? *bf16 : fma;
          auto flops = [&](const FmaPeak& p) { return all_threads ? p.all_threads_flops : p.one_thread_flops; };
          const double bound_s = (score_flops + sum_flops) / flops(peak);
          std::printf("%-16s %-11s %6d %8d %9.3f %9.1f %9.2f %7.0f%%\n", k->name, KvFormatName(format), heads,
                      all_threads ? pool.num_threads() : 1, s * 1e3, (score_flops + sum_flops) / s / 1e9,
                      double(rows.row_bytes()) * kContext / s / 1e9, 100.0 * bound_s / s);
        }
      }
    }
  }

  // The heads-in-lanes kernels alone, one tile (kKvTileRows) of bf16 rows (in L1/L2), 16 heads.
  const KernelSet* bf16_table = nullptr;
  for (const KernelSet* k : tables) {
    if (k->latent_scores != nullptr) bf16_table = k;
  }
  if (bf16_table == nullptr || !bf16) return;
  const KernelSet& k = *bf16_table;
  constexpr int kHeads = 16, kHp = 16, kCalls = 200;
  std::vector<uint16_t> tile(size_t(kKvTileRows) * kRowDim);
  for (uint16_t& v : tile) v = uint16_t(0x3F00 + (rng() & 0xFF));  // bf16 values in [0.5, 1)
  std::vector<const uint16_t*> row_ptrs(kKvTileRows);
  for (int r = 0; r < kKvTileRows; ++r) row_ptrs[size_t(r)] = tile.data() + size_t(r) * kRowDim;
  std::vector<float> q(size_t(kHeads) * kRowDim, 0.01f), scores(size_t(kKvTileRows) * kHp), o(size_t(kHeads) * kLatent);
  std::vector<uint32_t> q_pack(size_t(LatentQueryWords(kHeads, kRowDim)));
  std::vector<float> run_max(kHp), run_sum(kHp), corr(kHp, 1.0f), saved(scores.size());
  k.latent_pack_query(q.data(), kHeads, kRowDim, q_pack.data());
  const double pack_s = BestSeconds(5, [&] {
    for (int i = 0; i < kCalls; ++i) k.latent_pack_query(q.data(), kHeads, kRowDim, q_pack.data());
  }) / kCalls;
  const double scores_s = BestSeconds(5, [&] {
    for (int i = 0; i < kCalls; ++i) {
      RowPrefetch none;
      k.latent_scores(q_pack.data(), kHp, row_ptrs.data(), kKvTileRows, kRowDim, scores.data(), none);
    }
  }) / kCalls;
  saved = scores;
  const double softmax_s = BestSeconds(5, [&] {
    for (int i = 0; i < kCalls; ++i) {
      std::fill(run_max.begin(), run_max.end(), -std::numeric_limits<float>::infinity());
      std::fill(run_sum.begin(), run_sum.end(), 0.0f);
      std::copy(saved.begin(), saved.end(), scores.begin());
      k.softmax_columns(scores.data(), kKvTileRows, kHp, 0.07f, run_max.data(), run_sum.data(), corr.data());
    }
  }) / kCalls;
  std::fill(corr.begin(), corr.end(), 1.0f);
  const double sum_s = BestSeconds(5, [&] {
    for (int i = 0; i < kCalls; ++i) {
      RowPrefetch none;
      k.latent_sum(scores.data(), kHp, kHeads, corr.data(), row_ptrs.data(), kKvTileRows, kLatent, o.data(), none);
    }
  }) / kCalls;
  const double score_flops = 2.0 * kHeads * kKvTileRows * kRowDim, sum_flops = 2.0 * kHeads * kKvTileRows * kLatent;
  std::printf("%s kernels alone, %d heads, one %d-row tile in cache: latent_pack_query %.2f us; latent_scores %.2f us "
              "(%.0f%% of the bf16 dot-product peak); softmax_columns %.2f us; latent_sum %.2f us (%.0f%% of the "
              "bf16 dot-product peak)\n",
              k.name, kHeads, kKvTileRows, pack_s * 1e6, scores_s * 1e6, 100.0 * score_flops / scores_s / bf16->one_thread_flops,
              softmax_s * 1e6, sum_s * 1e6, 100.0 * sum_flops / sum_s / bf16->one_thread_flops);

  // The widening of a tile into bf16 (WidenKvRowsBf16, what fp8 pages cost before the
  // kernels above), per format, rows in cache.
  std::printf("WidenKvRowsBf16, one %d-row tile in cache:", kKvTileRows);
  std::vector<float> values(kRowDim);
  for (KvFormat format : {KvFormat::kBF16, KvFormat::kFP8E4M3, KvFormat::kFP8DsMla}) {
    const size_t row_bytes = KvRowBytes(format, kLatent, kRope);
    std::vector<std::byte> rows(row_bytes * kKvTileRows);
    for (int r = 0; r < kKvTileRows; ++r) {
      for (float& x : values) x = normal(rng);
      QuantizeKvRow(format, values.data(), kLatent, kRope, 1.0f, rows.data() + size_t(r) * row_bytes);
    }
    const double widen_s = BestSeconds(5, [&] {
      for (int i = 0; i < kCalls; ++i) {
        WidenKvRowsBf16(format, rows.data(), kKvTileRows, row_bytes, kLatent, kRope, tile.data());
      }
    }) / kCalls;
    std::printf(" %s %.2f us;", KvFormatName(format), widen_s * 1e6);
  }
  std::printf("\n");
}

}  // namespace mlaserve::cli

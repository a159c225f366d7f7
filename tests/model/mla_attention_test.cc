// MLA attention's two fast forms against plain computations: the absorbed form split along the
// KV length (flash-decoding) against one unsplit pass and a double-precision softmax over the
// same dequantized rows; the MHA-form prefill against the absorbed form on long contexts; and the
// deterministic mode bit-exact across chunk sizes and thread counts at contexts of several splits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "core/float16.h"
#include "engine/sampler.h"
#include "support/greedy_request.h"
#include "engine/sequence_runner.h"
#include "model/mla_decode_attention.h"
#include "model/model.h"
#include "support/kernel_tables.h"

namespace mlaserve {
namespace {

constexpr auto Prompt = testing::RandomPrompt;

const std::string kModel = std::string(MLASERVE_SOURCE_DIR) + "/models/shakespeare-mla";

// `context` random rows of one layer written through a shuffled page table.
struct RandomCache {
  std::unique_ptr<HostKvStorage> storage;
  std::vector<PageId> pages;
};

RandomCache FillCache(KvFormat format, int page_size, int context, const LatentAttentionShape& shape,
                      std::mt19937& rng) {
  const int num_pages = (context + page_size - 1) / page_size;
  auto storage = HostKvStorage::Create({.format = format, .num_layers = 1, .latent_dim = shape.latent_dim,
                                        .rope_dim = shape.rope_dim, .page_size = page_size, .num_pages = num_pages});
  EXPECT_TRUE(storage.ok()) << storage.error();
  RandomCache cache{.storage = std::move(storage).value(), .pages = std::vector<PageId>(size_t(num_pages))};
  std::iota(cache.pages.begin(), cache.pages.end(), PageId(0));
  std::shuffle(cache.pages.begin(), cache.pages.end(), rng);
  std::normal_distribution<float> normal;
  std::vector<float> row(size_t(shape.row_dim()));
  const KvHostRows rows = cache.storage->HostRows();
  for (int p = 0; p < context; ++p) {
    for (float& x : row) x = normal(rng);
    rows.WriteRow(0, cache.pages, p, row.data());
  }
  return cache;
}

// The softmax-weighted latent of every head, in double, over rows dequantized one at a time.
std::vector<double> ReferenceAttention(const KvHostRows& rows, std::span<const PageId> pages, int context,
                                       const LatentAttentionShape& shape, const std::vector<float>& q_lat,
                                       float scale) {
  const int heads = shape.heads, L = shape.latent_dim, row_dim = shape.row_dim();
  std::vector<float> all(size_t(context) * row_dim);
  for (int p = 0; p < context; ++p) rows.ReadRows(0, pages, p, 1, all.data() + size_t(p) * row_dim);
  std::vector<double> out(size_t(heads) * L, 0.0);
  for (int h = 0; h < heads; ++h) {
    std::vector<double> scores(static_cast<size_t>(context));
    for (int p = 0; p < context; ++p) {
      double dot = 0;
      for (int i = 0; i < row_dim; ++i) dot += double(q_lat[size_t(h * row_dim + i)]) * all[size_t(p) * row_dim + i];
      scores[size_t(p)] = dot * scale;
    }
    const double m = *std::max_element(scores.begin(), scores.end());
    double sum = 0;
    for (double& s : scores) sum += (s = std::exp(s - m));
    for (int p = 0; p < context; ++p) {
      for (int i = 0; i < L; ++i) out[size_t(h) * L + i] += scores[size_t(p)] / sum * all[size_t(p) * row_dim + i];
    }
  }
  return out;
}

double MaxAbsDiff(std::span<const float> a, std::span<const double> b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(double(a[i]) - b[i]));
  return d;
}

// The split computation the model runs (fixed spans of split_rows(context), merged in order) and one
// unsplit pass over the same rows agree with the double reference, for quantized formats and
// page sizes down to one row; a context within one split gives the unsplit pass's bits exactly.
// Splits run several to a call (AttendLatentSplits) give each split's partial bit for bit.
// 4 heads take a dot product per score, 16 one product per tile; bf16 and fp8 pages with a bf16
// table take the heads-in-lanes kernels (LatentRowsInBf16), whose reference has the query in
// bf16 and whose tolerance covers probabilities rounded to bf16.
// The parameter: heads, and the model's heads (0: the same), which with the context decide the
// split length (split_rows(context): 512 positions where every head's partial fits 32 KB, here 4
// and 16 heads, and the context is at least kLongSplitMinContext; else 128, as for a rank of a
// 128-head model).
class KvSplits : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(KvSplits, MergeToTheUnsplitSoftmax) {
  const auto [num_heads, model_heads] = GetParam();
  const LatentAttentionShape shape{.heads = num_heads, .latent_dim = 128, .rope_dim = 32,
                                   .gemm_scores = num_heads >= 16, .model_heads = model_heads};
  const int heads = shape.heads, L = shape.latent_dim, row_dim = shape.row_dim();
  const float scale = 0.3f;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> q_lat(size_t(heads) * row_dim);
  for (float& x : q_lat) x = normal(rng);
  std::vector<float> tile(size_t(kKvTileRows) * row_dim), q_t(size_t(row_dim) * ScoreColumns(heads));
  std::vector<float> tile_scores(size_t(kKvTileRows) * ScoreColumns(heads)), tile_probs(size_t(heads) * kKvTileRows);
  std::vector<float> tile_stats(size_t(3 * ScoreColumns(heads)));
  const LatentScratch scratch{.tile = tile.data(), .q_t = q_t.data(), .scores = tile_scores.data(),
                              .probs = tile_probs.data(), .stats = tile_stats.data()};
  std::vector<const KernelSet*> tables = testing::RunnableKernelTables();
  if (CpuSupportsBf16Dot()) tables.push_back(Avx512Bf16Kernels(1));
  const std::vector<float> nan_q(q_lat.size(), std::nanf(""));
  std::vector<float> q_bf16(q_lat.size());
  for (size_t i = 0; i < q_lat.size(); ++i) q_bf16[i] = Bf16ToF32(F32ToBf16(q_lat[i]));
  for (const KernelSet* k : tables) {
    for (KvFormat format : {KvFormat::kBF16, KvFormat::kFP8E4M3, KvFormat::kFP8DsMla, KvFormat::kFP4E2M1,
                            KvFormat::kNVFP4}) {
      for (int page_size : {1, 16, 64}) {
        for (int context : {100, 200, 2100}) {  // one split, two, and 5 of 512 (17 of 128)
          SCOPED_TRACE(std::string(k->name) + " " + KvFormatName(format) + " page " + std::to_string(page_size) +
                       " context " + std::to_string(context));
          const RandomCache cache = FillCache(format, page_size, context, shape, rng);
          const KvHostRows rows = cache.storage->HostRows();
          const bool bf16_queries = LatentRowsInBf16(*k, format, shape);
          const std::vector<double> expected =
              ReferenceAttention(rows, cache.pages, context, shape, bf16_queries ? q_bf16 : q_lat, scale);
          // The bf16 kernels also round each probability to bf16 (relative error <= 2^-9), so an
          // output may be off by up to 2^-9 of the largest latent value it averages; else fp32
          // rounding only.
          double tolerance = 2e-5;
          if (bf16_queries) {
            std::vector<float> row(static_cast<size_t>(row_dim));
            double max_latent = 0.0;
            for (int p = 0; p < context; ++p) {
              rows.ReadRows(0, cache.pages, p, 1, row.data());
              for (int i = 0; i < L; ++i) max_latent = std::max(max_latent, double(std::fabs(row[size_t(i)])));
            }
            tolerance += max_latent / 512.0;
          }

          // One pass over the whole context, normalized per head: the computation before splits.
          std::vector<float> unsplit(size_t(heads) * L), stats(size_t(heads) * 2);
          AttendLatentRows(*k, rows, 0, cache.pages, 0, context, shape, q_lat.data(), scale, scratch,
                           unsplit.data(), stats.data());
          for (int h = 0; h < heads; ++h) {
            const float inv = 1.0f / stats[size_t(2 * h + 1)];
            for (int i = 0; i < L; ++i) unsplit[size_t(h * L + i)] *= inv;
          }
          EXPECT_LT(MaxAbsDiff(unsplit, expected), tolerance);

          const int split_rows = shape.split_rows(context), splits = shape.num_splits(context);
          const bool long_splits = model_heads != 128 && context >= kLongSplitMinContext;
          ASSERT_EQ(split_rows, long_splits ? kLongKvSplitRows : kKvSplitRows);
          std::vector<float> split_o(size_t(splits) * heads * L), split_stats(size_t(splits) * heads * 2);
          for (int s = 0; s < splits; ++s) {
            const int begin = s * split_rows, end = std::min(context, begin + split_rows);
            AttendLatentRows(*k, rows, 0, cache.pages, begin, end, shape, q_lat.data(), scale, scratch,
                             split_o.data() + size_t(s) * heads * L, split_stats.data() + size_t(s) * heads * 2);
          }
          std::vector<float> merged(size_t(heads) * L);
          for (int h = 0; h < heads; ++h) {
            MergeLatentSplits(*k, shape, h, splits, split_o.data(), split_stats.data(), merged.data() + size_t(h) * L);
          }
          EXPECT_LT(MaxAbsDiff(merged, expected), tolerance);
          if (splits == 1) {
            EXPECT_EQ(merged, unsplit);
          }
          // Several splits by one call (the model's work items): each split's partial bit for bit,
          // whichever call holds it (all at once; the first alone, then the rest; in twos), the
          // query packed by a group's first call only (as a thread's next item of the same token).
          // The outputs start as NaN (a first tile that read them would show), the scratch's query
          // too (the first call must pack), and where the table packs (LatentRowsInBf16) the later
          // calls get a NaN query (they must use the packed one).
          const bool packs = LatentRowsInBf16(*k, format, shape);
          for (int group : {splits, 1, 2}) {
            std::vector<float> grouped_o(split_o.size(), std::nanf(""));
            std::vector<float> grouped_stats(split_stats.size(), std::nanf(""));
            std::fill(q_t.begin(), q_t.end(), std::nanf(""));
            for (int s0 = 0, count = group; s0 < splits;
                 s0 += count, count = group == 1 ? splits - s0 : std::min(group, splits - s0)) {
              const float* q = packs && s0 > 0 ? nan_q.data() : q_lat.data();
              AttendLatentSplits(*k, rows, 0, cache.pages, context, s0, count, shape, q, scale, scratch,
                                 /*query_packed=*/s0 > 0, grouped_o.data() + size_t(s0) * heads * L,
                                 grouped_stats.data() + size_t(s0) * heads * 2);
            }
            EXPECT_EQ(grouped_o, split_o);
            EXPECT_EQ(grouped_stats, split_stats);
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(MlaAttention, KvSplits,
                         ::testing::Values(std::pair{4, 0}, std::pair{16, 0}, std::pair{16, 128}));

// A tensor-parallel rank computes a subset of the heads with the scores path of the whole model:
// its heads' outputs and softmax statistics are bit-identical to the same heads computed with all
// of them (8 of 16 heads, the first and the second half, every kernel table, the bf16 ones too).
TEST(KvSplits, ARanksHeadsEqualTheSameHeadsOfAllHeads) {
  const LatentAttentionShape all{.heads = 16, .latent_dim = 128, .rope_dim = 32, .gemm_scores = true};
  const int L = all.latent_dim, row_dim = all.row_dim();
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::vector<float> q_lat(size_t(all.heads) * row_dim);
  for (float& x : q_lat) x = normal(rng);
  std::vector<float> tile(size_t(kKvTileRows) * row_dim), q_t(size_t(row_dim) * ScoreColumns(all.heads));
  std::vector<float> scores(size_t(kKvTileRows) * ScoreColumns(all.heads)), probs(size_t(all.heads) * kKvTileRows);
  std::vector<float> stats_scratch(size_t(3 * ScoreColumns(all.heads)));
  const LatentScratch scratch{.tile = tile.data(), .q_t = q_t.data(), .scores = scores.data(), .probs = probs.data(),
                              .stats = stats_scratch.data()};
  const RandomCache cache = FillCache(KvFormat::kBF16, 16, 300, all, rng);
  const KvHostRows rows = cache.storage->HostRows();
  std::vector<const KernelSet*> tables = testing::RunnableKernelTables();
  // bf16 tables: from 2 tokens the model's 16 heads take bf16 scores, and so does a rank's 8;
  // from 17, neither does.
  if (CpuSupportsBf16Dot()) tables.insert(tables.end(), {Avx512Bf16Kernels(2), Avx512Bf16Kernels(17)});
  for (const KernelSet* k : tables) {
    SCOPED_TRACE(k->name);
    std::vector<float> o_all(size_t(all.heads) * L), stats_all(size_t(all.heads) * 2);
    AttendLatentRows(*k, rows, 0, cache.pages, 0, 300, all, q_lat.data(), 0.3f, scratch, o_all.data(), stats_all.data());
    for (int first : {0, 8}) {
      LatentAttentionShape rank = all;
      rank.heads = 8;
      rank.model_heads = all.heads;
      std::vector<float> o(size_t(rank.heads) * L), stats(size_t(rank.heads) * 2);
      AttendLatentRows(*k, rows, 0, cache.pages, 0, 300, rank, q_lat.data() + size_t(first) * row_dim, 0.3f, scratch,
                       o.data(), stats.data());
      EXPECT_EQ(o, std::vector<float>(o_all.begin() + first * L, o_all.begin() + (first + 8) * L)) << first;
      EXPECT_EQ(stats, std::vector<float>(stats_all.begin() + first * 2, stats_all.begin() + (first + 8) * 2)) << first;
    }
  }
}

// Every token's logits for `prompt`, then those of `decode_steps` greedy steps.
// The logits of the prompt, then of decode_steps tokens appended one at a time: `decode`'s (when
// given and not empty), else greedy ones, written to *decode when given, so that a second model
// can be fed the same tokens (a near-tie may otherwise pick another token and compare logits of
// different inputs).
// kernels: the table the model computes with (nullptr: DefaultKernels()).
std::vector<float> RunLogits(Model& model, const std::vector<TokenId>& prompt, KvFormat format, int page_size,
                             int decode_steps, std::vector<TokenId>* decode = nullptr,
                             const KernelSet* kernels = nullptr) {
  auto runner = SequenceRunner::Create(model, kernels != nullptr ? *kernels : DefaultKernels(),
                                       {.kv_format = format, .page_size = page_size});
  EXPECT_TRUE(runner.ok()) << runner.error();
  if (!runner.ok()) return {};
  std::vector<float> logits;
  auto collect = [&](int, int count, const float* rows) {
    logits.insert(logits.end(), rows, rows + size_t(count) * model.config().vocab_size);
  };
  SequenceRunner::LogitsSink sink(collect);
  EXPECT_TRUE((*runner)->Append(prompt, &sink).ok());
  const bool given = decode != nullptr && !decode->empty();
  for (int step = 0; step < decode_steps; ++step) {
    const TokenId next = given ? (*decode)[size_t(step)] : ArgMax((*runner)->last_logits());
    if (decode != nullptr && !given) decode->push_back(next);
    EXPECT_TRUE((*runner)->Append(std::span(&next, 1), &sink).ok());
  }
  return logits;
}

// The MHA-form prefill (default mode, chunks of 512 with the earlier chunks cached) against the
// absorbed form (deterministic mode) over a 1200-token prompt, fp8 and fp4 caches, page sizes
// 1/16/64: the logits of 99% of the tokens within 1e-3 of the largest logit, all within 1e-2 (see
// below), and the decode steps after them too (the same tokens appended to both).
TEST(MlaAttention, MhaPrefillMatchesAbsorbedFormOnLongContexts) {
  auto fast = Model::Load(kModel, ModelOptions{.max_batch_tokens = 512, .max_context = 1400});
  auto exact = Model::Load(kModel, ModelOptions{.max_batch_tokens = 512, .max_context = 1400, .deterministic = true});
  ASSERT_TRUE(fast.ok() && exact.ok());
  const std::vector<TokenId> prompt = Prompt(1200, 11);
  for (KvFormat format : {KvFormat::kFP8E4M3, KvFormat::kFP4E2M1}) {
    for (int page_size : {1, 16, 64}) {
      SCOPED_TRACE(std::string(KvFormatName(format)) + " page " + std::to_string(page_size));
      std::vector<TokenId> decode;  // the absorbed form's greedy tokens, fed to both
      const std::vector<float> want = RunLogits(**exact, prompt, format, page_size, 3, &decode);
      const std::vector<float> got = RunLogits(**fast, prompt, format, page_size, 3, &decode);
      ASSERT_EQ(got.size(), want.size());
      const size_t vocab = size_t((*fast)->config().vocab_size);
      double max_diff = 0, max_logit = 0;
      std::vector<double> row_diff(got.size() / vocab, 0.0);  // each token's largest difference
      for (size_t i = 0; i < got.size(); ++i) {
        const double diff = std::abs(double(got[i]) - want[i]);
        row_diff[i / vocab] = std::max(row_diff[i / vocab], diff);
        max_diff = std::max(max_diff, diff);
        max_logit = std::max(max_logit, std::abs(double(want[i])));
      }
      // The two forms sum in different orders, so a cache value near a rounding boundary of the
      // quantized format can round to the neighbouring code in one form and not the other (fp8
      // E4M3: 1/16 of the value); its token and the few after it then differ by more (measured:
      // up to 3e-3 of the largest logit over tokens 298-312, one such run in six). 99% of the
      // tokens must agree within 1e-3 of the largest logit, every token within 1e-2.
      std::sort(row_diff.begin(), row_diff.end());
      EXPECT_LT(row_diff[row_diff.size() * 99 / 100], 1e-3 * max_logit) << "largest logit " << max_logit;
      EXPECT_LT(max_diff, 1e-2 * max_logit) << "largest logit " << max_logit;
      EXPECT_GT(max_diff, 0.0) << "the two forms ran the same code";
    }
  }
}

// The MHA-form prefill with a bf16 table, whose attention keys and values go into bf16 panels
// through the table's pack_f32_panels (gathers and the conversion instruction): the same logits,
// bit for bit, as the same table with that entry taken away (PackF32Panels, the plain reference),
// over a 1200-token prompt in chunks of 512 (blocks of 512 keys, a short last one).
TEST(MlaAttention, MhaPrefillPacksBf16PanelsAsTheReferenceDoes) {
  if (!CpuSupportsBf16Dot()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  auto model = Model::Load(kModel, ModelOptions{.max_batch_tokens = 512, .max_context = 1400});
  ASSERT_TRUE(model.ok());
  const KernelSet* fast = Avx512Bf16Kernels(2);
  ASSERT_NE(fast->pack_f32_panels, nullptr);
  KernelSet plain = *fast;
  plain.pack_f32_panels = nullptr;
  const std::vector<TokenId> prompt = Prompt(1200, 11);
  std::vector<TokenId> decode;  // the first run's greedy tokens, fed to the second
  const std::vector<float> want = RunLogits(**model, prompt, KvFormat::kBF16, 16, 2, &decode, &plain);
  const std::vector<float> got = RunLogits(**model, prompt, KvFormat::kBF16, 16, 2, &decode, fast);
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(got, want);
}

// Deterministic mode at a context of nine KV splits: the same logits, bit for bit, whether the
// prompt is computed in chunks of 64 on one thread (the splits then span several waves of work
// items) or of 512 on two, and through the decode steps after it.
TEST(MlaAttention, DeterministicModeIsChunkAndThreadInvariantAtLongContexts) {
  auto small = Model::Load(kModel, ModelOptions{.max_batch_tokens = 64, .max_context = 1200, .num_threads = 1,
                                                .deterministic = true});
  auto large = Model::Load(kModel, ModelOptions{.max_batch_tokens = 512, .max_context = 1200, .num_threads = 2,
                                                .deterministic = true});
  ASSERT_TRUE(small.ok() && large.ok());
  const std::vector<TokenId> prompt = Prompt(1100, 12);
  for (int page_size : {1, 16}) {
    SCOPED_TRACE("page " + std::to_string(page_size));
    const std::vector<float> a = RunLogits(**small, prompt, KvFormat::kFP8E4M3, page_size, 4);
    const std::vector<float> b = RunLogits(**large, prompt, KvFormat::kFP8E4M3, page_size, 4);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_TRUE(a == b);
  }
}

}  // namespace
}  // namespace mlaserve

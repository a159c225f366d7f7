// The heads-in-lanes decode attention kernels (kernels/latent_attention.h) against their plain
// references: the bf16 tables' packed query bit for bit, scores and weighted sums within rounding
// of the order of a vdpbf16ps's two products; softmax_columns of every SIMD table
// against the portable one (std::exp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/float16.h"
#include "kernels/kernels.h"
#include "kernels/latent_attention.h"
#include "support/kernel_tables.h"

namespace mlaserve {
namespace {

// n rows of row_dim bf16 values in separate allocations with a gap between them (rows are read
// through pointers, as cache pages are), and their pointers.
struct Rows {
  std::vector<std::vector<uint16_t>> storage;
  std::vector<const uint16_t*> ptrs;
};

Rows RandomRows(int64_t n, int64_t row_dim, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  Rows rows;
  for (int64_t r = 0; r < n; ++r) {
    std::vector<uint16_t> row(size_t(row_dim + 7));
    for (uint16_t& v : row) v = F32ToBf16(normal(rng));
    rows.storage.push_back(std::move(row));
  }
  for (const auto& row : rows.storage) rows.ptrs.push_back(row.data() + 3);  // 6 bytes in: unaligned
  return rows;
}

std::vector<float> Random(size_t n, float sigma, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

const KernelSet* Bf16Table() { return CpuSupportsBf16Dot() ? Avx512Bf16Kernels(1) : nullptr; }

// Heads counts: one group with padding, whole groups, a group and a half, DeepSeek-V3's 128.
constexpr int64_t kHeadCounts[] = {1, 4, 8, 16, 24, 128};
// (row_dim, latent_dim): the DeepSeek shape, the bundled model's, a small one.
constexpr std::pair<int64_t, int64_t> kShapes[] = {{576, 512}, {160, 128}, {40, 32}};

// The prefetch pacer hands out every cache line each row crosses, rows in order, whatever the
// row's length and alignment (fp8_ds_mla's 656-byte rows start anywhere in a line), resuming
// where `issued` says and stopping at the last line.
TEST(LatentAttention, RowLinePacerFetchesEveryLineOfEveryRow) {
  struct Record {
    std::vector<uintptr_t>* lines;
    void operator()(const char* address) const { lines->push_back(reinterpret_cast<uintptr_t>(address) / 64); }
  };
  alignas(64) static char buffer[8 * 4096];
  for (int64_t bytes : {80, 640, 656, 1152}) {
    for (int64_t start : {0, 2, 60}) {  // the first row's offset in its line (rows are bytes apart)
      SCOPED_TRACE("bytes " + std::to_string(bytes) + " start " + std::to_string(start));
      const int64_t count = 5;
      std::vector<const uint16_t*> rows;
      for (int64_t r = 0; r < count; ++r) {
        rows.push_back(reinterpret_cast<const uint16_t*>(buffer + start + r * bytes));
      }
      // Each row's lines, in order (the lines it crosses, from its first byte to its last).
      std::vector<std::vector<uintptr_t>> want(static_cast<size_t>(count));
      for (int64_t r = 0; r < count; ++r) {
        const auto first = reinterpret_cast<uintptr_t>(rows[size_t(r)]);
        for (uintptr_t line = first / 64; line <= (first + uintptr_t(bytes) - 1) / 64; ++line) {
          want[size_t(r)].push_back(line);
        }
      }
      for (int64_t resume : {int64_t(0), int64_t(7)}) {
        RowPrefetch next{.rows = rows.data(), .count = count, .bytes = bytes, .issued = resume};
        std::vector<uintptr_t> got;
        RowLinePacer<Record> pacer(next, Record{&got});
        for (int64_t i = 0; i < next.lines() + 3; ++i) pacer.Step();  // 3 past the end: no-ops
        pacer.Finish(next);
        EXPECT_EQ(next.issued, next.lines());
        ASSERT_EQ(int64_t(got.size()), next.lines() - resume);
        // Fetched in order; every row's lines are among those fetched for it, no other line.
        const int64_t per_row = next.lines_per_row();
        for (int64_t k = resume; k < next.lines(); ++k) {
          const int64_t r = k / per_row;
          const uintptr_t line = got[size_t(k - resume)];
          EXPECT_TRUE(std::find(want[size_t(r)].begin(), want[size_t(r)].end(), line) != want[size_t(r)].end())
              << "fetch " << k << " is outside row " << r;
        }
        for (int64_t r = (resume + per_row - 1) / per_row; r < count; ++r) {  // the rows fetched whole
          for (uintptr_t line : want[size_t(r)]) {
            EXPECT_TRUE(std::find(got.begin() + (r * per_row - resume), got.begin() + ((r + 1) * per_row - resume),
                                  line) != got.begin() + ((r + 1) * per_row - resume))
                << "row " << r << " line " << line << " not fetched";
          }
        }
      }
      // StepAll: the same lines at once.
      {
        RowPrefetch all{.rows = rows.data(), .count = count, .bytes = bytes};
        std::vector<uintptr_t> stepped, at_once;
        RowLinePacer<Record> one(all, Record{&stepped});
        for (int64_t i = 0; i < all.lines(); ++i) one.Step();
        RowLinePacer<Record>(all, Record{&at_once}).StepAll();
        EXPECT_EQ(at_once, stepped);
      }
      // No rows, or nothing left: nothing fetched.
      RowPrefetch none{.rows = rows.data(), .count = 0, .bytes = bytes};
      std::vector<uintptr_t> got;
      RowLinePacer<Record> empty(none, Record{&got});
      empty.Step();
      RowPrefetch done{.rows = rows.data(), .count = count, .bytes = bytes};
      done.issued = done.lines();
      RowLinePacer<Record> finished(done, Record{&got});
      finished.Step();
      EXPECT_TRUE(got.empty());
    }
  }
}

TEST(LatentAttention, PackedQueryIsTheReferenceLayout) {
  const KernelSet* k = Bf16Table();
  if (k == nullptr) GTEST_SKIP() << "this CPU lacks AVX512-BF16";
  std::mt19937 rng(1);
  for (int64_t heads : kHeadCounts) {
    for (auto [row_dim, latent_dim] : kShapes) {
      SCOPED_TRACE("heads " + std::to_string(heads) + " row_dim " + std::to_string(row_dim));
      const std::vector<float> q = Random(size_t(heads * row_dim), 3.0f, rng);
      std::vector<uint32_t> want(size_t(LatentQueryWords(heads, row_dim)), 7u), got(want.size(), 9u);
      LatentPackQueryReference(q.data(), heads, row_dim, want.data());
      k->latent_pack_query(q.data(), heads, row_dim, got.data());
      ASSERT_EQ(got, want);
    }
  }
}

TEST(LatentAttention, ScoresMatchTheReference) {
  const KernelSet* k = Bf16Table();
  if (k == nullptr) GTEST_SKIP() << "this CPU lacks AVX512-BF16";
  std::mt19937 rng(2);
  for (int64_t heads : kHeadCounts) {
    for (auto [row_dim, latent_dim] : kShapes) {
      const std::vector<float> q = Random(size_t(heads * row_dim), 1.0f, rng);
      std::vector<uint32_t> q_pack(size_t(LatentQueryWords(heads, row_dim)));
      LatentPackQueryReference(q.data(), heads, row_dim, q_pack.data());
      const int64_t hp = LatentHeadsPadded(heads);
      for (int64_t n : {1, 5, 12, 13, 64, 128}) {
        SCOPED_TRACE("heads " + std::to_string(heads) + " row_dim " + std::to_string(row_dim) + " n " +
                     std::to_string(n));
        const Rows rows = RandomRows(n, row_dim, rng);
        std::vector<float> want(size_t(n * hp)), got(size_t(n * hp), std::nanf(""));
        // The next tile's rows fetched meanwhile (here the same rows): paced, some lines issued.
        RowPrefetch next{.rows = rows.ptrs.data(), .count = n, .bytes = 2 * row_dim}, unread;
        LatentScoresReference(q_pack.data(), hp, rows.ptrs.data(), n, row_dim, want.data(), unread);
        k->latent_scores(q_pack.data(), hp, rows.ptrs.data(), n, row_dim, got.data(), next);
        // One line a step: a step per 16 heads, 12-row block and quad of the row.
        EXPECT_EQ(next.issued, std::min(next.lines(), hp / 16 * ((n + 11) / 12) * (row_dim / 4)));
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t h = 0; h < hp; ++h) {
            // Rounding bound: every fp32 addition of a chain errs by at most an ulp of its
            // running sum, itself at most the sum of |terms|.
            double abs_terms = 0.0;
            for (int64_t i = 0; i < row_dim && h < heads; ++i) {
              abs_terms += std::fabs(double(Bf16ToF32(F32ToBf16(q[size_t(h * row_dim + i)]))) *
                                     double(Bf16ToF32(rows.ptrs[size_t(r)][i])));
            }
            const float g = got[size_t(r * hp + h)], w = want[size_t(r * hp + h)];
            if (h >= heads) {
              ASSERT_EQ(g, 0.0f) << "padded head " << h;  // zero queries
            } else {
              ASSERT_NEAR(g, w, 1e-6 * abs_terms + 1e-30) << "row " << r << " head " << h;
            }
          }
        }
      }
    }
  }
}

TEST(LatentAttention, WeightedSumMatchesTheReference) {
  const KernelSet* k = Bf16Table();
  if (k == nullptr) GTEST_SKIP() << "this CPU lacks AVX512-BF16";
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (int64_t heads : kHeadCounts) {
    for (auto [row_dim, latent_dim] : kShapes) {
      const int64_t hp = LatentHeadsPadded(heads);
      for (int64_t n : {1, 3, 17, 64, 127, 128}) {
        for (bool fresh : {false, true}) {  // fresh: a partial's first tile (corr nullptr, o not read)
          SCOPED_TRACE("heads " + std::to_string(heads) + " latent " + std::to_string(latent_dim) + " n " +
                       std::to_string(n) + (fresh ? " fresh" : ""));
          const Rows rows = RandomRows(n, row_dim, rng);
          std::vector<float> p(size_t(n * hp)), corr(static_cast<size_t>(hp));
          for (float& x : p) x = unit(rng);
          for (float& x : corr) x = unit(rng);
          corr[0] = 0.0f;  // a correction that underflowed
          const std::vector<float> o = fresh ? std::vector<float>(size_t(heads * latent_dim), std::nanf(""))
                                             : Random(size_t(heads * latent_dim), 2.0f, rng);
          const float* c = fresh ? nullptr : corr.data();
          std::vector<float> want = o, got = o;
          // latent_scores issued some of the next rows' lines; latent_sum issues the rest.
          RowPrefetch next{.rows = rows.ptrs.data(), .count = n, .bytes = 2 * row_dim}, unread;
          next.issued = n == 17 ? next.lines() : next.lines() / 3;  // some left, or none (fp8's, 128 heads')
          LatentSumReference(p.data(), hp, heads, c, rows.ptrs.data(), n, latent_dim, want.data(), unread);
          k->latent_sum(p.data(), hp, heads, c, rows.ptrs.data(), n, latent_dim, got.data(), next);
          EXPECT_EQ(next.issued, next.lines());
          for (int64_t h = 0; h < heads; ++h) {
            for (int64_t v = 0; v < latent_dim; ++v) {
              // Rounding bound: an ulp of each running sum, at most the sum of |terms|.
              double abs_terms = fresh ? 0.0 : std::fabs(double(o[size_t(h * latent_dim + v)]) * corr[size_t(h)]);
              for (int64_t r = 0; r < n; ++r) {
                abs_terms += std::fabs(double(Bf16ToF32(F32ToBf16(p[size_t(r * hp + h)]))) *
                                       double(Bf16ToF32(rows.ptrs[size_t(r)][v])));
              }
              const size_t i = size_t(h * latent_dim + v);
              ASSERT_TRUE(std::isfinite(want[i]));
              ASSERT_NEAR(got[i], want[i], 1e-6 * abs_terms + 1e-30) << "head " << h << " value " << v;
            }
          }
        }
      }
    }
  }
}

// Two tiles through softmax_columns, from the initial state (max -inf, sum 0): every SIMD table
// against the portable reference, and the reference against its definition.
TEST(LatentAttention, SoftmaxColumnsMatchesTheReference) {
  std::mt19937 rng(4);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t hp : {16, 32}) {
    for (int64_t n : {1, 7, 64, 128}) {
      SCOPED_TRACE("hp " + std::to_string(hp) + " n " + std::to_string(n));
      const std::vector<float> tile0 = Random(size_t(n * hp), 20.0f, rng), tile1 = Random(size_t(n * hp), 20.0f, rng);
      const float scale = 0.125f;
      // The reference's own definition, per column, in double.
      std::vector<float> ref0 = tile0, ref1 = tile1;
      std::vector<float> ref_max(size_t(hp), -inf), ref_sum(size_t(hp), 0.0f), ref_corr(static_cast<size_t>(hp));
      const KernelSet& portable = PortableKernels();
      portable.softmax_columns(ref0.data(), n, hp, scale, ref_max.data(), ref_sum.data(), ref_corr.data());
      for (float c : ref_corr) ASSERT_EQ(c, 0.0f);
      portable.softmax_columns(ref1.data(), n, hp, scale, ref_max.data(), ref_sum.data(), ref_corr.data());
      for (int64_t h = 0; h < hp; ++h) {
        double m = -INFINITY;
        for (int64_t r = 0; r < n; ++r) {
          m = std::max({m, double(tile0[size_t(r * hp + h)] * scale), double(tile1[size_t(r * hp + h)] * scale)});
        }
        double sum = 0.0;
        for (int64_t r = 0; r < n; ++r) {
          sum += std::exp(double(tile0[size_t(r * hp + h)] * scale) - m) +
                 std::exp(double(tile1[size_t(r * hp + h)] * scale) - m);
          EXPECT_NEAR(ref1[size_t(r * hp + h)], std::exp(double(tile1[size_t(r * hp + h)] * scale) - m), 1e-6);
        }
        EXPECT_EQ(ref_max[size_t(h)], float(m));
        EXPECT_NEAR(ref_sum[size_t(h)], sum, 1e-5 * sum);
      }
      for (const KernelSet* k : testing::SimdKernelTables()) {
        SCOPED_TRACE(k->name);
        std::vector<float> got0 = tile0, got1 = tile1;
        std::vector<float> max(size_t(hp), -inf), sum(size_t(hp), 0.0f), corr(static_cast<size_t>(hp));
        k->softmax_columns(got0.data(), n, hp, scale, max.data(), sum.data(), corr.data());
        for (float c : corr) ASSERT_LT(c, 1e-37f);  // e^-87, the clamp, where std::exp gives 0
        k->softmax_columns(got1.data(), n, hp, scale, max.data(), sum.data(), corr.data());
        for (size_t i = 0; i < got1.size(); ++i) ASSERT_NEAR(got1[i], ref1[i], 1e-6f * ref1[i] + 1e-37f) << i;
        for (int64_t h = 0; h < hp; ++h) {
          ASSERT_EQ(max[size_t(h)], ref_max[size_t(h)]);
          ASSERT_NEAR(sum[size_t(h)], ref_sum[size_t(h)], 1e-6f * float(2 * n) * ref_sum[size_t(h)]);
          ASSERT_NEAR(corr[size_t(h)], ref_corr[size_t(h)], 1e-6f * ref_corr[size_t(h)] + 1e-37f);
        }
      }
    }
  }
}

}  // namespace
}  // namespace mlaserve

// The bf16 dot-product tables (kernels_avx512bf16.cc) against the plain reference: the portable
// table on activations rounded to bf16 (nearest even), which is what the bf16 products compute up
// to the order of fp32 additions. Also: the table is batch-invariant on its own (a token's outputs
// do not depend on its batch, in registers or over packed activations), and a table that starts
// bf16 products at N tokens is the AVX-512 table below N.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/float16.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "kernels/pack.h"

namespace mlaserve {
namespace {

struct Packed {
  std::vector<std::byte> row_major;
  std::vector<std::byte> bytes;
  WeightMatrix matrix;
};

Packed RandomPacked(DType dtype, int64_t rows, int64_t cols, std::mt19937& rng, ThreadPool& pool) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Packed p;
  p.row_major.resize(size_t(rows * cols) * size_t(DTypeBytes(dtype)));
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float v = dist(rng);
    if (dtype == DType::kF32) {
      std::memcpy(p.row_major.data() + 4 * i, &v, 4);
    } else {
      const uint16_t h = F32ToBf16(v);
      std::memcpy(p.row_major.data() + 2 * i, &h, 2);
    }
  }
  const WeightMatrix src{dtype, rows, cols, p.row_major.data()};
  p.bytes.assign(PackedBytes(src), std::byte{0});
  p.matrix = PackPanels(src, p.bytes.data(), pool);
  return p;
}

std::vector<float> RoundedToBf16(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = Bf16ToF32(F32ToBf16(x[i]));
  return out;
}

// matmul_panels over all panels, split in two ranges as MatMul's threads would.
std::vector<float> InRegisters(const KernelSet& k, const std::vector<float>& x, int64_t n, const WeightMatrix& w) {
  std::vector<float> y(size_t(n * w.rows), -7.0f);
  const int64_t split = w.num_panels() / 2 * 2;
  k.matmul_panels(x.data(), n, w, 0, split, y.data(), w.rows);
  k.matmul_panels(x.data(), n, w, split, w.num_panels(), y.data(), w.rows);
  return y;
}

// pack_activations (two halves of the tiles) then matmul_panels_packed over two ranges.
std::vector<float> OverPacked(const KernelSet& k, const std::vector<float>& x, int64_t n, const WeightMatrix& w) {
  std::vector<float> xp(size_t(PackedFloatsFor(k, n, w)), -3.0f);
  std::vector<float> scratch(size_t(GemmThreadScratchFloats(n)));
  const int64_t tiles = GemmTiles(n);
  k.pack_activations(x.data(), n, w, 0, tiles / 2, xp.data());
  k.pack_activations(x.data(), n, w, tiles / 2, tiles, xp.data());
  std::vector<float> y(size_t(n * w.rows), -7.0f);
  const int64_t split = w.num_panels() / 2 * 2;
  k.matmul_panels_packed(x.data(), xp.data(), scratch.data(), n, w, 0, split, y.data(), w.rows);
  k.matmul_panels_packed(x.data(), xp.data(), scratch.data(), n, w, split, w.num_panels(), y.data(), w.rows);
  return y;
}

class Bf16Dot : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CpuSupportsBf16Dot()) GTEST_SKIP() << "this CPU lacks AVX512-BF16";
  }
};

TEST_F(Bf16Dot, MatchesTheReferenceOnRoundedActivations) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  ThreadPool pool(2);
  const KernelSet& bf16 = *Avx512Bf16Kernels(1);
  for (int64_t rows : {15, 33, 150}) {
    // Odd column counts leave a last column without its pair; 512 + 96 + 33 crosses a column block.
    for (int64_t cols : {int64_t{96}, int64_t{97}, kGemmColumns + 96 + 33}) {
      const Packed w = RandomPacked(DType::kBF16, rows, cols, rng, pool);
      for (int64_t n : {1, 5, 13, 49, 131}) {
        SCOPED_TRACE("rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) + " n=" + std::to_string(n));
        std::vector<float> x(size_t(n * cols));
        for (float& v : x) v = dist(rng);
        const std::vector<float> want = InRegisters(PortableKernels(), RoundedToBf16(x), n, w.matrix);
        const std::vector<float> got = InRegisters(bf16, x, n, w.matrix);
        const std::vector<float> packed = OverPacked(bf16, x, n, w.matrix);
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            const size_t i = size_t(t * rows + r);
            // Products are exact; only the fp32 sums' order differs: ~cols ulps of the magnitude.
            const float tolerance = 1e-5f * std::sqrt(float(cols)) * (1.0f + std::fabs(want[i]));
            ASSERT_NEAR(got[i], want[i], tolerance) << "t=" << t << " r=" << r;
            // In registers and over packed activations: the same sums in the same order.
            ASSERT_EQ(packed[i], got[i]) << "t=" << t << " r=" << r;
          }
        }
        // Batch invariance: each token alone gives its outputs in the batch bit for bit.
        for (int64_t t = 0; t < n; t += std::max<int64_t>(1, n / 3)) {
          const std::vector<float> xt(x.begin() + t * cols, x.begin() + (t + 1) * cols);
          const std::vector<float> alone = InRegisters(bf16, xt, 1, w.matrix);
          for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(alone[size_t(r)], got[size_t(t * rows + r)]) << "t=" << t;
        }
      }
    }
  }
}

// Wider than a one-tile block (2048 columns), in registers: partial sums stored and reloaded
// across blocks, and an odd last column.
TEST_F(Bf16Dot, WideMatricesInRegistersMatchThePackedProduct) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  ThreadPool pool(2);
  const KernelSet& bf16 = *Avx512Bf16Kernels(1);
  const int64_t rows = 33, cols = 4096 + 33;
  const Packed w = RandomPacked(DType::kBF16, rows, cols, rng, pool);
  for (int64_t n : {1, 5, 13}) {
    std::vector<float> x(size_t(n * cols));
    for (float& v : x) v = dist(rng);
    const std::vector<float> want = InRegisters(PortableKernels(), RoundedToBf16(x), n, w.matrix);
    const std::vector<float> got = InRegisters(bf16, x, n, w.matrix);
    EXPECT_EQ(OverPacked(bf16, x, n, w.matrix), got) << "n=" << n;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-5f * std::sqrt(float(cols)) * (1.0f + std::fabs(want[i]))) << "n=" << n;
    }
  }
}

// Row-major BF16 weights (kv_b_proj's slices): matmul_rows multiplies bf16 pairs too.
TEST_F(Bf16Dot, RowMajorProductsMatchTheReferenceAndAreBatchInvariant) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  ThreadPool pool(2);
  const KernelSet& bf16 = *Avx512Bf16Kernels(1);
  for (int64_t rows : {7, 130}) {
    for (int64_t cols : {int64_t{33}, int64_t{512}}) {
      const Packed w = RandomPacked(DType::kBF16, rows, cols, rng, pool);
      const WeightMatrix row_major{DType::kBF16, rows, cols, w.row_major.data()};
      // 70 tokens of 512 columns: more than one group of the stack buffer (64 rows of 512).
      for (int64_t n : {1, 6, 37, 70}) {
        SCOPED_TRACE("rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) + " n=" + std::to_string(n));
        std::vector<float> x(size_t(n * cols));
        for (float& v : x) v = dist(rng);
        const std::vector<float> rounded = RoundedToBf16(x);
        std::vector<float> want(size_t(n * rows)), got(size_t(n * rows), -7.0f);
        PortableKernels().matmul_rows(rounded.data(), n, row_major, 0, rows, want.data(), rows);
        bf16.matmul_rows(x.data(), n, row_major, 0, rows / 2, got.data(), rows);
        bf16.matmul_rows(x.data(), n, row_major, rows / 2, rows, got.data(), rows);
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], 1e-5f * std::sqrt(float(cols)) * (1.0f + std::fabs(want[i]))) << i;
        }
        const int64_t t = n - 1;
        std::vector<float> alone(static_cast<size_t>(rows));
        bf16.matmul_rows(x.data() + t * cols, 1, row_major, 0, rows, alone.data(), rows);
        for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(alone[size_t(r)], got[size_t(t * rows + r)]) << r;
      }
    }
  }
}

// Below its threshold a table is the AVX-512 table; at and above it, the all-bf16 table. Other
// weight dtypes always go through the AVX-512 table.
TEST_F(Bf16Dot, ThresholdTablesSwitchAtTheirTokenCount) {
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  ThreadPool pool(2);
  const KernelSet& fp32 = *Avx512Kernels();
  const KernelSet& all = *Avx512Bf16Kernels(1);
  for (int min_tokens : {2, 17, 65}) {
    const KernelSet* k = Avx512Bf16Kernels(min_tokens);
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->bf16_min_tokens, min_tokens);
    auto by_name = KernelsByName(k->name);
    ASSERT_TRUE(by_name.ok()) << by_name.error();
    EXPECT_EQ(*by_name, k);
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      const Packed w = RandomPacked(dtype, 40, 160, rng, pool);
      for (int64_t n : {int64_t{min_tokens - 1}, int64_t{min_tokens}}) {
        if (n < 1) continue;
        SCOPED_TRACE(std::string(k->name) + " n=" + std::to_string(n) + (dtype == DType::kF32 ? " f32" : " bf16"));
        std::vector<float> x(size_t(n * w.matrix.cols));
        for (float& v : x) v = dist(rng);
        const bool bf16 = dtype == DType::kBF16 && n >= min_tokens;
        EXPECT_EQ(InRegisters(*k, x, n, w.matrix), InRegisters(bf16 ? all : fp32, x, n, w.matrix));
        EXPECT_EQ(OverPacked(*k, x, n, w.matrix), OverPacked(bf16 ? all : fp32, x, n, w.matrix));
      }
    }
  }
  EXPECT_EQ(Avx512Bf16Kernels(3), nullptr);
  EXPECT_FALSE(KernelsByName("avx512-bf16:3").ok());
}

}  // namespace
}  // namespace mlaserve

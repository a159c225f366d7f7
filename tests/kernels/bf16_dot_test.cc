// The bf16 dot-product tables (kernels_avx512bf16.cc) against the plain reference: the portable
// table on activations rounded to bf16 (nearest even), which is what the bf16 products compute up
// to the order of fp32 additions. Also: the table is batch-invariant on its own (a token's outputs
// do not depend on its batch, in registers or over packed activations), and a table that starts
// bf16 products at N tokens is the AVX-512 table below N.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/float16.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "kernels/pack.h"
#include "kernels/weight_value.h"
#include "support/panel_products.h"
#include "support/random_weights.h"

namespace mlaserve {
namespace {

// A random dense matrix, row-major and packed.
struct PackedDense {
  testing::Weights row_major;
  testing::PackedWeights packed;
};

PackedDense RandomPacked(DType dtype, int64_t rows, int64_t cols, std::mt19937& rng, ThreadPool& pool) {
  PackedDense p{testing::RandomWeights(dtype, rows, cols, rng), {}};
  p.packed = testing::Packed(p.row_major.matrix, pool);
  return p;
}

std::vector<float> RoundedToBf16(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = Bf16ToF32(F32ToBf16(x[i]));
  return out;
}

using testing::InRegisters;
using testing::OverPacked;

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
      const PackedDense w = RandomPacked(DType::kBF16, rows, cols, rng, pool);
      for (int64_t n : {1, 5, 13, 49, 131}) {
        SCOPED_TRACE("rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) + " n=" + std::to_string(n));
        std::vector<float> x(size_t(n * cols));
        for (float& v : x) v = dist(rng);
        const std::vector<float> want = InRegisters(PortableKernels(), RoundedToBf16(x), n, w.packed.matrix);
        const std::vector<float> got = InRegisters(bf16, x, n, w.packed.matrix);
        const std::vector<float> packed = OverPacked(bf16, x, n, w.packed.matrix);
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
          const std::vector<float> alone = InRegisters(bf16, xt, 1, w.packed.matrix);
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
  const PackedDense w = RandomPacked(DType::kBF16, rows, cols, rng, pool);
  for (int64_t n : {1, 5, 13}) {
    std::vector<float> x(size_t(n * cols));
    for (float& v : x) v = dist(rng);
    const std::vector<float> want = InRegisters(PortableKernels(), RoundedToBf16(x), n, w.packed.matrix);
    const std::vector<float> got = InRegisters(bf16, x, n, w.packed.matrix);
    EXPECT_EQ(OverPacked(bf16, x, n, w.packed.matrix), got) << "n=" << n;
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
      const PackedDense w = RandomPacked(DType::kBF16, rows, cols, rng, pool);
      const WeightMatrix row_major{DType::kBF16, rows, cols, w.row_major.bytes.data()};
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

// Quantized panels (fp8-block, int4-g32): the codes are exact in bf16 and each group's partial
// sums are scaled in fp32, so the result is the reference's on rounded activations up to fp32
// rounding, relative to the sum of the products' magnitudes (fp8 codes reach 448).
TEST_F(Bf16Dot, QuantizedPanelsMatchTheReferenceAndAreBatchInvariant) {
  std::mt19937 rng(13);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  ThreadPool pool(2);
  const KernelSet& bf16 = *Avx512Bf16Kernels(1);
  struct Shape {
    WeightFormat format;
    int block_rows, block_cols;
    int64_t rows, cols;
  };
  // DeepSeek's 128 x 128 fp8 blocks; 16-row bands (a block of 32 rows straddles two) with groups
  // that cut column blocks off pair boundaries of the block grid (20); an odd last column; int4
  // groups of 32 and 8; column counts that cross a column block (kGemmColumns).
  const Shape shapes[] = {{WeightFormat::kFp8Block, 128, 128, 150, kGemmColumns + 128},
                          {WeightFormat::kFp8Block, 16, 20, 33, kGemmColumns + 40},
                          {WeightFormat::kFp8Block, 32, 48, 40, 97},
                          {WeightFormat::kInt4Group, 1, 32, 150, kGemmColumns + 96},
                          {WeightFormat::kInt4Group, 1, 8, 17, 40}};
  for (const Shape& sh : shapes) {
    const testing::QuantWeights q =
        testing::RandomQuantWeights(sh.format, sh.rows, sh.cols, sh.block_rows, sh.block_cols, rng);
    const testing::PackedWeights w = testing::Packed(q.matrix, pool);
    ASSERT_TRUE(Bf16DotMultiplies(w.matrix));
    for (int64_t n : {1, 5, 6, 7, 13, 49}) {
      SCOPED_TRACE((sh.format == WeightFormat::kFp8Block ? "fp8 " : "int4 ") + std::to_string(sh.block_rows) + "x" +
                   std::to_string(sh.block_cols) + " rows=" + std::to_string(sh.rows) +
                   " cols=" + std::to_string(sh.cols) + " n=" + std::to_string(n));
      std::vector<float> x(size_t(n * sh.cols));
      for (float& v : x) v = dist(rng);
      const std::vector<float> rounded = RoundedToBf16(x);
      const std::vector<float> want = InRegisters(PortableKernels(), rounded, n, w.matrix);
      const std::vector<float> got = InRegisters(bf16, x, n, w.matrix);
      const std::vector<float> packed = OverPacked(bf16, x, n, w.matrix);
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t r = 0; r < sh.rows; ++r) {
          double magnitude = 0.0;
          for (int64_t c = 0; c < sh.cols; ++c) {
            magnitude += std::fabs(double(rounded[size_t(t * sh.cols + c)]) * WeightAt(q.matrix, r, c));
          }
          const size_t i = size_t(t * sh.rows + r);
          ASSERT_NEAR(got[i], want[i], 1e-6 * magnitude + 1e-30) << "t=" << t << " r=" << r;
          ASSERT_EQ(packed[i], got[i]) << "t=" << t << " r=" << r;
        }
      }
      for (int64_t t = 0; t < n; t += std::max<int64_t>(1, n / 3)) {
        const std::vector<float> xt(x.begin() + t * sh.cols, x.begin() + (t + 1) * sh.cols);
        const std::vector<float> alone = InRegisters(bf16, xt, 1, w.matrix);
        for (int64_t r = 0; r < sh.rows; ++r) ASSERT_EQ(alone[size_t(r)], got[size_t(t * sh.rows + r)]) << "t=" << t;
      }
    }
  }
}

// Row-major fp8-block rows (kv_b_proj slices where bands span heads' rows): the block scale is folded into
// the activations, so the reference is sum_c bf16(x * scale * 256) * code / 256, in double. The
// slice starts inside a band of rows (its scale grid offset), and the batch does not matter.
TEST_F(Bf16Dot, RowMajorFp8MatchesScaledActivationsAndIsBatchInvariant) {
  std::mt19937 rng(17);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const KernelSet& bf16 = *Avx512Bf16Kernels(1);
  for (int64_t cols : {int64_t{512}, int64_t{97}}) {
    const testing::QuantWeights q = testing::RandomQuantWeights(WeightFormat::kFp8Block, 160, cols, 32, 48, rng);
    const WeightMatrix slice = q.matrix.Slice(40, 100);
    for (int64_t n : {1, 6, 70}) {
      SCOPED_TRACE("cols=" + std::to_string(cols) + " n=" + std::to_string(n));
      std::vector<float> x(size_t(n * cols));
      for (float& v : x) v = dist(rng);
      std::vector<float> got(size_t(n * slice.rows), -7.0f);
      bf16.matmul_rows(x.data(), n, slice, 0, 37, got.data(), slice.rows);
      bf16.matmul_rows(x.data(), n, slice, 37, slice.rows, got.data(), slice.rows);
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t r = 0; r < slice.rows; ++r) {
          double want = 0.0, magnitude = 0.0;
          for (int64_t c = 0; c < cols; ++c) {
            const float scaled = x[size_t(t * cols + c)] * (WeightScaleAt(slice, r, c) * 256.0f);
            const double term = double(Bf16ToF32(F32ToBf16(scaled))) * WeightCodeAt(slice, r, c) / 256.0;
            want += term;
            magnitude += std::fabs(term);
          }
          ASSERT_NEAR(got[size_t(t * slice.rows + r)], want, 1e-6 * magnitude + 1e-30) << "t=" << t << " r=" << r;
        }
      }
      std::vector<float> alone(static_cast<size_t>(slice.rows));
      bf16.matmul_rows(x.data() + (n - 1) * cols, 1, slice, 0, slice.rows, alone.data(), slice.rows);
      for (int64_t r = 0; r < slice.rows; ++r) ASSERT_EQ(alone[size_t(r)], got[size_t((n - 1) * slice.rows + r)]);
      // The table switching at 2 tokens takes fp8 codes in bf16 from one (Bf16CodesMinTokens).
      std::vector<float> alone_from_two(static_cast<size_t>(slice.rows));
      Avx512Bf16Kernels(2)->matmul_rows(x.data() + (n - 1) * cols, 1, slice, 0, slice.rows, alone_from_two.data(),
                                        slice.rows);
      ASSERT_EQ(alone_from_two, alone);
    }
  }
}

// Below its threshold a table is the AVX-512 table; at and above it, the all-bf16 table. Other
// weight dtypes (F32 here) always go through the AVX-512 table; fp8-block panels switch as BF16 do,
// except that a table switching at 2 tokens takes them in bf16 from one (Bf16CodesMinTokens).
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
    const int codes_min_tokens = min_tokens == 2 ? 1 : min_tokens;
    auto by_name = KernelsByName(k->name);
    ASSERT_TRUE(by_name.ok()) << by_name.error();
    EXPECT_EQ(*by_name, k);
    const PackedDense dense_bf16 = RandomPacked(DType::kBF16, 40, 160, rng, pool);
    const PackedDense dense_f32 = RandomPacked(DType::kF32, 40, 160, rng, pool);
    const testing::QuantWeights fp8 = testing::RandomQuantWeights(WeightFormat::kFp8Block, 40, 160, 128, 128, rng);
    const testing::PackedWeights fp8_packed = testing::Packed(fp8.matrix, pool);
    for (const WeightMatrix* w : {&dense_bf16.packed.matrix, &dense_f32.packed.matrix, &fp8_packed.matrix}) {
      for (int64_t n : {int64_t{min_tokens - 1}, int64_t{min_tokens}}) {
        if (n < 1) continue;
        SCOPED_TRACE(std::string(k->name) + " n=" + std::to_string(n) + " dtype " + std::to_string(int(w->dtype)));
        std::vector<float> x(size_t(n * w->cols));
        for (float& v : x) v = dist(rng);
        const bool bf16 = w->dtype != DType::kF32 && n >= (w->quantized() ? codes_min_tokens : min_tokens);
        EXPECT_EQ(InRegisters(*k, x, n, *w), InRegisters(bf16 ? all : fp32, x, n, *w));
        EXPECT_EQ(OverPacked(*k, x, n, *w), OverPacked(bf16 ? all : fp32, x, n, *w));
      }
    }
  }
  EXPECT_EQ(Avx512Bf16Kernels(3), nullptr);
  EXPECT_FALSE(KernelsByName("avx512-bf16:3").ok());
}

}  // namespace
}  // namespace mlaserve

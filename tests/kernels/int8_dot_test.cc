// The int8 dot-product tables (kernels_avx512vnni.cc) against a plain scalar reference of what
// they define: activations quantized per token and group, integer sums, one fp32 multiply-add per
// group. Bit-identical, in registers and over packed activations, whatever the batch; close to the
// fp32 product; through MatMul (ops.h) as the model calls it; and named by --kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "kernels/pack.h"
#include "kernels/weight_value.h"
#include "support/panel_products.h"
#include "support/random_weights.h"

namespace mlaserve {
namespace {

// y[t][r] as kernels_avx512vnni.cc defines it, from the row-major matrix.
std::vector<float> Int8DotReference(const std::vector<float>& x, int64_t n, const WeightMatrix& w) {
  const int64_t group = w.block_cols, groups = w.cols / group;
  std::vector<float> y(size_t(n * w.rows));
  for (int64_t t = 0; t < n; ++t) {
    const float* row = x.data() + t * w.cols;
    std::vector<int> q(static_cast<size_t>(w.cols));
    std::vector<float> d(static_cast<size_t>(groups));
    for (int64_t g = 0; g < groups; ++g) {
      float amax = 0.0f;
      for (int64_t c = g * group; c < (g + 1) * group; ++c) amax = std::max(amax, std::abs(row[c]));
      d[size_t(g)] = amax / 127.0f;
      const float inv = d[size_t(g)] > 0.0f ? 1.0f / d[size_t(g)] : 0.0f;
      for (int64_t c = g * group; c < (g + 1) * group; ++c) {
        q[size_t(c)] = std::clamp(int(std::nearbyint(row[c] * inv)), -127, 127);
      }
    }
    for (int64_t r = 0; r < w.rows; ++r) {
      float acc = 0.0f;
      for (int64_t g = 0; g < groups; ++g) {
        int32_t sum = 0, sum_q = 0;
        for (int64_t c = g * group; c < (g + 1) * group; ++c) {
          sum += int32_t(WeightCodeAt(w, r, c)) * q[size_t(c)];
          sum_q += q[size_t(c)];
        }
        const float scale = WeightScaleAt(w, r, g * group) * d[size_t(g)];
        acc = std::fma(float(sum), scale, acc);
        if (w.has_mins()) {
          acc = std::fma(-WeightMinAt(w, r, g * group), d[size_t(g)] * float(sum_q), acc);
        }
      }
      y[size_t(t * w.rows + r)] = acc;
    }
  }
  return y;
}

using testing::InRegisters;
using testing::OverPacked;

class Int8Dot : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CpuSupportsInt8Dot()) GTEST_SKIP() << "this CPU lacks AVX512-VNNI";
  }
};

TEST_F(Int8Dot, IsItsDefinitionBatchInvariantAndCloseToFp32) {
  std::mt19937 rng(23);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  ThreadPool pool(2);
  const KernelSet& k = *WithInt8Dot(Avx512Kernels());
  ASSERT_TRUE(k.int8_dot);
  struct Shape {
    WeightFormat format;
    int64_t rows, cols;
    int group;
  };
  // Partial panels and blocks, one and several column chunks (512 columns), groups of Q8_0's 32
  // and Q6_K's 16 and of other multiples of 4 (Q6_K's with 20 groups a row; 12 and 20: whole
  // 8-column steps, then 4 columns); uint4-min (Q4_K: 32) and int4 (compressed-tensors' int4-g32:
  // column pairs transposed in the kernel) in multiples of 8.
  constexpr WeightFormat kI8 = WeightFormat::kInt8Group, kU4 = WeightFormat::kUint4GroupMin,
                         kU8 = WeightFormat::kUint8GroupMin, kI4 = WeightFormat::kInt4Group;
  const Shape shapes[] = {{kI8, 15, 64, 32}, {kI8, 33, 96, 32}, {kI8, 150, kGemmColumns + 96, 32}, {kI8, 40, 48, 16},
                          {kI8, 17, 40, 4},  {kI8, 64, 2 * kGemmColumns, 128}, {kU4, 15, 64, 32},
                          {kU4, 150, kGemmColumns + 96, 32}, {kU4, 40, 48, 8}, {kU4, 64, 2 * kGemmColumns, 256},
                          {kU8, 33, 96, 32}, {kU8, 150, kGemmColumns + 96, 32}, {kU8, 17, 40, 4},
                          {kI8, 40, 20 * 16, 16}, {kU4, 17, 17 * 64, 64}, {kI8, 17, 48, 12}, {kU8, 17, 40, 20},
                          {kI4, 15, 64, 32},  {kI4, 150, kGemmColumns + 96, 32}, {kI4, 40, 48, 8},
                          {kI4, 17, 17 * 64, 64}};
  for (const Shape& s : shapes) {
    const testing::QuantWeights w = testing::RandomQuantWeights(s.format, s.rows, s.cols, 1, s.group, rng);
    const testing::PackedWeights packed = testing::Packed(w.matrix, pool);
    for (int64_t n : {1, 2, 3, 5, 10, 13, 27}) {  // tiles of 1-6 tokens (kernels_avx512vnni.cc kTokens)
      SCOPED_TRACE("rows=" + std::to_string(s.rows) + " cols=" + std::to_string(s.cols) + " group=" +
                   std::to_string(s.group) + " n=" + std::to_string(n));
      std::vector<float> x(size_t(n * s.cols));
      for (float& v : x) v = dist(rng);
      if (n == 3) std::fill(x.begin() + s.cols, x.begin() + 2 * s.cols, 0.0f);  // an all-zero token: scale 0
      const std::vector<float> want = Int8DotReference(x, n, w.matrix);
      const std::vector<float> in_registers = InRegisters(k, x, n, packed.matrix);
      ASSERT_EQ(in_registers, want);
      ASSERT_EQ(OverPacked(k, x, n, packed.matrix), want);
      // Each token alone gives its outputs in the batch bit for bit (alone, a product keeps two
      // integer sums a panel, and takes its unpaired last panel one at a time:
      // kernels_avx512vnni.cc Block and Product; groups of 4, 12 and 20 end their byte groups in
      // a half step, outside the pairs of steps).
      for (int64_t t = 0; t < n; ++t) {
        const std::vector<float> one(x.begin() + t * s.cols, x.begin() + (t + 1) * s.cols);
        const std::vector<float> alone = InRegisters(k, one, 1, packed.matrix);
        for (int64_t r = 0; r < s.rows; ++r) ASSERT_EQ(alone[size_t(r)], want[size_t(t * s.rows + r)]);
        if (t > 0) continue;
        // One panel a call, odd first panels included: the same outputs, and no row past a call's
        // panel written.
        std::vector<float> by_panel(size_t(s.rows), -7.0f);
        for (int64_t p = 0; p < packed.matrix.num_panels(); ++p) {
          k.matmul_panels(one.data(), 1, packed.matrix, p, p + 1, by_panel.data(), s.rows);
          for (int64_t r = (p + 1) * kPanelRows; r < s.rows; ++r) ASSERT_EQ(by_panel[size_t(r)], -7.0f);
        }
        ASSERT_EQ(by_panel, alone);
      }
      // Within the activations' rounding of the exact product: each code moves by at most half a
      // step of its group's scale, so an output moves by at most sum |w| * d / 2.
      std::vector<float> exact(size_t(n * s.rows));
      PortableKernels().matmul_rows(x.data(), n, w.matrix, 0, s.rows, exact.data(), s.rows);
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t r = 0; r < s.rows; ++r) {
          double bound = 1e-5;
          for (int64_t c = 0; c < s.cols; c += s.group) {
            float amax = 0.0f, wsum = 0.0f;
            for (int64_t i = c; i < c + s.group; ++i) {
              amax = std::max(amax, std::abs(x[size_t(t * s.cols + i)]));
              wsum += std::abs(WeightAt(w.matrix, r, i));
            }
            bound += 0.5 * amax / 127.0 * wsum * 1.001 + 1e-6 * wsum;
          }
          ASSERT_NEAR(want[size_t(t * s.rows + r)], exact[size_t(t * s.rows + r)], bound);
        }
      }
    }
  }
}

// MatMul and MatMulPair as the model calls them, with and without the packing scratch: the same
// outputs; the other formats are the base table's, bit for bit.
TEST_F(Int8Dot, MatMulUsesItAndLeavesOtherFormatsToTheBase) {
  std::mt19937 rng(29);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  ThreadPool pool(2);
  const KernelSet& k = *WithInt8Dot(Avx512Kernels());
  const testing::QuantWeights a = testing::RandomQuantWeights(WeightFormat::kInt8Group, 200, 320, 1, 32, rng);
  const testing::QuantWeights b = testing::RandomQuantWeights(WeightFormat::kInt8Group, 72, 320, 1, 32, rng);
  const testing::PackedWeights pa = testing::Packed(a.matrix, pool), pb = testing::Packed(b.matrix, pool);
  const testing::Weights dense = testing::RandomWeights(DType::kBF16, 80, 320, rng);
  const testing::PackedWeights pd = testing::Packed(dense.matrix, pool);
  for (int64_t n : {1, 4, 40}) {
    std::vector<float> x(size_t(n * 320));
    for (float& v : x) v = dist(rng);
    std::vector<float> scratch(size_t(GemmScratchFloats(n, 320, pool.num_threads())));
    const ComputeContext with{&k, &pool, scratch}, without{&k, &pool, {}};
    std::vector<float> y1(size_t(n * 200)), y2(size_t(n * 200)), z1(size_t(n * 72)), z2(size_t(n * 72));
    MatMul(with, x.data(), n, pa.matrix, y1.data());
    MatMul(without, x.data(), n, pa.matrix, y2.data());
    EXPECT_EQ(y1, Int8DotReference(x, n, a.matrix)) << n;
    EXPECT_EQ(y2, y1) << n;
    MatMulPair(with, x.data(), n, pa.matrix, pb.matrix, y2.data(), z1.data());
    MatMul(without, x.data(), n, pb.matrix, z2.data());
    EXPECT_EQ(y2, y1) << n;
    EXPECT_EQ(z1, z2) << n;
    std::vector<float> d1(size_t(n * 80)), d2(size_t(n * 80));
    const ComputeContext base{Avx512Kernels(), &pool, scratch};
    MatMul(with, x.data(), n, pd.matrix, d1.data());
    MatMul(base, x.data(), n, pd.matrix, d2.data());
    EXPECT_EQ(d1, d2) << n;
  }
}

// One packing serves two products only if both take the same layout: int4 groups of 12 columns
// (the base table's packing) and of 32 (int8 activations, pair-ordered) share a format but not
// the int8 decision, in either order; the same group size shares.
TEST(Int8DotPacking, SharedOnlyWhereBothTakeTheSameDecision) {
  const auto int4 = [](int group) {
    return WeightMatrix{.dtype = DType::kI32, .rows = 32, .cols = 96, .packed = true,
                        .format = WeightFormat::kInt4Group, .block_cols = group};
  };
  ASSERT_FALSE(Int8DotMultiplies(int4(12)));
  ASSERT_TRUE(Int8DotMultiplies(int4(32)));
  EXPECT_FALSE(SharePackedActivations(int4(12), int4(32)));
  EXPECT_FALSE(SharePackedActivations(int4(32), int4(12)));
  EXPECT_TRUE(SharePackedActivations(int4(32), int4(32)));
  EXPECT_TRUE(SharePackedActivations(int4(12), int4(12)));
}

TEST_F(Int8Dot, NamedByKernelsFlag) {
  auto k = KernelsByName("avx512+int8");
  ASSERT_TRUE(k.ok()) << k.error();
  EXPECT_TRUE((*k)->int8_dot);
  EXPECT_STREQ((*k)->name, "avx512+int8");
  EXPECT_EQ(WithInt8Dot(*k), *k);
  EXPECT_EQ(WithInt8Dot(&PortableKernels()), nullptr);
  const auto bad = KernelsByName("avx2+int8");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("avx512"), std::string::npos) << bad.error();
  if (CpuSupportsBf16Dot()) {
    auto bf16 = KernelsByName("avx512-bf16:17+int8");
    ASSERT_TRUE(bf16.ok()) << bf16.error();
    EXPECT_EQ((*bf16)->bf16_min_tokens, 17);
    EXPECT_TRUE((*bf16)->int8_dot);
  }
}

}  // namespace
}  // namespace mlaserve

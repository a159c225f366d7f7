// The element-wise kernels (rms_norm, add_rms_norm, silu_mul) of every SIMD table against the
// portable reference (ops.cc's RmsNorm and SiluMul), over lengths that exercise the vector
// bodies and the scalar tails, and over the whole range the SiLU's exp sees.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "support/kernel_tables.h"

namespace mlaserve {
namespace {

std::vector<float> Random(size_t n, float stddev, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// |a - b| <= rel * |b| + abs
void ExpectClose(const std::vector<float>& a, const std::vector<float>& b, float rel, float abs) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_LE(std::abs(a[i] - b[i]), rel * std::abs(b[i]) + abs) << "at " << i << ": " << a[i] << " vs " << b[i];
  }
}

TEST(ElementwiseKernels, PortableTableIsTheOpsReference) {
  std::mt19937 rng(7);
  const KernelSet& k = PortableKernels();
  const auto x = Random(300, 2.0f, rng), w = Random(300, 1.0f, rng), add = Random(300, 1.0f, rng);
  std::vector<float> ref(300), out(300);
  RmsNorm(x.data(), w.data(), 300, 1e-6, ref.data());
  k.rms_norm(x.data(), w.data(), 300, 1e-6, out.data());
  EXPECT_EQ(out, ref);

  std::vector<float> hidden = x, sum(300);
  for (size_t i = 0; i < 300; ++i) sum[i] = x[i] + add[i];
  RmsNorm(sum.data(), w.data(), 300, 1e-6, ref.data());
  k.add_rms_norm(hidden.data(), add.data(), w.data(), 300, 1e-6, out.data());
  EXPECT_EQ(hidden, sum);
  EXPECT_EQ(out, ref);
}

TEST(ElementwiseKernels, SimdRmsNormMatchesReference) {
  std::mt19937 rng(1);
  if (testing::SimdKernelTables().empty()) GTEST_SKIP() << "this CPU runs no SIMD kernel table (no AVX2): nothing to compare with the portable one";
  for (const KernelSet* k : testing::SimdKernelTables()) {
    SCOPED_TRACE(k->name);
    for (int64_t dim : {1, 7, 16, 63, 64, 65, 512, 2048, 7168 + 3}) {
      SCOPED_TRACE(dim);
      const auto x = Random(size_t(dim), 3.0f, rng), w = Random(size_t(dim), 1.0f, rng);
      const auto add = Random(size_t(dim), 1.0f, rng);
      std::vector<float> ref(static_cast<size_t>(dim)), out(static_cast<size_t>(dim));
      RmsNorm(x.data(), w.data(), dim, 1e-6, ref.data());
      k->rms_norm(x.data(), w.data(), dim, 1e-6, out.data());
      ExpectClose(out, ref, 5e-6f, 1e-7f);

      // In place (x and out alias), as attention's norms run.
      std::vector<float> in_place = x;
      k->rms_norm(in_place.data(), w.data(), dim, 1e-6, in_place.data());
      EXPECT_EQ(in_place, out);

      std::vector<float> hidden = x, hidden_ref = x;
      for (size_t i = 0; i < size_t(dim); ++i) hidden_ref[i] += add[i];
      RmsNorm(hidden_ref.data(), w.data(), dim, 1e-6, ref.data());
      k->add_rms_norm(hidden.data(), add.data(), w.data(), dim, 1e-6, out.data());
      EXPECT_EQ(hidden, hidden_ref);  // the residual add itself is exact
      ExpectClose(out, ref, 5e-6f, 1e-7f);
    }
  }
}

TEST(ElementwiseKernels, SimdSiluMulMatchesReference) {
  std::mt19937 rng(2);
  if (testing::SimdKernelTables().empty()) GTEST_SKIP() << "this CPU runs no SIMD kernel table (no AVX2): nothing to compare with the portable one";
  for (const KernelSet* k : testing::SimdKernelTables()) {
    SCOPED_TRACE(k->name);
    for (int64_t n : {1, 5, 8, 16, 31, 1408, 2048 + 9}) {
      SCOPED_TRACE(n);
      const auto gate = Random(size_t(n), 4.0f, rng), up = Random(size_t(n), 1.0f, rng);
      std::vector<float> ref(static_cast<size_t>(n)), out(static_cast<size_t>(n));
      SiluMul(gate.data(), up.data(), n, ref.data());
      k->silu_mul(gate.data(), up.data(), n, out.data());
      ExpectClose(out, ref, 1e-6f, 1e-37f);
    }
    // Every input the exp sees in practice and past its clamps: large |gate| gives gate * up or 0.
    std::vector<float> gate, up;
    for (float g = -120.0f; g <= 120.0f; g += 0.0625f) {
      gate.push_back(g);
      up.push_back(1.0f);
    }
    std::vector<float> ref(gate.size()), out(gate.size());
    SiluMul(gate.data(), up.data(), int64_t(gate.size()), ref.data());
    k->silu_mul(gate.data(), up.data(), int64_t(gate.size()), out.data());
    ExpectClose(out, ref, 1e-6f, 1e-35f);
    // In place over gate, as the MLPs run it, and the same values whatever the length (a value
    // gets the same function in the vector body and in the tail).
    std::vector<float> in_place = gate;
    k->silu_mul(in_place.data(), up.data(), int64_t(gate.size()), in_place.data());
    EXPECT_EQ(in_place, out);
    for (int64_t len = 1; len < 40; ++len) {
      std::vector<float> part(static_cast<size_t>(len));
      k->silu_mul(gate.data() + 1000, up.data() + 1000, len, part.data());
      for (int64_t i = 0; i < len; ++i) ASSERT_EQ(part[size_t(i)], out[size_t(1000 + i)]) << len << " " << i;
    }
  }
}

// exp_sum (softmax's numerators): every SIMD table against the portable one (std::exp, sum in
// order), scores from a softmax's range (shifted by their max: <= 0) and beyond the clamp.
TEST(ElementwiseKernels, SimdExpSumMatchesReference) {
  std::mt19937 rng(4);
  if (testing::SimdKernelTables().empty()) GTEST_SKIP() << "no SIMD kernel table on this CPU";
  for (const KernelSet* k : testing::SimdKernelTables()) {
    SCOPED_TRACE(k->name);
    for (int64_t n : {1, 7, 16, 33, 64, 1000}) {
      SCOPED_TRACE(n);
      const std::vector<float> x = Random(size_t(n), 30.0f, rng);
      const float shift = *std::max_element(x.begin(), x.end());
      std::vector<float> ref = x, out = x;
      const float ref_sum = PortableKernels().exp_sum(ref.data(), n, shift);
      const float sum = k->exp_sum(out.data(), n, shift);
      ExpectClose(out, ref, 1e-6f, 1e-37f);
      EXPECT_NEAR(sum, ref_sum, 1e-6f * float(n) * ref_sum);
    }
    // An element's value does not depend on where the row ends (vector body or padded tail).
    const std::vector<float> row = Random(40, 5.0f, rng);
    std::vector<float> whole = row;
    k->exp_sum(whole.data(), int64_t(whole.size()), 1.0f);
    for (int64_t len = 1; len < 40; ++len) {
      std::vector<float> part(row.begin(), row.begin() + len);
      k->exp_sum(part.data(), len, 1.0f);
      ASSERT_TRUE(std::equal(part.begin(), part.end(), whole.begin())) << "len " << len;
    }
    // Far below the shift: e^(-200) is 0 for std::exp and the clamp's e^-87 here, both ~0 beside 1.
    std::vector<float> x = {0.0f, -200.0f, -50.0f};
    const float sum = k->exp_sum(x.data(), 3, 0.0f);
    EXPECT_FLOAT_EQ(x[0], 1.0f);
    EXPECT_LT(x[1], 1e-37f);
    EXPECT_NEAR(sum, 1.0f, 1e-6f);
  }
}

// scale_max: every SIMD table gives the portable one's values and maximum bit for bit (one
// multiply per element, an exact maximum), at every length (vector body and scalar tail).
TEST(ElementwiseKernels, SimdScaleMaxIsTheReference) {
  std::mt19937 rng(6);
  if (testing::SimdKernelTables().empty()) GTEST_SKIP() << "no SIMD kernel table on this CPU";
  for (const KernelSet* k : testing::SimdKernelTables()) {
    SCOPED_TRACE(k->name);
    for (int64_t n : {0, 1, 7, 16, 31, 32, 33, 64, 100}) {
      const std::vector<float> x = Random(size_t(n), 10.0f, rng);
      std::vector<float> ref = x, out = x;
      const float ref_max = PortableKernels().scale_max(ref.data(), n, 0.088f);
      const float got_max = k->scale_max(out.data(), n, 0.088f);
      ASSERT_EQ(out, ref) << n;
      ASSERT_EQ(got_max, ref_max) << n;
      if (n == 0) {
        EXPECT_EQ(ref_max, -std::numeric_limits<float>::infinity());
      }
    }
  }
}

// scale_add_f32 (the online softmax's o = o * correction + p @ v): every table has it (the MHA
// prefill calls it unchecked), each SIMD one gives the portable one's values bit for bit, the
// portable one's are one fused multiply-add each, and a factor of 1 adds x to y as axpy_f32 with
// 1 does.
TEST(ElementwiseKernels, SimdScaleAddIsTheReference) {
  std::mt19937 rng(7);
  std::vector<const KernelSet*> tables = testing::SimdKernelTables();
  if (CpuSupportsBf16Dot()) tables.push_back(Avx512Bf16Kernels(2));
  // The portable table first: its values are fma's by definition.
  tables.insert(tables.begin(), &PortableKernels());
  for (const KernelSet* k : tables) {
    ASSERT_NE(k->scale_add_f32, nullptr) << k->name;  // every table has it (the MHA prefill calls it)
    SCOPED_TRACE(k->name);
    for (int64_t n : {0, 1, 7, 16, 31, 32, 33, 128, 130}) {
      const std::vector<float> x = Random(size_t(n), 3.0f, rng), y = Random(size_t(n), 3.0f, rng);
      for (float b : {0.0f, 0.37f, 1.0f}) {
        std::vector<float> ref = y, out = y;
        PortableKernels().scale_add_f32(b, x.data(), ref.data(), n);
        k->scale_add_f32(b, x.data(), out.data(), n);
        ASSERT_EQ(out, ref) << n << " " << b;
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(ref[size_t(i)], std::fma(y[size_t(i)], b, x[size_t(i)])) << i;
        if (b == 1.0f) {
          std::vector<float> axpy = y;
          k->axpy_f32(1.0f, x.data(), axpy.data(), n);
          ASSERT_EQ(out, axpy) << n;
        }
      }
    }
  }
}

}  // namespace
}  // namespace mlaserve

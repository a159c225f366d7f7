// gemm_f32 (attention's q @ k^T and p @ v) in every SIMD table against the portable reference,
// over shapes that leave every tail: tokens not a multiple of the 4-token block, columns not a
// multiple of the vector blocks, strided operands, and accumulation into y.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "core/float16.h"
#include "kernels/kernels.h"
#include "support/kernel_tables.h"

namespace mlaserve {
namespace {

TEST(GemmF32, SimdTablesMatchThePortableReference) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (const KernelSet* k : testing::SimdKernelTables()) {
    for (int n : {1, 3, 4, 9, 32}) {
      for (int kk : {1, 17, 192}) {
        for (int m : {5, 16, 64, 77, 128}) {
          for (bool accumulate : {false, true}) {
            SCOPED_TRACE(std::string(k->name) + " n " + std::to_string(n) + " k " + std::to_string(kk) + " m " +
                         std::to_string(m) + (accumulate ? " accumulate" : ""));
            const int ldx = kk + 3, ldb = m + 5, ldy = m + 7;
            std::vector<float> x(size_t(n) * ldx), b(size_t(kk) * ldb), y0(size_t(n) * ldy);
            for (float& v : x) v = normal(rng);
            for (float& v : b) v = normal(rng);
            for (float& v : y0) v = normal(rng);
            std::vector<float> want = y0, got = y0;
            PortableKernels().gemm_f32(x.data(), ldx, b.data(), ldb, want.data(), ldy, n, kk, m, accumulate);
            k->gemm_f32(x.data(), ldx, b.data(), ldb, got.data(), ldy, n, kk, m, accumulate);
            for (int t = 0; t < n; ++t) {
              for (int j = 0; j < ldy; ++j) {
                const size_t i = size_t(t) * ldy + j;
                if (j >= m) {
                  ASSERT_EQ(got[i], y0[i]) << "column " << j << " past m was written";
                } else {
                  ASSERT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::abs(want[i]))) << "row " << t << " column " << j;
                }
              }
            }
          }
        }
      }
    }
  }
}

// A column's value does not depend on how many columns are computed or where the product's
// columns start (tensor parallelism computes a rank's heads' score columns alone): every subset
// of columns equals the same columns of the whole product bit for bit, in every table.
TEST(GemmF32, AColumnDoesNotDependOnTheOtherColumns) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  const int n = 9, kk = 192, m = 77;
  std::vector<float> x(size_t(n) * kk), b(size_t(kk) * m);
  for (float& v : x) v = normal(rng);
  for (float& v : b) v = normal(rng);
  for (const KernelSet* k : testing::RunnableKernelTables()) {
    SCOPED_TRACE(k->name);
    std::vector<float> whole(size_t(n) * m);
    k->gemm_f32(x.data(), kk, b.data(), m, whole.data(), m, n, kk, m, false);
    for (const auto& [first, count] : {std::pair{0, 8}, {16, 16}, {8, 8}, {64, 13}, {3, 5}}) {
      std::vector<float> part(size_t(n) * count);
      k->gemm_f32(x.data(), kk, b.data() + first, m, part.data(), count, n, kk, count, false);
      for (int t = 0; t < n; ++t) {
        for (int j = 0; j < count; ++j) {
          ASSERT_EQ(part[size_t(t) * count + j], whole[size_t(t) * m + first + j])
              << "columns [" << first << ", " << first + count << ") row " << t << " column " << j;
        }
      }
    }
  }
}

}  // namespace
}  // namespace mlaserve

// Every SIMD kernel table against the portable reference, for every weight dtype and for
// shapes that exercise the register blocks and the scalar tails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/float16.h"
#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "kernels/pack.h"

namespace mlaserve {
namespace {

std::vector<const KernelSet*> SimdTables() {
  std::vector<const KernelSet*> out;
  if (CpuSupports(KernelIsa::kAvx2)) out.push_back(Avx2Kernels());
  if (CpuSupports(KernelIsa::kAvx512)) out.push_back(Avx512Kernels());
  return out;
}

struct Weights {
  std::vector<std::byte> bytes;
  WeightMatrix matrix;
};

Weights RandomWeights(DType dtype, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Weights w;
  w.bytes.resize(size_t(rows * cols) * size_t(DTypeBytes(dtype)));
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float v = dist(rng);
    if (dtype == DType::kF32) {
      std::memcpy(w.bytes.data() + 4 * i, &v, 4);
    } else {
      const uint16_t h = dtype == DType::kBF16 ? F32ToBf16(v) : F32ToF16(v);
      std::memcpy(w.bytes.data() + 2 * i, &h, 2);
    }
  }
  w.matrix = WeightMatrix{dtype, rows, cols, w.bytes.data()};
  return w;
}

TEST(Kernels, SimdMatchesPortable) {
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const auto tables = SimdTables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD kernels on this CPU";
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t cols : {1, 7, 16, 33, 64, 200}) {
      for (int64_t n : {1, 2, 3, 4, 5, 9, 37}) {
        const int64_t rows = 11;
        Weights w = RandomWeights(dtype, rows, cols, rng);
        std::vector<float> x(size_t(n * cols));
        for (float& v : x) v = dist(rng);
        std::vector<float> expected(size_t(n * rows), -1.0f);
        PortableKernels().matmul_rows(x.data(), n, w.matrix, 0, rows, expected.data(), rows);
        for (const KernelSet* k : tables) {
          std::vector<float> got(size_t(n * rows), -1.0f);
          // Two row ranges, as the thread pool would split them.
          k->matmul_rows(x.data(), n, w.matrix, 0, 5, got.data(), rows);
          k->matmul_rows(x.data(), n, w.matrix, 5, rows, got.data(), rows);
          for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_NEAR(got[i], expected[i], 1e-4 * (1 + std::sqrt(double(cols))))
                << k->name << " " << DTypeName(dtype) << " cols=" << cols << " n=" << n;
          }
          std::vector<float> y_ref(size_t(cols), 0.5f), y(size_t(cols), 0.5f);
          PortableKernels().axpy_row(0.75f, w.matrix, 3, y_ref.data());
          k->axpy_row(0.75f, w.matrix, 3, y.data());
          for (int64_t i = 0; i < cols; ++i) ASSERT_NEAR(y[size_t(i)], y_ref[size_t(i)], 1e-5);
          EXPECT_NEAR(k->dot_f32(x.data(), x.data() + 1, cols - 1 + (cols == 1)),
                      PortableKernels().dot_f32(x.data(), x.data() + 1, cols - 1 + (cols == 1)),
                      1e-3);
        }
      }
    }
  }
}

// A token's result must not depend on what else is in the batch (bitwise), for every table:
// the engine's batch-invariance rests on this.
TEST(Kernels, MatMulIsBatchInvariant) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<const KernelSet*> tables = SimdTables();
  tables.push_back(&PortableKernels());
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t cols : {5, 64, 100, 2048}) {
      const int64_t rows = 9, n = 37;
      Weights w = RandomWeights(dtype, rows, cols, rng);
      std::vector<float> x(size_t(n * cols));
      for (float& v : x) v = dist(rng);
      for (const KernelSet* k : tables) {
        std::vector<float> batched(size_t(n * rows));
        k->matmul_rows(x.data(), n, w.matrix, 0, rows, batched.data(), rows);
        for (int64_t t = 0; t < n; ++t) {
          std::vector<float> alone(static_cast<size_t>(rows));
          k->matmul_rows(x.data() + t * cols, 1, w.matrix, 0, rows, alone.data(), rows);
          for (int64_t r = 0; r < rows; ++r) {
            ASSERT_EQ(alone[size_t(r)], batched[size_t(t * rows + r)]) << k->name << " t=" << t;
          }
        }
      }
    }
  }
}

// Packed panels: every table (portable included) against the row-major reference, for shapes
// with partial panels and pairs, and bitwise batch invariance.
TEST(Kernels, PackedPanelsMatchRowMajorAndAreBatchInvariant) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  ThreadPool pool(2);
  std::vector<const KernelSet*> tables = SimdTables();
  tables.push_back(&PortableKernels());
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t rows : {1, 15, 16, 17, 33, 64, 70}) {
      for (int64_t n : {1, 2, 5, 13, 27}) {
        const int64_t cols = 37;
        Weights w = RandomWeights(dtype, rows, cols, rng);
        std::vector<std::byte> packed_bytes(PackedBytes(w.matrix));
        const WeightMatrix packed = PackPanels(w.matrix, packed_bytes.data(), pool);
        std::vector<float> x(size_t(n * cols));
        for (float& v : x) v = dist(rng);
        std::vector<float> expected(size_t(n * rows));
        PortableKernels().matmul_rows(x.data(), n, w.matrix, 0, rows, expected.data(), rows);
        for (const KernelSet* k : tables) {
          std::vector<float> got(size_t(n * rows), -7.0f);
          const int64_t split = packed.num_panels() / 2 * 2;  // as MatMul splits: pairs of panels
          k->matmul_panels(x.data(), n, packed, 0, split, got.data(), rows);
          k->matmul_panels(x.data(), n, packed, split, packed.num_panels(), got.data(), rows);
          for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_NEAR(got[i], expected[i], 1e-4 * (1 + std::sqrt(double(cols))))
                << k->name << " " << DTypeName(dtype) << " rows=" << rows << " n=" << n << " i=" << i;
          }
          for (int64_t t = 0; t < n; ++t) {
            std::vector<float> alone(static_cast<size_t>(rows));
            k->matmul_panels(x.data() + t * cols, 1, packed, 0, packed.num_panels(), alone.data(), rows);
            for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(alone[size_t(r)], got[size_t(t * rows + r)]) << k->name;
          }
        }
      }
    }
  }
}

TEST(Kernels, ByNameRejectsUnknown) {
  auto k = KernelsByName("sse9");
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.error().find("sse9"), std::string::npos);
  EXPECT_TRUE(KernelsByName("portable").ok());
}

TEST(Float16, ConversionsRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t bits = uint16_t(h);
    const float f = F16ToF32(bits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(f))));
      continue;
    }
    ASSERT_EQ(F32ToF16(f), bits) << std::hex << h;
    ASSERT_EQ(Bf16ToF32(F32ToBf16(Bf16ToF32(bits))), Bf16ToF32(bits));
  }
  EXPECT_EQ(F32ToBf16(1.0f + 1.0f / 256.0f), F32ToBf16(1.0f));  // tie to even
  EXPECT_EQ(F32ToF16(1e6f), 0x7c00);                            // overflow to infinity
}

}  // namespace
}  // namespace mlaserve

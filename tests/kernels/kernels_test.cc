// Every SIMD kernel table against the portable reference, for every weight dtype and for
// shapes that exercise the register blocks and the scalar tails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/float16.h"
#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "kernels/pack.h"
#include "kernels/weight_value.h"
#include "support/kernel_tables.h"
#include "support/random_weights.h"

namespace mlaserve {
namespace {

using testing::QuantWeights;
using testing::RandomQuantWeights;
using testing::RandomWeights;
using testing::Weights;

// The weight kinds every kernel handles: dense dtypes and the two quantized formats (int4 needs
// cols a multiple of 8; its group is 32 when it divides cols, else 8). fp8 comes with 128-row
// blocks (DeepSeek's), 32-row ones (a panel block of two vectors lies in one band of rows: one
// buffer of scaled activations) and 16-row ones (AVX-512 blocks straddle bands: one buffer per
// band, each vector reading its own).
enum class Kind { kF32, kBF16, kF16, kFp8, kFp8Rows16, kFp8Rows128, kInt4, kInt8, kUint4Min, kUint8Min };
constexpr Kind kAllKinds[] = {Kind::kF32,       Kind::kBF16,        Kind::kF16,  Kind::kFp8,
                              Kind::kFp8Rows16, Kind::kFp8Rows128, Kind::kInt4, Kind::kInt8, Kind::kUint4Min,
                              Kind::kUint8Min};

struct AnyWeights {
  Weights dense;
  QuantWeights quant;
  const WeightMatrix& matrix() const { return quant.codes.empty() ? dense.matrix : quant.matrix; }
};

std::optional<AnyWeights> MakeWeights(Kind kind, int64_t rows, int64_t cols, std::mt19937& rng) {
  AnyWeights w;
  switch (kind) {
    case Kind::kF32: w.dense = RandomWeights(DType::kF32, rows, cols, rng); break;
    case Kind::kBF16: w.dense = RandomWeights(DType::kBF16, rows, cols, rng); break;
    case Kind::kF16: w.dense = RandomWeights(DType::kF16, rows, cols, rng); break;
    case Kind::kFp8: w.quant = RandomQuantWeights(WeightFormat::kFp8Block, rows, cols, 32, 48, rng); break;
    case Kind::kFp8Rows16: w.quant = RandomQuantWeights(WeightFormat::kFp8Block, rows, cols, 16, 20, rng); break;
    case Kind::kFp8Rows128: w.quant = RandomQuantWeights(WeightFormat::kFp8Block, rows, cols, 128, 128, rng); break;
    case Kind::kInt4:
      if (cols % 8 != 0) return std::nullopt;
      w.quant = RandomQuantWeights(WeightFormat::kInt4Group, rows, cols, 1, cols % 32 == 0 ? 32 : 8, rng);
      break;
    case Kind::kInt8: {
      // GGUF's Q8_0 groups of 32, else the largest group that divides cols and packs (a
      // multiple of 4: weight_matrix.h).
      int group = 0;
      for (int g : {32, 8, 4}) {
        if (group == 0 && cols % g == 0) group = g;
      }
      if (group == 0) return std::nullopt;
      w.quant = RandomQuantWeights(WeightFormat::kInt8Group, rows, cols, 1, group, rng);
      break;
    }
    case Kind::kUint4Min:  // GGUF's Q4_K: groups of 32, else of 8
      if (cols % 8 != 0) return std::nullopt;
      w.quant = RandomQuantWeights(WeightFormat::kUint4GroupMin, rows, cols, 1, cols % 32 == 0 ? 32 : 8, rng);
      break;
    case Kind::kUint8Min:  // GGUF's Q5_K: groups of 32, else of 4
      if (cols % 4 != 0) return std::nullopt;
      w.quant = RandomQuantWeights(WeightFormat::kUint8GroupMin, rows, cols, 1, cols % 32 == 0 ? 32 : 4, rng);
      break;
  }
  return w;
}

const char* KindName(Kind kind) {
  constexpr const char* kNames[] = {"F32",        "BF16", "F16", "fp8-block", "fp8-block rows 16", "fp8-block rows 128",
                                    "int4-group", "int8-group", "uint4-group-min", "uint8-group-min"};
  return kNames[int(kind)];
}

// Quantized weights: every SIMD table against the portable one (row-major products over split
// row ranges, a Slice whose scale grid starts mid-block, axpy_row), for block/group shapes that
// do and do not fill whole vectors.
TEST(Kernels, QuantizedSimdMatchesPortable) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const auto tables = testing::SimdKernelTables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD kernels on this CPU";
  struct Shape {
    WeightFormat format;
    int block_rows, block_cols;
    int64_t cols;
  };
  const Shape shapes[] = {{WeightFormat::kFp8Block, 128, 128, 7},   {WeightFormat::kFp8Block, 128, 128, 128},
                          {WeightFormat::kFp8Block, 128, 128, 300}, {WeightFormat::kFp8Block, 16, 48, 200},
                          {WeightFormat::kFp8Block, 32, 20, 61},    {WeightFormat::kInt4Group, 1, 32, 64},
                          {WeightFormat::kInt4Group, 1, 32, 224},   {WeightFormat::kInt4Group, 1, 8, 40},
                          {WeightFormat::kInt4Group, 1, 2, 8},      {WeightFormat::kInt8Group, 1, 32, 64},
                          {WeightFormat::kInt8Group, 1, 32, 224},   {WeightFormat::kInt8Group, 1, 2, 6},
                          {WeightFormat::kUint4GroupMin, 1, 32, 64}, {WeightFormat::kUint4GroupMin, 1, 32, 224},
                          {WeightFormat::kUint4GroupMin, 1, 8, 40},  {WeightFormat::kUint4GroupMin, 1, 2, 10},
                          {WeightFormat::kUint8GroupMin, 1, 32, 224}, {WeightFormat::kUint8GroupMin, 1, 2, 6}};
  for (const Shape& shape : shapes) {
    for (int64_t n : {1, 2, 5, 13}) {
      const int64_t rows = 150;
      QuantWeights w = RandomQuantWeights(shape.format, rows, shape.cols, shape.block_rows, shape.block_cols, rng);
      const WeightMatrix slice = w.matrix.Slice(37, 90);
      std::vector<float> x(size_t(n * shape.cols));
      for (float& v : x) v = dist(rng);
      for (const WeightMatrix& m : {w.matrix, slice}) {
        std::vector<float> expected(size_t(n * m.rows), -1.0f);
        PortableKernels().matmul_rows(x.data(), n, m, 0, m.rows, expected.data(), m.rows);
        for (const KernelSet* k : tables) {
          SCOPED_TRACE(std::string(k->name) + " cols=" + std::to_string(shape.cols) + " block_cols=" +
                       std::to_string(shape.block_cols) + " n=" + std::to_string(n) + " rows=" + std::to_string(m.rows));
          std::vector<float> got(size_t(n * m.rows), -1.0f);
          k->matmul_rows(x.data(), n, m, 0, 40, got.data(), m.rows);
          k->matmul_rows(x.data(), n, m, 40, m.rows, got.data(), m.rows);
          for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], expected[i], 1e-4 * (1 + std::abs(expected[i])));
          for (int64_t r : {int64_t(0), int64_t(3), m.rows - 1}) {
            std::vector<float> y_ref(size_t(m.cols), 0.5f), y(size_t(m.cols), 0.5f);
            PortableKernels().axpy_row(0.75f, m, r, y_ref.data());
            k->axpy_row(0.75f, m, r, y.data());
            for (int64_t i = 0; i < m.cols; ++i) ASSERT_NEAR(y[size_t(i)], y_ref[size_t(i)], 1e-5 * (1 + std::abs(y_ref[size_t(i)])));
          }
        }
      }
    }
  }
}

TEST(Kernels, SimdMatchesPortable) {
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const auto tables = testing::SimdKernelTables();
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
          // x against itself shifted by one: x.size() - 1 products (the shifted side ends with x;
          // the sanitized suite found the old length reading one past it when n = cols = 1).
          const int64_t dot_len = int64_t(x.size()) - 1;
          EXPECT_NEAR(k->dot_f32(x.data(), x.data() + 1, dot_len), PortableKernels().dot_f32(x.data(), x.data() + 1, dot_len),
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
  std::vector<const KernelSet*> tables = testing::SimdKernelTables();
  tables.push_back(&PortableKernels());
  for (Kind kind : kAllKinds) {
    for (int64_t cols : {5, 64, 100, 2048}) {
      const int64_t rows = 9, n = 37;
      const auto w = MakeWeights(kind, rows, cols, rng);
      if (!w) continue;
      std::vector<float> x(size_t(n * cols));
      for (float& v : x) v = dist(rng);
      for (const KernelSet* k : tables) {
        SCOPED_TRACE(KindName(kind));
        std::vector<float> batched(size_t(n * rows));
        k->matmul_rows(x.data(), n, w->matrix(), 0, rows, batched.data(), rows);
        for (int64_t t = 0; t < n; ++t) {
          std::vector<float> alone(static_cast<size_t>(rows));
          k->matmul_rows(x.data() + t * cols, 1, w->matrix(), 0, rows, alone.data(), rows);
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
  std::vector<const KernelSet*> tables = testing::SimdKernelTables();
  tables.push_back(&PortableKernels());
  for (Kind kind : kAllKinds) {
    for (int64_t rows : {1, 15, 16, 17, 33, 64, 70, 150}) {
      for (int64_t n : {1, 2, 5, 13, 27, 40}) {  // 13+: quantized prefill widens fp8, 40: int4 too
        const int64_t cols = kind == Kind::kInt4 || kind == Kind::kInt8 || kind == Kind::kUint4Min ||
                               kind == Kind::kUint8Min
                           ? 72
                           : 37;
        const auto w = MakeWeights(kind, rows, cols, rng);
        ASSERT_TRUE(w.has_value());
        std::vector<std::byte> packed_bytes(PackedBytes(w->matrix()));
        const WeightMatrix packed = PackPanels(w->matrix(), packed_bytes.data(), pool);
        std::vector<float> x(size_t(n * cols));
        for (float& v : x) v = dist(rng);
        std::vector<float> expected(size_t(n * rows));
        PortableKernels().matmul_rows(x.data(), n, w->matrix(), 0, rows, expected.data(), rows);
        const DType dtype = w->matrix().dtype;
        SCOPED_TRACE(KindName(kind));
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

// The prefill product over packed activations: every table's packing lays out exactly what the
// layout's definition (the portable packing) does, and its product is bit-identical to
// matmul_panels (so a token's result does not depend on which product its batch size chose),
// for every format (fp8 with 128-row bands, and 16-row bands that AVX-512 hands back to
// matmul_panels), across column blocks (cols > kGemmColumns), partial token tiles and row ranges
// split as MatMul splits them.
TEST(Kernels, PackedActivationProductIsBitIdenticalToPanels) {
  std::mt19937 rng(17);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  ThreadPool pool(2);
  for (Kind kind : kAllKinds) {
    for (int64_t rows : {15, 33, 150}) {
      for (int64_t cols : {int64_t{96}, kGemmColumns + 96 + 32}) {
        const auto w = MakeWeights(kind, rows, cols, rng);
        ASSERT_TRUE(w.has_value());
        std::vector<std::byte> packed_bytes(PackedBytes(w->matrix()));
        const WeightMatrix packed = PackPanels(w->matrix(), packed_bytes.data(), pool);
        for (int64_t n : {13, 49, 131}) {
          std::vector<float> x(size_t(n * cols));
          for (float& v : x) v = dist(rng);
          const size_t xp_floats = size_t(PackedActivationFloats(n, cols));
          std::vector<float> reference_xp(xp_floats, -3.0f);
          PortableKernels().pack_activations(x.data(), n, packed, 0, GemmTiles(n), reference_xp.data());
          SCOPED_TRACE(std::string(KindName(kind)) + " rows=" + std::to_string(rows) + " cols=" +
                       std::to_string(cols) + " n=" + std::to_string(n));
          for (const KernelSet* k : testing::RunnableKernelTables()) {
            std::vector<float> xp(xp_floats, -3.0f);
            const int64_t tiles = GemmTiles(n);
            k->pack_activations(x.data(), n, packed, 0, tiles / 2, xp.data());  // two threads' halves
            k->pack_activations(x.data(), n, packed, tiles / 2, tiles, xp.data());
            for (int64_t t = 0; t < n; ++t) {
              for (int64_t c = 0; c < cols; ++c) {
                ASSERT_EQ(xp[size_t(GemmPackedIndex(n, t, c))], x[size_t(t * cols + c)]) << k->name;
              }
            }
            ASSERT_EQ(xp, reference_xp) << k->name;

            std::vector<float> want(size_t(n * rows), -7.0f), got(size_t(n * rows), -7.0f);
            const int64_t split = packed.num_panels() / 2 * 2;
            k->matmul_panels(x.data(), n, packed, 0, split, want.data(), rows);
            k->matmul_panels(x.data(), n, packed, split, packed.num_panels(), want.data(), rows);
            std::vector<float> scratch(size_t(GemmThreadScratchFloats(n)));
            k->matmul_panels_packed(x.data(), xp.data(), scratch.data(), n, packed, 0, split, got.data(), rows);
            k->matmul_panels_packed(x.data(), xp.data(), scratch.data(), n, packed, split, packed.num_panels(),
                                    got.data(), rows);
            for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << k->name << " i=" << i;
          }
        }
      }
    }
  }
}

// The shapes DeepSeek-V3 runs (hidden 7168, expert intermediate 2048) in the formats its
// checkpoints ship: every SIMD table, row-major and packed, against the portable row-major
// product. Long rows are where a dropped tail chunk, a mis-strided scale block or a
// reassociated sum hides; small shapes cannot show them. One token is checked on every row;
// thirteen (the token tiles of prefill) on three bands of 128 rows, the middle one straddling a
// 128-row scale block, so that the scalar reference stays within a second or two.
TEST(Kernels, RealShapesSimdMatchPortable) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const auto tables = testing::SimdKernelTables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD kernels on this CPU";
  ThreadPool pool(2);
  struct Shape {
    int64_t rows, cols;
  };
  constexpr Shape kShapes[] = {{7168, 2048}, {2048, 7168}};  // [out, in]: down_proj, up_proj
  constexpr Kind kKinds[] = {Kind::kBF16, Kind::kFp8Rows128, Kind::kInt4, Kind::kInt8,
                             Kind::kUint4Min, Kind::kUint8Min};  // the grouped ones: groups of 32
  constexpr int64_t kBandRows = 128;
  for (const Shape& shape : kShapes) {
    for (Kind kind : kKinds) {
      const auto w = MakeWeights(kind, shape.rows, shape.cols, rng);
      ASSERT_TRUE(w.has_value());
      std::vector<std::byte> packed_bytes(PackedBytes(w->matrix()));
      const WeightMatrix packed = PackPanels(w->matrix(), packed_bytes.data(), pool);
      const int64_t bands[] = {0, shape.rows / 2 - kBandRows / 2, shape.rows - kBandRows};  // first rows
      for (int64_t n : {1, 13}) {
        std::vector<float> x(size_t(n * shape.cols));
        for (float& v : x) v = dist(rng);
        // The reference on the rows checked: all of them for one token, the bands for more.
        std::vector<float> expected(size_t(n * shape.rows), std::nanf(""));
        if (n == 1) {
          PortableKernels().matmul_rows(x.data(), n, w->matrix(), 0, shape.rows, expected.data(), shape.rows);
        } else {
          for (int64_t first : bands) {
            PortableKernels().matmul_rows(x.data(), n, w->matrix(), first, first + kBandRows, expected.data(),
                                          shape.rows);
          }
        }
        for (const KernelSet* k : tables) {
          SCOPED_TRACE(std::string(k->name) + " " + KindName(kind) + " " + std::to_string(shape.rows) + "x" +
                       std::to_string(shape.cols) + " n=" + std::to_string(n));
          std::vector<float> rows_out(size_t(n * shape.rows), -7.0f), panels_out(size_t(n * shape.rows), -7.0f);
          k->matmul_rows(x.data(), n, w->matrix(), 0, shape.rows, rows_out.data(), shape.rows);
          k->matmul_panels(x.data(), n, packed, 0, packed.num_panels(), panels_out.data(), shape.rows);
          int64_t compared = 0;
          for (size_t i = 0; i < rows_out.size(); ++i) {
            const float want = expected[i];
            if (std::isnan(want)) continue;  // a row outside the bands
            // fp32 sums of cols terms in another order: a few ulps of the row's magnitude.
            const float tolerance = 2e-5f * (std::sqrt(float(shape.cols)) + std::abs(want));
            ASSERT_NEAR(rows_out[i], want, tolerance) << "matmul_rows, token " << i / size_t(shape.rows) << " row "
                                                      << i % size_t(shape.rows);
            ASSERT_NEAR(panels_out[i], want, tolerance) << "matmul_panels, token " << i / size_t(shape.rows)
                                                        << " row " << i % size_t(shape.rows);
            ++compared;
          }
          EXPECT_EQ(compared, n == 1 ? shape.rows : n * 3 * kBandRows);
        }
      }
    }
  }
}

// PackF32Panels (attention's keys and transposed values), and every SIMD table's pack_f32_panels:
// every element where WeightAt reads it, F32 exactly and BF16 rounded to nearest even, through
// strides that transpose (the values) and that gather (the keys), and padding lanes zero.
TEST(Kernels, PackF32PanelsPlacesEveryElement) {
  std::mt19937 rng(23);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t rows = 37, cols = 21;
  std::vector<float> src(size_t(rows * cols));  // [cols][rows] or [rows][cols]
  for (float& v : src) v = dist(rng);
  using Pack = WeightMatrix (*)(const float*, int64_t, int64_t, int64_t, int64_t, DType, void*);
  std::vector<std::pair<std::string, Pack>> packers{{"PackF32Panels", PackF32Panels}};
  std::vector<const KernelSet*> tables = testing::SimdKernelTables();
  if (CpuSupportsBf16Dot()) tables.push_back(Avx512Bf16Kernels(2));
  for (const KernelSet* k : tables) {
    if (k->pack_f32_panels != nullptr) packers.emplace_back(k->name, k->pack_f32_panels);
  }
  for (const auto& [name, pack] : packers) {
    for (bool transposed : {true, false}) {
      const int64_t row_stride = transposed ? 1 : cols, col_stride = transposed ? rows : 1;
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE(name + (transposed ? " transposed " : " gathered ") + (dtype == DType::kF32 ? "F32" : "BF16"));
        std::vector<std::byte> bytes(PackedF32PanelsBytes(rows, cols, dtype), std::byte{0x7f});
        const WeightMatrix w = pack(src.data(), rows, cols, row_stride, col_stride, dtype, bytes.data());
        ASSERT_TRUE(w.packed);
        ASSERT_EQ(w.rows, rows);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < cols; ++c) {
            const float want = src[size_t(r * row_stride + c * col_stride)];
            EXPECT_EQ(WeightAt(w, r, c), dtype == DType::kF32 ? want : Bf16ToF32(F32ToBf16(want))) << r << "," << c;
          }
        }
        // The last panel's lanes past row 36 are zero.
        for (int64_t c = 0; c < cols; ++c) {
          for (int64_t lane = rows % kPanelRows; lane < kPanelRows; ++lane) {
            const std::byte* p = w.panel(w.num_panels() - 1) + (c * kPanelRows + lane) * DTypeBytes(dtype);
            for (int b = 0; b < DTypeBytes(dtype); ++b) EXPECT_EQ(p[b], std::byte{0}) << c << "," << lane;
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

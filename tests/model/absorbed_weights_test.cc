// kv_b_proj's per-head copies (model/absorbed_weights.h): W_UK^T, W_UV and W_UK in panels
// multiply as kv_b's own rows do, through every kernel table this CPU runs, for the
// formats that get copies; the others get none.
#include "model/absorbed_weights.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/weight_value.h"
#include "support/kernel_tables.h"
#include "support/random_weights.h"

namespace mlaserve {
namespace {

ModelConfig SmallMla() {
  ModelConfig c;
  c.num_attention_heads = 3;
  c.qk_nope_head_dim = 32;
  c.v_head_dim = 16;
  c.kv_lora_rank = 64;
  return c;
}

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

// Every table this CPU runs, and the int8 one where there is one (it quantizes the query).
std::vector<const KernelSet*> Tables() {
  std::vector<const KernelSet*> out = testing::RunnableKernelTables();
  if (const KernelSet* bf16 = CpuSupportsBf16Dot() ? Avx512Bf16Kernels(1) : nullptr) out.push_back(bf16);
  if (const KernelSet* int8 = CpuSupportsInt8Dot() ? WithInt8Dot(Avx512Kernels()) : nullptr) out.push_back(int8);
  return out;
}

// Multiplies by each head's copies as the decode does and compares with kv_b's rows summed in
// double; exact tables (fp32 products) to 1e-5 of the largest output, rounding ones (bf16 or int8
// activations) to 2e-2.
void ExpectCopiesMultiplyAsRows(const WeightMatrix& kv_b, bool transposed_copy) {
  const ModelConfig c = SmallMla();
  const int64_t nope = c.qk_nope_head_dim, v = c.v_head_dim, L = c.kv_lora_rank;
  ModelWeights w;
  w.layers.resize(1);
  AttentionWeights& a = w.layers[0].attn;
  a.kv_b = kv_b;
  ASSERT_TRUE(PackAbsorbedWeights(w, c, pool()).ok());
  ASSERT_TRUE(HasPanelCopies(a));
  ASSERT_EQ(a.uv.size(), size_t(c.num_attention_heads));
  ASSERT_EQ(a.uk.size(), size_t(c.num_attention_heads));
  ASSERT_EQ(HasTransposedCopies(a), transposed_copy);
  if (transposed_copy) {
    ASSERT_EQ(a.uk_t.size(), size_t(c.num_attention_heads));
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const KernelSet* k : Tables()) {
    const bool rounds = k->int8_dot || k->bf16_min_tokens > 0;
    for (int64_t h = 0; h < c.num_attention_heads; ++h) {
      std::vector<float> q(static_cast<size_t>(nope)), o(static_cast<size_t>(L));
      for (float& x : q) x = normal(rng);
      for (float& x : o) x = normal(rng);
      // W_UK^T: q_lat[col] = sum_d q[d] * W_UK[d][col]. Grouped copies take the query scaled per
      // group (a.uk_t_scales); dense and fp8 copies (which keep their blocks' scales) take it as it is.
      const bool scaled_groups = !a.uk_t_scales.empty();
      const int64_t group_rows = scaled_groups ? kv_b.block_cols : L;
      std::vector<float> q_lat(static_cast<size_t>(L), 0.0f), scaled(static_cast<size_t>(nope * (L / group_rows)));
      std::vector<float> min_sums(static_cast<size_t>(L / group_rows));
      if (transposed_copy && scaled_groups) {
        ScaleAbsorbedQuery(*k, a, c, h, q.data(), scaled.data(), min_sums.data());
        // Exactly one rounding a scaled value, and the min sums added row by row in d order, from
        // kv_b's own scales and mins (the head's table holds them transposed).
        const int64_t groups = L / group_rows;
        std::vector<float> want_min_sums(static_cast<size_t>(groups), 0.0f), mins(static_cast<size_t>(groups));
        for (int64_t d = 0; d < nope; ++d) {
          const int64_t row = h * (nope + v) + d;
          for (int64_t g = 0; g < groups; ++g) {
            ASSERT_EQ(scaled[size_t(g * nope + d)], q[size_t(d)] * WeightScaleAt(kv_b, row, g * group_rows));
            mins[size_t(g)] = WeightMinAt(kv_b, row, g * group_rows);
          }
          k->axpy_f32(q[size_t(d)], mins.data(), want_min_sums.data(), groups);
        }
        if (kv_b.has_mins()) {
          ASSERT_EQ(min_sums, want_min_sums);
        }
      }
      if (transposed_copy) MultiplyAbsorbedQuery(*k, a, c, h, q.data(), q_lat.data());
      std::vector<double> want(size_t(L), 0.0);
      for (int64_t col = 0; col < L; ++col) {
        for (int64_t d = 0; d < nope; ++d) want[size_t(col)] += double(q[size_t(d)]) * WeightAt(kv_b, h * (nope + v) + d, col);
      }
      // W_UV: out[j] = sum_col o[col] * W_UV[j][col].
      std::vector<float> out(static_cast<size_t>(v));
      k->matmul_panels(o.data(), 1, a.uv[size_t(h)], 0, a.uv[size_t(h)].num_panels(), out.data(), v);
      std::vector<double> want_out(size_t(v), 0.0);
      for (int64_t j = 0; j < v; ++j) {
        for (int64_t col = 0; col < L; ++col) {
          want_out[size_t(j)] += double(o[size_t(col)]) * WeightAt(kv_b, h * (nope + v) + nope + j, col);
        }
      }
      // W_UK (the MHA form's keys): key[d] = sum_col o[col] * W_UK[d][col].
      std::vector<float> key(static_cast<size_t>(nope));
      k->matmul_panels(o.data(), 1, a.uk[size_t(h)], 0, a.uk[size_t(h)].num_panels(), key.data(), nope);
      std::vector<double> want_key(size_t(nope), 0.0);
      for (int64_t d = 0; d < nope; ++d) {
        for (int64_t col = 0; col < L; ++col) want_key[size_t(d)] += double(o[size_t(col)]) * WeightAt(kv_b, h * (nope + v) + d, col);
      }
      // Without a W_UK^T copy there is no query product to compare (q_lat is never written).
      std::vector<std::pair<const std::vector<float>*, const std::vector<double>*>> checks = {{&out, &want_out},
                                                                                             {&key, &want_key}};
      if (transposed_copy) checks.push_back({&q_lat, &want});
      for (const auto& [got, expected] : checks) {
        double largest = 0.0;
        for (double e : *expected) largest = std::max(largest, std::abs(e));
        for (size_t i = 0; i < got->size(); ++i) {
          EXPECT_NEAR((*got)[i], (*expected)[i], (rounds ? 2e-2 : 1e-5) * largest) << k->name << " head " << h << " " << i;
        }
      }
    }
  }
}

TEST(AbsorbedWeights, DenseCopiesMultiplyAsKvBRows) {
  std::mt19937 rng(1);
  const ModelConfig c = SmallMla();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const testing::Weights kv_b =
        testing::RandomWeights(dtype, int64_t(c.num_attention_heads) * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank, rng);
    ExpectCopiesMultiplyAsRows(kv_b.matrix, true);
  }
}

// kv_b of a grouped format, heads x (nope + v) rows of SmallMla's kv_lora.
testing::QuantWeights RandomKvB(WeightFormat format, int block_rows, int block_cols, std::mt19937& rng) {
  const ModelConfig c = SmallMla();
  return testing::RandomQuantWeights(format, int64_t(c.num_attention_heads) * (c.qk_nope_head_dim + c.v_head_dim),
                                     c.kv_lora_rank, block_rows, block_cols, rng);
}

// Grouped codes: W_UV and W_UK copies, and a W_UK^T copy of the codes for all but int4 (the
// absorbed query scaled by kv_b's group scales; with mins, each group's outputs less
// sum_d q[d] * min(d, g)); int4 keeps the row-major path for the query.
TEST(AbsorbedWeights, GroupedCopiesMultiplyAsKvBRows) {
  std::mt19937 rng(2);
  const struct {
    WeightFormat format;
    int group;
    bool transposed_copy;
  } cases[] = {{WeightFormat::kInt8Group, 16, true},      {WeightFormat::kInt8Group, 32, true},  // Q6_K's, Q8_0's
               {WeightFormat::kUint4GroupMin, 32, true},  {WeightFormat::kUint8GroupMin, 32, true},
               {WeightFormat::kInt4Group, 32, false}};
  for (const auto& t : cases) {
    SCOPED_TRACE(std::to_string(int(t.format)) + " group " + std::to_string(t.group));
    ExpectCopiesMultiplyAsRows(RandomKvB(t.format, 1, t.group, rng).matrix, t.transposed_copy);
  }
}

// The int8 tables' one-pass absorbed query (KernelSet::grouped_query_product) gives the plain
// path's q_lat bit for bit (ScaleAbsorbedQuery, then matmul_panels a group at a time and the min
// sums off): DeepSeek's shape (nope 128, kv_lora 512) in Q8_0's, Q6_K's, Q4_K's and Q5_K's groups,
// and a nope that is no multiple of 16 with 20 groups (the min sums' vector and its tail).
TEST(AbsorbedWeights, GroupedQueryProductIsThePlainPathBitForBit) {
  const KernelSet* int8 = CpuSupportsInt8Dot() ? WithInt8Dot(Avx512Kernels()) : nullptr;
  if (int8 == nullptr) GTEST_SKIP() << "no int8 dot-product table on this CPU";
  std::vector<const KernelSet*> tables = {int8};
  if (CpuSupportsBf16Dot()) tables.push_back(WithInt8Dot(Avx512Bf16Kernels(2)));
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const struct {
    int nope, kv_lora;
    WeightFormat format;
    int group;
  } cases[] = {{128, 512, WeightFormat::kInt8Group, 32},     {128, 512, WeightFormat::kInt8Group, 16},
               {128, 512, WeightFormat::kUint4GroupMin, 32}, {128, 512, WeightFormat::kUint8GroupMin, 32},
               {24, 320, WeightFormat::kUint4GroupMin, 16},  {24, 320, WeightFormat::kInt8Group, 16},
               {24, 320, WeightFormat::kUint8GroupMin, 16}};
  for (const auto& t : cases) {
    SCOPED_TRACE(std::to_string(int(t.format)) + " group " + std::to_string(t.group) + " nope " + std::to_string(t.nope));
    ModelConfig c = SmallMla();
    c.num_attention_heads = 2;
    c.qk_nope_head_dim = t.nope;
    c.kv_lora_rank = t.kv_lora;
    const testing::QuantWeights kv_b = testing::RandomQuantWeights(
        t.format, int64_t(c.num_attention_heads) * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank, 1, t.group, rng);
    ModelWeights w;
    w.layers.resize(1);
    AttentionWeights& a = w.layers[0].attn;
    a.kv_b = kv_b.matrix;
    ASSERT_TRUE(PackAbsorbedWeights(w, c, pool()).ok());
    ASSERT_TRUE(HasTransposedCopies(a));
    ASSERT_EQ(a.uk_t_scales.size(), size_t(c.num_attention_heads));
    for (const KernelSet* k : tables) {
      ASSERT_NE(k->grouped_query_product, nullptr) << k->name;
      KernelSet plain = *k;
      plain.grouped_query_product = nullptr;
      for (int64_t h = 0; h < c.num_attention_heads; ++h) {
        std::vector<float> q(static_cast<size_t>(t.nope));
        for (float& x : q) x = normal(rng);
        q[3] = 0.0f;  // a zero and a larger value among the query's
        q[5] = 40.0f;
        // Then the same head for an all-zero query (every group's scale 0: zero codes).
        for (const bool zero : {false, true}) {
          if (zero) std::fill(q.begin(), q.end(), 0.0f);
          std::vector<float> got(static_cast<size_t>(t.kv_lora), -1.0f), want(static_cast<size_t>(t.kv_lora), -2.0f);
          MultiplyAbsorbedQuery(*k, a, c, h, q.data(), got.data());
          MultiplyAbsorbedQuery(plain, a, c, h, q.data(), want.data());
          for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
                << k->name << " head " << h << " row " << i << (zero ? " (zero query)" : "") << ": " << got[i]
                << " vs " << want[i];
          }
        }
      }
    }
  }
}

// A GGUF's split pair kept in its formats (AttentionWeights::k_b, v_b; kv_b empty), both in
// block types or one dense (files mix a K type's fallback with another type): W_UK^T and
// W_UV packed as they are, the query one product a head (no scale table: k_b's groups run along
// nope, the product's input), and W_UK (the MHA form's keys) k_b transposed in F32 (WeightAt).
TEST(AbsorbedWeights, SplitPairCopiesMultiplyAsTheirRows) {
  std::mt19937 rng(4);
  const ModelConfig c = SmallMla();
  const int64_t heads = c.num_attention_heads, nope = c.qk_nope_head_dim, v = c.v_head_dim, L = c.kv_lora_rank;
  const struct {
    WeightFormat k_format, v_format;  // kDense: F32
    int k_group, v_group;
  } cases[] = {{WeightFormat::kInt8Group, WeightFormat::kInt8Group, 32, 16},          // Q8_0 k_b, Q6_K v_b
               {WeightFormat::kUint4GroupMin, WeightFormat::kUint8GroupMin, 32, 32},  // Q4_0, Q5_K
               {WeightFormat::kInt8Group, WeightFormat::kDense, 32, 0},               // Q8_0, F32
               {WeightFormat::kDense, WeightFormat::kUint4GroupMin, 0, 32}};          // F32, Q4_K
  for (const auto& t : cases) {
    SCOPED_TRACE(std::to_string(int(t.k_format)) + " / " + std::to_string(int(t.v_format)));
    std::vector<testing::Weights> dense;        // the matrices' bytes, kept for the test
    std::vector<testing::QuantWeights> quantized;
    dense.reserve(2);
    quantized.reserve(2);
    const auto make = [&](WeightFormat format, int64_t rows, int64_t cols, int group) {
      if (format == WeightFormat::kDense) return dense.emplace_back(testing::RandomWeights(DType::kF32, rows, cols, rng)).matrix;
      return quantized.emplace_back(testing::RandomQuantWeights(format, rows, cols, 1, group, rng)).matrix;
    };
    ModelWeights w;
    w.layers.resize(1);
    AttentionWeights& a = w.layers[0].attn;
    a.k_b = make(t.k_format, heads * L, nope, t.k_group);
    a.v_b = make(t.v_format, heads * v, L, t.v_group);
    const WeightMatrix k_b = a.k_b, v_b = a.v_b;
    ASSERT_TRUE(PackAbsorbedWeights(w, c, pool()).ok());
    ASSERT_TRUE(HasPanelCopies(a) && HasTransposedCopies(a));
    ASSERT_EQ(a.uk_t.size(), size_t(heads));
    EXPECT_TRUE(a.uk_t_scales.empty());
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const KernelSet* k : Tables()) {
      const bool rounds = k->int8_dot || k->bf16_min_tokens > 0;
      for (int64_t h = 0; h < heads; ++h) {
        std::vector<float> q(static_cast<size_t>(nope)), o(static_cast<size_t>(L));
        for (float& x : q) x = normal(rng);
        for (float& x : o) x = normal(rng);
        std::vector<float> q_lat(static_cast<size_t>(L)), out(static_cast<size_t>(v)), key(static_cast<size_t>(nope));
        k->matmul_panels(q.data(), 1, a.uk_t[size_t(h)], 0, a.uk_t[size_t(h)].num_panels(), q_lat.data(), L);
        k->matmul_panels(o.data(), 1, a.uv[size_t(h)], 0, a.uv[size_t(h)].num_panels(), out.data(), v);
        k->matmul_panels(o.data(), 1, a.uk[size_t(h)], 0, a.uk[size_t(h)].num_panels(), key.data(), nope);
        std::vector<double> want_lat(size_t(L), 0.0), want_out(size_t(v), 0.0), want_key(size_t(nope), 0.0);
        for (int64_t col = 0; col < L; ++col) {
          for (int64_t d = 0; d < nope; ++d) {
            const double w_uk = WeightAt(k_b, h * L + col, d);  // W_UK[d][col] = k_b[h][col][d]
            want_lat[size_t(col)] += double(q[size_t(d)]) * w_uk;
            want_key[size_t(d)] += double(o[size_t(col)]) * w_uk;
          }
          for (int64_t j = 0; j < v; ++j) want_out[size_t(j)] += double(o[size_t(col)]) * WeightAt(v_b, h * v + j, col);
        }
        const std::pair<const std::vector<float>*, const std::vector<double>*> checks[] = {
            {&q_lat, &want_lat}, {&out, &want_out}, {&key, &want_key}};
        for (const auto& [got, expected] : checks) {
          double largest = 0.0;
          for (double e : *expected) largest = std::max(largest, std::abs(e));
          for (size_t i = 0; i < got->size(); ++i) {
            EXPECT_NEAR((*got)[i], (*expected)[i], (rounds ? 2e-2 : 1e-5) * largest) << k->name << " head " << h << " " << i;
          }
        }
      }
    }
  }
}

// fp8 blocks whose bands hold whole heads' W_UK and W_UV rows (nope 32 and v 16 in bands of 16,
// as DeepSeek-V3's 128 and 128 in bands of 128) get W_UV and W_UK copies, each with its bands'
// scales, and a W_UK^T copy with the blocks transposed (16 x 32 blocks become 32 x 16: two
// column groups a head, two row bands); blocks of 32 rows, whose band would hold one head's
// W_UV and the next head's first W_UK rows, get none.
TEST(AbsorbedWeights, Fp8BlocksCopyWhereEachHeadHoldsWholeBands) {
  std::mt19937 rng(3);
  ExpectCopiesMultiplyAsRows(RandomKvB(WeightFormat::kFp8Block, 16, 32, rng).matrix, /*transposed_copy=*/true);
  const testing::QuantWeights spanning = RandomKvB(WeightFormat::kFp8Block, 32, 32, rng);
  ModelWeights w;
  w.layers.resize(1);
  w.layers[0].attn.kv_b = spanning.matrix;
  ASSERT_TRUE(PackAbsorbedWeights(w, SmallMla(), pool()).ok());
  EXPECT_FALSE(HasPanelCopies(w.layers[0].attn));
  EXPECT_FALSE(HasTransposedCopies(w.layers[0].attn));
  EXPECT_EQ(w.absorbed_storage.size(), 0u);
}

}  // namespace
}  // namespace mlaserve

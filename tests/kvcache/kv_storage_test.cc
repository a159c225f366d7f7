// The KV storage alone: bytes and locations, no bookkeeping.
#include "kvcache/kv_storage.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <vector>

namespace mlaserve {
namespace {

constexpr int kLayers = 3, kLatent = 64, kRope = 16, kRowDim = kLatent + kRope;

std::unique_ptr<HostKvStorage> MakeStorage(KvFormat format, int64_t pages, int page_size = 4) {
  auto storage = HostKvStorage::Create(
      {.format = format, .num_layers = kLayers, .latent_dim = kLatent, .rope_dim = kRope, .page_size = page_size,
       .num_pages = pages});
  EXPECT_TRUE(storage.ok()) << storage.error();
  return std::move(storage).value();
}

TEST(KvStorage, SizesComeFromTheFormat) {
  auto storage = MakeStorage(KvFormat::kFP8DsMla, 10);
  EXPECT_EQ(storage->row_bytes(), KvRowBytes(KvFormat::kFP8DsMla, kLatent, kRope));
  EXPECT_EQ(storage->bytes_per_token(), kLayers * storage->row_bytes());
  EXPECT_EQ(storage->total_bytes(), 40 * storage->bytes_per_token());
  // Pages of different layers never overlap, and every page lies inside the storage.
  const KvHostRows rows = storage->HostRows();
  ASSERT_FALSE(rows.empty());
  std::set<const std::byte*> starts;
  const std::byte* first = rows.PageRows(0, 0);
  for (int l = 0; l < kLayers; ++l) {
    for (PageId p = 0; p < 10; ++p) {
      starts.insert(rows.PageRows(l, p));
      EXPECT_LE(size_t(rows.PageRows(l, p) - first) + 4 * storage->row_bytes(), storage->total_bytes());
    }
  }
  EXPECT_EQ(starts.size(), 30u);
}

TEST(KvStorage, EveryHostPageReportsItsLocation) {
  auto storage = MakeStorage(KvFormat::kBF16, 6);
  for (PageId p = 0; p < 6; ++p) EXPECT_EQ(storage->location(p), PageLocation::kHost) << p;
  EXPECT_STREQ(PageLocationName(PageLocation::kHost), "host");
  EXPECT_STREQ(PageLocationName(PageLocation::kDevice), "device");
  EXPECT_STREQ(PageLocationName(PageLocation::kDisk), "disk");
  EXPECT_DEATH((void)storage->location(6), "check failed");
}

TEST(KvStorage, RowsRoundTripThroughAPageTableInEveryFormat) {
  // Each position's row is written through a scrambled page table, then all are read back: each
  // must dequantize to exactly what the format's codec gives for that row alone (so rows land
  // where the table says, with the layer's tensor scale, and no write disturbs another row).
  std::mt19937 rng(7);
  std::normal_distribution<float> value(0.0f, 2.0f);
  const std::vector<PageId> page_table = {4, 1, 3};  // positions [0, 12) with page_size 4
  const int num_positions = 11;
  for (KvFormat format : kAllKvFormats) {
    SCOPED_TRACE(KvFormatName(format));
    auto storage = MakeStorage(format, 5);
    ASSERT_TRUE(storage->SetTensorScales({0.37f, 1.0f, 0.61f}).ok());
    const KvHostRows rows = storage->HostRows();
    std::vector<float> written(size_t(kLayers * num_positions * kRowDim));
    for (float& v : written) v = value(rng);
    for (int l = 0; l < kLayers; ++l) {
      for (int p = 0; p < num_positions; ++p) {
        rows.WriteRow(l, page_table, p, &written[size_t((l * num_positions + p) * kRowDim)]);
      }
    }
    for (int l = 0; l < kLayers; ++l) {
      for (int p = 0; p < num_positions; ++p) {
        std::vector<std::byte> alone(storage->row_bytes());
        const float* row = &written[size_t((l * num_positions + p) * kRowDim)];
        QuantizeKvRow(format, row, kLatent, kRope, storage->tensor_scale(l), alone.data());
        float expected[kRowDim], got[kRowDim];
        DequantizeKvRows(format, alone.data(), 1, alone.size(), kLatent, kRope, storage->tensor_scale(l), expected);
        rows.ReadRows(l, page_table, p, 1, got);
        ASSERT_EQ(std::memcmp(expected, got, sizeof got), 0) << "layer " << l << " position " << p;
      }
      // A tile of a whole page reads the same rows.
      float tile[4 * kRowDim], one[kRowDim];
      rows.ReadRows(l, page_table, 4, 4, tile);
      rows.ReadRows(l, page_table, 6, 1, one);
      EXPECT_EQ(std::memcmp(tile + 2 * kRowDim, one, sizeof one), 0);
    }
    // The bytes are where the page table says: position 5 is row 1 of page 1.
    EXPECT_EQ(rows.Row(2, page_table, 5), rows.PageRows(2, 1) + storage->row_bytes());
  }
}

TEST(KvStorage, BadShapesAndScales) {
  EXPECT_FALSE(HostKvStorage::Create({.format = KvFormat::kBF16, .num_layers = 3, .latent_dim = 64,
                                      .rope_dim = 16, .page_size = 0, .num_pages = 4}).ok());
  EXPECT_FALSE(HostKvStorage::Create({.format = KvFormat::kBF16, .num_layers = 0, .latent_dim = 64,
                                      .rope_dim = 16, .page_size = 4, .num_pages = 4}).ok());
  auto none = HostKvStorage::Create({.format = KvFormat::kBF16, .num_layers = 3, .latent_dim = 64,
                                     .rope_dim = 16, .page_size = 16, .num_pages = 0});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().find("holds no page"), std::string::npos) << none.error();
  auto storage = MakeStorage(KvFormat::kFP8E4M3, 4);
  EXPECT_FALSE(storage->SetTensorScales({1.0f, 2.0f}).ok());  // 3 layers
  EXPECT_FALSE(storage->SetTensorScales({1.0f, -2.0f, 1.0f}).ok());
  EXPECT_EQ(storage->tensor_scale(1), 1.0f);  // unchanged by the failures
  EXPECT_TRUE(storage->SetTensorScales({1.0f, 2.0f, 0.5f}).ok());
  EXPECT_EQ(storage->tensor_scale(1), 2.0f);
  EXPECT_EQ(storage->HostRows().tensor_scale(2), 0.5f);
}

}  // namespace
}  // namespace mlaserve

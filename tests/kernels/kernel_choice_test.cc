// --kernels auto: the rule that turns measured rates into a table, and the cache that keeps them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/kernel_choice.h"
#include "support/run_binary.h"

namespace mlaserve {
namespace {

// Rates where bf16 runs `gain` times the fp32 rate, class by class (1, 2-16, 17-64, 65+).
std::vector<ShapeClassRate> Rates(double g1, double g8, double g32, double g128) {
  std::vector<ShapeClassRate> rates = {{"1", 1, 1, kBf16MinSpeedupOneToken},
                                       {"2-16", 8, 2, kBf16MinSpeedup},
                                       {"17-64", 32, 17, kBf16MinSpeedup},
                                       {"65+", 128, 65, kBf16MinSpeedup}};
  const double gains[] = {g1, g8, g32, g128};
  for (size_t i = 0; i < rates.size(); ++i) {
    rates[i].fp32_flops = 100e9;
    rates[i].bf16_flops = 100e9 * gains[i];
  }
  return rates;
}

TEST(KernelChoice, Bf16FromTheSmallestClassFromWhichEveryLargerOneGains) {
  if (!CpuSupportsBf16Dot()) GTEST_SKIP() << "this CPU lacks AVX512-BF16: auto never measures";
  const std::string fp32 = KernelsByName("auto").value()->name;
  EXPECT_EQ(TableForRates(Rates(2.0, 2.0, 2.0, 2.0), false)->name, std::string("avx512-bf16"));
  // One token needs the higher bar; the others 1.1x.
  EXPECT_EQ(TableForRates(Rates(1.2, 1.45, 1.9, 1.9), false)->name, std::string("avx512-bf16:2"));
  EXPECT_EQ(TableForRates(Rates(1.0, 1.05, 1.9, 1.9), false)->name, std::string("avx512-bf16:17"));
  EXPECT_EQ(TableForRates(Rates(1.0, 1.0, 1.0, 1.5), false)->name, std::string("avx512-bf16:65"));
  // A class that does not gain stops the run of classes above it: 2-16 gains but 17-64 does not.
  EXPECT_EQ(TableForRates(Rates(1.0, 1.5, 1.0, 1.5), false)->name, std::string("avx512-bf16:65"));
  // Half-rate bf16 (the Intel host of docs/benchmarks.md): fp32 everywhere.
  EXPECT_EQ(TableForRates(Rates(0.9, 0.5, 0.5, 0.5), false)->name, fp32);
  // Deterministic inference: one table for every token count.
  EXPECT_EQ(TableForRates(Rates(1.0, 1.0, 1.9, 1.9), true)->name, std::string("avx512-bf16"));
  EXPECT_EQ(TableForRates(Rates(2.0, 2.0, 2.0, 1.0), true)->name, fp32);
}

TEST(KernelChoice, Int8ProductsWhereBothShapesGainAtAnyBf16Choice) {
  if (!CpuSupportsInt8Dot()) GTEST_SKIP() << "this CPU lacks AVX512-VNNI";
  const std::string fp32 = KernelsByName("auto").value()->name;
  const std::vector<ShapeClassRate> no_bf16 = Rates(1.0, 1.0, 1.0, 1.0);
  const Int8Rates fast{100e9, 150e9, 100e9, 300e9};
  EXPECT_EQ(TableForRates(no_bf16, false, fast)->name, fp32 + "+int8");
  EXPECT_EQ(TableForRates(no_bf16, true, fast)->name, fp32 + "+int8");  // batch-invariant: deterministic too
  EXPECT_EQ(TableForRates(no_bf16, false, Int8Rates{100e9, 105e9, 100e9, 300e9})->name, fp32);  // 1 token: 1.05x
  EXPECT_EQ(TableForRates(no_bf16, false, Int8Rates{100e9, 150e9, 100e9, 100e9})->name, fp32);  // 32 tokens: 1x
  EXPECT_EQ(TableForRates(no_bf16, false, Int8Rates{})->name, fp32);                           // not measured
  if (CpuSupportsBf16Dot()) {
    EXPECT_EQ(TableForRates(Rates(1.0, 1.05, 1.9, 1.9), false, fast)->name, std::string("avx512-bf16:17+int8"));
    EXPECT_EQ(TableForRates(Rates(2.0, 2.0, 2.0, 2.0), true, fast)->name, std::string("avx512-bf16+int8"));
  }
}

TEST(KernelChoice, AutoMeasuresOnceThenReadsTheCache) {
  testing::TempDir dir;
  const std::string cache = dir.path() + "/sub/kernel-choice.json";
  // This process's cache path, put back however the test ends.
  struct RestoreEnv {
    std::string old;
    bool had;
    ~RestoreEnv() { had ? ::setenv("MLASERVE_KERNEL_CACHE", old.c_str(), 1) : ::unsetenv("MLASERVE_KERNEL_CACHE"); }
  } restore{std::getenv("MLASERVE_KERNEL_CACHE") ? std::getenv("MLASERVE_KERNEL_CACHE") : "",
            std::getenv("MLASERVE_KERNEL_CACHE") != nullptr};
  ASSERT_EQ(::setenv("MLASERVE_KERNEL_CACHE", cache.c_str(), 1), 0);
  auto first = ChooseKernels("auto", false);
  ASSERT_TRUE(first.ok()) << first.error();
  if (!CpuSupportsBf16Dot() && !CpuSupportsInt8Dot()) {
    EXPECT_TRUE(first->rates.empty());
    EXPECT_NE(first->Describe().find("no AVX512-BF16 or AVX512-VNNI"), std::string::npos) << first->Describe();
    return;
  }
  EXPECT_FALSE(first->from_cache);
  EXPECT_EQ(first->rates.size(), 4u);
  EXPECT_EQ(first->int8.measured(), CpuSupportsInt8Dot());
  EXPECT_NE(first->Describe().find("cached in " + cache), std::string::npos) << first->Describe();
  auto second = ChooseKernels("auto", false);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->from_cache);
  EXPECT_EQ(second->kernels, first->kernels);
  EXPECT_DOUBLE_EQ(second->rates[2].bf16_flops, first->rates[2].bf16_flops);  // through GFLOP/s in JSON
  EXPECT_DOUBLE_EQ(second->int8.int8_one_flops, first->int8.int8_one_flops);
  // A file with this build's key but fields of the wrong type or value is measured over, never a
  // crash.
  const nlohmann::json good = nlohmann::json::parse(testing::ReadTextFile(cache));
  std::vector<std::tuple<std::string, std::string, nlohmann::json>> bad_fields;
  if (CpuSupportsBf16Dot()) {
    bad_fields.insert(bad_fields.end(), {{"classes", "label", 1}, {"classes", "fp32_gflops", "fast"},
                                         {"classes", "bf16_gflops", -1.0}, {"classes", "bf16_gflops", nullptr}});
  }
  if (CpuSupportsInt8Dot()) {
    bad_fields.insert(bad_fields.end(), {{"int8", "int8_one_gflops", "fast"}, {"int8", "fp32_batch_gflops", 0.0}});
  }
  for (const auto& [part, field, value] : bad_fields) {
    nlohmann::json bad = good;
    (part == "classes" ? bad["classes"][1] : bad["int8"])[field] = value;
    std::ofstream(cache) << bad.dump();
    auto remeasured = ChooseKernels("auto", false);
    ASSERT_TRUE(remeasured.ok()) << field;
    EXPECT_FALSE(remeasured->from_cache) << field;
  }
  // Another binary's (or CPU's) figures are not read: the key must match.
  std::ofstream(cache) << R"({"key": "another binary", "classes": []})";
  auto third = ChooseKernels("auto", false);
  ASSERT_TRUE(third.ok());
  EXPECT_FALSE(third->from_cache);
  // A named table is taken as it is, without measuring.
  auto named = ChooseKernels("portable", false);
  ASSERT_TRUE(named.ok());
  EXPECT_TRUE(named->rates.empty());
  EXPECT_FALSE(ChooseKernels("avx512-bf16:3", false).ok());
  // Deterministic inference refuses a table that switches at some token count.
  auto switching = ChooseKernels("avx512-bf16:17", true);
  ASSERT_FALSE(switching.ok());
  EXPECT_NE(switching.error().find("--enable-deterministic-inference"), std::string::npos) << switching.error();
  EXPECT_TRUE(ChooseKernels("avx512-bf16", true).ok());
}

}  // namespace
}  // namespace mlaserve

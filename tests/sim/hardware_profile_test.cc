// Hardware profiles: the built-in ones parse and name their sources; a file's mistakes are
// refused with the file and the field named.
#include <gtest/gtest.h>

#include <fstream>

#include "sim/builtin_profiles.h"
#include "sim/hardware_profile.h"
#include "support/run_binary.h"

namespace mlaserve {
namespace {

TEST(HardwareProfile, BuiltinProfilesParseAndStateTheirSources) {
  ASSERT_GE(BuiltinProfiles().size(), 4u);
  for (const BuiltinProfile& b : BuiltinProfiles()) {
    auto p = ParseHardwareProfile(nlohmann::json::parse(b.json), std::string(b.name));
    ASSERT_TRUE(p.ok()) << p.error();
    EXPECT_EQ(p->name, b.name);
    EXPECT_GT(p->memory_gb, 0);
    EXPECT_GT(p->memory_bandwidth_gbs, 0);
    EXPECT_GT(p->interconnect_gbs, 0) << "an 8-GPU node's profile has its link";
    EXPECT_GE(p->sources.size(), 3u) << "every efficiency is an assumption with a source";
    EXPECT_LE(p->efficiency.linear, 1.0);
    // Round trip through the file format.
    auto again = ParseHardwareProfile(HardwareProfileJson(*p), "again");
    ASSERT_TRUE(again.ok()) << again.error();
    EXPECT_EQ(again->memory_bandwidth_gbs, p->memory_bandwidth_gbs);
    EXPECT_EQ(again->efficiency.attention, p->efficiency.attention);
  }
}

TEST(HardwareProfile, RefusesUnknownKeysAndBadValuesByName) {
  const nlohmann::json good = {{"name", "x"}, {"memory_gb", 80}, {"memory_bandwidth_gbs", 3000}, {"bf16_tflops", 900}};
  ASSERT_TRUE(ParseHardwareProfile(good, "f.json").ok());
  auto with = [&](const std::string& key, nlohmann::json value) {
    nlohmann::json j = good;
    j[key] = std::move(value);
    return ParseHardwareProfile(j, "f.json");
  };
  auto unknown = with("hbm_gb", 80);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().find("f.json: unknown key \"hbm_gb\""), std::string::npos) << unknown.error();
  auto negative = with("memory_bandwidth_gbs", -1);
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.error().find("memory_bandwidth_gbs"), std::string::npos) << negative.error();
  auto efficiency = with("efficiency", {{"linear", 7}});
  ASSERT_FALSE(efficiency.ok());
  EXPECT_NE(efficiency.error().find("\"linear\" is a fraction"), std::string::npos) << efficiency.error();
  auto efficiency_key = with("efficiency", {{"matmul", 0.5}});
  ASSERT_FALSE(efficiency_key.ok());
  EXPECT_NE(efficiency_key.error().find("unknown key \"matmul\""), std::string::npos) << efficiency_key.error();
  auto combine = with("combine", "min");
  ASSERT_FALSE(combine.ok());
  EXPECT_NE(combine.error().find("combine"), std::string::npos);
  nlohmann::json missing = good;
  missing.erase("bf16_tflops");
  auto m = ParseHardwareProfile(missing, "f.json");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().find("\"bf16_tflops\" is required"), std::string::npos) << m.error();
}

TEST(HardwareProfile, LoadsAFileAndNamesItInErrors) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/p.json";
  std::ofstream(path) << "{\"name\": \"x\", \"memory_gb\": 1}";
  auto p = LoadHardwareProfile(path);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().find(path + ": \"memory_bandwidth_gbs\" is required"), std::string::npos) << p.error();
  std::ofstream(path) << "{not json";
  auto bad = LoadHardwareProfile(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("not valid JSON"), std::string::npos);
}

}  // namespace
}  // namespace mlaserve

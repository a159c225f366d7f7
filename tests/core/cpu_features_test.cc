// What GetCpuFeatures claims against the kernel's own reading of CPUID (/proc/cpuinfo): the
// AVX2 table runs F16C instructions, so claiming it needs the f16c flag too.
#include "core/cpu_features.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace mlaserve {
namespace {

// The first processor's flags in /proc/cpuinfo; empty when there is none (not Linux on x86).
std::set<std::string> CpuinfoFlags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

TEST(CpuFeatures, ClaimsWhatTheCpuinfoFlagsSay) {
  const std::set<std::string> flags = CpuinfoFlags();
  if (flags.empty()) GTEST_SKIP() << "/proc/cpuinfo has no flags line on this system";
  auto has = [&](const char* flag) { return flags.count(flag) > 0; };
  const CpuFeatures& f = GetCpuFeatures();
  EXPECT_EQ(f.avx2_fma_f16c, has("avx2") && has("fma") && has("f16c"));
  EXPECT_EQ(f.avx512, f.avx2_fma_f16c && has("avx512f") && has("avx512bw") && has("avx512vl") && has("avx512dq"));
  EXPECT_EQ(f.avx512_bf16, f.avx512 && has("avx512_bf16"));
}

}  // namespace
}  // namespace mlaserve

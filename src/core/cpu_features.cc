#include "core/cpu_features.h"

#include <fstream>
#include <string>

namespace mlaserve {

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__)
    // GCC's checks include the OS's consent (XGETBV) for the AVX and AVX-512 registers.
    __builtin_cpu_init();
    f.avx2_fma_f16c = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                      __builtin_cpu_supports("f16c");
    f.avx512 = f.avx2_fma_f16c && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
    f.avx512_vnni = f.avx512 && __builtin_cpu_supports("avx512vnni");
#endif
    return f;
  }();
  return features;
}

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown";
}

}  // namespace mlaserve

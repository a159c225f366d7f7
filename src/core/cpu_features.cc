#include "core/cpu_features.h"

namespace mlaserve {

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__)
    __builtin_cpu_init();
    f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    f.avx512 = f.avx2_fma && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512dq");
    f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
    f.avx512_vnni = f.avx512 && __builtin_cpu_supports("avx512vnni");
#endif
    return f;
  }();
  return features;
}

}  // namespace mlaserve

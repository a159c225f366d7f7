// What the CPU this process runs on can execute, read once.
#pragma once

#include <string>

namespace mlaserve {

struct CpuFeatures {
  bool avx2_fma_f16c = false;  // AVX2 + FMA + F16C: what the AVX2 table is compiled for
  bool avx512 = false;         // AVX-512 F/BW/VL/DQ, and all of the above
  bool avx512_bf16 = false;    // AVX512-BF16 (vdpbf16ps), and AVX-512
  bool avx512_vnni = false;    // AVX512-VNNI (vpdpbusd), and AVX-512
};

const CpuFeatures& GetCpuFeatures();

// The "model name" line of /proc/cpuinfo ("unknown" when there is none).
std::string CpuModelName();

}  // namespace mlaserve

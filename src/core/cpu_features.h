// What the CPU this process runs on can execute, read once.
#pragma once

namespace mlaserve {

struct CpuFeatures {
  bool avx2_fma = false;    // AVX2 + FMA + F16C: every x86-64 from ~2013 on
  bool avx512 = false;      // AVX-512 F/BW/VL/DQ
  bool avx512_bf16 = false;
  bool avx512_vnni = false;
};

const CpuFeatures& GetCpuFeatures();

}  // namespace mlaserve

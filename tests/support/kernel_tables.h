// The kernel tables this CPU can run, for tests that compare or exercise each of them.
#pragma once

#include <vector>

#include "kernels/kernels.h"

namespace mlaserve::testing {

// The SIMD tables this CPU runs (AVX2, AVX-512), without the portable reference.
inline std::vector<const KernelSet*> SimdKernelTables() {
  std::vector<const KernelSet*> out;
  if (CpuSupports(KernelIsa::kAvx2)) out.push_back(Avx2Kernels());
  if (CpuSupports(KernelIsa::kAvx512)) out.push_back(Avx512Kernels());
  return out;
}

// The portable reference followed by every SIMD table this CPU runs.
inline std::vector<const KernelSet*> RunnableKernelTables() {
  std::vector<const KernelSet*> out{&PortableKernels()};
  for (const KernelSet* k : SimdKernelTables()) out.push_back(k);
  return out;
}

}  // namespace mlaserve::testing

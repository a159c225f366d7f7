// Chooses the kernel table at run time from the CPU's features.
#include <cstdlib>
#include <string>

#include "core/cpu_features.h"
#include "kernels/kernels.h"

namespace mlaserve {

bool CpuSupports(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kPortable: return true;
    case KernelIsa::kAvx2: return GetCpuFeatures().avx2_fma_f16c && Avx2Kernels() != nullptr;
    case KernelIsa::kAvx512: return GetCpuFeatures().avx512 && Avx512Kernels() != nullptr;
  }
  return false;
}

bool CpuSupportsBf16Dot() { return GetCpuFeatures().avx512_bf16 && CpuSupports(KernelIsa::kAvx512); }
bool CpuSupportsInt8Dot() { return GetCpuFeatures().avx512_vnni && CpuSupports(KernelIsa::kAvx512); }

Result<const KernelSet*> KernelsByName(std::string_view name) {
  if (name.ends_with("+int8")) {
    const std::string_view base_name = name.substr(0, name.size() - std::string_view("+int8").size());
    if (base_name != "avx512" && !base_name.starts_with("avx512-bf16")) {
      return Status::Error("kernels '" + std::string(name) + "': int8 products go only with avx512 or avx512-bf16[:N]");
    }
    auto base = KernelsByName(base_name);
    if (!base.ok()) return base.status();
    if (!CpuSupportsInt8Dot()) {
      return Status::Error("kernels '" + std::string(name) + "': this CPU lacks AVX512-VNNI (vpdpbusd)");
    }
    return WithInt8Dot(*base);
  }
  if (name == "auto") {
    if (CpuSupports(KernelIsa::kAvx512)) return Avx512Kernels();
    if (CpuSupports(KernelIsa::kAvx2)) return Avx2Kernels();
    return &PortableKernels();
  }
  if (name == "portable") return &PortableKernels();
  if (name == "avx2") {
    if (!CpuSupports(KernelIsa::kAvx2)) return Status::Error("kernels 'avx2': this CPU lacks AVX2, FMA or F16C");
    return Avx2Kernels();
  }
  if (name == "avx512") {
    if (!CpuSupports(KernelIsa::kAvx512)) return Status::Error("kernels 'avx512': this CPU lacks AVX-512");
    return Avx512Kernels();
  }
  if (name.starts_with("avx512-bf16")) {
    const std::string_view from = name.substr(std::string_view("avx512-bf16").size());
    const int min_tokens = from.empty() ? 1 : from == ":2" ? 2 : from == ":17" ? 17 : from == ":65" ? 65 : 0;
    if (min_tokens != 0) {
      if (!CpuSupportsBf16Dot()) {
        return Status::Error("kernels '" + std::string(name) + "': this CPU lacks AVX512-BF16 (vdpbf16ps)");
      }
      return Avx512Bf16Kernels(min_tokens);
    }
  }
  return Status::Error("unknown kernels '" + std::string(name) +
                       "' (auto, portable, avx2, avx512, avx512-bf16, avx512-bf16:2, avx512-bf16:17, avx512-bf16:65; the AVX-512 ones "
                       "with +int8)");
}

const KernelSet& DefaultKernels() {
  static const KernelSet* chosen = [] {
    const char* env = std::getenv("MLASERVE_KERNELS");
    auto k = KernelsByName(env != nullptr && *env != '\0' ? env : "auto");
    return k.ok() ? k.value() : KernelsByName("auto").value();
  }();
  return *chosen;
}

}  // namespace mlaserve

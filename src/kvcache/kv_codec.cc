// Chooses the KV row codec by instruction set, following the kernel table's choice.
#include "kvcache/kv_codec.h"

namespace mlaserve {

const KvCodec* KvCodecFor(KernelIsa isa) {
  if (!CpuSupports(isa)) return nullptr;
  switch (isa) {
    case KernelIsa::kPortable: return &PortableKvCodec();
    case KernelIsa::kAvx2: return Avx2KvCodec();
    case KernelIsa::kAvx512: return Avx512KvCodec();
  }
  return nullptr;
}

const KvCodec& DefaultKvCodec() {
  static const KvCodec* chosen = [] {
    const KvCodec* codec = KvCodecFor(DefaultKernels().isa);
    return codec != nullptr ? codec : &PortableKvCodec();
  }();
  return *chosen;
}

}  // namespace mlaserve

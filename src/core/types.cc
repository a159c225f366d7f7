#include "core/types.h"

namespace mlaserve {

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kBool: return "BOOL";
    case DType::kI8: return "I8";
    case DType::kF8E4M3: return "F8_E4M3";
  }
  return "?";
}

}  // namespace mlaserve

// Small shared types: token ids and the numeric element types the engine reads.
#pragma once

#include <cstdint>

namespace mlaserve {

using TokenId = int32_t;

// Element types of checkpoint tensors the kernels read directly.
// kF8E4M3 is safetensors' F8_E4M3 (OCP E4M3FN), read only as block-scaled fp8 weights.
// kBool is safetensors' BOOL (one byte, 0 or 1: EAGLE-3's t2d map).
enum class DType { kF32, kBF16, kF16, kI32, kI64, kF8E4M3, kBool, kI8 };

inline int DTypeBytes(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kF8E4M3: return 1;
    case DType::kBool: return 1;
    case DType::kI8: return 1;
  }
  return 0;
}

const char* DTypeName(DType t);

}  // namespace mlaserve

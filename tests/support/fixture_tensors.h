// Reading the Python reference's fixture tensors (tools/train/make_fixtures.py): token ids are
// stored I64, values F32.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/types.h"
#include "model/safetensors.h"

namespace mlaserve::testing {

inline std::vector<TokenId> ReadFixtureIds(const TensorView& t) {
  std::vector<TokenId> ids(size_t(t.numel()));
  for (size_t i = 0; i < ids.size(); ++i) {
    int64_t v;
    std::memcpy(&v, t.data + 8 * i, 8);
    ids[i] = TokenId(v);
  }
  return ids;
}

inline std::vector<float> ReadFixtureF32(const TensorView& t) {
  std::vector<float> out(size_t(t.numel()));
  std::memcpy(out.data(), t.data, t.num_bytes);
  return out;
}

}  // namespace mlaserve::testing

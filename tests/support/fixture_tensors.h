// Reading the Python reference's fixture tensors (tools/train/make_fixtures.py): token ids are
// stored I64 (or I32), values F32; and comparing values with them.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "core/types.h"
#include "model/safetensors.h"

namespace mlaserve::testing {

inline std::vector<TokenId> ReadFixtureIds(const TensorView& t) {
  std::vector<TokenId> ids(size_t(t.numel()));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (t.dtype == DType::kI32) {
      std::memcpy(&ids[i], t.data + 4 * i, 4);
    } else {
      int64_t v;
      std::memcpy(&v, t.data + 8 * i, 8);
      ids[i] = TokenId(v);
    }
  }
  return ids;
}

inline std::vector<float> ReadFixtureF32(const TensorView& t) {
  std::vector<float> out(size_t(t.numel()));
  std::memcpy(out.data(), t.data, t.num_bytes);
  return out;
}

// The largest |a[i] - b[i]| (the sizes must match: a test failure otherwise); NaN when any
// difference is NaN, so that a tolerance check fails.
inline double MaxDiff(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double diff = std::abs(double(a[i]) - double(b[i]));
    if (!(diff <= d)) d = diff;  // (NaN replaces d, and stays: nothing compares above it)
  }
  return d;
}

}  // namespace mlaserve::testing

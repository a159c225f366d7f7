// A table's packed-panel product computed the two ways MatMul runs it, each split over two panel
// ranges as MatMul's threads would: for tests that compare them, bit for bit, with a definition.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/ops.h"

namespace mlaserve::testing {

// matmul_panels over all panels: y [n, w.rows].
inline std::vector<float> InRegisters(const KernelSet& k, const std::vector<float>& x, int64_t n,
                                      const WeightMatrix& w) {
  std::vector<float> y(size_t(n * w.rows), -7.0f);
  const int64_t split = w.num_panels() / 2 * 2;
  k.matmul_panels(x.data(), n, w, 0, split, y.data(), w.rows);
  k.matmul_panels(x.data(), n, w, split, w.num_panels(), y.data(), w.rows);
  return y;
}

// pack_activations (two halves of the tiles), then matmul_panels_packed: y [n, w.rows].
inline std::vector<float> OverPacked(const KernelSet& k, const std::vector<float>& x, int64_t n,
                                     const WeightMatrix& w) {
  std::vector<float> xp(size_t(PackedFloatsFor(k, n, w)), -3.0f);
  std::vector<float> scratch(size_t(GemmThreadScratchFloats(n)));
  const int64_t tiles = GemmTiles(n);
  k.pack_activations(x.data(), n, w, 0, tiles / 2, xp.data());
  k.pack_activations(x.data(), n, w, tiles / 2, tiles, xp.data());
  std::vector<float> y(size_t(n * w.rows), -7.0f);
  const int64_t split = w.num_panels() / 2 * 2;
  k.matmul_panels_packed(x.data(), xp.data(), scratch.data(), n, w, 0, split, y.data(), w.rows);
  k.matmul_panels_packed(x.data(), xp.data(), scratch.data(), n, w, split, w.num_panels(), y.data(), w.rows);
  return y;
}

}  // namespace mlaserve::testing

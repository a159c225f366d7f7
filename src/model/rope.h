// Rotary position tables for the rope part of MLA queries and keys, with DeepSeek's YaRN
// scaling, and their application in either pair layout.
#pragma once

#include <vector>

#include "model/config.h"

namespace mlaserve {

class RopeTables {
 public:
  // Precomputes positions [0, max_positions). Allocated once.
  RopeTables(const ModelConfig& config, int max_positions);

  int max_positions() const { return max_positions_; }
  // In place on x[rope_dim]. interleave: pairs (2i, 2i+1); otherwise (i, i + rope_dim/2).
  void Apply(float* x, int position) const;

  // The per-pair inverse frequencies (exposed for tests).
  const std::vector<float>& inv_freq() const { return inv_freq_; }

 private:
  int rope_dim_;
  bool interleave_;
  int max_positions_;
  std::vector<float> inv_freq_;  // [rope_dim / 2]
  std::vector<float> cos_;       // [max_positions, rope_dim / 2], times the yarn mscale ratio
  std::vector<float> sin_;       // [max_positions, rope_dim / 2]
};

}  // namespace mlaserve

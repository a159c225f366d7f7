// The absorbed-MLA cache of one sequence: per layer, per position, the normalised latent c_kv
// (kv_lora_rank) followed by the rotated rope key k_pe (qk_rope_head_dim). Nothing per head.
// Storage is allocated once for `capacity_tokens`; the forward pass writes a position's row
// exactly once, when that token is computed, and attention reads rows [0, position].
// Owned by whoever runs the sequence; the forward pass borrows it for one call.
#pragma once

#include <cstdint>
#include <vector>

namespace mlaserve {

class SequenceKv {
 public:
  SequenceKv(int num_layers, int capacity_tokens, int row_dim)
      : num_layers_(num_layers),
        capacity_tokens_(capacity_tokens),
        row_dim_(row_dim),
        data_(size_t(num_layers) * size_t(capacity_tokens) * size_t(row_dim)) {}

  int capacity_tokens() const { return capacity_tokens_; }
  int row_dim() const { return row_dim_; }
  int num_tokens() const { return num_tokens_; }
  // Tokens whose rows are written in every layer; set by the forward pass after a step.
  void set_num_tokens(int n) { num_tokens_ = n; }

  // [capacity_tokens, row_dim] for one layer; row t at layer_rows(l) + t * row_dim.
  float* layer_rows(int layer) { return data_.data() + size_t(layer) * capacity_tokens_ * row_dim_; }
  const float* layer_rows(int layer) const {
    return data_.data() + size_t(layer) * capacity_tokens_ * row_dim_;
  }
  size_t bytes() const { return data_.size() * sizeof(float); }

 private:
  int num_layers_;
  int capacity_tokens_;
  int row_dim_;
  int num_tokens_ = 0;
  std::vector<float> data_;  // [num_layers, capacity_tokens, row_dim]
};

}  // namespace mlaserve

// The plain reference of the heads-in-lanes decode attention kernels (latent_attention.h),
// element by element.
#include "kernels/latent_attention.h"


#include "core/float16.h"

namespace mlaserve {

void LatentPackQueryReference(const float* q, int64_t heads, int64_t row_dim, uint32_t* q_pack) {
  const int64_t hp = LatentHeadsPadded(heads);
  for (int64_t h = 0; h < hp; ++h) {
    for (int64_t j = 0; j < row_dim / 2; ++j) {
      uint32_t word = 0;
      if (h < heads) {
        word = uint32_t(F32ToBf16(q[h * row_dim + 2 * j])) | uint32_t(F32ToBf16(q[h * row_dim + 2 * j + 1])) << 16;
      }
      q_pack[LatentQueryIndex(row_dim, h, j)] = word;
    }
  }
}

void LatentScoresReference(const uint32_t* q_pack, int64_t hp, const uint16_t* const* rows, int64_t n,
                           int64_t row_dim, float* scores, RowPrefetch&) {
  auto half = [](uint32_t word, int k) { return Bf16ToF32(uint16_t(word >> (16 * k))); };
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t h = 0; h < hp; ++h) {
      // Two chains, as the kernel's two words per head: pairs 2d (chain 0) and 2d + 1 (chain 1).
      float chain[2] = {0.0f, 0.0f};
      for (int64_t j = 0; j < row_dim / 2; ++j) {
        const uint32_t qw = q_pack[LatentQueryIndex(row_dim, h, j)];
        // Each bf16 product is exact in fp32.
        chain[j % 2] += half(qw, 0) * Bf16ToF32(rows[r][2 * j]) + half(qw, 1) * Bf16ToF32(rows[r][2 * j + 1]);
      }
      scores[r * hp + h] = chain[0] + chain[1];
    }
  }
}

void LatentSumReference(const float* p, int64_t hp, int64_t heads, const float* corr, const uint16_t* const* rows,
                        int64_t n, int64_t latent_dim, float* o, RowPrefetch&) {
  auto prob = [&](int64_t r, int64_t h) { return Bf16ToF32(F32ToBf16(p[r * hp + h])); };
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t c = 0; c < latent_dim; ++c) {
      float acc = corr == nullptr ? 0.0f : o[h * latent_dim + c] * corr[h];
      for (int64_t r = 0; r < n; r += 2) {
        // The pair's two products are exact in fp32.
        const float second = r + 1 < n ? prob(r + 1, h) * Bf16ToF32(rows[r + 1][c]) : 0.0f;
        acc += prob(r, h) * Bf16ToF32(rows[r][c]) + second;
      }
      o[h * latent_dim + c] = acc;
    }
  }
}

}  // namespace mlaserve

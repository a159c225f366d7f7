// The per-instruction-set kernel table. Each table is a complete implementation of the same
// contracts; the portable one (kernels_portable.cc) is the plain reference that tests compare
// the SIMD ones (kernels_avx2.cc, kernels_avx512.cc) against. The table is chosen once at
// start-up (SelectKernels) from what the CPU supports, or forced (MLASERVE_KERNELS=portable|
// avx2|avx512, or --kernels).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "kernels/weight_matrix.h"

namespace mlaserve {

enum class KernelIsa { kPortable, kAvx2, kAvx512 };

struct KernelSet {
  KernelIsa isa;
  const char* name;

  // y[t * ldy + r] = dot(x[t * w.cols ...], W[r, :]) for t in [0, n), r in [row_begin, row_end).
  // x: [n, w.cols] fp32. y: [n, ldy] fp32. Writes only the named rows' columns of y.
  void (*matmul_rows)(const float* x, int64_t n, const WeightMatrix& w, int64_t row_begin,
                      int64_t row_end, float* y, int64_t ldy);
  // The same product for a packed matrix, over panels [panel_begin, panel_end): writes rows
  // [panel_begin * 16, min(rows, panel_end * 16)).
  void (*matmul_panels)(const float* x, int64_t n, const WeightMatrix& w, int64_t panel_begin,
                        int64_t panel_end, float* y, int64_t ldy);
  // y[0, w.cols) += a * W[row, :]
  void (*axpy_row)(float a, const WeightMatrix& w, int64_t row, float* y);
  // sum a[i] * b[i]
  float (*dot_f32)(const float* a, const float* b, int64_t n);
  // y[i] += a * x[i]
  void (*axpy_f32)(float a, const float* x, float* y, int64_t n);
  // The compute roofline probe: `iterations` rounds of kFmaChains independent fp32 multiply-add
  // chains per vector lane (each chain depends only on its own previous value, so enough are in
  // flight to cover the FMA latency times the FMA ports). Writes the chains' sum to *sink (read
  // first as the chains' seed, in (0, 1)) so that none is optimized away. Returns the
  // floating-point operations done: 2 per multiply-add per lane. The caller times it.
  double (*fma_chains)(int64_t iterations, float* sink);
  // y[t * ldy + j] (+)= sum_i x[t * ldx + i] * b[i * ldb + j] for t < n, j < m, i < k: fp32
  // activations times a row-major fp32 matrix (attention's q @ k^T and p @ v). accumulate: add
  // to y, else overwrite. Writes only columns [0, m) of the n rows; each output sums i in order.
  void (*gemm_f32)(const float* x, int64_t ldx, const float* b, int64_t ldb, float* y, int64_t ldy, int64_t n,
                   int64_t k, int64_t m, bool accumulate);
};

// Chains in flight per thread: at least latency (4-5 cycles) x FMA ports (2) on current x86
// cores, and with the two operands still within the 16 vector registers of AVX2.
inline constexpr int kFmaChains = 12;

const KernelSet& PortableKernels();
const KernelSet* Avx2Kernels();    // nullptr when not compiled in
const KernelSet* Avx512Kernels();  // nullptr when not compiled in

// The fastest table this CPU runs, unless MLASERVE_KERNELS names another.
const KernelSet& DefaultKernels();
// "portable", "avx2", "avx512" or "auto"; an error if the CPU cannot run it.
Result<const KernelSet*> KernelsByName(std::string_view name);
bool CpuSupports(KernelIsa isa);

}  // namespace mlaserve

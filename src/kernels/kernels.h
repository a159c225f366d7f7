// The per-instruction-set kernel table. Each table is a complete implementation of the same
// contracts; the portable one (kernels_portable.cc) is the plain reference that tests compare
// the SIMD ones (kernels_avx2.cc, kernels_avx512.cc, kernels_avx512bf16.cc) against. The table
// is chosen once at start-up: by measurement (--kernels auto, kernel_choice.h), by name
// (--kernels, KernelsByName), or, for tools and tests, the widest the CPU runs (DefaultKernels,
// MLASERVE_KERNELS).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "kernels/latent_attention.h"
#include "kernels/weight_matrix.h"

namespace mlaserve {

enum class KernelIsa { kPortable, kAvx2, kAvx512 };

// KernelSet::grouped_query_product's bounds: a W_UK row's columns (nope) and scale groups.
inline constexpr int64_t kGroupedQueryMaxCols = 512;
inline constexpr int64_t kGroupedQueryMaxGroups = 64;

// Tokens of a packed-activation tile and columns of a block (the layout below KernelSet).
inline constexpr int64_t kGemmTileTokens = 12;
inline constexpr int64_t kGemmColumns = 512;

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

  // ---- Prefill GEMM (many tokens): activations packed once per product, shared by threads ----
  // xp = the activations [n, w.cols] packed for the product with w (matmul_panels_packed with
  // the same n and w): in the layout GemmPackedIndex gives (fp32), or, where the table multiplies
  // w in bf16 (bf16_min_tokens), as bf16 column pairs in the same blocks and tiles, each half as
  // long, a tile's tokens in rows of pairs rather than in columns (Bf16PackedActivationFloats;
  // ops.h PackedFloatsFor says which; int8 tables: Int8PackedActivationFloats).
  // For token tiles [tile_begin, tile_end) (tiles of kGemmTileTokens; a tail tile's missing
  // tokens are not written). Threads may pack disjoint tile ranges of one xp concurrently.
  void (*pack_activations)(const float* x, int64_t n, const WeightMatrix& w, int64_t tile_begin, int64_t tile_end,
                           float* xp);
  // matmul_panels for n > kGemmTileTokens, reading the activations from xp (packed from x by
  // pack_activations): a cache-blocked product whose weights are widened to fp32 once per
  // column block and every token tile accumulates from them with plain FMAs. scratch: the
  // calling thread's own GemmThreadScratchFloats(n) floats (fp8 scales activations into it).
  // Bit-identical to matmul_panels (each output is the same products summed over columns in
  // order), so results stay batch-invariant whichever is called.
  void (*matmul_panels_packed)(const float* x, const float* xp, float* scratch, int64_t n, const WeightMatrix& w,
                               int64_t panel_begin, int64_t panel_end, float* y, int64_t ldy);
  // out[i] = x[i] / rms(x) * weight[i], i < dim; rms(x) = sqrt(mean(x^2) + eps). x and out may
  // alias. Every row of every batch goes through the same table entry, so a token's result does
  // not depend on what else is in its batch (the SIMD tables sum the squares in their own order).
  void (*rms_norm)(const float* x, const float* weight, int64_t dim, double eps, float* out);
  // The residual add fused with the next norm: x[i] += add[i], then out = rms_norm(x).
  void (*add_rms_norm)(float* x, const float* add, const float* weight, int64_t dim, double eps, float* out);
  // out[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i]; out may alias gate.
  void (*silu_mul)(const float* gate, const float* up, int64_t n, float* out);
  // y[t * ldy + j] (+)= sum_i x[t * ldx + i] * b[i * ldb + j] for t < n, j < m, i < k: fp32
  // activations times a row-major fp32 matrix (attention's q @ k^T and p @ v). accumulate: add
  // to y, else overwrite. Writes only columns [0, m) of the n rows; each output sums i in order.
  void (*gemm_f32)(const float* x, int64_t ldx, const float* b, int64_t ldb, float* y, int64_t ldy, int64_t n,
                   int64_t k, int64_t m, bool accumulate);
  // Softmax's numerators: x[i] = e^(x[i] - shift) for i < n, in place; returns their sum. The
  // portable table uses std::exp and sums in index order; the SIMD tables' e^x is within 2 ulp
  // (simd_elementwise_impl.h ExpF32), the same for every element (the tail padded), and they sum
  // lane-wise, then across lanes.
  float (*exp_sum)(float* x, int64_t n, float shift);
  // x[i] *= scale for i < n, in place; returns the largest result (-inf for n = 0). Each element
  // is one fp32 multiply and the maximum is exact, so every table gives the same values.
  float (*scale_max)(float* x, int64_t n, float scale);
  // One online-softmax step over a tile of scores with a column per head (the absorbed decode's
  // layout, kernels/latent_attention.h): s[r * hp + h], r < n, h < hp (a multiple of 16). Per
  // column: m = max(run_max[h], max_r s[r][h] * scale); corr[h] = e^(run_max[h] - m);
  // s[r][h] = e^(s[r][h] * scale - m) in place; run_sum[h] = run_sum[h] * corr[h] + the new
  // s[r][h] summed over r in order; run_max[h] = m. e^x as exp_sum's.
  void (*softmax_columns)(float* s, int64_t n, int64_t hp, float scale, float* run_max, float* run_sum,
                          float* corr);
  // y[i] = fma(y[i], b, x[i]) for i < n (one rounding, in every table: the same values from each).
  // The online softmax's o = o * correction + p @ v; with b = 1 it is axpy_f32 with a = 1.
  void (*scale_add_f32)(float b, const float* x, float* y, int64_t n);

  // ---- Absorbed decode attention over bf16 rows (latent_attention.h; nullptr: not in this table) ----
  // The bf16 tables only. hp = LatentHeadsPadded(heads); rows[r] points at a row's row_dim
  // bf16 values; shapes as LatentShapeOk.
  // q_pack = q ([heads, row_dim] fp32) rounded to bf16 (nearest even) in the packed query layout,
  // the padded heads zero: LatentQueryWords(heads, row_dim) words.
  void (*latent_pack_query)(const float* q, int64_t heads, int64_t row_dim, uint32_t* q_pack) = nullptr;
  // scores[r * hp + h] = q_pack's head h . rows[r], r < n, h < hp: bf16 products (exact) summed
  // in fp32 in a fixed order of dimensions (a score depends on its query and row alone).
  // Fetches `next`'s rows into L2 meanwhile, paced (latent_attention.h RowPrefetch).
  void (*latent_scores)(const uint32_t* q_pack, int64_t hp, const uint16_t* const* rows, int64_t n, int64_t row_dim,
                        float* scores, RowPrefetch& next) = nullptr;
  // o[h * latent_dim + c] = o[...] * corr[h] + sum_r bf16(p[r * hp + h]) * rows[r][c] for
  // h < heads, c < latent_dim, n <= kLatentSumMaxRows, hp <= kLatentSumMaxHeads: the
  // probabilities rounded to bf16 (nearest even), each pair of rows (2i, 2i + 1) one vdpbf16ps,
  // pairs in order into fp32. corr nullptr: o's old values are not read (o = the sum; a partial's
  // first tile). Fetches the rest of `next`'s rows into L2 meanwhile: all of them are issued when
  // it returns.
  void (*latent_sum)(const float* p, int64_t hp, int64_t heads, const float* corr, const uint16_t* const* rows,
                     int64_t n, int64_t latent_dim, float* o, RowPrefetch& next) = nullptr;

  // ---- The absorbed decode's query through a grouped W_UK^T copy (nullptr: the plain path,
  // model/absorbed_weights.h MultiplyAbsorbedQuery: the query scaled per group, then matmul_panels
  // a group at a time) ----
  // One token. w: a head's W_UK^T copy [kv_lora, nope] of grouped codes with unit scales (and zero
  // mins), packed (kernels/pack.h PackTransposedPanels), rows in groups of group_rows (a multiple
  // of 16); scales: [groups][nope] F32, x_g[d] = q[d] * scales[g * nope + d] the query of group g;
  // mins: nullptr, or [nope][groups] F32, min_sums[g] = q[d] * mins[d * groups + g] summed as
  // this table's axpy_f32 adds row d into the sums, d in order. y[r] = matmul_panels(x_g, row r)
  // - min_sums[g] for r < w.rows, g = r / group_rows: bit for bit the plain path through this
  // table. next_scales: the next head's scales (its table of the same shape, mins included, in L2
  // meanwhile), or nullptr. Only for copies GroupedQueryProductTakes, groups <=
  // kGroupedQueryMaxGroups (the kernel's stack scratch).
  void (*grouped_query_product)(const float* q, const float* scales, const float* mins, const WeightMatrix& w,
                                int64_t group_rows, const float* next_scales, float* y) = nullptr;

  // ---- Attention's run-time panels (nullptr: kernels/pack.h PackF32Panels, the plain path) ----
  // PackF32Panels' contract (the MHA prefill's keys and transposed values); the bf16 tables' entry
  // writes BF16 panels with the conversion instruction (nearest even; an fp32 subnormal becomes
  // a signed zero) and hands F32 ones to PackF32Panels.
  WeightMatrix (*pack_f32_panels)(const float* src, int64_t rows, int64_t cols, int64_t row_stride,
                                  int64_t col_stride, DType dtype, void* dst) = nullptr;

  // Products with at least this many tokens of the weights Bf16DotMultiplies names (and of
  // row-major BF16 and fp8-block rows; their fp8 and int4 codes: Bf16CodesMinTokens) round the
  // activations to bf16 and multiply with bf16 dot
  // products (kernels_avx512bf16.cc); 0: never (every product in fp32).
  // A table that switches at some n > 1 is not batch-invariant (a token's rounding depends on its
  // batch's size): --enable-deterministic-inference takes 0 or 1 (kernel_choice.h).
  int bf16_min_tokens = 0;
  // Products of packed weights with at least this many tokens read packed activations
  // (pack_activations once per product, shared by its threads, then matmul_panels_packed) where
  // the caller has the scratch (ops.h PackedProductPays); fewer tokens: matmul_panels. For the
  // bf16 tables' bf16 products this is lower: packing saves them converting the activations in
  // every chunk of panels. (fp32: the packed product widens each weight once per call, which pays
  // from about four tiles; `mlaserve bench-kernels` times both, one thread, 2048 x 2048.)
  int64_t packed_min_tokens = 4 * kGemmTileTokens + 1;
  int64_t bf16_packed_min_tokens = 4 * kGemmTileTokens + 1;
  // Products of packed int8-group weights (Int8DotMultiplies), at every token count, quantize the
  // activations to int8 per group and multiply with integer dot products (kernels_avx512vnni.cc,
  // WithInt8Dot): pack_activations writes the quantized activations
  // (Int8PackedActivationFloats), matmul_panels_packed reads them, and matmul_panels quantizes
  // them itself; every other product is the base table's.
  bool int8_dot = false;
};

// The threshold of a bf16 table (KernelSet::bf16_min_tokens, 0: never) for fp8-block and int4-g32
// codes (Bf16DotMultiplies' quantized formats, and row-major fp8-block rows): 1 in the tables that
// take bf16 products from 2 tokens or fewer, else the same. Their fp32 path widens every code to
// fp32 and is bound by that, not by memory, even at one token, where the bf16 path widens two
// codes an instruction and multiplies 32 a vdpbf16ps; bf16 weights at one token read memory at
// the same rate either way, which is what the one-token class measures (kernel_choice.h). So a
// table whose bf16 products won from the 2-16 class on takes them for codes from one token
// (bench-kernels, AMD host: fp8-block one token 35 -> 40 GB/s; int4-g32, where a table has no int8
// products, 13 -> 19 GB/s; docs/benchmarks.md).
constexpr int Bf16CodesMinTokens(int bf16_min_tokens) {
  return bf16_min_tokens == 2 ? 1 : bf16_min_tokens;
}

// The weights a bf16 table multiplies in bf16 (from bf16_min_tokens tokens, codes from
// Bf16CodesMinTokens): packed panels of
// BF16 values, and of fp8-block or grouped int4 codes (exact in bf16) whose scale groups hold whole
// column pairs (the scales then multiply each group's partial sums in fp32). Row-major BF16
// matrices take bf16 products too, through matmul_rows (no packed activations).
inline bool Bf16DotMultiplies(const WeightMatrix& w) {
  if (!w.packed) return false;
  switch (w.format) {
    case WeightFormat::kDense: return w.dtype == DType::kBF16;
    case WeightFormat::kFp8Block: return w.block_cols % 2 == 0 && w.block_rows > 0;
    case WeightFormat::kInt4Group: return w.block_cols % 2 == 0;
    case WeightFormat::kInt8Group:
    case WeightFormat::kUint4GroupMin:
    case WeightFormat::kUint8GroupMin: return false;  // the fp32 kernels, or the int8 tables' (no bf16 path)
  }
  return false;
}
// The weights an int8 table (KernelSet::int8_dot) multiplies by int8 activations: packed int8
// groups, uint4-min and uint8-min groups, and int4 groups (compressed-tensors' int4-g32: nibbles
// stored + 8, BF16 scales), at every token count (so a product stays batch-invariant).
// (Whole groups of whole 32-bit words: the binders and packing guarantee it; checked here too.)
inline bool Int8DotMultiplies(const WeightMatrix& w) {
  if (!w.packed || w.block_cols <= 0 || w.cols % w.block_cols != 0) return false;
  if (w.format == WeightFormat::kInt8Group || w.format == WeightFormat::kUint8GroupMin) return w.block_cols % 4 == 0;
  return (w.format == WeightFormat::kUint4GroupMin || w.format == WeightFormat::kInt4Group) && w.block_cols % 8 == 0;
}
// The W_UK^T copies an int8 table's grouped_query_product multiplies (the formats with such copies
// but int4, which gets none), with nope (the copy's columns) in whole 8-column steps and within the
// kernel's stack scratch.
inline bool GroupedQueryProductTakes(const WeightMatrix& uk_t) {
  return Int8DotMultiplies(uk_t) && uk_t.format != WeightFormat::kInt4Group && uk_t.cols % 8 == 0 &&
         uk_t.cols <= kGroupedQueryMaxCols;
}
// Whether one pack_activations serves products with both a and b (MatMulPair, an MLP's gate and
// up): they must take the same layout, so the same stored format, the same bf16 and int8
// decisions and, for int8 groups (quantized per group), the same group size. (int4 groups of 12
// and 32 columns share a format but not the int8 decision: only the second is int8-multiplied.)
inline bool SharePackedActivations(const WeightMatrix& a, const WeightMatrix& b) {
  return a.format == b.format && a.dtype == b.dtype && Bf16DotMultiplies(a) == Bf16DotMultiplies(b) &&
         Int8DotMultiplies(a) == Int8DotMultiplies(b) && (!Int8DotMultiplies(a) || a.block_cols == b.block_cols);
}

// Packed activations: column blocks of kGemmColumns (the activations' [n, kGemmColumns] block
// stays in L2 while every output row passes), each holding the token tiles of kGemmTileTokens
// column-major: xp[((block * tiles + tile) * kGemmColumns + column in block) * kGemmTileTokens +
// token in tile], tiles = ceil(n / kGemmTileTokens).
inline constexpr int64_t GemmTiles(int64_t n) { return (n + kGemmTileTokens - 1) / kGemmTileTokens; }
// Floats an xp for n tokens of cols columns takes.
inline constexpr int64_t PackedActivationFloats(int64_t n, int64_t cols) {
  return (cols + kGemmColumns - 1) / kGemmColumns * GemmTiles(n) * kGemmColumns * kGemmTileTokens;
}
// The same for a bf16 table's bf16 products (KernelSet::pack_activations): pairs of bf16, half.
inline constexpr int64_t Bf16PackedActivationFloats(int64_t n, int64_t cols) {
  return PackedActivationFloats(n, cols) / 2;
}
// An int8 table's packed activations for n tokens of cols columns in groups of `group`: the
// codes int8 [n][cols] (padded to 64 bytes), then per token and group {fp32 scale, int32
// correction} [n][cols / group] (kernels_avx512vnni.cc). Never more than PackedActivationFloats.
inline constexpr int64_t Int8ActivationCodeBytes(int64_t n, int64_t cols) { return (n * cols + 63) / 64 * 64; }
inline constexpr int64_t Int8PackedActivationFloats(int64_t n, int64_t cols, int64_t group) {
  return Int8ActivationCodeBytes(n, cols) / 4 + n * (cols / group) * 2;
}
// Floats of one thread's matmul_panels_packed scratch: one column block of xp.
inline constexpr int64_t GemmThreadScratchFloats(int64_t n) {
  return GemmTiles(n) * kGemmColumns * kGemmTileTokens;
}
inline constexpr int64_t GemmPackedIndex(int64_t n, int64_t t, int64_t c) {
  return ((c / kGemmColumns * GemmTiles(n) + t / kGemmTileTokens) * kGemmColumns + c % kGemmColumns) *
             kGemmTileTokens + t % kGemmTileTokens;
}

// Chains in flight per thread: at least latency (4-5 cycles) x FMA ports (2) on current x86
// cores, and with the two operands still within the 16 vector registers of AVX2.
inline constexpr int kFmaChains = 12;

const KernelSet& PortableKernels();
const KernelSet* Avx2Kernels();    // nullptr when not compiled in
const KernelSet* Avx512Kernels();  // nullptr when not compiled in
// The AVX-512 table with bf16 dot products from min_tokens tokens (1, 2, 17 or 65: the shape
// classes of kernel_choice.h; nullptr for any other). Only where the CPU has AVX512-BF16.
const KernelSet* Avx512Bf16Kernels(int min_tokens);
// `base` (the AVX-512 table or an AVX-512 bf16 one) with int8 products of int8-group weights
// (KernelSet::int8_dot; named base's name + "+int8"); nullptr for another table or where the CPU
// lacks AVX512-VNNI.
const KernelSet* WithInt8Dot(const KernelSet* base);

// The fastest table this CPU runs, unless MLASERVE_KERNELS names another.
const KernelSet& DefaultKernels();
// "portable", "avx2", "avx512", "avx512-bf16[:N]" (N = 2, 17, 65) or "auto" (the widest ISA, no
// bf16 products: measuring is kernel_choice.h's); an error if the CPU cannot run it.
Result<const KernelSet*> KernelsByName(std::string_view name);
bool CpuSupports(KernelIsa isa);
// AVX512-BF16 and the AVX-512 table: the bf16 dot-product tables run.
bool CpuSupportsBf16Dot();
// AVX512-VNNI and the AVX-512 table: the int8 dot-product tables run.
bool CpuSupportsInt8Dot();

}  // namespace mlaserve

// mlaserve bench-kernels: the packed-panel matmul kernels alone, per weight format (bf16,
// fp8-block 128x128, int4-g32, and GGUF's q8_0, q6_k and q4_k as the loader holds them: int8
// codes with an F32 scale per 32 or 16, uint4 codes with an F32 scale and min per 32), on random
// weights: the bandwidth one-token products reach streaming from memory on every thread (decode), and the compute rate of one thread on a
// matrix that fits in L2, for token counts from decode to prefill tiles; then the KV row codecs
// per cache format, scalar against SIMD. The figures the kernel notes in docs/benchmarks.md
// quote come from here.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cli/bench_decode_attention.h"
#include "cli/best_seconds.h"
#include "cli/commands.h"
#include "cli/fma_peak.h"
#include "cli/read_bandwidth.h"
#include "core/float16.h"
#include "core/huge_page_buffer.h"
#include "core/percentile.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/kernel_choice.h"
#include "kernels/ops.h"
#include "kernels/pack.h"
#include "model/absorbed_weights.h"
#include "kvcache/fp8.h"
#include "kvcache/kv_codec.h"
#include "kvcache/kv_format.h"

namespace mlaserve::cli {
namespace {

enum class Format { kBf16, kFp8Block, kInt4G32, kQ8_0, kQ6K, kQ4K };
constexpr Format kFormats[] = {Format::kBf16, Format::kFp8Block, Format::kInt4G32,
                               Format::kQ8_0, Format::kQ6K,     Format::kQ4K};

const char* FormatName(Format f) {
  switch (f) {
    case Format::kBf16: return "bf16";
    case Format::kFp8Block: return "fp8-block";
    case Format::kInt4G32: return "int4-g32";
    case Format::kQ8_0: return "q8_0";
    case Format::kQ6K: return "q6_k";
    case Format::kQ4K: return "q4_k";
  }
  return "?";
}

// One random matrix in a format, packed into panels as the loader packs checkpoints. Owns its
// bytes; `packed` views them.
struct PackedMatrix {
  std::vector<std::byte> packed_bytes;
  WeightMatrix packed;
};

// The random matrix's shape and format, no data yet (PackedBytes of it sizes its panels).
WeightMatrix RandomShape(Format f, int64_t rows, int64_t cols) {
  WeightMatrix w;
  w.rows = rows;
  w.cols = cols;
  if (f == Format::kFp8Block) {
    w.dtype = DType::kF8E4M3;
    w.format = WeightFormat::kFp8Block;
    w.block_rows = w.block_cols = 128;
  } else if (f == Format::kInt4G32) {
    w.dtype = DType::kI32;
    w.format = WeightFormat::kInt4Group;
    w.block_cols = 32;
  } else if (f == Format::kQ8_0 || f == Format::kQ6K) {
    // GGUF's Q8_0 / Q6_K as held: int8 codes, an F32 scale per 32 / 16.
    w.dtype = DType::kI8;
    w.format = WeightFormat::kInt8Group;
    w.block_cols = f == Format::kQ8_0 ? 32 : 16;
  } else if (f == Format::kQ4K) {  // GGUF's Q4_K as held: uint4 codes, an F32 scale and min per 32
    w.dtype = DType::kI8;
    w.format = WeightFormat::kUint4GroupMin;
    w.block_cols = 32;
  }
  return w;
}

// A random row-major matrix in a format, as a checkpoint holds it. Owns its bytes; `matrix`
// views them (moving the struct keeps the vectors' buffers, so the view stays valid).
struct RowMajorMatrix {
  std::vector<std::byte> values, scales;
  WeightMatrix matrix;
};

RowMajorMatrix RandomRowMajor(Format f, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  RowMajorMatrix m{.values = {}, .scales = {}, .matrix = RandomShape(f, rows, cols)};
  std::vector<std::byte>& values = m.values;
  std::vector<std::byte>& scales = m.scales;
  values.resize(m.matrix.total_bytes());
  scales.resize(m.matrix.scale_bytes());
  switch (f) {
    case Format::kBf16:
      for (size_t i = 0; i < values.size(); i += 2) {
        const uint16_t b = F32ToBf16(0.02f * normal(rng));
        std::memcpy(&values[i], &b, 2);
      }
      break;
    case Format::kFp8Block:
      for (std::byte& b : values) b = std::byte(F32ToE4M3(100.0f * normal(rng)));
      for (size_t i = 0; i < scales.size(); i += 4) {
        const float s = 2e-4f;
        std::memcpy(&scales[i], &s, 4);
      }
      break;
    case Format::kInt4G32:
      for (std::byte& b : values) b = std::byte(rng());
      for (size_t i = 0; i < scales.size(); i += 2) {
        const uint16_t s = F32ToBf16(3e-3f);
        std::memcpy(&scales[i], &s, 2);
      }
      break;
    case Format::kQ8_0:
    case Format::kQ6K:
      for (std::byte& b : values) b = std::byte(int8_t(std::clamp(40.0f * normal(rng), -127.0f, 127.0f)));
      for (size_t i = 0; i < scales.size(); i += 4) {
        const float s = 5e-4f;
        std::memcpy(&scales[i], &s, 4);
      }
      break;
    case Format::kQ4K:
      for (std::byte& b : values) b = std::byte(rng());
      for (size_t i = 0; i < scales.size(); i += 4) {  // (scale, min) pairs
        const float s = (i / 4) % 2 == 0 ? 3e-3f : 2e-2f;
        std::memcpy(&scales[i], &s, 4);
      }
      break;
  }
  m.matrix.data = values.data();
  m.matrix.scales = scales.data();
  return m;
}

// A random matrix in a format, packed into panels at `dst` (PackedBytes(RandomShape(...)) bytes,
// 64-byte aligned) as the loader packs checkpoints.
WeightMatrix RandomPanels(Format f, int64_t rows, int64_t cols, std::mt19937& rng, ThreadPool& pool, std::byte* dst) {
  const RowMajorMatrix m = RandomRowMajor(f, rows, cols, rng);
  return PackPanels(m.matrix, dst, pool);
}

PackedMatrix RandomPacked(Format f, int64_t rows, int64_t cols, std::mt19937& rng, ThreadPool& pool) {
  PackedMatrix m;
  m.packed_bytes.resize(PackedBytes(RandomShape(f, rows, cols)) + 64);
  auto* aligned = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(m.packed_bytes.data()) + 63) & ~uintptr_t(63));
  m.packed = RandomPanels(f, rows, cols, rng, pool, aligned);
  return m;
}

// A decode layer's attention projections at one token, the reference shape (q_a 512 and kv_a 576
// rows over 2048 as one pair, q_b 3072 x 512, o_proj 2048 x 2048): products of a few MB, where
// whatever a product pays once (its first lines, each panel block's start, the threads finishing
// apart) weighs more the fewer bytes a format reads. `num_layers` layers a format, each format's in
// 2 MB pages one after another as the loader holds a checkpoint, so that nothing stays cached.
// The formats alternate layer by layer, the order reversed every other round, so every format
// sees the host's same moments: each round's ratio over bf16 is a same-moment comparison. The
// best of a product's timings is its time on a quiet host, the least noisy figure there is.
bool PrintProjectionTable(const ComputeContext& ctx, double peak, std::mt19937& rng, ThreadPool& pool, int num_layers,
                          int rounds) {
  constexpr Format kProductFormats[] = {Format::kBf16, Format::kQ8_0, Format::kQ6K, Format::kQ4K};
  constexpr int kF = int(std::size(kProductFormats));
  constexpr int kProducts = 3;  // the q_a + kv_a pair, q_b, o_proj
  constexpr int64_t kShapes[4][2] = {{512, 2048}, {576, 2048}, {3072, 512}, {2048, 2048}};  // q_a, kv_a, q_b, o_proj
  struct Layer {
    WeightMatrix m[4];  // kShapes' matrices
  };
  std::vector<HugePageBuffer> storage(kF);
  std::vector<std::vector<Layer>> layers(kF);
  double bytes[kF][kProducts] = {};  // a layer's bytes per product
  for (int f = 0; f < kF; ++f) {
    const Format format = kProductFormats[f];
    size_t packed_bytes[4], layer_bytes = 0;  // each matrix's panels, a multiple of 64 bytes
    for (int i = 0; i < 4; ++i) {
      packed_bytes[i] = PackedBytes(RandomShape(format, kShapes[i][0], kShapes[i][1]));
      layer_bytes += packed_bytes[i];
    }
    if (!storage[size_t(f)].Assign(layer_bytes * size_t(num_layers))) return false;
    std::byte* at = storage[size_t(f)].data();
    for (int l = 0; l < num_layers; ++l) {
      Layer layer;
      for (int i = 0; i < 4; ++i) {
        layer.m[i] = RandomPanels(format, kShapes[i][0], kShapes[i][1], rng, pool, at);
        at += packed_bytes[i];
      }
      layers[size_t(f)].push_back(layer);
    }
    const Layer& l = layers[size_t(f)][0];
    bytes[f][0] = double(l.m[0].stored_bytes() + l.m[1].stored_bytes());
    bytes[f][1] = double(l.m[2].stored_bytes());
    bytes[f][2] = double(l.m[3].stored_bytes());
  }
  std::vector<float> x(2048, 0.01f), y_q_a(512), y_kv_a(576), y_q(3072), y_o(2048);
  double total_ns[kF][kProducts] = {}, best_ns[kF][kProducts];
  for (auto& row : best_ns) std::fill(std::begin(row), std::end(row), 1e30);
  std::vector<double> round_ratios[kF];  // per round: the format's GB/s over bf16's
  for (int r = 0; r < rounds; ++r) {
    double round_ns[kF] = {};
    for (int l = 0; l < num_layers; ++l) {
      for (int i = 0; i < kF; ++i) {
        const int f = r % 2 == 0 ? i : kF - 1 - i;
        const WeightMatrix(&m)[4] = layers[size_t(f)][size_t(l)].m;
        const auto t0 = std::chrono::steady_clock::now();
        MatMulPair(ctx, x.data(), 1, m[0], m[1], y_q_a.data(), y_kv_a.data());
        const auto t1 = std::chrono::steady_clock::now();
        MatMul(ctx, y_q_a.data(), 1, m[2], y_q.data());
        const auto t2 = std::chrono::steady_clock::now();
        MatMul(ctx, x.data(), 1, m[3], y_o.data());
        const auto t3 = std::chrono::steady_clock::now();
        const std::chrono::duration<double, std::nano> ns[kProducts] = {t1 - t0, t2 - t1, t3 - t2};
        for (int p = 0; p < kProducts; ++p) {
          total_ns[f][p] += ns[p].count();
          best_ns[f][p] = std::min(best_ns[f][p], ns[p].count());
          round_ns[f] += ns[p].count();
        }
      }
    }
    const auto layer_total = [&](int f) { return bytes[f][0] + bytes[f][1] + bytes[f][2]; };
    for (int f = 0; f < kF; ++f) {
      round_ratios[f].push_back((layer_total(f) / round_ns[f]) / (layer_total(0) / round_ns[0]));
    }
  }
  const auto print_table = [&](const double (&ns)[kF][kProducts], double calls, bool with_median) {
    std::printf("%-8s %24s %24s %24s %17s %10s\n", "format", "q_a+kv_a (1088 x 2048)", "q_b (3072 x 512)",
                "o_proj (2048 x 2048)", "together", with_median ? "x bf16" : "x bf16's");
    double bf16_rate = 0.0;
    for (int f = 0; f < kF; ++f) {
      std::printf("%-8s", FormatName(kProductFormats[f]));
      double layer_bytes = 0.0, layer_ns = 0.0;
      for (int p = 0; p < kProducts; ++p) {
        std::printf(" %8.1f us %7.2f GB/s", ns[f][p] / calls / 1e3, bytes[f][p] * calls / ns[f][p]);
        layer_bytes += bytes[f][p];
        layer_ns += ns[f][p] / calls;
      }
      const double rate = layer_bytes / layer_ns;  // bytes per ns: GB/s
      if (f == 0) bf16_rate = rate;
      double ratio = rate / bf16_rate;
      if (with_median) ratio = Percentile(round_ratios[f], 50.0);
      std::printf(" %7.2f GB/s %3.0f%% %9.3fx\n", rate, 100.0 * rate * 1e9 / peak, ratio);
    }
  };
  std::printf("\nattention projections at 1 token (the reference shape), %d layers a format x %d rounds, the formats "
              "alternated layer by layer: mean us a product, GB/s, and the median of the rounds' ratios over "
              "bf16's GB/s\n",
              num_layers, rounds);
  print_table(total_ns, double(rounds) * num_layers, true);
  std::printf("best of each product's %d timings (a quiet host's): us, GB/s, and the layer's GB/s over bf16's\n",
              rounds * num_layers);
  print_table(best_ns, 1.0, false);
  return true;
}

// The KV row codecs, one thread, DeepSeek's 512 + 64 row: a cache of kKvRows rows (a few MB, as
// one layer of a long context) read in attention's 16-row tiles into one tile buffer, with every
// codec this CPU runs; and the scalar quantizer, one row at a time as tokens are written.
void PrintKvCodecTable(std::mt19937& rng) {
  constexpr int kLatent = 512, kRope = 64, kRowDim = kLatent + kRope;
  constexpr int kKvRows = 4096, kTileRows = 16;
  std::vector<const KvCodec*> codecs;
  for (KernelIsa isa : {KernelIsa::kPortable, KernelIsa::kAvx2, KernelIsa::kAvx512}) {
    if (const KvCodec* codec = KvCodecFor(isa)) codecs.push_back(codec);
  }
  std::printf("\nKV row codecs, one thread, %d + %d values a row, %d rows read in %d-row tiles: million rows/s"
              " dequantized (GB/s of row bytes)\n", kLatent, kRope, kKvRows, kTileRows);
  std::printf("%-11s %6s", "kv format", "bytes");
  for (const KvCodec* codec : codecs) std::printf(" %16s", codec->name);
  std::printf(" %9s %16s\n", "simd gain", "quantize Mrows/s");
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(size_t(kKvRows) * kRowDim);  // [kKvRows, kRowDim]
  for (float& v : values) v = normal(rng);
  std::vector<float> tile(size_t(kTileRows) * kRowDim);  // [kTileRows, kRowDim]
  for (KvFormat format : kAllKvFormats) {
    const KvRowLayout layout = KvRowLayoutFor(format, kLatent, kRope);
    const float tensor_scale = KvTensorScaleFor(format, 4.0f);
    std::vector<std::byte> rows(layout.row_bytes * kKvRows);  // [kKvRows, row_bytes]
    const double quantize_s = BestSeconds(3, [&] {
      for (int r = 0; r < kKvRows; ++r) {
        QuantizeKvRow(format, values.data() + size_t(r) * kRowDim, kLatent, kRope, tensor_scale,
                      rows.data() + size_t(r) * layout.row_bytes);
      }
    });
    std::printf("%-11s %6zu", KvFormatName(format), layout.row_bytes);
    double portable_s = 0, best_s = 1e30;
    for (const KvCodec* codec : codecs) {
      const double s = BestSeconds(5, [&] {
        for (int r = 0; r < kKvRows; r += kTileRows) {
          codec->dequantize_rows(format, rows.data() + size_t(r) * layout.row_bytes, kTileRows, layout.row_bytes,
                                 layout, kLatent, kRope, tensor_scale, tile.data());
        }
      });
      if (codec->isa == KernelIsa::kPortable) portable_s = s;
      best_s = std::min(best_s, s);
      std::printf(" %7.2f (%6.2f)", kKvRows / s / 1e6, double(rows.size()) / s / 1e9);
    }
    std::printf(" %8.1fx %16.2f\n", portable_s / best_s, kKvRows / quantize_s / 1e6);
  }
}

// The prefill product both ways, one thread, a 2048 x 2048 matrix (8 MB in bf16, from cache
// after the first call): in registers (matmul_panels, activations read per panel) and over
// packed activations (pack_activations, then matmul_panels_packed: each weight widened once per
// call, ops.cc's kPackedProductMinTokens picks between them).
// peak_name: what one_thread_flops is (the share printed is of it). int8_one_thread_ops: the
// one-thread vpdpbusd peak (MeasureInt8DotPeak), which the rows the table multiplies by int8 dot
// products (an int8 table's GGUF and int4-g32 rows) are a share of instead, marked "(int8)".
void PrintPrefillGemmTable(const KernelSet& kernels, double one_thread_flops, const char* peak_name,
                           std::optional<double> int8_one_thread_ops, std::mt19937& rng, ThreadPool& pool) {
  constexpr int64_t kRows = 2048, kCols = 2048;
  const int token_counts[] = {24, 48, 96, 256};
  std::printf("\nprefill product (%s), one thread, %lld x %lld: G multiply-adds/s (share of the one-thread %s "
              "peak%s), in registers / over packed activations\n",
              kernels.name, static_cast<long long>(kRows), static_cast<long long>(kCols), peak_name,
              kernels.int8_dot && int8_one_thread_ops ? "; rows marked (int8): of the one-thread vpdpbusd peak" : "");
  std::printf("%-10s", "format");
  for (int n : token_counts) std::printf(" %26s", ("n=" + std::to_string(n)).c_str());
  std::printf("\n");
  for (Format f : kFormats) {
    const PackedMatrix m = RandomPacked(f, kRows, kCols, rng, pool);
    const bool int8 = kernels.int8_dot && Int8DotMultiplies(m.packed) && int8_one_thread_ops;
    const double peak = int8 ? *int8_one_thread_ops : one_thread_flops;
    std::printf("%-10s", FormatName(f));
    for (int n : token_counts) {
      std::vector<float> x(size_t(n * kCols)), y(size_t(n * kRows));
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (float& v : x) v = normal(rng);
      std::vector<float> xp(size_t(PackedFloatsFor(kernels, n, m.packed))), scratch(size_t(GemmThreadScratchFloats(n)));
      const double in_registers = BestSeconds(5, [&] {
        kernels.matmul_panels(x.data(), n, m.packed, 0, m.packed.num_panels(), y.data(), kRows);
      });
      const double packed = BestSeconds(5, [&] {
        kernels.pack_activations(x.data(), n, m.packed, 0, GemmTiles(n), xp.data());
        kernels.matmul_panels_packed(x.data(), xp.data(), scratch.data(), n, m.packed, 0, m.packed.num_panels(),
                                     y.data(), kRows);
      });
      const double madds = double(kRows * kCols) * n;
      std::printf("   %6.1f %3.0f%% / %6.1f %3.0f%%", madds / in_registers / 1e9, 100.0 * 2.0 * madds / in_registers / peak,
                  madds / packed / 1e9, 100.0 * 2.0 * madds / packed / peak);
    }
    std::printf("%s\n", int8 ? " (int8)" : "");
  }
}

// The measurement --kernels auto makes (kernel_choice.h), printed, and the cache it writes.
void PrintKernelChoice() {
  auto choice = ChooseKernels("auto", false);
  if (!choice.ok() || choice->rates.empty()) {
    std::printf("\nkernel choice: %s\n", choice.ok() ? choice->Describe().c_str() : choice.error().c_str());
    return;
  }
  // Fresh figures for the table, whatever the cache held (measured only if the choice read them).
  const std::vector<ShapeClassRate> rates = choice->from_cache ? MeasureShapeClasses() : choice->rates;
  const Int8Rates int8 = choice->from_cache ? MeasureInt8Rates() : choice->int8;
  std::printf("\nkernel choice (--kernels auto): one thread, bf16 weights (1 token: 4096 x 4096 from memory; more: "
              "512 x 2048 from cache), GFLOP/s\n");
  std::printf("%-8s %7s %10s %10s %8s\n", "class", "tokens", "fp32 FMA", "bf16 dot", "ratio");
  for (const ShapeClassRate& r : rates) {
    std::printf("%-8s %7d %10.1f %10.1f %7.2fx\n", r.label, r.tokens, r.fp32_flops / 1e9, r.bf16_flops / 1e9,
                r.bf16_flops / r.fp32_flops);
  }
  if (int8.measured()) {
    std::printf("Q8_0 weights, fp32 FMA / int8 dot (vpdpbusd): 1 token (4096 x 4096 from memory) %.1f / %.1f "
                "(%.2fx), 32 tokens (512 x 2048 from cache) %.1f / %.1f (%.2fx)\n",
                int8.fp32_one_flops / 1e9, int8.int8_one_flops / 1e9, int8.int8_one_flops / int8.fp32_one_flops,
                int8.fp32_batch_flops / 1e9, int8.int8_batch_flops / 1e9, int8.int8_batch_flops / int8.fp32_batch_flops);
  }
  std::printf("chosen from these: %s; deterministic inference: %s; start-up uses %s\n",
              TableForRates(rates, false, int8)->name, TableForRates(rates, true, int8)->name,
              choice->Describe().c_str());
}

}  // namespace

// The absorbed decode's per-head kv_b products at one token, DeepSeek's kv_b (128 heads, nope 128,
// v 128, kv_lora 512) in the GGUF formats that get W_UK^T copies, one thread (the decode splits
// the heads over the threads): the query through a head's W_UK^T copy (model/absorbed_weights.h
// MultiplyAbsorbedQuery) in one pass (the table's grouped_query_product) and by the plain path
// (the same table without it), and the output through its W_UV copy; each from cache (one head
// over and over) and from memory (every head of `num_layers` layers in turn, as a decode step
// reads them). Bytes: the head's rows of kv_b as held (codes, scales and mins), which the copies
// read. False: no W_UK^T copies (a table without int8 products takes none of this).
bool PrintAbsorbedQueryTable(const KernelSet& kernels, double peak, std::mt19937& rng, ThreadPool& pool,
                             int num_layers) {
  ModelConfig c;
  c.num_attention_heads = 128;
  c.qk_nope_head_dim = 128;
  c.v_head_dim = 128;
  c.kv_lora_rank = 512;
  const int64_t heads = c.num_attention_heads, rows_per_head = c.qk_nope_head_dim + c.v_head_dim;
  KernelSet plain = kernels;
  plain.grouped_query_product = nullptr;
  std::printf("\nthe absorbed query and output at 1 token, DeepSeek's kv_b (%lld heads, nope %d, v %d, kv_lora %d), "
              "one thread (%s), %d layers a format from memory: us a head, GB/s of its kv_b rows, share of the "
              "machine's read bandwidth\n", static_cast<long long>(heads), c.qk_nope_head_dim, c.v_head_dim,
              c.kv_lora_rank, kernels.name, num_layers);
  std::printf("%-7s %-27s %-27s %-27s %-27s %-27s %-27s\n", "format", "query one pass, cache", "query one pass, memory",
              "query plain, cache", "query plain, memory", "W_UV, cache", "W_UV, memory");
  for (Format f : {Format::kQ8_0, Format::kQ6K, Format::kQ4K}) {
    std::vector<RowMajorMatrix> kv_b;
    std::vector<ModelWeights> layers(static_cast<size_t>(num_layers));
    for (int l = 0; l < num_layers; ++l) {
      kv_b.push_back(RandomRowMajor(f, heads * rows_per_head, c.kv_lora_rank, rng));
      layers[size_t(l)].layers.resize(1);
      layers[size_t(l)].layers[0].attn.kv_b = kv_b.back().matrix;
      if (!PackAbsorbedWeights(layers[size_t(l)], c, pool).ok()) return false;
      if (!HasTransposedCopies(layers[size_t(l)].layers[0].attn)) return false;
    }
    const double uk_bytes = double(kv_b[0].matrix.Slice(0, c.qk_nope_head_dim).stored_bytes());
    const double uv_bytes = double(kv_b[0].matrix.Slice(c.qk_nope_head_dim, c.v_head_dim).stored_bytes());
    std::vector<float> q(size_t(c.qk_nope_head_dim)), o(size_t(c.kv_lora_rank)), q_lat(size_t(c.kv_lora_rank)),
        out(size_t(c.v_head_dim));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : q) v = normal(rng);
    for (float& v : o) v = normal(rng);
    const AttentionWeights& first = layers[0].layers[0].attn;
    const auto query = [&](const KernelSet& k, const AttentionWeights& a, int64_t h) {
      MultiplyAbsorbedQuery(k, a, c, h, q.data(), q_lat.data());
    };
    const auto output = [&](const KernelSet& k, const AttentionWeights& a, int64_t h) {
      const WeightMatrix& uv = a.uv[size_t(h)];
      k.matmul_panels(o.data(), 1, uv, 0, uv.num_panels(), out.data(), c.v_head_dim);
    };
    std::printf("%-7s", FormatName(f));
    const struct {
      bool query;  // else W_UV
      const KernelSet* k;
      double bytes;
    } columns[] = {{true, &kernels, uk_bytes}, {true, &plain, uk_bytes}, {false, &kernels, uv_bytes}};
    for (const auto& [is_query, k, bytes] : columns) {
      const auto run = [&](const AttentionWeights& a, int64_t h) {
        if (is_query) {
          query(*k, a, h);
        } else {
          output(*k, a, h);
        }
      };
      constexpr int kCachedCalls = 200;
      const double cached_s = BestSeconds(5, [&] {
                                for (int i = 0; i < kCachedCalls; ++i) run(first, 0);
                              }) / kCachedCalls;
      const double memory_s = BestSeconds(5, [&] {
                                for (const ModelWeights& layer : layers) {
                                  for (int64_t h = 0; h < heads; ++h) run(layer.layers[0].attn, h);
                                }
                              }) / double(heads * num_layers);
      for (double s : {cached_s, memory_s}) {
        std::printf(" %7.3f us %6.2f GB/s %3.0f%%", s * 1e6, bytes / s / 1e9, 100.0 * bytes / s / peak);
      }
    }
    std::printf("\n");
  }
  return true;
}

int RunBenchKernels(Args& args) {
  const std::string kernels_name = args.Str("kernels", "auto", "the table the per-format figures time: auto (the "
                                            "widest ISA, nothing measured), portable, avx2, avx512, avx512-bf16[:N], either AVX-512 one +int8");
  const int threads = args.Int("threads", 0, "worker threads; 0: one per core", {.min = 0});
  const int stream_mb = args.Int("stream-mb", 512, "bf16 megabytes of 2048 x 2048 matrices streamed per format "
                                 "(quantized formats stream the same matrices, in fewer bytes)", {.value_name = "MB", .min = 8});
  const int bandwidth_mb = args.Int("bandwidth-buffer-mb", 1024, "buffer for the machine's read bandwidth, in MB",
                                    {.value_name = "MB", .min = 1});
  const bool attention_only = args.Switch(
      "attention-only", "only the decode attention table (with the peaks it is measured against)");
  const bool choice_only = args.Switch(
      "choice-only", "only time the kernel candidates per shape class as --kernels auto does, and cache the choice");
  const bool projections_only = args.Switch(
      "projections-only", "only the attention projections' table: one token through a decode layer's q_a + kv_a, "
      "q_b and o_proj of the reference shape in bf16, q8_0, q6_k and q4_k, the formats alternated layer by layer "
      "(--stream-mb of bf16 layers, as many in each format)");
  const bool absorbed_query_only = args.Switch(
      "absorbed-query-only", "only the absorbed query and output table: one token through a head's kv_b copies "
      "(DeepSeek's shape, q8_0, q6_k and q4_k), one pass and the plain path, one thread, from cache and from memory "
      "(--stream-mb / 64 layers a format)");
  const int rounds = args.Int("rounds", 20, "rounds of the --projections-only table", {.min = 1});
  if (absorbed_query_only) {
    for (const char* other : {"attention-only", "choice-only", "projections-only"}) {
      if (args.WasGiven(other)) args.Reject(std::string("--") + other + " has no effect with --absorbed-query-only");
    }
  }
  if (args.WasGiven("rounds") && !projections_only) args.Reject("--rounds needs --projections-only");
  if (projections_only) {
    for (const char* other : {"attention-only", "choice-only"}) {
      if (args.WasGiven(other)) args.Reject(std::string("--") + other + " has no effect with --projections-only");
    }
  }
  if (choice_only) {
    for (const char* other : {"kernels", "threads", "stream-mb", "bandwidth-buffer-mb"}) {
      if (args.WasGiven(other)) args.Reject(std::string("--") + other + " has no effect with --choice-only");
    }
  }
  if (attention_only) {
    for (const char* other : {"stream-mb", "choice-only"}) {
      if (args.WasGiven(other)) args.Reject(std::string("--") + other + " has no effect with --attention-only");
    }
  }
  if (auto exit_code = args.Finish()) return *exit_code;
  if (choice_only) {
    PrintKernelChoice();
    return 0;
  }
  auto kernels = KernelsByName(kernels_name);
  if (!kernels.ok()) return Fail("bench-kernels", kernels.error(), 2);
  ThreadPool pool(threads > 0 ? threads : ThreadPool::DefaultThreadCount());
  // The products' scratch, as the model's workspace lends it (model/workspace.h): with it, an
  // int8 table quantizes a product's activations once and the threads take its chunks in turn,
  // where without it every chunk would quantize them again.
  std::vector<float> gemm_scratch(size_t(GemmScratchFloats(6, 2048, pool.num_threads())));  // 6 tokens x 2048 at most
  const ComputeContext ctx{*kernels, &pool, gemm_scratch};
  std::mt19937 rng(1);

  std::vector<ReadRate> read_rates;
  const double peak = MeasureReadBandwidth(pool, size_t(bandwidth_mb) << 20, 5, &read_rates);
  std::printf("kernels %s, threads %d; machine read bandwidth %.2f GB/s\n", (*kernels)->name, pool.num_threads(),
              peak / 1e9);
  std::printf("read bandwidth by probe variant (%d MB, 2 MB pages asked for; the best is the machine's):\n",
              bandwidth_mb);
  for (const ReadRate& r : read_rates) {
    std::printf("  %-42s %7.2f GB/s\n", r.variant.Name().c_str(), r.bytes_per_s / 1e9);
  }
  if (absorbed_query_only) {  // measured against the read probe alone
    if (!PrintAbsorbedQueryTable(**kernels, peak, rng, pool, std::max(2, stream_mb / 64))) {
      return Fail("bench-kernels", std::string("--absorbed-query-only: the table ") + (*kernels)->name +
                                       " makes no W_UK^T copies of these formats");
    }
    return 0;
  }
  if (projections_only) {  // measured against the read probe alone: the compute peaks are not taken
    // ~16 MB a bf16 layer: --stream-mb of bf16, about half of it in each GGUF format.
    if (!PrintProjectionTable(ctx, peak, rng, pool, std::max(2, stream_mb / 16), rounds)) {
      return Fail("bench-kernels", "out of memory for the projections' layers (--stream-mb " + std::to_string(stream_mb) + ")");
    }
    return 0;
  }
  const FmaPeak fma = MeasureFmaPeak(pool, **kernels);
  std::printf("fp32 FMA peak: %.1f GFLOP/s all threads, %.1f GFLOP/s one thread\n", fma.all_threads_flops / 1e9,
              fma.one_thread_flops / 1e9);
  const std::optional<FmaPeak> bf16_peak = MeasureBf16DotPeak(pool);
  if (bf16_peak) {
    std::printf("vdpbf16ps (bf16 dot-product) peak: %.1f GFLOP/s all threads, %.1f GFLOP/s one thread\n",
                bf16_peak->all_threads_flops / 1e9, bf16_peak->one_thread_flops / 1e9);
  } else {
    std::printf("vdpbf16ps (bf16 dot-product) peak: none (this CPU lacks AVX512-BF16)\n");
  }
  const std::optional<FmaPeak> int8_peak = MeasureInt8DotPeak(pool);
  std::optional<double> int8_one_thread;
  if (int8_peak) {
    int8_one_thread = int8_peak->one_thread_flops;
    std::printf("vpdpbusd (int8 dot-product) peak: %.1f GOP/s all threads, %.1f GOP/s one thread\n",
                int8_peak->all_threads_flops / 1e9, int8_peak->one_thread_flops / 1e9);
  } else {
    std::printf("vpdpbusd (int8 dot-product) peak: none (this CPU lacks AVX512-VNNI)\n");
  }
  std::vector<const KernelSet*> attention_tables{*kernels};
  if (bf16_peak && (*kernels)->latent_scores == nullptr) attention_tables.push_back(Avx512Bf16Kernels(1));
  if (attention_only) {
    PrintDecodeAttentionTable(attention_tables, pool, fma, bf16_peak, rng);
    return 0;
  }
  PrintKernelChoice();

  // Decode: a few tokens through enough 2048 x 2048 matrices that nothing stays cached. One token
  // is batch-1 decode; 3 and 6 are what a routed expert of the reference shape (64 experts, top-6)
  // gets on average at 32 and 64 requests decoding together (k N / E).
  constexpr int64_t kSide = 2048;
  const int num_matrices = std::max(1, int((int64_t(stream_mb) << 20) / (kSide * kSide * 2)));
  constexpr int stream_tokens[] = {1, 3, 6};
  constexpr int kMaxStreamTokens = stream_tokens[std::size(stream_tokens) - 1];
  std::printf("\n1, 3 and 6 tokens, %d matrices of %lld x %lld streamed from memory, all threads (%s): GB/s of "
              "weights, share of the read bandwidth\n", num_matrices, static_cast<long long>(kSide),
              static_cast<long long>(kSide), (*kernels)->name);
  std::printf("%-10s %8s", "format", "MB");
  for (int n : stream_tokens) std::printf(" %15s", ("n=" + std::to_string(n)).c_str());
  std::printf("\n");
  {
    std::vector<float> x(kSide * kMaxStreamTokens, 0.01f), y(kSide * kMaxStreamTokens);
    for (Format f : kFormats) {
      std::vector<PackedMatrix> ms;
      for (int i = 0; i < num_matrices; ++i) ms.push_back(RandomPacked(f, kSide, kSide, rng, pool));
      size_t bytes = 0;
      for (const PackedMatrix& m : ms) bytes += m.packed.stored_bytes();
      std::printf("%-10s %8.1f", FormatName(f), double(bytes) / 1e6);
      for (int n : stream_tokens) {
        const double s = BestSeconds(8, [&] {
          for (const PackedMatrix& m : ms) MatMul(ctx, x.data(), n, m.packed, y.data());
        });
        std::printf(" %8.2f %5.0f%%", double(bytes) / s / 1e9, 100.0 * double(bytes) / s / peak);
      }
      std::printf("\n");
    }
  }

  // Compute: one thread, a 256 x 2048 matrix (1 MB in bf16) that stays in L2.
  constexpr int64_t kRows = 256;
  const int token_counts[] = {1, 4, 12, 13, 24, 48};
  // Each weight x token is one multiply-add (2 FLOP): the share is of the one-thread FMA peak.
  std::printf("\none thread, %lld x %lld in L2: weights x tokens per second (G), share of the one-thread FMA peak\n",
              static_cast<long long>(kRows), static_cast<long long>(kSide));
  std::printf("%-10s", "format");
  for (int n : token_counts) std::printf(" %14s", ("n=" + std::to_string(n)).c_str());
  std::printf("\n");
  for (Format f : kFormats) {
    const PackedMatrix m = RandomPacked(f, kRows, kSide, rng, pool);
    std::printf("%-10s", FormatName(f));
    for (int n : token_counts) {
      std::vector<float> x(size_t(n * kSide)), y(size_t(n * kRows));
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (float& v : x) v = normal(rng);
      constexpr int kCalls = 20;
      const double s = BestSeconds(20, [&] {
        for (int i = 0; i < kCalls; ++i) (*kernels)->matmul_panels(x.data(), n, m.packed, 0, m.packed.num_panels(), y.data(), kRows);
      });
      const double madds = double(kRows * kSide) * n * kCalls / s;
      std::printf(" %8.2f %4.0f%%", madds / 1e9, 100.0 * 2.0 * madds / fma.one_thread_flops);
    }
    std::printf("\n");
  }

  PrintPrefillGemmTable(**kernels, fma.one_thread_flops, "fp32 FMA", int8_one_thread, rng, pool);
  if (bf16_peak) {
    PrintPrefillGemmTable(*Avx512Bf16Kernels(1), bf16_peak->one_thread_flops, "bf16 dot", int8_one_thread, rng, pool);
  }
  PrintKvCodecTable(rng);
  PrintDecodeAttentionTable(attention_tables, pool, fma, bf16_peak, rng);
  return 0;
}

}  // namespace mlaserve::cli

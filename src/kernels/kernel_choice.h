// Which kernel table a process computes with, chosen by measurement on this host (--kernels auto)
// or named (--kernels NAME). The bf16 candidates differ in how they multiply packed BF16 weights (and,
// though only BF16 is timed, fp8-block and int4 codes: Bf16DotMultiplies, from one token in the
// table chosen from 2 tokens: kernels.h Bf16CodesMinTokens; a +int8 table takes int4 to int8
// instead): fp32
// FMA after widening (the AVX-512 / AVX2 tables: exact in the weights, activations kept in fp32)
// or bf16 dot products (vdpbf16ps: activations rounded to bf16, twice the multiply-adds per
// instruction where the host runs it at full rate, nothing gained where it runs at half rate).
//
// auto times both on one thread, for one token count of each shape class: 1 token on a 32 MB bf16
// matrix read from memory, as decode reads its weights; 8, 32 and 128 tokens (the classes 2-16,
// 17-64, 65+) on a 512 x 2048 one from cache. bf16 products are taken from the smallest class from
// which every larger class measured at least its min_speedup faster (the tables of
// Avx512Bf16Kernels).
// The measurement (a few hundred milliseconds, most of it writing the 32 MB matrix) is cached in a
// file keyed by the CPU's model name, its features and the library's build, so a restart reads it
// back.
//
// --enable-deterministic-inference needs batch invariance, which a table switching at N > 1
// tokens breaks (a token's rounding would depend on its batch's size): it takes the all-bf16
// table when the largest class chose bf16, else the fp32 table; a named avx512-bf16:N is refused.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kernels/kernels.h"

namespace mlaserve {

// bf16 products are taken for a shape class only where they measured at least this much faster:
// within it the exact fp32 path is kept, and measurement noise cannot flip the choice. One token
// reads its weights from memory, where the two measured within 10% of each other (1.04-1.09x on
// the AMD host of docs/kernels.md), so rounding must buy more there.
inline constexpr double kBf16MinSpeedup = 1.1;
inline constexpr double kBf16MinSpeedupOneToken = 1.25;

struct ShapeClassRate {
  const char* label;          // "1", "2-16", "17-64", "65+"
  int tokens;                 // the token count measured for the class
  int min_tokens;             // the class's first token count (a bf16 table's threshold)
  double min_speedup;         // what bf16 must gain here to be taken
  double fp32_flops = 0.0;    // FLOP/s of the fp32 table, one thread
  double bf16_flops = 0.0;    // FLOP/s of the all-bf16 table, one thread
};

// int8 products of int8-group weights (GGUF's Q8_0; the decision also governs the other GGUF
// block types and int4-g32: kernels_avx512vnni.cc), where the CPU has
// AVX512-VNNI: the fp32 table's Q8_0 product (codes widened to fp32) against its +int8 variant's
// (activations quantized to int8, vpdpbusd), one thread: one token on a 4096 x 4096 Q8_0 matrix
// from memory, 32 tokens on 512 x 2048 from cache. Taken where both measured at least
// kInt8MinSpeedup faster (the int8 table serves every token count: batch-invariant).
inline constexpr double kInt8MinSpeedup = 1.1;
struct Int8Rates {
  double fp32_one_flops = 0.0, int8_one_flops = 0.0;      // one token, from memory
  double fp32_batch_flops = 0.0, int8_batch_flops = 0.0;  // 32 tokens, from cache
  bool measured() const { return fp32_one_flops > 0.0 && fp32_batch_flops > 0.0; }
  bool Chosen() const {
    return measured() && int8_one_flops >= kInt8MinSpeedup * fp32_one_flops &&
           int8_batch_flops >= kInt8MinSpeedup * fp32_batch_flops;
  }
};

struct KernelChoice {
  const KernelSet* kernels = nullptr;
  std::vector<ShapeClassRate> rates;  // measured or read back; empty when named or not measured
  Int8Rates int8;                     // likewise; zero where the CPU lacks AVX512-VNNI
  std::string cache_path;             // where the rates were read from or written to; "" if none
  bool from_cache = false;
  std::string why;                    // why nothing was measured (named, no AVX512-BF16), if so

  // One line for the start-up log: the table, and the rates it was chosen from.
  std::string Describe() const;
};

// flag: --kernels ("auto" or a KernelsByName name). An error for a name this CPU cannot run, and
// for avx512-bf16:N with deterministic inference (not batch-invariant).
[[nodiscard]] Result<KernelChoice> ChooseKernels(std::string_view flag, bool deterministic);

// The measurement alone (no cache): every class's rates for the two candidates. Zero rates
// where the CPU lacks AVX512-BF16.
[[nodiscard]] std::vector<ShapeClassRate> MeasureShapeClasses();
// The same for int8 products (Int8Rates); zero where the CPU lacks AVX512-VNNI.
[[nodiscard]] Int8Rates MeasureInt8Rates();

// The table the rates choose (see above): the bf16 decision's table, with int8 products
// (WithInt8Dot) where int8.Chosen().
[[nodiscard]] const KernelSet* TableForRates(const std::vector<ShapeClassRate>& rates, bool deterministic,
                                             const Int8Rates& int8 = {});

// The cache file: $MLASERVE_KERNEL_CACHE, else $XDG_CACHE_HOME/mlaserve/kernel-choice.json, else
// $HOME/.cache/mlaserve/kernel-choice.json; "" when none of these is set.
[[nodiscard]] std::string KernelChoiceCachePath();

}  // namespace mlaserve

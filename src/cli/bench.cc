// mlaserve bench: prefill and decode tokens/s on any checkpoint (typically one from init-random),
// each as a share of its roofline measured in the same run: decode of one sequence as the bytes
// it reads per second against the machine's read bandwidth, prefill's FLOP/s against the kernel
// table's fp32 FMA peak (the bf16 dot-product peak is printed beside it where the CPU has one),
// and with --batch N, N sequences decoding together against the per-step bound
// max(bytes / bandwidth, FLOPs / peak); also the share of a decode step spent in attention.
// docs/benchmarks.md says how to read the output.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/fma_peak.h"
#include "cli/model_setup.h"
#include "cli/read_bandwidth.h"
#include "core/percentile.h"
#include "core/thread_pool.h"
#include "dist/mpi_group.h"
#include "engine/sampler.h"
#include "engine/sequence_runner.h"
#include "kvcache/kv_format.h"
#include "kvcache/sequence_kv.h"
#include "model/mla_decode_attention.h"

namespace mlaserve::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Calls visit(matrix) for every matrix each token of a forward pass multiplies by, except the
// lm_head (only for the tokens whose logits are wanted) and the routed experts (top-k per token).
template <class Visit>
void ForEachPerTokenMatrix(const Model& model, Visit&& visit) {
  for (const LayerWeights& l : model.weights().layers) {
    const AttentionWeights& a = l.attn;
    for (const WeightMatrix* m : {&a.q_a, &a.q_b, &a.q_proj, &a.kv_a, &a.kv_b, &a.k_b, &a.v_b, &a.o_proj}) visit(*m);
    if (l.is_moe) {
      visit(l.moe.router);
      if (l.moe.has_shared) {
        for (const WeightMatrix* m : {&l.moe.shared.gate, &l.moe.shared.up, &l.moe.shared.down}) visit(*m);
      }
    } else {
      for (const WeightMatrix* m : {&l.mlp.gate, &l.mlp.up, &l.mlp.down}) visit(*m);
    }
  }
}

int64_t Params(const WeightMatrix& m) { return m.rows * m.cols; }

// Weight bytes one decode step reads: everything but the embedding table and the experts the
// router did not pick, which are counted per step from the actual routing.
size_t DenseBytesPerToken(const Model& model) {
  const ModelWeights& w = model.weights();
  size_t bytes = w.lm_head.stored_bytes() + w.embed.row_bytes();
  ForEachPerTokenMatrix(model, [&](const WeightMatrix& m) { bytes += m.stored_bytes(); });
  return bytes;
}

// Weight elements each token multiplies by, lm_head and routed experts excepted (see above).
int64_t DenseParamsPerToken(const Model& model) {
  int64_t params = 0;
  ForEachPerTokenMatrix(model, [&](const WeightMatrix& m) { params += Params(m); });
  return params;
}

const MlpWeights* FirstExpert(const Model& model) {
  for (const LayerWeights& l : model.weights().layers) {
    if (l.is_moe && !l.moe.experts.empty()) return &l.moe.experts[0];
  }
  return nullptr;
}

size_t ExpertBytes(const Model& model) {
  const MlpWeights* e = FirstExpert(model);
  return e == nullptr ? 0 : e->gate.stored_bytes() + e->up.stored_bytes() + e->down.stored_bytes();
}

int MoeLayers(const ModelConfig& c) {
  int moe_layers = 0;
  for (int l = 0; l < c.num_hidden_layers; ++l) moe_layers += c.IsMoeLayer(l) ? 1 : 0;
  return moe_layers;
}

// 2 x (per-token weight elements + top-k routed experts' elements): a token's matmul FLOPs but
// the lm_head's.
double WeightFlopsPerToken(const Model& model) {
  const ModelConfig& c = model.config();
  int64_t expert_params = 0;
  if (const MlpWeights* e = FirstExpert(model)) expert_params = Params(e->gate) + Params(e->up) + Params(e->down);
  return 2.0 * (double(DenseParamsPerToken(model)) +
                double(MoeLayers(c)) * c.num_experts_per_tok * double(expert_params));
}

// The absorbed MLA attention's FLOPs for one query and one cached position, all layers and heads:
// the score over the latent and rope parts, and the latent value sum.
double AttentionFlopsPerPosition(const ModelConfig& c) {
  return double(c.num_hidden_layers) * c.num_attention_heads * (2.0 * c.kv_cache_dim() + 2.0 * c.kv_lora_rank);
}

// FLOPs of one prefill of `prompt_len` tokens from an empty cache, in chunks of max_batch_tokens,
// counting 2 per multiply-add:
//   2 x (per-token weight elements + top-k routed experts' elements) x prompt_len
//   + 2 x lm_head elements x prompt chunks (logits only for each chunk's last token)
//   + each chunk's attention in the form the model runs it (Model::UseMhaPrefill), over its
//     query-key pairs n (cached + (n + 1) / 2) for n new tokens after `cached` positions:
//     absorbed: layers x heads x (2 (kv_lora_rank + rope_dim) + 2 kv_lora_rank) a pair (the
//     absorption by kv_b counts in the weights term, once per token);
//     MHA: layers x heads x 2 (qk_head_dim + v_head_dim) a pair, plus the keys and values of
//     every prefix row (cached + n) decompressed by kv_b (2 (nope + v) kv_lora_rank a row and
//     head), less the n new tokens' absorption the weights term counted: cached rows' worth.
// Softmax, norms, RoPE and routing are not counted.
double PrefillFlops(const Model& model, int prompt_len) {
  const ModelConfig& c = model.config();
  const int chunk = model.max_batch_tokens();
  const double layers_heads = double(c.num_hidden_layers) * c.num_attention_heads;
  const double kv_b_per_head = 2.0 * double(c.qk_nope_head_dim + c.v_head_dim) * c.kv_lora_rank;
  double attention = 0;
  int chunks = 0;
  for (int cached = 0; cached < prompt_len; cached += chunk, ++chunks) {
    const int n = std::min(chunk, prompt_len - cached);
    const double pairs = double(n) * cached + double(n) * (n + 1) / 2.0;
    if (model.UseMhaPrefill(ForwardSegment{.num_computed_tokens = cached, .num_tokens = n})) {
      attention += layers_heads * (pairs * 2.0 * (c.qk_head_dim() + c.v_head_dim) + double(cached) * kv_b_per_head);
    } else {
      attention += pairs * AttentionFlopsPerPosition(c);
    }
  }
  return WeightFlopsPerToken(model) * prompt_len + 2.0 * double(Params(model.weights().lm_head)) * chunks + attention;
}

const char* WeightsName(const ModelConfig& c) {
  switch (c.quant.method) {
    case WeightQuantMethod::kFp8Block: return "fp8-block";
    case WeightQuantMethod::kInt4Pack: return "int4 experts";
    case WeightQuantMethod::kNone: break;
  }
  return c.torch_dtype.empty() ? "dense" : c.torch_dtype.c_str();
}

// The expected number of distinct experts n tokens pick, each choosing k of E uniformly:
// E (1 - (1 - k/E)^n). The routing itself is inside the model, not observed here.
double ExpectedDistinctExperts(int num_experts, int top_k, int num_tokens) {
  if (num_experts <= 0) return 0.0;
  return num_experts * (1.0 - std::pow(1.0 - double(top_k) / num_experts, num_tokens));
}

// KV cache bytes one cached position holds in every layer, in the cache's format.
size_t KvBytesPerPosition(const LoadedModel& loaded) {
  const ModelConfig& c = loaded.model->config();
  return KvRowBytes(loaded.kv_cache.kv_format, c.kv_lora_rank, c.qk_rope_head_dim) * size_t(c.num_hidden_layers);
}

struct Peaks {
  double read_bandwidth;      // bytes/s
  FmaPeak fp32;               // the kernel table's FMA
  std::optional<FmaPeak> bf16;  // vdpbf16ps; nullopt without AVX512-BF16
};

Peaks MeasurePeaks(Model& model, const KernelSet& kernels, int bandwidth_mb) {
  return Peaks{.read_bandwidth = MeasureReadBandwidth(model.pool(), size_t(bandwidth_mb) << 20, 5),
               .fp32 = MeasureFmaPeak(model.pool(), kernels),
               .bf16 = MeasureBf16DotPeak(model.pool())};
}

// Each compute peak of `from` kept in `best` where higher (bench's --prefill-repeats measures
// them after every prefill run too, so that they are the best of as long a stretch of the host's
// time as the prefill they are compared with).
void KeepHigherComputePeaks(const Peaks& from, Peaks& best) {
  const auto keep = [](const FmaPeak& f, FmaPeak& b) {
    b.one_thread_flops = std::max(b.one_thread_flops, f.one_thread_flops);
    b.all_threads_flops = std::max(b.all_threads_flops, f.all_threads_flops);
  };
  keep(from.fp32, best.fp32);
  if (from.bf16 && best.bf16) keep(*from.bf16, *best.bf16);
}

void PrintComputePeaks(const Peaks& peaks, const KernelSet& kernels) {
  std::printf("fp32 FMA peak (%s): %.1f GFLOP/s all threads, %.1f GFLOP/s one thread\n", kernels.name,
              peaks.fp32.all_threads_flops / 1e9, peaks.fp32.one_thread_flops / 1e9);
  if (peaks.bf16) {
    std::printf("bf16 dot-product peak (avx512_bf16 vdpbf16ps): %.1f GFLOP/s all threads, %.1f GFLOP/s one thread "
                "(%s)\n",
                peaks.bf16->all_threads_flops / 1e9, peaks.bf16->one_thread_flops / 1e9,
                kernels.bf16_min_tokens > 0 ? "the kernels' bf16 products run at it" : "not used by these kernels");
  } else {
    std::printf("bf16 dot-product peak: none (this CPU lacks AVX512-BF16)\n");
  }
}

// The compute peak a product of n tokens runs against: the bf16 dot-product peak where the table
// multiplies this checkpoint's dense BF16 weights in bf16 at n tokens, else the fp32 FMA peak.
// (Where only some weights are bf16, e.g. int4 experts, this is the fp32 peak: an upper bound on
// neither; the line names which one it is.)
struct ComputePeak {
  double flops;
  const char* name;
};
ComputePeak PeakFor(const Peaks& peaks, const KernelSet& kernels, const ModelConfig& c, int n) {
  // The bf16 tables multiply BF16, fp8-block and int4 weights in bf16 (kernels.h Bf16DotMultiplies;
  // a +int8 table's int4 products are int8 ones, whose peak is not measured: the bf16 one stands);
  // an int4 checkpoint's other weights are BF16 (its dtype), an fp8 one's are all fp8.
  const bool weights_in_bf16 = c.quant.method == WeightQuantMethod::kFp8Block || c.torch_dtype == "bfloat16";
  // (fp8's codes from Bf16CodesMinTokens: one token in the table chosen from two.)
  const int min_tokens = c.quant.method == WeightQuantMethod::kFp8Block ? Bf16CodesMinTokens(kernels.bf16_min_tokens)
                                                                        : kernels.bf16_min_tokens;
  const bool bf16 = peaks.bf16 && min_tokens > 0 && n >= min_tokens && weights_in_bf16;
  return bf16 ? ComputePeak{peaks.bf16->all_threads_flops, "bf16 dot-product"}
              : ComputePeak{peaks.fp32.all_threads_flops, "FMA"};
}

// GFLOP to four significant digits, without an exponent (a tiny test model's prompt is ~1e-4).
std::string GflopText(double flops) {
  char text[32];
  const double gflop = flops / 1e9;
  std::snprintf(text, sizeof text, gflop >= 1000 ? "%.0f" : "%.4g", gflop);
  return text;
}

void PrintPrefillCompute(double flops, double seconds, const ComputePeak& peak) {
  std::printf("prefill compute: %.1f GFLOP/s achieved (%s GFLOP in the prompt), %.0f%% of the %s peak\n",
              flops / seconds / 1e9, GflopText(flops).c_str(), 100.0 * flops / seconds / peak.flops, peak.name);
}

void PrintAttentionShare(const ForwardTimings& timings, double decode_s) {
  std::printf("attention share of decode step: %.1f%% (the attention block of every layer, projections included)\n",
              100.0 * double(timings.attention_ns) / 1e9 / decode_s);
}

// Attention over the KV cache in the decode steps (ForwardTimings::attention_core_ns) against its
// own bound at the mean context: max(the cache bytes `sequences` steps read / the read bandwidth,
// the absorbed form's FLOPs over the peaks its products run at). Scores (over L + R per head and
// position) and the weighted sum (over L) take the bf16 dot-product peak where AttendLatentRows
// multiplies in bf16 (LatentRowsInBf16: bf16 or exactly widened fp8 rows, a table that
// multiplies the heads in bf16: latent_scores, latent_sum), else the FMA peak (gemm_f32).
void PrintAttentionBound(const ForwardTimings& timings, int steps, int sequences, double mean_context,
                         const LoadedModel& loaded, const Peaks& peaks) {
  const ModelConfig& c = loaded.model->config();
  const double step_s = double(timings.attention_core_ns) / 1e9 / steps;
  const double positions = double(sequences) * mean_context;
  const double bytes = positions * double(KvBytesPerPosition(loaded));
  const double per_position = double(c.num_hidden_layers) * c.num_attention_heads;
  const double score_flops = positions * per_position * 2.0 * c.kv_cache_dim();
  const double sum_flops = positions * per_position * 2.0 * c.kv_lora_rank;
  const LatentAttentionShape shape{.heads = c.num_attention_heads, .latent_dim = c.kv_lora_rank,
                                   .rope_dim = c.qk_rope_head_dim, .gemm_scores = false};
  const bool bf16_products = peaks.bf16 && LatentRowsInBf16(*loaded.kernels, loaded.kv_cache.kv_format, shape);
  const double peak = bf16_products ? peaks.bf16->all_threads_flops : peaks.fp32.all_threads_flops;
  const double memory_s = bytes / peaks.read_bandwidth;
  const double compute_s = (score_flops + sum_flops) / peak;
  const double bound_s = std::max(memory_s, compute_s);
  std::printf("decode attention over the KV cache: %.3g ms/step; bound max(%.2f ms reading %.1f MB at %.2f GB/s, "
              "%.2f ms computing %.2f GFLOP at the %s peak) = %.2f ms; %.3g%% of it\n",
              1000.0 * step_s, 1000.0 * memory_s, bytes / 1e6, peaks.read_bandwidth / 1e9, 1000.0 * compute_s,
              (score_flops + sum_flops) / 1e9, bf16_products ? "bf16 dot-product" : "FMA", 1000.0 * bound_s,
              100.0 * bound_s / step_s);
}

// A measure of the matrices one token multiplies by, summed per phase of the decode and prefill
// tables (ForwardTimings): the attention projections, kv_b, the MLPs (dense MLPs, shared experts
// and top-k routed experts, counted as the first expert's) and the router; lm_head apart.
struct PhaseSums {
  double projections = 0, kv_b = 0, mlp = 0, router = 0;
};
template <class Measure>
PhaseSums SumPerPhase(const Model& model, Measure&& measure) {
  const ModelConfig& c = model.config();
  const auto mlp_sum = [&](const MlpWeights& m) { return double(measure(m.gate) + measure(m.up) + measure(m.down)); };
  PhaseSums sums;
  for (const LayerWeights& l : model.weights().layers) {
    for (const WeightMatrix* m : {&l.attn.q_a, &l.attn.q_b, &l.attn.q_proj, &l.attn.kv_a, &l.attn.o_proj}) {
      sums.projections += double(measure(*m));
    }
    sums.kv_b += double(measure(l.attn.kv_b) + measure(l.attn.k_b) + measure(l.attn.v_b));  // one or the pair
    if (!l.is_moe) sums.mlp += mlp_sum(l.mlp);
    if (l.is_moe && l.moe.has_shared) sums.mlp += mlp_sum(l.moe.shared);
    if (l.is_moe) sums.router += double(measure(l.moe.router));
  }
  if (const MlpWeights* e = FirstExpert(model)) sums.mlp += double(MoeLayers(c)) * c.num_experts_per_tok * mlp_sum(*e);
  return sums;
}

// The weight bytes a decode step's phases read: a walk over the model's matrices, made once per
// model (the interleaved run reads them after every step).
struct DecodeBytes {
  PhaseSums weights;
  double lm_head = 0;
};
DecodeBytes DecodeWeightBytes(const Model& model) {
  return {SumPerPhase(model, [](const WeightMatrix& m) { return m.stored_bytes(); }),
          double(model.weights().lm_head.stored_bytes())};
}

// A decode step's phases (ForwardTimings'), with the bytes each reads: the weight products, then
// attention over the cache (kv_bytes: its rows at the mean context).
struct DecodePhase {
  const char* name;
  int64_t ns;
  double bytes;
  bool reads_weights;  // a weight product (else attention over the cache)
};
std::array<DecodePhase, 6> DecodePhases(const ForwardTimings& t, double kv_bytes, const DecodeBytes& b) {
  const PhaseSums& w = b.weights;
  return {{{"MLP products (dense MLPs, routed and shared experts)", t.mlp_ns, w.mlp, true},
           {"attention projections (q, kv_a and the cache write, o_proj)", t.projections_ns, w.projections, true},
           {"kv_b products (absorbed W_UK, W_UV)", t.kv_b_ns, w.kv_b, true},
           {"router (product, top-k, the experts' combine)", t.router_ns, w.router, true},
           {"lm_head", t.lm_head_ns, b.lm_head, true},
           {"attention over the KV cache (bytes: the cache rows)", t.attention_core_ns, kv_bytes, false}}};
}

// The decode's weight products together (every phase but attention over the cache): seconds and
// bytes a step, over `steps` single-sequence steps. What a weight format changes; the rest costs
// every format alike.
struct WeightProducts {
  double step_s = 0, bytes = 0;
};
WeightProducts DecodeWeightProducts(const ForwardTimings& t, int steps, const DecodeBytes& b) {
  WeightProducts sum;
  for (const DecodePhase& p : DecodePhases(t, 0.0, b)) {
    if (!p.reads_weights) continue;
    sum.step_s += double(p.ns) / 1e9 / steps;
    sum.bytes += p.bytes;
  }
  return sum;
}

// Where a decode step's time goes (ForwardTimings' phases over `steps` single-sequence steps of
// `step_s` each), with the weight bytes each phase reads and the rate it reads them at: the MLPs'
// large products stream; the fixed per-step costs (attention over the cache, small products,
// norms) weigh more, the fewer bytes the weights take.
void PrintDecodePhases(const ForwardTimings& t, int steps, double step_s, double kv_bytes, const DecodeBytes& b,
                       double bandwidth) {
  std::printf("decode step by phase: ms/step, MB/step read, GB/s, share of the machine's read bandwidth\n");
  auto print = [&](const char* name, double s, double bytes) {
    std::printf("  %-62s %7.3f ms %8.1f MB %7.2f GB/s %4.0f%%\n", name, 1e3 * s, bytes / 1e6, s > 0 ? bytes / s / 1e9 : 0.0,
                s > 0 ? 100.0 * bytes / s / bandwidth : 0.0);
  };
  double timed_s = 0;
  for (const DecodePhase& p : DecodePhases(t, kv_bytes, b)) {
    const double s = double(p.ns) / 1e9 / steps;
    timed_s += s;
    print(p.name, s, p.bytes);
  }
  std::printf("  %-62s %7.3f ms\n", "the rest (embedding row, norms, residual adds, the step's loop)",
              1e3 * std::max(0.0, step_s - timed_s));
  const WeightProducts products = DecodeWeightProducts(t, steps, b);
  print("weight products together (the phases above but the cache)", products.step_s, products.bytes);
}

// The prompt's forward calls by phase (ForwardTimings, the decode table's phases): time, the
// FLOPs each phase's products do, their rate and its share of `peak` (the peak the whole prefill
// is compared with). The MLPs count the dense MLPs, the shared experts and top-k routed experts per
// token; the attention line joins kv_b and attention over the prompt (in the MHA form kv_b's
// products run inside it) and gets the rest of PrefillFlops' total. What no phase times is the
// rest: the embedding rows, the layers' input norms and residual adds, the final norm and the
// forward call's own loop (RoPE runs inside the attention phases).
void PrintPrefillPhases(const ForwardTimings& t, const Model& model, int prompt_len, double prefill_s,
                        const ComputePeak& peak) {
  const PhaseSums params = SumPerPhase(model, Params);
  const double chunks = std::ceil(double(prompt_len) / model.max_batch_tokens());
  const double mlp = 2.0 * params.mlp * prompt_len, projections = 2.0 * params.projections * prompt_len;
  const double router = 2.0 * params.router * prompt_len;
  const double lm_head = 2.0 * double(Params(model.weights().lm_head)) * chunks;
  const double attention = PrefillFlops(model, prompt_len) - mlp - projections - router - lm_head;
  struct Phase {
    const char* name;
    int64_t ns;
    double flops;
  };
  const Phase phases[] = {{"MLP products (dense MLPs, routed and shared experts)", t.mlp_ns, mlp},
                          {"attention projections (q, kv_a and the cache write, o_proj)", t.projections_ns, projections},
                          {"attention (kv_b products, attention over the prompt)", t.kv_b_ns + t.attention_core_ns,
                           attention},
                          {"router (product, top-k, the experts' combine)", t.router_ns, router},
                          {"lm_head (each chunk's last token)", t.lm_head_ns, lm_head}};
  std::printf("prefill by phase: ms, GFLOP, GFLOP/s, share of the %s peak\n", peak.name);
  double timed_s = 0;
  for (const Phase& p : phases) {
    const double s = double(p.ns) / 1e9;
    timed_s += s;
    std::printf("  %-62s %8.3f ms %9s GFLOP %7.1f GFLOP/s %4.0f%%\n", p.name, 1e3 * s, GflopText(p.flops).c_str(),
                s > 0 ? p.flops / s / 1e9 : 0.0, s > 0 ? 100.0 * p.flops / s / peak.flops : 0.0);
  }
  std::printf("  %-62s %8.3f ms\n", "the rest (embedding rows, norms, residual adds, the calls' loop)",
              1e3 * std::max(0.0, prefill_s - timed_s));
}

// Tensor parallelism (--tp-size under mpirun): what rank 0's collectives moved and cost in a
// phase of `steps` forward calls taking `seconds`. The time inside them is the transfer plus
// waiting for the slowest rank to arrive.
dist::TpTraffic TpTrafficNow(const Model& model) {
  if (model.tp_size() == 1) return {};
  auto group = dist::MpiGroup::Get();
  return group.ok() ? (*group)->traffic() : dist::TpTraffic{};
}

// A rank's roofline would count its shard against its own cores' peaks, while a token's experts
// live on any rank: under tensor parallelism, tokens/s are compared with one process instead.
void PrintTpNoRooflines(Model& model) {
  std::printf("tensor parallel over %d ranks: no per-rank rooflines (compare tokens/s with one process of %d threads)\n",
              model.tp_size(), model.tp_size() * model.pool().num_threads());
}

void PrintTpTraffic(const Model& model, const char* phase, const dist::TpTraffic& before,
                    const dist::TpTraffic& after, double seconds, int steps) {
  if (model.tp_size() == 1) return;
  const double bytes = double(after.bytes_received - before.bytes_received) / steps;
  const double calls = double(after.calls - before.calls) / steps;
  const double inside_s = double(after.ns - before.ns) / 1e9;
  std::printf("tensor parallel, %s: rank 0 of %d received %.1f KB in %.0f collectives per forward call; %.1f%% of "
              "the time inside collectives (transfer and waiting for the other ranks)\n",
              phase, model.tp_size(), bytes / 1e3, calls, 100.0 * inside_s / seconds);
}

// The matmul kernel alone on the lm_head matrix, for batches of n tokens: where decode turns from
// bandwidth-bound to compute-bound.
void PrintMatmulSweep(Model& model, const KernelSet& kernels) {
  const WeightMatrix& w = model.weights().lm_head;
  const ComputeContext ctx{&kernels, &model.pool()};
  for (int n : {1, 8, 32, 64}) {
    std::vector<float> x(static_cast<size_t>(n) * size_t(w.cols), 0.01f);
    std::vector<float> y(static_cast<size_t>(n) * size_t(w.rows));
    MatMul(ctx, x.data(), n, w, y.data());
    const auto m0 = Clock::now();
    constexpr int kReps = 5;
    for (int rep = 0; rep < kReps; ++rep) MatMul(ctx, x.data(), n, w, y.data());
    const double s = Seconds(m0, Clock::now()) / kReps;
    std::printf("matmul [%d x %lld] x [%lld x %lld]^T: %.1f GFLOP/s, %.1f GB/s of weights\n", n,
                (long long)w.cols, (long long)w.rows, (long long)w.cols,
                2.0 * n * double(w.rows) * double(w.cols) / s / 1e9, double(w.stored_bytes()) / s / 1e9);
  }
}

// Deterministic pseudo-random prompt; `stream` tells sequences apart.
std::vector<TokenId> BenchPrompt(int prompt_len, int vocab_size, uint64_t stream = 0) {
  std::vector<TokenId> prompt(static_cast<size_t>(prompt_len));
  for (int i = 0; i < prompt_len; ++i) prompt[size_t(i)] = TokenId(CounterUniform(7 + stream, uint64_t(i)) * vocab_size);
  return prompt;
}

struct BenchSettings {
  int prompt_len;
  int decode_tokens;
  int bandwidth_mb;
  bool matmul_sweep;
  int batch;            // sequences decoding together (--batch)
  int prefill_repeats;  // one sequence: the prompt's prefill runs this many times, the fastest counts
};

// Loads one checkpoint and prints its figures for one sequence; returns the exit code.
int BenchModel(const ModelFlags& model_flags, const BenchSettings& settings) {
  const int prompt_len = settings.prompt_len, decode_tokens = settings.decode_tokens;
  auto loaded = LoadModel(model_flags, /*need_tokenizer=*/false);
  if (!loaded.ok()) return Fail("bench", loaded.error());
  Model& model = *loaded->model;
  const ModelConfig& c = model.config();
  if (prompt_len + decode_tokens + 1 > model.max_context()) {
    return Fail("bench", "--prompt-len + --decode-tokens exceeds the context length", 2);
  }

  const std::vector<TokenId> prompt = BenchPrompt(prompt_len, c.vocab_size);
  auto created = SequenceRunner::Create(model, *loaded->kernels, loaded->kv_cache);
  if (!created.ok()) return Fail("bench", created.error());
  SequenceRunner& runner = **created;
  // Warm-up: touch every weight page once so the first timed step does not page-fault.
  if (Status s = runner.Append(std::span(prompt).first(std::min(prompt_len, 8))); !s.ok()) {
    return Fail("bench", s.message());
  }
  runner.Reset();

  // The prompt --prefill-repeats times from an empty cache; the fastest run's time and phases
  // count (a noisy host's slow runs are its neighbours', not the engine's). With more than one
  // run, the compute peaks are measured after each run too and the best kept
  // (KeepHigherComputePeaks): not one moment's peaks against the best of several runs.
  ForwardTimings prefill_timings;  // the fastest run's; counts the forward calls the prompt took
  double prefill_s = 0;
  std::optional<Peaks> between_runs;  // the best compute peaks measured after each run (repeats > 1)
  dist::TpTraffic traffic0, traffic1;  // the collectives' counters before and after the fastest run
  for (int repeat = 0; repeat < settings.prefill_repeats; ++repeat) {
    if (repeat > 0) runner.Reset();
    const dist::TpTraffic run_traffic0 = TpTrafficNow(model);
    ForwardTimings run_timings;
    model.set_timings(&run_timings);
    const auto t0 = Clock::now();
    if (Status s = runner.Append(prompt); !s.ok()) return Fail("bench", s.message());
    const double run_s = Seconds(t0, Clock::now());
    model.set_timings(nullptr);
    if (repeat == 0 || run_s < prefill_s) {
      prefill_s = run_s, prefill_timings = run_timings;
      traffic0 = run_traffic0, traffic1 = TpTrafficNow(model);
    }
    if (settings.prefill_repeats > 1) {
      const Peaks now{.read_bandwidth = 0,
                      .fp32 = MeasureFmaPeak(model.pool(), *loaded->kernels),
                      .bf16 = MeasureBf16DotPeak(model.pool())};
      if (between_runs) {
        KeepHigherComputePeaks(now, *between_runs);
      } else {
        between_runs = now;
      }
    }
  }
  const dist::TpTraffic decode_traffic0 = TpTrafficNow(model);

  const size_t decode_bytes =
      DenseBytesPerToken(model) + size_t(MoeLayers(c) * c.num_experts_per_tok) * ExpertBytes(model);

  ForwardTimings timings;
  model.set_timings(&timings);
  const auto t1 = Clock::now();
  for (int i = 0; i < decode_tokens; ++i) {
    const TokenId next = ArgMax(runner.last_logits());
    if (Status s = runner.Append(std::span(&next, 1)); !s.ok()) return Fail("bench", s.message());
  }
  const double decode_s = Seconds(t1, Clock::now());
  model.set_timings(nullptr);
  const dist::TpTraffic traffic2 = TpTrafficNow(model);
  const double decode_tps = decode_tokens / decode_s;
  const double achieved = double(decode_bytes) * decode_tps;
  Peaks peaks = MeasurePeaks(model, *loaded->kernels, settings.bandwidth_mb);
  if (between_runs) KeepHigherComputePeaks(*between_runs, peaks);
  const double machine = peaks.read_bandwidth;
  // Step i reads the rows of positions [0, prompt_len + i + 1).
  const double mean_context = prompt_len + (decode_tokens + 1) / 2.0;

  std::printf("model: %s (%s), %.3f GB of weights\n", model_flags.model_path.c_str(),
              c.model_type.c_str(), double(model.weight_bytes()) / 1e9);
  std::printf("kernels: %s, threads: %d\n", loaded->kernels->name, model.pool().num_threads());
  std::printf("prefill: %d tokens in %.3f s = %.1f tokens/s%s\n", prompt_len, prefill_s, prompt_len / prefill_s,
              settings.prefill_repeats > 1 ? (" (the fastest of " + std::to_string(settings.prefill_repeats) + " runs)").c_str()
                                           : "");
  std::printf("decode: %d tokens in %.3f s = %.2f tokens/s (%.1f ms/token)\n", decode_tokens,
              decode_s, decode_tps, 1000.0 * decode_s / decode_tokens);
  if (model.tp_size() > 1) {
    PrintTpNoRooflines(model);
  } else {
    std::printf("weights read per decode step: %.1f MB\n", double(decode_bytes) / 1e6);
    std::printf("decode bandwidth: %.2f GB/s achieved, machine read bandwidth %.2f GB/s (%.0f%%)\n",
                achieved / 1e9, machine / 1e9, 100.0 * achieved / machine);
    std::printf("KV cache read per decode step: %.1f MB at the mean context of %.0f tokens (%s; not in the weights "
                "figure above)\n",
                double(KvBytesPerPosition(*loaded)) * mean_context / 1e6, mean_context,
                KvFormatName(loaded->kv_cache.kv_format));
    PrintAttentionShare(timings, decode_s);
    PrintAttentionBound(timings, decode_tokens, 1, mean_context, *loaded, peaks);
    PrintDecodePhases(timings, decode_tokens, decode_s / decode_tokens,
                      double(KvBytesPerPosition(*loaded)) * mean_context, DecodeWeightBytes(model), machine);
    PrintComputePeaks(peaks, *loaded->kernels);
    const ComputePeak prefill_peak = PeakFor(peaks, *loaded->kernels, c, std::min(prompt_len, model.max_batch_tokens()));
    PrintPrefillCompute(PrefillFlops(model, prompt_len), prefill_s, prefill_peak);
    PrintPrefillPhases(prefill_timings, model, prompt_len, prefill_s, prefill_peak);
  }
  PrintTpTraffic(model, "prefill", traffic0, traffic1, prefill_s, int(prefill_timings.forward_calls));
  PrintTpTraffic(model, "decode", decode_traffic0, traffic2, decode_s, decode_tokens);
  if (settings.matmul_sweep) PrintMatmulSweep(model, *loaded->kernels);
  return 0;
}

// --batch N: N sequences of --prompt-len tokens prefilled together (packed into forward calls of
// up to --max-batch-tokens), then --decode-tokens steps, each one Forward of one token for every
// sequence, as the engine's decode batches are; figures against the per-step roofline bound.
int BenchBatch(const ModelFlags& model_flags, const BenchSettings& settings) {
  const int n_seqs = settings.batch, prompt_len = settings.prompt_len, decode_tokens = settings.decode_tokens;
  auto loaded = LoadModel(model_flags, /*need_tokenizer=*/false);
  if (!loaded.ok()) return Fail("bench", loaded.error());
  Model& model = *loaded->model;
  const ModelConfig& c = model.config();
  const int seq_tokens = prompt_len + decode_tokens;
  if (seq_tokens + 1 > model.max_context()) {
    return Fail("bench", "--prompt-len + --decode-tokens exceeds the context length", 2);
  }
  if (n_seqs > model.max_batch_tokens()) {
    return Fail("bench", "--batch " + std::to_string(n_seqs) + " exceeds --max-batch-tokens " +
                             std::to_string(model.max_batch_tokens()) + ": a decode step forwards one token per sequence",
                2);
  }

  // The KV cache: every sequence's pages, reserved up front.
  const int page_size = loaded->kv_cache.page_size;
  const int64_t pages_per_seq = (seq_tokens + page_size - 1) / page_size;
  auto storage = HostKvStorage::Create(KvStorageShape{.format = loaded->kv_cache.kv_format,
                                                      .num_layers = c.num_hidden_layers,
                                                      .latent_dim = c.kv_lora_rank,
                                                      .rope_dim = c.qk_rope_head_dim,
                                                      .page_size = page_size,
                                                      .num_pages = pages_per_seq * n_seqs});
  if (!storage.ok()) return Fail("bench", storage.error());
  if (!loaded->kv_cache.kv_tensor_scales.empty()) {
    if (Status s = (*storage)->SetTensorScales(loaded->kv_cache.kv_tensor_scales); !s.ok()) {
      return Fail("bench", s.message());
    }
  }
  auto allocator = PageAllocator::Create(page_size, pages_per_seq * n_seqs);
  if (!allocator.ok()) return Fail("bench", allocator.error());
  std::vector<std::unique_ptr<SequenceKv>> seqs;
  std::vector<std::vector<TokenId>> prompts;
  for (int s = 0; s < n_seqs; ++s) {
    seqs.push_back(std::make_unique<SequenceKv>(**allocator, seq_tokens));
    if (Status st = seqs.back()->Reserve(seq_tokens); !st.ok()) return Fail("bench", st.message());
    prompts.push_back(BenchPrompt(prompt_len, c.vocab_size, uint64_t(s)));
  }
  std::vector<float> logits(size_t(n_seqs) * size_t(c.vocab_size));  // [n_seqs, vocab]: a row per segment
  std::vector<TokenId> tokens;                                         // [max_batch_tokens]
  std::vector<ForwardSegment> segments;                                // [n_seqs]
  std::vector<int> segment_seq;                                        // [n_seqs] the sequence of each
  std::vector<TokenId> next(static_cast<size_t>(n_seqs));              // each sequence's next input
  tokens.reserve(size_t(model.max_batch_tokens()));
  segments.reserve(size_t(n_seqs));
  segment_seq.reserve(size_t(n_seqs));
  // One Forward of `segments`; then each segment's rows count as computed.
  auto forward = [&]() -> Status {
    MLA_RETURN_IF_ERROR(model.Forward(*loaded->kernels, **storage, tokens, segments, LogitsMode::kLastPerSegment,
                                      logits.data()));
    for (size_t j = 0; j < segments.size(); ++j) seqs[size_t(segment_seq[j])]->MarkComputed(segments[j].num_tokens);
    return Status::Ok();
  };

  // Warm-up: touch every weight page once (rows written here are overwritten by the prefill).
  const int warm = std::min(prompt_len, 8);
  tokens.assign(prompts[0].begin(), prompts[0].begin() + warm);
  const ForwardSegment warm_segment{.pages = seqs[0]->pages(), .num_computed_tokens = 0, .num_tokens = warm};
  if (Status s = model.Forward(*loaded->kernels, **storage, tokens, std::span(&warm_segment, 1),
                               LogitsMode::kLastPerSegment, logits.data());
      !s.ok()) {
    return Fail("bench", s.message());
  }

  // Prefill: the prompts back to back, cut into forward calls of up to max_batch_tokens.
  const dist::TpTraffic traffic0 = TpTrafficNow(model);
  int prefill_calls = 0;
  const auto t0 = Clock::now();
  for (int s = 0; s < n_seqs;) {
    tokens.clear();
    segments.clear();
    segment_seq.clear();
    while (s < n_seqs && int(tokens.size()) < model.max_batch_tokens()) {
      const int done = seqs[size_t(s)]->num_tokens();  // a prompt cut by the budget goes on in the next call
      const int take = std::min(prompt_len - done, model.max_batch_tokens() - int(tokens.size()));
      segments.push_back({.pages = seqs[size_t(s)]->pages(), .num_computed_tokens = done, .num_tokens = take});
      segment_seq.push_back(s);
      tokens.insert(tokens.end(), prompts[size_t(s)].begin() + done, prompts[size_t(s)].begin() + done + take);
      if (done + take == prompt_len) ++s;
    }
    ++prefill_calls;
    if (Status st = forward(); !st.ok()) return Fail("bench", st.message());
    for (size_t j = 0; j < segments.size(); ++j) {
      if (seqs[size_t(segment_seq[j])]->num_tokens() == prompt_len) {
        next[size_t(segment_seq[j])] = ArgMax(std::span(logits).subspan(j * size_t(c.vocab_size), size_t(c.vocab_size)));
      }
    }
  }
  const double prefill_s = Seconds(t0, Clock::now());
  const dist::TpTraffic traffic1 = TpTrafficNow(model);

  // Decode: every step one token for each sequence.
  ForwardTimings timings;
  model.set_timings(&timings);
  const auto t1 = Clock::now();
  for (int step = 0; step < decode_tokens; ++step) {
    tokens.assign(next.begin(), next.end());
    segments.clear();
    segment_seq.clear();
    for (int s = 0; s < n_seqs; ++s) {
      segments.push_back({.pages = seqs[size_t(s)]->pages(), .num_computed_tokens = seqs[size_t(s)]->num_tokens(),
                          .num_tokens = 1});
      segment_seq.push_back(s);
    }
    if (Status st = forward(); !st.ok()) return Fail("bench", st.message());
    for (int s = 0; s < n_seqs; ++s) {
      next[size_t(s)] = ArgMax(std::span(logits).subspan(size_t(s) * size_t(c.vocab_size), size_t(c.vocab_size)));
    }
  }
  const double decode_s = Seconds(t1, Clock::now());
  model.set_timings(nullptr);
  const dist::TpTraffic traffic2 = TpTrafficNow(model);
  const Peaks peaks = MeasurePeaks(model, *loaded->kernels, settings.bandwidth_mb);

  // The per-step roofline bound, at the mean context (step i reads positions [0, prompt_len + i + 1)).
  const double mean_context = prompt_len + (decode_tokens + 1) / 2.0;
  // The routed experts the steps really ran (the router's choices, counted by the model), and what
  // uniform routing would have touched, for comparison.
  const double experts_uniform = ExpectedDistinctExperts(c.n_routed_experts, c.num_experts_per_tok, n_seqs);
  const double experts_touched = timings.moe_blocks > 0 ? double(timings.routed_experts_run) / double(timings.moe_blocks)
                                                        : experts_uniform;
  const double dense_bytes = double(DenseBytesPerToken(model)) + double(n_seqs - 1) * double(model.weights().embed.row_bytes());
  const double expert_bytes = double(MoeLayers(c)) * experts_touched * double(ExpertBytes(model));
  const double kv_bytes = double(n_seqs) * mean_context * double(KvBytesPerPosition(*loaded));
  const double step_bytes = dense_bytes + expert_bytes + kv_bytes;
  const double step_flops = n_seqs * (WeightFlopsPerToken(model) + 2.0 * double(Params(model.weights().lm_head)) +
                                      AttentionFlopsPerPosition(c) * mean_context);
  const double memory_s = step_bytes / peaks.read_bandwidth;
  const ComputePeak step_peak = PeakFor(peaks, *loaded->kernels, c, n_seqs);
  const double compute_s = step_flops / step_peak.flops;
  const double bound_s = std::max(memory_s, compute_s);
  const double step_s = decode_s / decode_tokens;

  std::printf("model: %s (%s), %.3f GB of weights\n", model_flags.model_path.c_str(), c.model_type.c_str(),
              double(model.weight_bytes()) / 1e9);
  std::printf("kernels: %s, threads: %d\n", loaded->kernels->name, model.pool().num_threads());
  std::printf("batch: %d sequences, %d-token prompts, %d decode steps\n", n_seqs, prompt_len, decode_tokens);
  std::printf("prefill: %d tokens (%d x %d) in %.3f s = %.1f tokens/s\n", n_seqs * prompt_len, n_seqs, prompt_len,
              prefill_s, n_seqs * prompt_len / prefill_s);
  std::printf("decode: %d steps x %d sequences in %.3f s = %.2f tokens/s aggregate (%.1f ms/step)\n", decode_tokens,
              n_seqs, decode_s, n_seqs * decode_tokens / decode_s, 1000.0 * step_s);
  if (model.tp_size() > 1) {
    PrintTpNoRooflines(model);
  } else {
    std::printf("bytes per decode step: %.1f MB = %.1f MB dense weights and lm_head + %.1f MB routed experts + %.1f MB "
                "KV cache (%s, mean context %.0f)\n",
                step_bytes / 1e6, dense_bytes / 1e6, expert_bytes / 1e6, kv_bytes / 1e6,
                KvFormatName(loaded->kv_cache.kv_format), mean_context);
    if (c.n_routed_experts > 0) {
      std::printf("routed experts per MoE layer and step: %.1f of %d, counted from the router's choices (%d x top-%d "
                  "uniform draws would touch %.1f, E (1 - (1 - k/E)^N))\n",
                  experts_touched, c.n_routed_experts, n_seqs, c.num_experts_per_tok, experts_uniform);
    }
    std::printf("FLOPs per decode step: %.2f GFLOP (weights, lm_head and attention at the mean context)\n",
                step_flops / 1e9);
    std::printf("per-step bound: max(%.1f ms reading at %.2f GB/s, %.1f ms computing at %.1f GFLOP/s, the %s peak) = "
                "%.1f ms (%s-bound, %.1f tokens/s)\n",
                1000.0 * memory_s, peaks.read_bandwidth / 1e9, 1000.0 * compute_s, step_peak.flops / 1e9, step_peak.name,
                1000.0 * bound_s, memory_s >= compute_s ? "memory" : "compute", n_seqs / bound_s);
    // Three significant digits: a tiny model's bound is a fraction of a percent of its step, not 0.
    std::printf("batched decode: %.1f ms/step achieved, %.3g%% of the per-step bound\n", 1000.0 * step_s,
                100.0 * bound_s / step_s);
    PrintAttentionShare(timings, decode_s);
    PrintAttentionBound(timings, decode_tokens, n_seqs, mean_context, *loaded, peaks);
    PrintComputePeaks(peaks, *loaded->kernels);
    // (Approximate: each prompt counted as chunked from its start; the batch's prefill packs
    // prompts back to back into forward calls, so a prompt's chunks can fall elsewhere.)
    PrintPrefillCompute(n_seqs * PrefillFlops(model, prompt_len), prefill_s,
                        PeakFor(peaks, *loaded->kernels, c, std::min(n_seqs * prompt_len, model.max_batch_tokens())));
  }
  PrintTpTraffic(model, "prefill", traffic0, traffic1, prefill_s, prefill_calls);
  PrintTpTraffic(model, "decode", traffic1, traffic2, decode_s, decode_tokens);
  if (settings.matmul_sweep) PrintMatmulSweep(model, *loaded->kernels);
  return 0;
}

// Several checkpoints of one shape, loaded together and run in turns (each prefill, then each
// decode step, model after model), so that whatever else the machine is doing slows them alike.
int BenchInterleaved(const ModelFlags& model_flags, const std::vector<std::string>& paths,
                     const BenchSettings& settings) {
  struct Entry {
    LoadedModel loaded;
    std::unique_ptr<SequenceRunner> runner;
    double prefill_s = 0.0;
    double decode_s = 0.0;
    size_t decode_bytes = 0;
    ForwardTimings decode_timings;  // its decode steps' phases
    DecodeBytes weight_bytes;       // what its phases read
    std::vector<double> step_products_s;  // [decode steps] each step's weight products
    std::string label;              // the table's name for it: the checkpoint's file or folder name
  };
  std::vector<Entry> entries;
  for (const std::string& path : paths) {
    ModelFlags flags = model_flags;
    flags.model_path = path;
    auto loaded = LoadModel(flags, /*need_tokenizer=*/false);
    if (!loaded.ok()) return Fail("bench", path + ": " + loaded.error());
    // The label: the file or folder name ("dir/" included); the path itself where that is empty or
    // "." / "..", or where an earlier model has the same name (a/m.gguf beside b/m.gguf).
    const std::filesystem::path normal = std::filesystem::path(path).lexically_normal();
    std::string label = (normal.has_filename() ? normal : normal.parent_path()).filename().string();
    if (label.empty() || label == "." || label == ".." ||
        std::any_of(entries.begin(), entries.end(), [&](const Entry& other) { return other.label == label; })) {
      label = path;
    }
    Entry e{.loaded = std::move(loaded).value(), .label = std::move(label)};
    e.weight_bytes = DecodeWeightBytes(*e.loaded.model);
    e.step_products_s.reserve(size_t(settings.decode_tokens));
    const ModelConfig& c = e.loaded.model->config();
    if (!entries.empty() && c.vocab_size != entries[0].loaded.model->config().vocab_size) {
      return Fail("bench", path + ": a different vocabulary from --model-path's", 2);
    }
    if (settings.prompt_len + settings.decode_tokens + 1 > e.loaded.model->max_context()) {
      return Fail("bench", "--prompt-len + --decode-tokens exceeds the context length", 2);
    }
    auto runner = SequenceRunner::Create(*e.loaded.model, *e.loaded.kernels, e.loaded.kv_cache);
    if (!runner.ok()) return Fail("bench", runner.error());
    e.runner = std::move(runner).value();
    e.decode_bytes = DenseBytesPerToken(*e.loaded.model) +
                     size_t(MoeLayers(c) * c.num_experts_per_tok) * ExpertBytes(*e.loaded.model);
    std::printf("model: %s (%s), %.3f GB of weights, kernels %s, threads %d\n", path.c_str(), WeightsName(c),
                double(e.loaded.model->weight_bytes()) / 1e9, e.loaded.kernels->name,
                e.loaded.model->pool().num_threads());
    entries.push_back(std::move(e));
  }
  const std::vector<TokenId> prompt = BenchPrompt(settings.prompt_len, entries[0].loaded.model->config().vocab_size);
  constexpr int kPrefillRounds = 2;
  for (int round = 0; round <= kPrefillRounds; ++round) {  // round 0 warms up
    for (Entry& e : entries) {
      e.runner->Reset();
      const auto t0 = Clock::now();
      if (Status s = e.runner->Append(round == 0 ? std::span(prompt).first(std::min<size_t>(prompt.size(), 8))
                                                 : std::span(prompt));
          !s.ok()) {
        return Fail("bench", s.message());
      }
      if (round > 0) e.prefill_s += Seconds(t0, Clock::now());
    }
  }
  for (int i = 0; i < settings.decode_tokens; ++i) {
    for (Entry& e : entries) {
      const TokenId next = ArgMax(e.runner->last_logits());
      const double products_before_s = DecodeWeightProducts(e.decode_timings, 1, e.weight_bytes).step_s;
      e.loaded.model->set_timings(&e.decode_timings);
      const auto t0 = Clock::now();
      const Status s = e.runner->Append(std::span(&next, 1));
      e.decode_s += Seconds(t0, Clock::now());
      e.loaded.model->set_timings(nullptr);
      if (!s.ok()) return Fail("bench", s.message());
      e.step_products_s.push_back(DecodeWeightProducts(e.decode_timings, 1, e.weight_bytes).step_s - products_before_s);
    }
  }
  Model& model0 = *entries[0].loaded.model;
  const Peaks peaks = MeasurePeaks(model0, *entries[0].loaded.kernels, settings.bandwidth_mb);
  const double machine = peaks.read_bandwidth;
  const FmaPeak& fma = peaks.fp32;
  std::printf("interleaved: %d-token prompt x %d rounds, %d decode steps, model after model; machine read bandwidth "
              "%.2f GB/s\n",
              settings.prompt_len, kPrefillRounds, settings.decode_tokens, machine / 1e9);
  PrintComputePeaks(peaks, *entries[0].loaded.kernels);
  // The label column as wide as the longest label: every row names its checkpoint whole.
  int label_width = 7;  // "weights"
  for (const Entry& e : entries) label_width = std::max(label_width, int(e.label.size()));
  std::printf("%-*s %14s %14s %10s %12s %8s %10s %10s %15s\n", label_width, "weights", "prefill tok/s", "decode tok/s",
              "MB/token", "decode GB/s", "of peak", "decode x", "prefill x", "prefill of peak");
  const double prefill0 = kPrefillRounds * settings.prompt_len / entries[0].prefill_s;
  const double decode0 = settings.decode_tokens / entries[0].decode_s;
  for (const Entry& e : entries) {
    const double prefill = kPrefillRounds * settings.prompt_len / e.prefill_s;
    const double decode = settings.decode_tokens / e.decode_s;
    const double decode_bandwidth = double(e.decode_bytes) * decode;
    const double prefill_flops_per_s =
        PrefillFlops(*e.loaded.model, settings.prompt_len) / settings.prompt_len * prefill;
    std::printf("%-*s %14.1f %14.2f %10.1f %12.2f %7.0f%% %9.2fx %9.2fx %14.0f%%\n", label_width, e.label.c_str(), prefill,
                decode, double(e.decode_bytes) / 1e6, decode_bandwidth / 1e9, 100.0 * decode_bandwidth / machine,
                decode / decode0, prefill / prefill0, 100.0 * prefill_flops_per_s / fma.all_threads_flops);
  }
  // The weight products alone (PrintDecodePhases' last line), each model's over the same steps:
  // what a weight format changes, without the per-step costs every format pays alike. Their share
  // of the one probe ("of peak"), and each model's share over the first's ("share x": its GB/s
  // over the first's, the probe cancels; the steps interleave, so the host's drift does too). Then
  // each model's quickest step ("best ms"), and its rate over the first model's quickest ("best
  // x"): a busy host only ever slows a step, so the quickest is the least disturbed figure. And
  // "median x": step i's rate over the first model's step i (taken moments apart), the median over
  // the steps, which a burst on a few steps does not move.
  std::printf("decode weight products (the decode phase table's \"weight products together\"), the same steps:\n");
  std::printf("%-*s %10s %10s %12s %8s %12s %10s %10s %10s\n", label_width, "weights", "ms/step", "MB/step", "GB/s",
              "of peak", "share x", "best ms", "best x", "median x");
  double share0 = 0.0, best_rate0 = 0.0;
  const std::vector<double>& steps0 = entries[0].step_products_s;
  const double bytes0 = DecodeWeightProducts(entries[0].decode_timings, 1, entries[0].weight_bytes).bytes;
  for (const Entry& e : entries) {
    const auto [step_s, bytes] = DecodeWeightProducts(e.decode_timings, settings.decode_tokens, e.weight_bytes);
    const double share = step_s > 0 ? bytes / step_s / machine : 0.0;
    const double best_s = *std::min_element(e.step_products_s.begin(), e.step_products_s.end());  // >= 1 step
    const double best_rate = best_s > 0 ? bytes / best_s : 0.0;
    if (&e == &entries[0]) share0 = share, best_rate0 = best_rate;
    std::vector<double> step_ratios;
    for (size_t i = 0; i < e.step_products_s.size() && i < steps0.size(); ++i) {
      if (e.step_products_s[i] > 0 && steps0[i] > 0) {
        step_ratios.push_back((bytes / e.step_products_s[i]) / (bytes0 / steps0[i]));
      }
    }
    const double median = Percentile(std::move(step_ratios), 50.0);
    std::printf("%-*s %10.3f %10.1f %12.2f %7.0f%% %11.2fx %10.3f %9.2fx %9.2fx\n", label_width, e.label.c_str(),
                1e3 * step_s, bytes / 1e6, step_s > 0 ? bytes / step_s / 1e9 : 0.0, 100.0 * share,
                share0 > 0 ? share / share0 : 0.0, 1e3 * best_s, best_rate0 > 0 ? best_rate / best_rate0 : 0.0,
                median);
  }
  // Step i reads the rows of positions [0, prompt_len + i + 1).
  const double mean_context = settings.prompt_len + (settings.decode_tokens + 1) / 2.0;
  for (const Entry& e : entries) {
    std::printf("%s, ", e.label.c_str());
    PrintDecodePhases(e.decode_timings, settings.decode_tokens, e.decode_s / settings.decode_tokens,
                      double(KvBytesPerPosition(e.loaded)) * mean_context, e.weight_bytes, machine);
  }
  return 0;
}

}  // namespace

int RunBench(Args& args) {
  ModelFlags model_flags = ReadModelFlags(args);
  const BenchSettings settings{
      .prompt_len = args.Int("prompt-len", 256, "prompt tokens (pseudo-random ids)", {.min = 1}),
      .decode_tokens = args.Int("decode-tokens", 32, "tokens decoded after the prompt", {.min = 1}),
      .bandwidth_mb = args.Int("bandwidth-buffer-mb", 1024, "buffer for the machine's read bandwidth, in MB",
                               {.value_name = "MB", .min = 1}),
      .matmul_sweep = args.Switch("matmul-sweep", "also time the lm_head matmul for batches of 1 to 64 tokens"),
      .batch = args.Int("batch", 1,
                        "sequences decoding together, after an N x --prompt-len prefill; figures against the "
                        "per-step bound max(bytes / bandwidth, FLOPs / FMA peak)",
                        {.value_name = "N", .min = 1}),
      .prefill_repeats = args.Int("prefill-repeats", 1,
                                  "one sequence (--batch 1, no --compare-model-path): prefill the prompt N times "
                                  "from an empty cache and report the fastest run, its phases too",
                                  {.value_name = "N", .min = 1})};
  const std::vector<std::string> compare =
      args.All("compare-model-path", "another checkpoint of the same shape (e.g. `quantize` output) benched in the "
               "same run and tabulated beside --model-path", {.value_name = "DIR"});
  if (settings.matmul_sweep && !compare.empty()) {
    args.Reject("--matmul-sweep times one model's lm_head; it does not combine with --compare-model-path");
  }
  if (settings.batch > 1 && !compare.empty()) {
    args.Reject("--batch above 1 benches one model; it does not combine with --compare-model-path");
  }
  if (settings.prefill_repeats > 1 && (settings.batch > 1 || !compare.empty())) {
    args.Reject("--prefill-repeats times one sequence's prompt; it does not combine with --batch above 1 or "
                "--compare-model-path");
  }
  if (auto exit_code = args.Finish()) return *exit_code;
  if (settings.batch > 1) return BenchBatch(model_flags, settings);
  if (compare.empty()) return BenchModel(model_flags, settings);
  std::vector<std::string> paths{model_flags.model_path};
  paths.insert(paths.end(), compare.begin(), compare.end());
  return BenchInterleaved(model_flags, paths, settings);
}

}  // namespace mlaserve::cli

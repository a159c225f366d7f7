// mlaserve bench: prefill and decode tokens/s of one sequence on any checkpoint (typically one
// from init-random), the weight bytes each decode step reads, the bandwidth that achieves, and
// this machine's read bandwidth measured the same way for comparison; likewise prefill's FLOP/s
// against the kernel table's fp32 FMA peak measured in the same run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/fma_peak.h"
#include "cli/model_setup.h"
#include "cli/read_bandwidth.h"
#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "engine/sequence_runner.h"

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
    for (const WeightMatrix* m : {&a.q_a, &a.q_b, &a.q_proj, &a.kv_a, &a.kv_b, &a.o_proj}) visit(*m);
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

// FLOPs of one prefill of `prompt_len` tokens from an empty cache, counting 2 per multiply-add:
//   2 x (per-token weight elements + top-k routed experts' elements) x prompt_len
//   + 2 x lm_head elements x prompt chunks (logits only for each chunk's last token)
//   + layers x heads x (2 (kv_lora_rank + rope_dim) + 2 kv_lora_rank) x prompt_len (prompt_len + 1) / 2,
// the last term being the absorbed MLA attention: each query scores every cached position with
// the latent and rope parts, and sums the latent values, over the causal prompt (query i attends
// i + 1 positions). kv_b counts once per token: the absorbed form applies W_UK and W_UV per query.
// Softmax, norms, RoPE and routing are not counted.
double PrefillFlops(const Model& model, int prompt_len) {
  const ModelConfig& c = model.config();
  int64_t expert_params = 0;
  if (const MlpWeights* e = FirstExpert(model)) expert_params = Params(e->gate) + Params(e->up) + Params(e->down);
  const double per_token =
      double(DenseParamsPerToken(model)) + double(MoeLayers(c)) * c.num_experts_per_tok * double(expert_params);
  const int chunks = (prompt_len + model.max_batch_tokens() - 1) / model.max_batch_tokens();
  const double attended = double(prompt_len) * (prompt_len + 1) / 2.0;
  const double attention_per_position =
      double(c.num_hidden_layers) * c.num_attention_heads * (2.0 * c.kv_cache_dim() + 2.0 * c.kv_lora_rank);
  return 2.0 * per_token * prompt_len + 2.0 * double(Params(model.weights().lm_head)) * chunks +
         attention_per_position * attended;
}

const char* WeightsName(const ModelConfig& c) {
  switch (c.quant.method) {
    case WeightQuantMethod::kFp8Block: return "fp8-block";
    case WeightQuantMethod::kInt4Pack: return "int4 experts";
    case WeightQuantMethod::kNone: break;
  }
  return c.torch_dtype.empty() ? "dense" : c.torch_dtype.c_str();
}

struct BenchSettings {
  int prompt_len;
  int decode_tokens;
  int bandwidth_mb;
  bool matmul_sweep;
};

// Loads one checkpoint and prints its figures; returns the exit code.
int BenchModel(const ModelFlags& model_flags, const BenchSettings& settings) {
  const int prompt_len = settings.prompt_len, decode_tokens = settings.decode_tokens;
  const int bandwidth_mb = settings.bandwidth_mb;
  const bool matmul_sweep = settings.matmul_sweep;
  auto loaded = LoadModel(model_flags, /*need_tokenizer=*/false);
  if (!loaded.ok()) return Fail("bench", loaded.error());
  Model& model = *loaded->model;
  const ModelConfig& c = model.config();
  if (prompt_len + decode_tokens + 1 > model.max_context()) {
    return Fail("bench", "--prompt-len + --decode-tokens exceeds the context length", 2);
  }

  // Deterministic pseudo-random prompt.
  std::vector<TokenId> prompt(static_cast<size_t>(prompt_len));
  for (int i = 0; i < prompt_len; ++i) {
    prompt[size_t(i)] = TokenId(CounterUniform(7, uint64_t(i)) * c.vocab_size);
  }
  auto created = SequenceRunner::Create(model, *loaded->kernels, loaded->kv_cache);
  if (!created.ok()) return Fail("bench", created.error());
  SequenceRunner& runner = **created;
  // Warm-up: touch every weight page once so the first timed step does not page-fault.
  if (Status s = runner.Append(std::span(prompt).first(std::min(prompt_len, 8))); !s.ok()) {
    return Fail("bench", s.message());
  }
  runner.Reset();

  const auto t0 = Clock::now();
  if (Status s = runner.Append(prompt); !s.ok()) return Fail("bench", s.message());
  const double prefill_s = Seconds(t0, Clock::now());

  const size_t decode_bytes =
      DenseBytesPerToken(model) + size_t(MoeLayers(c) * c.num_experts_per_tok) * ExpertBytes(model);

  const auto t1 = Clock::now();
  for (int i = 0; i < decode_tokens; ++i) {
    const TokenId next = ArgMax(runner.last_logits());
    if (Status s = runner.Append(std::span(&next, 1)); !s.ok()) return Fail("bench", s.message());
  }
  const double decode_s = Seconds(t1, Clock::now());
  const double decode_tps = decode_tokens / decode_s;
  const double achieved = double(decode_bytes) * decode_tps;
  const double machine = MeasureReadBandwidth(model.pool(), size_t(bandwidth_mb) << 20, 5);
  const FmaPeak fma = MeasureFmaPeak(model.pool(), *loaded->kernels);
  const double prefill_flops = PrefillFlops(model, prompt_len);
  const double prefill_flops_per_s = prefill_flops / prefill_s;

  std::printf("model: %s (%s), %.3f GB of weights\n", model_flags.model_path.c_str(),
              c.model_type.c_str(), double(model.weight_bytes()) / 1e9);
  std::printf("kernels: %s, threads: %d\n", loaded->kernels->name, model.pool().num_threads());
  std::printf("prefill: %d tokens in %.3f s = %.1f tokens/s\n", prompt_len, prefill_s,
              prompt_len / prefill_s);
  std::printf("decode: %d tokens in %.3f s = %.2f tokens/s (%.1f ms/token)\n", decode_tokens,
              decode_s, decode_tps, 1000.0 * decode_s / decode_tokens);
  std::printf("weights read per decode step: %.1f MB\n", double(decode_bytes) / 1e6);
  std::printf("decode bandwidth: %.2f GB/s achieved, machine read bandwidth %.2f GB/s (%.0f%%)\n",
              achieved / 1e9, machine / 1e9, 100.0 * achieved / machine);
  std::printf("fp32 FMA peak (%s): %.1f GFLOP/s all threads, %.1f GFLOP/s one thread\n", loaded->kernels->name,
              fma.all_threads_flops / 1e9, fma.one_thread_flops / 1e9);
  std::printf("prefill compute: %.1f GFLOP/s achieved (%.1f GFLOP in the prompt), %.0f%% of the FMA peak\n",
              prefill_flops_per_s / 1e9, prefill_flops / 1e9, 100.0 * prefill_flops_per_s / fma.all_threads_flops);
  if (matmul_sweep) {
    // The matmul kernel alone on the lm_head matrix, for batches of n tokens: where decode turns
    // from bandwidth-bound to compute-bound.
    const WeightMatrix& w = model.weights().lm_head;
    const ComputeContext ctx{loaded->kernels, &model.pool()};
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
  };
  std::vector<Entry> entries;
  for (const std::string& path : paths) {
    ModelFlags flags = model_flags;
    flags.model_path = path;
    auto loaded = LoadModel(flags, /*need_tokenizer=*/false);
    if (!loaded.ok()) return Fail("bench", path + ": " + loaded.error());
    Entry e{.loaded = std::move(loaded).value()};
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
  const int vocab = entries[0].loaded.model->config().vocab_size;
  std::vector<TokenId> prompt(static_cast<size_t>(settings.prompt_len));
  for (int i = 0; i < settings.prompt_len; ++i) prompt[size_t(i)] = TokenId(CounterUniform(7, uint64_t(i)) * vocab);
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
      const auto t0 = Clock::now();
      if (Status s = e.runner->Append(std::span(&next, 1)); !s.ok()) return Fail("bench", s.message());
      e.decode_s += Seconds(t0, Clock::now());
    }
  }
  Model& model0 = *entries[0].loaded.model;
  const double machine = MeasureReadBandwidth(model0.pool(), size_t(settings.bandwidth_mb) << 20, 5);
  const FmaPeak fma = MeasureFmaPeak(model0.pool(), *entries[0].loaded.kernels);
  std::printf("interleaved: %d-token prompt x %d rounds, %d decode steps, model after model; machine read bandwidth "
              "%.2f GB/s\n",
              settings.prompt_len, kPrefillRounds, settings.decode_tokens, machine / 1e9);
  std::printf("fp32 FMA peak (%s): %.1f GFLOP/s all threads\n", entries[0].loaded.kernels->name,
              fma.all_threads_flops / 1e9);
  std::printf("%-14s %14s %14s %10s %12s %8s %10s %10s %15s\n", "weights", "prefill tok/s", "decode tok/s", "MB/token",
              "decode GB/s", "of peak", "decode x", "prefill x", "prefill of peak");
  const double prefill0 = kPrefillRounds * settings.prompt_len / entries[0].prefill_s;
  const double decode0 = settings.decode_tokens / entries[0].decode_s;
  for (const Entry& e : entries) {
    const double prefill = kPrefillRounds * settings.prompt_len / e.prefill_s;
    const double decode = settings.decode_tokens / e.decode_s;
    const double decode_bandwidth = double(e.decode_bytes) * decode;
    const double prefill_flops_per_s =
        PrefillFlops(*e.loaded.model, settings.prompt_len) / settings.prompt_len * prefill;
    std::printf("%-14s %14.1f %14.2f %10.1f %12.2f %7.0f%% %9.2fx %9.2fx %14.0f%%\n", WeightsName(e.loaded.model->config()),
                prefill, decode, double(e.decode_bytes) / 1e6, decode_bandwidth / 1e9, 100.0 * decode_bandwidth / machine,
                decode / decode0, prefill / prefill0, 100.0 * prefill_flops_per_s / fma.all_threads_flops);
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
      .matmul_sweep = args.Switch("matmul-sweep", "also time the lm_head matmul for batches of 1 to 64 tokens")};
  const std::vector<std::string> compare =
      args.All("compare-model-path", "another checkpoint of the same shape (e.g. `quantize` output) benched in the "
               "same run and tabulated beside --model-path", {.value_name = "DIR"});
  if (settings.matmul_sweep && !compare.empty()) {
    args.Reject("--matmul-sweep times one model's lm_head; it does not combine with --compare-model-path");
  }
  if (auto exit_code = args.Finish()) return *exit_code;
  if (compare.empty()) return BenchModel(model_flags, settings);
  std::vector<std::string> paths{model_flags.model_path};
  paths.insert(paths.end(), compare.begin(), compare.end());
  return BenchInterleaved(model_flags, paths, settings);
}

}  // namespace mlaserve::cli

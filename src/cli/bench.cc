// mlaserve bench: prefill and decode tokens/s of one sequence on any checkpoint (typically one
// from init-random), the weight bytes each decode step reads, the bandwidth that achieves, and
// this machine's read bandwidth measured the same way for comparison.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"
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

// Weight bytes one decode step reads: everything but the embedding table and the experts the
// router did not pick, which are counted per step from the actual routing.
size_t DenseBytesPerToken(const Model& model) {
  const ModelWeights& w = model.weights();
  size_t bytes = w.lm_head.stored_bytes() + w.embed.row_bytes();
  for (const LayerWeights& l : w.layers) {
    const AttentionWeights& a = l.attn;
    bytes += a.q_a.stored_bytes() + a.q_b.stored_bytes() + a.q_proj.stored_bytes() +
             a.kv_a.stored_bytes() + a.kv_b.stored_bytes() + a.o_proj.stored_bytes();
    if (l.is_moe) {
      bytes += l.moe.router.stored_bytes();
      if (l.moe.has_shared) {
        bytes += l.moe.shared.gate.stored_bytes() + l.moe.shared.up.stored_bytes() +
                 l.moe.shared.down.stored_bytes();
      }
    } else {
      bytes += l.mlp.gate.stored_bytes() + l.mlp.up.stored_bytes() + l.mlp.down.stored_bytes();
    }
  }
  return bytes;
}

size_t ExpertBytes(const Model& model) {
  for (const LayerWeights& l : model.weights().layers) {
    if (l.is_moe && !l.moe.experts.empty()) {
      const MlpWeights& e = l.moe.experts[0];
      return e.gate.stored_bytes() + e.up.stored_bytes() + e.down.stored_bytes();
    }
  }
  return 0;
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

  const size_t dense_bytes = DenseBytesPerToken(model);
  const size_t expert_bytes = ExpertBytes(model);
  int moe_layers = 0;
  for (int l = 0; l < c.num_hidden_layers; ++l) moe_layers += c.IsMoeLayer(l) ? 1 : 0;
  const size_t decode_bytes = dense_bytes + size_t(moe_layers * c.num_experts_per_tok) * expert_bytes;

  const auto t1 = Clock::now();
  for (int i = 0; i < decode_tokens; ++i) {
    const TokenId next = ArgMax(runner.last_logits());
    if (Status s = runner.Append(std::span(&next, 1)); !s.ok()) return Fail("bench", s.message());
  }
  const double decode_s = Seconds(t1, Clock::now());
  const double decode_tps = decode_tokens / decode_s;
  const double achieved = double(decode_bytes) * decode_tps;
  const double machine = MeasureReadBandwidth(model.pool(), size_t(bandwidth_mb) << 20, 5);

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
    int moe_layers = 0;
    for (int l = 0; l < c.num_hidden_layers; ++l) moe_layers += c.IsMoeLayer(l) ? 1 : 0;
    e.decode_bytes = DenseBytesPerToken(*e.loaded.model) +
                     size_t(moe_layers * c.num_experts_per_tok) * ExpertBytes(*e.loaded.model);
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
  const double machine = MeasureReadBandwidth(entries[0].loaded.model->pool(), size_t(settings.bandwidth_mb) << 20, 5);
  std::printf("interleaved: %d-token prompt x %d rounds, %d decode steps, model after model; machine read bandwidth "
              "%.2f GB/s\n",
              settings.prompt_len, kPrefillRounds, settings.decode_tokens, machine / 1e9);
  std::printf("%-14s %14s %14s %10s %12s %8s %10s %10s\n", "weights", "prefill tok/s", "decode tok/s", "MB/token",
              "decode GB/s", "of peak", "decode x", "prefill x");
  const double prefill0 = kPrefillRounds * settings.prompt_len / entries[0].prefill_s;
  const double decode0 = settings.decode_tokens / entries[0].decode_s;
  for (const Entry& e : entries) {
    const double prefill = kPrefillRounds * settings.prompt_len / e.prefill_s;
    const double decode = settings.decode_tokens / e.decode_s;
    const double decode_bandwidth = double(e.decode_bytes) * decode;
    std::printf("%-14s %14.1f %14.2f %10.1f %12.2f %7.0f%% %9.2fx %9.2fx\n", WeightsName(e.loaded.model->config()),
                prefill, decode, double(e.decode_bytes) / 1e6, decode_bandwidth / 1e9, 100.0 * decode_bandwidth / machine,
                decode / decode0, prefill / prefill0);
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

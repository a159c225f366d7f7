// Shared by the commands that run a model: the model flags, and loading model + tokenizer.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "cli/args.h"
#include "kernels/kernels.h"
#include "engine/sequence_runner.h"
#include "kvcache/kv_budget.h"
#include "kvcache/kv_storage.h"
#include "kvcache/page_allocator.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve::cli {

struct ModelFlags {
  std::string model_path;
  std::string tokenizer_path;  // --tokenizer-path; empty: model_path's
  bool trust_remote_code = false;  // accepted for SGLang command lines; nothing to trust here
  std::string kernels = "auto";
  std::string kv_cache_dtype = "auto";
  std::string kv_scales;  // calibration file from kv-calibrate; empty: 1.0
  int page_size = 16;
  double device_memory_gb = 0;  // 0: physical memory
  double mem_fraction_static = 0.88;
  int64_t max_total_tokens = 0;
  int tp_size = 1;  // --tp-size: ranks of the mpirun job (docs/distributed.md)
  std::optional<int> max_batch_tokens;  // as given; options.max_batch_tokens holds the one used
  // A separate draft model's share of the memory budget (EAGLE3, ReadEngineFlags): its
  // checkpoint's bytes, and its cache's bytes per KV-pool token.
  size_t draft_weight_bytes = 0;
  size_t draft_kv_bytes_per_token = 0;
  ModelOptions options;
};

// Where the tokenizer and the chat template are read: --tokenizer-path, else --model-path.
inline const std::string& TokenizerPath(const ModelFlags& f) {
  return f.tokenizer_path.empty() ? f.model_path : f.tokenizer_path;
}

// How a command sizes the model's forward calls: the sequence commands chunk prompts to
// --max-batch-tokens (512 by default); the engine commands size them for one engine step
// (ReadEngineFlags).
enum class ForwardSize { kFixed, kEngineStep };

// Reads --model-path, --tokenizer-path, --trust-remote-code, --threads, --kernels, --enable-deterministic-inference, --context-length,
// --max-batch-tokens, --kv-cache-dtype, --kv-scales, --page-size, --device-memory,
// --mem-fraction-static, --max-total-tokens, and --log-level, which it applies to the process's
// logger (core/log.h) at once. Bad values are reported through args.Finish().
ModelFlags ReadModelFlags(Args& args, ForwardSize forward_size = ForwardSize::kFixed);

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::optional<Tokenizer> tokenizer;
  const KernelSet* kernels = nullptr;
  std::string kernel_choice;       // how `kernels` was chosen (KernelChoice::Describe), for start-up logs
  SequenceRunnerOptions kv_cache;  // the KV cache asked for: format, scales, page size, pool tokens
  std::string kv_scales_source;    // "file PATH", "checkpoint", or "1.0 (none)"
  KvBudget kv_budget;              // what the memory budget holds (SGLang's arithmetic)
  // SGLang's "Load weight end. elapsed=.. s, type=.., dtype=.., avail mem=.. GB, mem usage=.. GB."
  // (mem usage: MemAvailable's drop over the load; the file's page cache still counts as
  // available), for the server's start-up log: commands whose errors are one line do not print it.
  std::string load_line;
};

// Logs that --trust-remote-code has no effect when it was given.
// Tensor parallelism (--tp-size N, every rank of `mpirun -np N` runs the same command line):
// every rank loads its shard and the ranks agree on the KV pool (the smallest budget); rank 0
// returns and runs the command, while ranks 1.. serve its forward calls (Model::RunTpWorker)
// here and then end the process: LoadModel does not return on them.
Result<LoadedModel> LoadModel(const ModelFlags& flags, bool need_tokenizer);

// The engine's KV cache for a loaded model, sized to the whole budget (max_total_num_tokens):
// the page ids (for the Engine's scheduler) and their bytes in the model's KV format and scales
// (for the CpuModelRunner). Both have the same page_size and num_pages.
struct EngineKv {
  std::unique_ptr<PageAllocator> allocator;
  std::unique_ptr<HostKvStorage> storage;
};
Result<EngineKv> CreateEngineKv(const LoadedModel& loaded, int page_size);

}  // namespace mlaserve::cli

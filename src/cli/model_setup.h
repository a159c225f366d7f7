// Shared by the commands that run a model: the model flags, and loading model + tokenizer.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "cli/args.h"
#include "kernels/kernels.h"
#include "engine/sequence_runner.h"
#include "kvcache/kv_budget.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve::cli {

struct ModelFlags {
  std::string model_path;
  std::string kernels = "auto";
  std::string kv_cache_dtype = "auto";
  std::string kv_scales;  // calibration file from kv-calibrate; empty: 1.0
  int page_size = 16;
  double device_memory_gb = 0;  // 0: physical memory
  double mem_fraction_static = 0.88;
  int64_t max_total_tokens = 0;
  ModelOptions options;
};

// Reads --model-path, --threads, --kernels, --context-length, --max-batch-tokens,
// --kv-cache-dtype, --kv-scales, --page-size, --device-memory, --mem-fraction-static,
// --max-total-tokens.
ModelFlags ReadModelFlags(Args& args);

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::optional<Tokenizer> tokenizer;
  const KernelSet* kernels = nullptr;
  SequenceRunnerOptions runner_options;  // the KV format, scales and page size asked for
  std::string kv_scales_source;          // "file PATH", "checkpoint", or "1.0 (none)"
  KvBudget kv_budget;                    // what the memory budget holds (SGLang's arithmetic)
};

Result<LoadedModel> LoadModel(const ModelFlags& flags, bool need_tokenizer);

// The engine's KV pool for a loaded model: its format, scales and page size, sized to the
// whole budget (max_total_num_tokens).
Result<std::unique_ptr<KvPool>> CreateEnginePool(const LoadedModel& loaded, int page_size);

// Prints "mlaserve COMMAND: MESSAGE" to stderr and returns `code`.
int Fail(const char* command, const std::string& message, int code = 1);

}  // namespace mlaserve::cli

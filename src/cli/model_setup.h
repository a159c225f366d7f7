// Shared by the commands that run a model: the model flags, and loading model + tokenizer.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "cli/args.h"
#include "kernels/kernels.h"
#include "engine/sequence_runner.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve::cli {

struct ModelFlags {
  std::string model_path;
  std::string kernels = "auto";
  std::string kv_cache_dtype = "auto";
  std::string kv_scales;  // calibration file from kv-calibrate; empty: 1.0
  int page_size = 16;
  ModelOptions options;
};

// Reads --model-path, --threads, --kernels, --context-length, --max-batch-tokens,
// --kv-cache-dtype, --kv-scales, --page-size.
ModelFlags ReadModelFlags(Args& args);

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::optional<Tokenizer> tokenizer;
  const KernelSet* kernels = nullptr;
  SequenceRunnerOptions runner_options;  // the KV format, scales and page size asked for
};

Result<LoadedModel> LoadModel(const ModelFlags& flags, bool need_tokenizer);

// Prints "mlaserve COMMAND: MESSAGE" to stderr and returns `code`.
int Fail(const char* command, const std::string& message, int code = 1);

}  // namespace mlaserve::cli

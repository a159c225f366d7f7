// Shared by the commands that run a model: the model flags, and loading model + tokenizer.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "cli/args.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve::cli {

struct ModelFlags {
  std::string model_path;
  std::string kernels = "auto";
  ModelOptions options;
};

// Reads --model-path, --threads, --kernels, --context-length, --max-batch-tokens.
ModelFlags ReadModelFlags(Args& args);

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::optional<Tokenizer> tokenizer;
  const KernelSet* kernels = nullptr;
};

Result<LoadedModel> LoadModel(const ModelFlags& flags, bool need_tokenizer);

// Prints "mlaserve COMMAND: MESSAGE" to stderr and returns `code`.
int Fail(const char* command, const std::string& message, int code = 1);

}  // namespace mlaserve::cli

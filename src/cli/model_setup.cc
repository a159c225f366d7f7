#include "cli/model_setup.h"

#include <cstdio>

namespace mlaserve::cli {

ModelFlags ReadModelFlags(Args& args) {
  ModelFlags f;
  f.model_path = args.Str("model-path", "");
  f.kernels = args.Str("kernels", "auto");
  f.options.num_threads = args.Int("threads", 0);
  f.options.max_context = args.Int("context-length", 0);
  f.options.max_batch_tokens = args.Int("max-batch-tokens", 512);
  return f;
}

Result<LoadedModel> LoadModel(const ModelFlags& flags, bool need_tokenizer) {
  if (flags.model_path.empty()) return Status::Error("--model-path is required");
  LoadedModel loaded;
  auto kernels = KernelsByName(flags.kernels);
  if (!kernels.ok()) return kernels.status();
  loaded.kernels = *kernels;
  auto model = Model::Load(flags.model_path, flags.options);
  if (!model.ok()) return model.status();
  loaded.model = std::move(model).value();
  if (need_tokenizer) {
    auto tokenizer = Tokenizer::FromDirectory(flags.model_path);
    if (!tokenizer.ok()) return tokenizer.status();
    loaded.tokenizer.emplace(std::move(tokenizer).value());
  }
  return loaded;
}

int Fail(const char* command, const std::string& message, int code) {
  std::fprintf(stderr, "mlaserve %s: %s\n", command, message.c_str());
  return code;
}

}  // namespace mlaserve::cli

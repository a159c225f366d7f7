// A GGUF file (model/gguf.cc, model/gguf_checkpoint.cc, model/gguf_model.cc,
// tokenizer/gguf_tokenizer.cc) from arbitrary bytes: the parser, then, as `--model-path
// file.gguf` does, the config, the checkpoint and the tokenizer files. Every tensor a checkpoint
// that opens hands out must lie inside its mappings: its first and last bytes are read.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "model/config.h"
#include "model/gguf.h"
#include "model/safetensors.h"
#include "tokenizer/gguf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes = mlaserve::fuzz::AsText(data, size);
  auto parsed = mlaserve::ParseGguf(bytes, "fuzz.gguf");
  if (!parsed.ok()) return 0;
  (void)mlaserve::HfTokenizerFromGguf(*parsed, "fuzz.gguf");
  const std::string path = mlaserve::fuzz::WriteScratchFile("model.gguf", bytes);
  (void)mlaserve::LoadModelConfig(path);
  auto checkpoint = mlaserve::Checkpoint::Open(path);
  if (!checkpoint.ok()) return 0;
  unsigned sum = 0;
  for (const auto& [name, view] : (*checkpoint)->tensors()) {
    if (view.num_bytes == 0) continue;
    sum += unsigned(view.data[0]) + unsigned(view.data[view.num_bytes - 1]);
  }
  asm volatile("" : : "r"(sum));
  return 0;
}

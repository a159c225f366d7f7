#include "cli/weight_source.h"

#include <filesystem>

#include "model/safetensors.h"

namespace mlaserve::cli {

WeightSource ReadWeightSource(const std::string& path, const ModelConfig& config) {
  WeightSource out;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    auto ckpt = Checkpoint::Open(path);
    if (ckpt.ok()) {
      out.tensors = StoredTensorsOf(**ckpt);
      out.total_bytes = double((*ckpt)->total_tensor_bytes());
      out.description = "read from the checkpoint";
      out.from_checkpoint = true;
      return out;
    }
  }
  out.tensors = EstimateStoredTensors(config);
  const WeightBytes w = EstimateWeightBytes(config);
  out.total_bytes = w.total_bytes;
  switch (config.quant.method) {
    case WeightQuantMethod::kNone: out.description = "estimated from the config, bf16"; break;
    case WeightQuantMethod::kFp8Block:
      out.description = "estimated from the config: fp8 block-scaled linears (" +
                        std::to_string(w.quantized_tensors) + " matrices), the rest bf16";
      break;
    case WeightQuantMethod::kInt4Pack:
      out.description = "estimated from the config: int4 group-" + std::to_string(config.quant.group_size) + " (" +
                        std::to_string(w.quantized_tensors) + " matrices), the rest bf16";
      break;
  }
  return out;
}

}  // namespace mlaserve::cli

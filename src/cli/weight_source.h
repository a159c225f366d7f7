// Where a command that needs no weights (plan, simulate) takes the weights' tensors from: the
// checkpoint's own when --model-path is a directory that has one or a GGUF file (each tensor's
// bytes in its stored type, counted per type), else the config's tensors in the format its
// quantization_config stores them in (model/weight_bytes.h).
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "model/weight_bytes.h"

namespace mlaserve::cli {

struct WeightSource {
  std::vector<StoredTensor> tensors;
  double total_bytes = 0;  // every stored tensor, loaded or not
  std::string description;
  bool from_checkpoint = false;  // tensors read from the checkpoint (else estimated from the config)
};

WeightSource ReadWeightSource(const std::string& path, const ModelConfig& config);

}  // namespace mlaserve::cli

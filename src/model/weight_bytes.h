// What a checkpoint of a given config holds for the weights mlaserve loads, in the format its
// quantization_config says they are stored in, computed from the config alone (for `plan`, when
// the checkpoint itself is not at hand):
//   - not quantized (embeddings, norms, the router, lm_head, anything a quantization leaves
//     alone): 2 bytes per value (bf16);
//   - fp8 block-scaled (DeepSeek-V3/R1, Kimi-K2): every Linear of the decoder layers, 1 byte per
//     value plus an f32 scale per weight_block_size block;
//   - compressed-tensors int4 (Kimi-K2-Thinking, Kimi-K2.5): every Linear not in `ignore`, half a
//     byte per value plus a bf16 scale per group and the int32 [2] weight_shape.
// MTP / nextn layers are not counted: mlaserve does not load them. The same tensors one by one,
// as stored (StoredTensor), feed the per-rank split of model/tp_weights.h.
#pragma once

#include <cstdint>
#include <regex>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace mlaserve {

struct WeightBytes {
  double total_bytes = 0;
  double quantized_bytes = 0;      // of total: the quantized matrices with their scales
  int64_t quantized_tensors = 0;   // matrices stored quantized
  int64_t dense_tensors = 0;       // everything else
};

WeightBytes EstimateWeightBytes(const ModelConfig& config);

// A Linear layer of a decoder layer (q/kv/o projections, MLP and expert gate/up/down), as the
// quantizers target them, anywhere in the name (a multimodal wrapper puts them under
// language_model.); the router (`mlp.gate`) is not one of them.
bool IsDecoderLinear(const std::string& tensor_name);

// compressed-tensors' `ignore` list, compiled once: names `module` (a tensor name without
// ".weight") by an entry equal to it, or an "re:" entry whose regex matches from its start
// (Python's re.match).
class QuantizationIgnoreList {
 public:
  explicit QuantizationIgnoreList(const std::vector<std::string>& entries);
  bool Ignores(const std::string& module) const;

 private:
  std::vector<std::string> names_;
  std::vector<std::regex> patterns_;
};

// One tensor as a checkpoint stores it. A quantized matrix is several: fp8 `X.weight` +
// `X.weight_scale_inv`; int4 `X.weight_packed` + `X.weight_scale` + `X.weight_shape`.
struct StoredTensor {
  std::string name;
  std::vector<int64_t> shape;
  double bytes = 0;
};

// The stored tensors of `spec` (a tensor BindWeights reads) in the format `quant` names.
std::vector<StoredTensor> StoredForm(const TensorSpec& spec, const WeightQuantConfig& quant,
                                     const QuantizationIgnoreList& ignore);
// Every stored tensor a checkpoint of `config` has for the weights mlaserve loads (what
// EstimateWeightBytes sums).
std::vector<StoredTensor> EstimateStoredTensors(const ModelConfig& config);
// A checkpoint's tensors as they are (including any mlaserve does not load).
std::vector<StoredTensor> StoredTensorsOf(const Checkpoint& checkpoint);

}  // namespace mlaserve

#include "model/weight_bytes.h"

#include <regex>

#include "model/weights.h"

namespace mlaserve {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A Linear layer of a decoder layer (attention and MLP projections, experts included), as the
// quantizers target them; the router (`mlp.gate`) is not one of them.
bool IsDecoderLinear(const std::string& name) {
  return name.find("model.layers.") != std::string::npos &&
         (EndsWith(name, "_proj.weight") || EndsWith(name, "_proj_with_mqa.weight"));
}

}  // namespace

bool IgnoredByQuantization(const std::vector<std::string>& ignore, const std::string& module) {
  for (const std::string& entry : ignore) {
    if (entry.rfind("re:", 0) == 0) {
      const std::regex re(entry.substr(3), std::regex::ECMAScript);
      std::smatch m;
      if (std::regex_search(module, m, re, std::regex_constants::match_continuous)) return true;
    } else if (entry == module) {
      return true;
    }
  }
  return false;
}

WeightBytes EstimateWeightBytes(const ModelConfig& config) {
  WeightBytes out;
  const WeightQuantConfig& q = config.quant;
  for (const TensorSpec& t : ListWeightTensors(config)) {
    double values = 1;
    for (int64_t d : t.shape) values *= double(d);
    const std::string module = t.name.substr(0, t.name.size() - (EndsWith(t.name, ".weight") ? 7 : 0));
    const bool two_d = t.shape.size() == 2;
    double bytes = 2 * values;  // bf16
    bool quantized = false;
    if (two_d && q.method == WeightQuantMethod::kFp8Block && IsDecoderLinear(t.name)) {
      const double block_rows = double((t.shape[0] + q.block_rows - 1) / q.block_rows);
      const double block_cols = double((t.shape[1] + q.block_cols - 1) / q.block_cols);
      bytes = values + 4 * block_rows * block_cols;
      quantized = true;
    } else if (two_d && q.method == WeightQuantMethod::kInt4Pack &&
               (IsDecoderLinear(t.name) || EndsWith(t.name, "lm_head.weight")) &&
               !IgnoredByQuantization(q.ignore, module)) {
      const double groups = double(t.shape[0]) * double((t.shape[1] + q.group_size - 1) / q.group_size);
      bytes = values / 2 + 2 * groups + 8;
      quantized = true;
    }
    out.total_bytes += bytes;
    if (quantized) {
      out.quantized_bytes += bytes;
      ++out.quantized_tensors;
    } else {
      ++out.dense_tensors;
    }
  }
  return out;
}

}  // namespace mlaserve

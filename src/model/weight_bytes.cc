#include "model/weight_bytes.h"

#include <regex>

#include "model/weights.h"

namespace mlaserve {
bool IsDecoderLinear(const std::string& name) {
  return name.find("model.layers.") != std::string::npos &&
         (name.ends_with("_proj.weight") || name.ends_with("_proj_with_mqa.weight"));
}

QuantizationIgnoreList::QuantizationIgnoreList(const std::vector<std::string>& entries) {
  for (const std::string& entry : entries) {
    if (entry.rfind("re:", 0) == 0) patterns_.emplace_back(entry.substr(3), std::regex::ECMAScript);
    else names_.push_back(entry);
  }
}

bool QuantizationIgnoreList::Ignores(const std::string& module) const {
  for (const std::string& name : names_) {
    if (name == module) return true;
  }
  std::smatch m;
  for (const std::regex& re : patterns_) {
    if (std::regex_search(module, m, re, std::regex_constants::match_continuous)) return true;
  }
  return false;
}

WeightBytes EstimateWeightBytes(const ModelConfig& config) {
  WeightBytes out;
  const WeightQuantConfig& q = config.quant;
  const QuantizationIgnoreList ignore(q.ignore);
  for (const TensorSpec& t : ListWeightTensors(config)) {
    double values = 1;
    for (int64_t d : t.shape) values *= double(d);
    const std::string module = t.name.substr(0, t.name.size() - (t.name.ends_with(".weight") ? 7 : 0));
    const bool two_d = t.shape.size() == 2;
    double bytes = 2 * values;  // bf16
    bool quantized = false;
    if (two_d && q.method == WeightQuantMethod::kFp8Block && IsDecoderLinear(t.name)) {
      const double block_rows = double((t.shape[0] + q.block_rows - 1) / q.block_rows);
      const double block_cols = double((t.shape[1] + q.block_cols - 1) / q.block_cols);
      bytes = values + 4 * block_rows * block_cols;
      quantized = true;
    } else if (two_d && q.method == WeightQuantMethod::kInt4Pack &&
               (IsDecoderLinear(t.name) || t.name.ends_with("lm_head.weight")) && !ignore.Ignores(module)) {
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

#include "model/weight_bytes.h"

#include <regex>

#include "model/safetensors.h"
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

std::vector<StoredTensor> StoredForm(const TensorSpec& t, const WeightQuantConfig& q,
                                     const QuantizationIgnoreList& ignore) {
  double values = 1;
  for (int64_t d : t.shape) values *= double(d);
  const std::string module = t.name.substr(0, t.name.size() - (t.name.ends_with(".weight") ? 7 : 0));
  if (t.shape.size() == 2) {
    const int64_t rows = t.shape[0], cols = t.shape[1];
    if (q.method == WeightQuantMethod::kFp8Block && IsDecoderLinear(t.name)) {
      const int64_t block_rows = (rows + q.block_rows - 1) / q.block_rows;
      const int64_t block_cols = (cols + q.block_cols - 1) / q.block_cols;
      return {{t.name, t.shape, values},  // 1 byte per value
              {t.name + "_scale_inv", {block_rows, block_cols}, 4 * double(block_rows) * double(block_cols)}};
    }
    if (q.method == WeightQuantMethod::kInt4Pack && (IsDecoderLinear(t.name) || t.name.ends_with("lm_head.weight")) &&
        !ignore.Ignores(module)) {
      const int64_t groups = (cols + q.group_size - 1) / q.group_size;
      return {{module + ".weight_packed", {rows, cols / 8}, values / 2},
              {module + ".weight_scale", {rows, groups}, 2 * double(rows) * double(groups)},  // bf16
              {module + ".weight_shape", {2}, 8}};                                             // int32 [2]
    }
  }
  return {{t.name, t.shape, 2 * values}};  // bf16
}

std::vector<StoredTensor> EstimateStoredTensors(const ModelConfig& config) {
  const QuantizationIgnoreList ignore(config.quant.ignore);
  std::vector<StoredTensor> out;
  for (const TensorSpec& t : ListWeightTensors(config)) {
    for (StoredTensor& s : StoredForm(t, config.quant, ignore)) out.push_back(std::move(s));
  }
  return out;
}

std::vector<StoredTensor> StoredTensorsOf(const Checkpoint& checkpoint) {
  std::vector<StoredTensor> out;
  out.reserve(checkpoint.tensors().size());
  for (const auto& [name, view] : checkpoint.tensors()) out.push_back({name, view.shape, double(view.num_bytes)});
  return out;
}

WeightBytes EstimateWeightBytes(const ModelConfig& config) {
  WeightBytes out;
  const QuantizationIgnoreList ignore(config.quant.ignore);
  for (const TensorSpec& t : ListWeightTensors(config)) {
    const std::vector<StoredTensor> stored = StoredForm(t, config.quant, ignore);
    double bytes = 0;
    for (const StoredTensor& s : stored) bytes += s.bytes;
    const bool quantized = stored.size() > 1;
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

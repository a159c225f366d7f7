#include "cli/kv_scales.h"

#include "core/read_file.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace mlaserve::cli {

Result<std::vector<float>> LoadKvScales(const std::string& path, const ModelConfig& c, KvFormat format) {
  auto text = ReadWholeFile(path);
  if (!text.ok()) return Status::Error(text.error() + " (KV scales file)");
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("kv_amax") || !j["kv_amax"].is_array()) {
    return Status::Error(path + ": not a KV scales file (JSON with a kv_amax array, from mlaserve kv-calibrate)");
  }
  auto field = [&](const char* key) { return j.contains(key) && j[key].is_number_integer() ? j[key].get<int>() : -1; };
  if (field("num_hidden_layers") != c.num_hidden_layers || field("kv_lora_rank") != c.kv_lora_rank ||
      field("qk_rope_head_dim") != c.qk_rope_head_dim || int(j["kv_amax"].size()) != c.num_hidden_layers) {
    return Status::Error(path + ": scales were calibrated for " + std::to_string(field("num_hidden_layers")) +
                         " layers with kv_lora_rank " + std::to_string(field("kv_lora_rank")) +
                         " + rope " + std::to_string(field("qk_rope_head_dim")) + "; this model has " +
                         std::to_string(c.num_hidden_layers) + " layers with " +
                         std::to_string(c.kv_lora_rank) + " + " + std::to_string(c.qk_rope_head_dim));
  }
  std::vector<float> scales;
  for (const auto& v : j["kv_amax"]) {
    if (!v.is_number() || !(v.get<double>() > 0)) return Status::Error(path + ": kv_amax values must be positive numbers");
    scales.push_back(KvTensorScaleFor(format, v.get<float>()));
  }
  return scales;
}

}  // namespace mlaserve::cli

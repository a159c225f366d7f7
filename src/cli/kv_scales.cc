#include "cli/kv_scales.h"

#include "core/read_file.h"
#include "model/weights.h"

#include <cmath>

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

Result<std::vector<float>> CheckpointKvScales(const Checkpoint& checkpoint, const ModelConfig& c) {
  std::vector<float> scales;
  int found = 0;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = c.tensor_prefix + "model.layers." + std::to_string(l) + ".self_attn.";
    const TensorView* t = nullptr;
    for (const char* name : {"k_scale", "kv_scale", "attn.k_scale"}) {
      if ((t = checkpoint.Find(p + name)) != nullptr) break;
    }
    if (t == nullptr) {
      scales.push_back(1.0f);
      continue;
    }
    if (t->numel() != 1) return Status::Error(t->file + ": tensor '" + t->name + "' must be a scalar KV scale");
    const float v = TensorToF32(*t)[0];
    if (!(v > 0.0f) || !std::isfinite(v)) {
      return Status::Error(t->file + ": tensor '" + t->name + "' is not a positive finite KV scale");
    }
    scales.push_back(v);
    ++found;
  }
  if (found == 0) return std::vector<float>{};
  if (found != c.num_hidden_layers) {
    return Status::Error("the checkpoint has KV scales (self_attn.k_scale) for " + std::to_string(found) + " of " +
                         std::to_string(c.num_hidden_layers) + " layers");
  }
  return scales;
}

Result<std::vector<float>> ResolveKvScales(const std::string& path, const Checkpoint& checkpoint,
                                           const ModelConfig& config, KvFormat format, std::string* source) {
  // Read even when a file overrides it, so a checkpoint with scales on only some layers is
  // always an error.
  auto from_checkpoint = CheckpointKvScales(checkpoint, config);
  if (!from_checkpoint.ok()) return from_checkpoint.status();
  if (!path.empty()) {
    if (source != nullptr) *source = "file " + path;
    return LoadKvScales(path, config, format);
  }
  if (!from_checkpoint->empty() && KvFormatUsesTensorScale(format)) {
    if (source != nullptr) *source = "checkpoint";
    return from_checkpoint;
  }
  if (source != nullptr) *source = "1.0 (none: give --kv-scales from mlaserve kv-calibrate)";
  return std::vector<float>{};
}

}  // namespace mlaserve::cli

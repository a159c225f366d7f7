#include "cli/weight_source.h"

#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "model/gguf_model.h"
#include "model/safetensors.h"

namespace mlaserve::cli {

namespace {

// A GGUF file's tensors under their Hugging Face names (a stacked expert tensor as one tensor
// per expert, the split kv_b pair as kv_b_proj), bytes as mlaserve holds them: as stored, except
// the block types (model/gguf_checkpoint.cc): Q8_0 as int8 codes with an F32 scale per 32 (1.125
// bytes a weight, the file's 1.06), Q6_K with one per 16 (1.25, the file's 0.82), Q5_K as bytes
// with an F32 scale and min per 32 (1.25, the file's 0.69; Q5_0 / Q5_1 alike), Q4_K / Q4_0 / Q4_1 as
// nibbles with an F32 scale and min per 32 (0.75, the file's 0.56), a split kv_b pair in the same
// forms (model/gguf_checkpoint.cc); `plan` counts the types mlaserve does not compute (Q2_K, IQ*, ...) as stored.
std::optional<WeightSource> GgufWeightSource(const std::string& path, const ModelConfig& config) {
  auto f = ReadGgufFile(path);
  if (!f.ok()) return std::nullopt;
  WeightSource out;
  std::map<std::string, double> bytes_by_type;
  std::map<int, size_t> kv_b_entry;  // layer -> index in out.tensors
  const std::set<int> combined_kv_b = CombinedKvBLayers(f->tensors);  // their split pair is not read
  for (const GgufTensorInfo& t : f->tensors) {
    double elements = 1;
    for (int64_t d : t.ne) elements *= double(d);
    const GgmlType type = GgmlType(t.type);
    const bool four_bit = type == GgmlType::kQ4_K || type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1;
    const bool bytes_with_scale = type == GgmlType::kQ6_K || type == GgmlType::kQ5_K || type == GgmlType::kQ5_0 ||
                                  type == GgmlType::kQ5_1;
    const bool widened = bytes_with_scale || type == GgmlType::kQ8_0 || four_bit;
    double bytes = bytes_with_scale ? elements * 1.25
                   : type == GgmlType::kQ8_0 ? elements * 1.125
                   : four_bit                ? elements * 0.75
                                             : double(t.num_bytes);
    const std::optional<HfTensorName> hf = HfNameOfGgufTensor(t.name);
    bytes_by_type[std::string(GgmlTraits(t.type).name) + (widened ? " (as held)" : "")] += bytes;
    out.total_bytes += bytes;
    const std::vector<int64_t> shape(t.ne.rbegin(), t.ne.rend());
    if (!hf) {
      out.tensors.push_back({t.name, shape, bytes});
    } else if (!hf->name.empty()) {
      out.tensors.push_back({hf->name, shape, bytes});
    } else if (!hf->kv_part.empty()) {
      if (combined_kv_b.count(hf->layer)) {
        out.tensors.push_back({t.name, shape, bytes});  // stored, not loaded
        continue;
      }
      auto [it, added] = kv_b_entry.emplace(hf->layer, out.tensors.size());
      if (added) {
        out.tensors.push_back({"model.layers." + std::to_string(hf->layer) + ".self_attn.kv_b_proj.weight",
                               {int64_t(config.num_attention_heads) * (config.qk_nope_head_dim + config.v_head_dim),
                                config.kv_lora_rank},
                               0.0});
      }
      out.tensors[it->second].bytes += bytes;
    } else if (t.ne.size() == 3) {
      for (int64_t e = 0; e < t.ne[2]; ++e) {
        out.tensors.push_back({HfExpertTensorName(hf->layer, e, hf->expert_projection), {t.ne[1], t.ne[0]},
                               bytes / double(t.ne[2])});
      }
    }
  }
  out.description = "read from the GGUF file:";
  for (const auto& [type, bytes] : bytes_by_type) {
    char part[64];
    std::snprintf(part, sizeof part, " %s %.2f GB", type.c_str(), bytes / 1e9);
    out.description += part;
  }
  out.from_checkpoint = true;
  return out;
}

}  // namespace

WeightSource ReadWeightSource(const std::string& path, const ModelConfig& config) {
  WeightSource out;
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec) && IsGgufFile(path)) {
    if (auto gguf = GgufWeightSource(path, config)) return std::move(gguf).value();
  }
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

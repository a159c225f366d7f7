#include "model/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/float16.h"
#include "core/read_file.h"
#include "kvcache/fp8.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"
#include "model/weight_bytes.h"
#include "model/weights.h"

namespace mlaserve {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr int kFp8Block = 128;
constexpr int kInt4Group = 32;

bool IsRoutedExpert(const std::string& name) {
  return IsDecoderLinear(name) && name.find(".mlp.experts.") != std::string::npos;
}

bool Quantizes(QuantScheme scheme, const TensorView& t) {
  if (t.shape.size() != 2) return false;
  return scheme == QuantScheme::kFp8Block ? IsDecoderLinear(t.name) : IsRoutedExpert(t.name);
}

json QuantizationConfig(QuantScheme scheme) {
  if (scheme == QuantScheme::kFp8Block) {
    return json{{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
                {"weight_block_size", {kFp8Block, kFp8Block}}};
  }
  json weights = {{"actorder", nullptr}, {"block_structure", nullptr}, {"dynamic", false},
                  {"group_size", kInt4Group}, {"num_bits", 4}, {"observer", "minmax"},
                  {"observer_kwargs", json::object()}, {"strategy", "group"}, {"symmetric", true},
                  {"type", "int"}};
  return json{{"config_groups",
               {{"group_0",
                 {{"input_activations", nullptr}, {"output_activations", nullptr}, {"targets", {"Linear"}},
                  {"weights", weights}}}}},
              {"format", "pack-quantized"},
              {"ignore", {"lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"}},
              {"kv_cache_scheme", nullptr},
              {"quant_method", "compressed-tensors"},
              {"quantization_status", "compressed"}};
}

// [rows, cols] -> E4M3 codes + F32 scale_inv per 128 x 128 block (block amax / 448).
void QuantizeFp8(const std::vector<float>& w, int64_t rows, int64_t cols, std::vector<std::byte>& codes,
                 std::vector<std::byte>& scales) {
  const int64_t brows = (rows + kFp8Block - 1) / kFp8Block, bcols = (cols + kFp8Block - 1) / kFp8Block;
  codes.assign(size_t(rows * cols), std::byte{0});
  scales.assign(size_t(brows * bcols) * 4, std::byte{0});
  for (int64_t br = 0; br < brows; ++br) {
    for (int64_t bc = 0; bc < bcols; ++bc) {
      const int64_t r1 = std::min(rows, (br + 1) * kFp8Block), c1 = std::min(cols, (bc + 1) * kFp8Block);
      float amax = 0.0f;
      for (int64_t r = br * kFp8Block; r < r1; ++r) {
        for (int64_t c = bc * kFp8Block; c < c1; ++c) amax = std::max(amax, std::abs(w[size_t(r * cols + c)]));
      }
      const float scale = amax > 0.0f ? amax / kE4M3Max : 1.0f;
      std::memcpy(scales.data() + size_t(br * bcols + bc) * 4, &scale, 4);
      for (int64_t r = br * kFp8Block; r < r1; ++r) {
        for (int64_t c = bc * kFp8Block; c < c1; ++c) {
          codes[size_t(r * cols + c)] = std::byte(F32ToE4M3(w[size_t(r * cols + c)] / scale));
        }
      }
    }
  }
}

// [rows, cols] -> int32 words of 8 nibbles (q + 8, value j at bits 4j) + BF16 group scales.
void QuantizeInt4(const std::vector<float>& w, int64_t rows, int64_t cols, std::vector<std::byte>& packed,
                  std::vector<std::byte>& scales) {
  const int64_t groups = cols / kInt4Group;
  packed.assign(size_t(rows * cols / 2), std::byte{0});
  scales.assign(size_t(rows * groups) * 2, std::byte{0});
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* v = w.data() + r * cols + g * kInt4Group;
      float amax = 0.0f;
      for (int i = 0; i < kInt4Group; ++i) amax = std::max(amax, std::abs(v[i]));
      const uint16_t scale_bits = F32ToBf16(amax / 7.5f);
      std::memcpy(scales.data() + size_t(r * groups + g) * 2, &scale_bits, 2);
      const float scale = Bf16ToF32(scale_bits);
      for (int i = 0; i < kInt4Group; ++i) {
        const float q = scale > 0.0f ? std::clamp(std::nearbyint(v[i] / scale), -8.0f, 7.0f) : 0.0f;
        const int64_t c = g * kInt4Group + i;
        // Little-endian words: nibble c of the row is byte c / 2, low nibble first.
        packed[size_t(r * cols + c) / 2] |= std::byte(uint8_t(int(q) + 8) << (4 * (c % 2)));
      }
    }
  }
}

}  // namespace

const char* QuantSchemeName(QuantScheme scheme) {
  return scheme == QuantScheme::kFp8Block ? "fp8-block" : "int4-g32";
}

Result<QuantizeReport> QuantizeCheckpoint(const std::string& in_dir, const std::string& out_dir, QuantScheme scheme) {
  const fs::path config_path = fs::path(in_dir) / "config.json";
  auto text = ReadWholeFile(config_path.string());
  if (!text.ok()) return text.status();
  json config_json = json::parse(*text, nullptr, false);
  auto config = ParseModelConfig(*text, config_path.string());
  if (!config.ok()) return config.status();
  if (config->quant.method != WeightQuantMethod::kNone) {
    return Status::Error(config_path.string() + " already has a quantization_config (quantize reads bf16/f16/f32 checkpoints)");
  }
  auto checkpoint = Checkpoint::Open(in_dir);
  if (!checkpoint.ok()) return checkpoint.status();

  QuantizeReport report;
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  SafetensorsWriter writer((fs::path(out_dir) / "model.safetensors").string());
  writer.SetMetadata("format", "pt");
  for (const auto& [name, t] : (*checkpoint)->tensors()) {
    report.input_bytes += t.num_bytes;
    if (!Quantizes(scheme, t)) {
      writer.Declare(name, t.dtype, t.shape);
      continue;
    }
    if (t.dtype != DType::kF32 && t.dtype != DType::kBF16 && t.dtype != DType::kF16) {
      return Status::Error(t.file + ": tensor '" + name + "' has dtype " + DTypeName(t.dtype) +
                           " (quantize reads F32, BF16 or F16)");
    }
    const int64_t rows = t.shape[0], cols = t.shape[1];
    if (scheme == QuantScheme::kFp8Block) {
      writer.Declare(name, DType::kF8E4M3, {rows, cols});
      writer.Declare(name + "_scale_inv", DType::kF32, {(rows + kFp8Block - 1) / kFp8Block, (cols + kFp8Block - 1) / kFp8Block});
    } else {
      if (cols % kInt4Group != 0) {
        return Status::Error("tensor '" + name + "': " + std::to_string(cols) +
                             " input features are not a multiple of the int4 group size 32");
      }
      const std::string base = name.substr(0, name.size() - std::string(".weight").size());
      writer.Declare(base + ".weight_packed", DType::kI32, {rows, cols / 8});
      writer.Declare(base + ".weight_scale", DType::kBF16, {rows, cols / kInt4Group});
      writer.Declare(base + ".weight_shape", DType::kI64, {2});
    }
  }
  MLA_RETURN_IF_ERROR(writer.Begin());
  std::vector<std::byte> values, scales;
  for (const auto& [name, t] : (*checkpoint)->tensors()) {
    if (!Quantizes(scheme, t)) {
      MLA_RETURN_IF_ERROR(writer.Write(t.data, t.num_bytes));
      report.output_bytes += t.num_bytes;
      ++report.num_copied;
      continue;
    }
    const int64_t rows = t.shape[0], cols = t.shape[1];
    const std::vector<float> w = TensorToF32(t);
    if (scheme == QuantScheme::kFp8Block) {
      QuantizeFp8(w, rows, cols, values, scales);
      MLA_RETURN_IF_ERROR(writer.Write(values.data(), values.size()));
      MLA_RETURN_IF_ERROR(writer.Write(scales.data(), scales.size()));
      report.output_bytes += values.size() + scales.size();
    } else {
      QuantizeInt4(w, rows, cols, values, scales);
      const int64_t shape[2] = {rows, cols};
      MLA_RETURN_IF_ERROR(writer.Write(values.data(), values.size()));
      MLA_RETURN_IF_ERROR(writer.Write(scales.data(), scales.size()));
      MLA_RETURN_IF_ERROR(writer.Write(shape, sizeof(shape)));
      report.output_bytes += values.size() + scales.size() + sizeof(shape);
    }
    ++report.num_quantized;
  }
  MLA_RETURN_IF_ERROR(writer.Finish());

  // A multimodal wrapper (Kimi-K2.5) keeps it in its text_config, as the published one does.
  json& quantized_model = config_json.contains("text_config") && config_json["text_config"].is_object()
                              ? config_json["text_config"]
                              : config_json;
  quantized_model["quantization_config"] = QuantizationConfig(scheme);
  {
    std::ofstream out(fs::path(out_dir) / "config.json");
    out << config_json.dump(2) << "\n";
    if (!out) return Status::Error(out_dir + "/config.json: write failed");
  }
  // Tokenizer and other small files travel with the weights.
  if (fs::is_directory(in_dir, ec)) {
    for (const auto& entry : fs::directory_iterator(in_dir, ec)) {
      const std::string file = entry.path().filename().string();
      if (!entry.is_regular_file() || file == "config.json" || file.ends_with(".safetensors") ||
          file.ends_with(".safetensors.index.json")) {
        continue;
      }
      fs::copy_file(entry.path(), fs::path(out_dir) / file, fs::copy_options::overwrite_existing, ec);
      if (ec) return Status::Error(entry.path().string() + ": copy failed: " + ec.message());
    }
  }
  return report;
}

}  // namespace mlaserve

// mlaserve init-random: writes config.json and model.safetensors with random weights for any
// DeepSeek-V2/V3 shape: a preset (the reference benchmark shape, DeepSeek-V3's layer shapes in two layers, or a
// tiny one), a config.json, and --set key=value overrides (the value is JSON).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "core/read_file.h"
#include "core/float16.h"
#include "model/quantize.h"
#include "model/safetensors_writer.h"
#include "model/weights.h"

namespace mlaserve::cli {
namespace {

using nlohmann::json;

// The reference shape for mlaserve's performance figures (docs/benchmarks.md): DeepSeek-V3
// architecture, ~2B parameters, ~760 MB of bf16 weights read per decoded token.
json ReferencePreset() {
  return json{{"architectures", {"DeepseekV3ForCausalLM"}},
              {"model_type", "deepseek_v3"},
              {"vocab_size", 32000},
              {"hidden_size", 2048},
              {"intermediate_size", 10944},
              {"moe_intermediate_size", 1408},
              {"num_hidden_layers", 4},
              {"num_attention_heads", 16},
              {"num_key_value_heads", 16},
              {"q_lora_rank", 512},
              {"kv_lora_rank", 512},
              {"qk_nope_head_dim", 128},
              {"qk_rope_head_dim", 64},
              {"v_head_dim", 128},
              {"first_k_dense_replace", 1},
              {"moe_layer_freq", 1},
              {"n_routed_experts", 64},
              {"n_shared_experts", 2},
              {"num_experts_per_tok", 6},
              {"n_group", 1},
              {"topk_group", 1},
              {"topk_method", "noaux_tc"},
              {"scoring_func", "sigmoid"},
              {"norm_topk_prob", true},
              {"routed_scaling_factor", 2.5},
              {"max_position_embeddings", 4096},
              {"rope_theta", 10000},
              {"rope_scaling", nullptr},
              {"rms_norm_eps", 1e-6},
              {"tie_word_embeddings", false},
              {"torch_dtype", "bfloat16"}};
}

// DeepSeek-V3's layer shapes (hidden 7168, 128 heads, q_lora 1536, kv_lora 512, a dense MLP of
// 18432, experts of 2048 with one shared, 8 of them routed a token in 8 groups of which 4 are
// taken), in two layers: the leading dense one and one MoE layer with 16 of V3's 256 routed experts
// (1.549B parameters, 3.1 GB of bf16, with --set vocab_size=2048 as docs/benchmarks.md's runs;
// the preset's 32000 give 1.98B). Each product has V3's own size, so its fixed costs (dispatch,
// the threads' imbalance, the first lines' latency) weigh what they weigh in V3; in the reference
// shape's 16x smaller attention products they weigh far more.
json V3LayersPreset() {
  json j = ReferencePreset();
  j["hidden_size"] = 7168;
  j["intermediate_size"] = 18432;
  j["moe_intermediate_size"] = 2048;
  j["num_hidden_layers"] = 2;
  j["num_attention_heads"] = 128;
  j["num_key_value_heads"] = 128;
  j["q_lora_rank"] = 1536;
  j["n_routed_experts"] = 16;
  j["n_shared_experts"] = 1;
  j["num_experts_per_tok"] = 8;
  j["n_group"] = 8;
  j["topk_group"] = 4;
  return j;
}

json TinyPreset() {
  json j = ReferencePreset();
  j["vocab_size"] = 256;
  j["hidden_size"] = 64;
  j["intermediate_size"] = 128;
  j["moe_intermediate_size"] = 32;
  j["num_hidden_layers"] = 3;
  j["num_attention_heads"] = 4;
  j["num_key_value_heads"] = 4;
  j["q_lora_rank"] = 32;
  j["kv_lora_rank"] = 32;
  j["qk_nope_head_dim"] = 16;
  j["qk_rope_head_dim"] = 8;
  j["v_head_dim"] = 16;
  j["n_routed_experts"] = 8;
  j["n_shared_experts"] = 1;
  j["num_experts_per_tok"] = 2;
  j["max_position_embeddings"] = 512;
  return j;
}

// xorshift64*: fast, and plenty for random weights.
struct Rng {
  uint64_t state;
  float Uniform() {  // [-1, 1)
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return float(int32_t((state * 0x2545F4914F6CDD1Dull) >> 32)) * (1.0f / 2147483648.0f);
  }
};

bool IsNormOrBias(const std::string& name) {
  return name.find("norm") != std::string::npos || name.find("bias") != std::string::npos;
}

}  // namespace

int RunInitRandom(Args& args) {
  const std::string out_dir = args.Str("out", "", "directory to write config.json and model.safetensors (required)",
                                       {.value_name = "DIR"});
  const std::string preset =
      args.Str("preset", "reference",
               "the shape: the benchmark reference, DeepSeek-V3's layer shapes in two layers (v3-layers), or a tiny one",
               {.choices = {"reference", "v3-layers", "tiny"}});
  const auto config_path = args.OptStr("config", "a config.json to use instead of --preset", {.value_name = "FILE"});
  const std::vector<std::string> overrides =
      args.All("set", "overrides one config key; the value is JSON", {.value_name = "KEY=VALUE"});
  const std::string dtype_name = args.Str("dtype", "bf16", "weight dtype (norms stay f32)",
                                          {.choices = {"bf16", "f16", "f32"}});
  const std::string weights = args.Str("weights", "dense",
                                       "dense (--dtype), or a quantized layout written through `quantize`: "
                                       "fp8-block, int4-g32",
                                       {.choices = {"dense", "fp8-block", "int4-g32"}});
  const uint64_t seed = uint64_t(args.Int64("seed", 1, "weight seed"));
  const double init_std = args.Double("init-std", 0.02, "standard deviation of the weights", {.min = 0});
  if (out_dir.empty()) args.Reject("--out DIR is required");
  if (auto exit_code = args.Finish()) return *exit_code;
  const DType dtype = dtype_name == "f32" ? DType::kF32 : dtype_name == "f16" ? DType::kF16 : DType::kBF16;

  json config;
  if (config_path) {
    auto text = ReadWholeFile(*config_path);
    if (!text.ok()) return Fail("init-random", text.error(), 2);
    config = json::parse(*text, nullptr, false);
    if (config.is_discarded()) return Fail("init-random", *config_path + ": not valid JSON", 2);
  } else {
    config = preset == "tiny" ? TinyPreset() : preset == "v3-layers" ? V3LayersPreset() : ReferencePreset();
  }
  for (const std::string& kv : overrides) {
    const size_t eq = kv.find('=');
    json value = eq == std::string::npos ? json() : json::parse(kv.substr(eq + 1), nullptr, false);
    if (eq == std::string::npos || value.is_discarded()) {
      return Fail("init-random", "--set wants key=JSON-value, got '" + kv + "'", 2);
    }
    config[kv.substr(0, eq)] = value;
  }
  auto parsed = ParseModelConfig(config.dump(), "the requested config");
  if (!parsed.ok()) return Fail("init-random", parsed.error(), 2);

  // Quantized layouts: the dense checkpoint goes to a scratch directory, then through quantize.
  const std::string dense_dir = weights == "dense" ? out_dir : out_dir + "/.dense-tmp";
  std::error_code ec;
  std::filesystem::create_directories(dense_dir, ec);
  {
    std::ofstream out(std::filesystem::path(dense_dir) / "config.json");
    out << config.dump(2) << "\n";
    if (!out) return Fail("init-random", out_dir + "/config.json: write failed");
  }

  // A config with num_nextn_predict_layers > 0 gets its (random) MTP layer too.
  const std::vector<TensorSpec> specs = ListWeightTensors(*parsed, /*with_mtp=*/true);
  SafetensorsWriter writer((std::filesystem::path(dense_dir) / "model.safetensors").string());
  writer.SetMetadata("format", "pt");
  for (const TensorSpec& spec : specs) {
    writer.Declare(spec.name, IsNormOrBias(spec.name) ? DType::kF32 : dtype, spec.shape);
  }
  if (Status s = writer.Begin(); !s.ok()) return Fail("init-random", s.message());
  Rng rng{seed * 0x9E3779B97F4A7C15ull + 1};
  const float amplitude = float(init_std * std::sqrt(3.0));  // uniform with that std
  std::vector<std::byte> buffer;
  size_t total_params = 0;
  for (const TensorSpec& spec : specs) {
    size_t count = 1;
    for (int64_t d : spec.shape) count *= size_t(d);
    total_params += count;
    const bool norm_or_bias = IsNormOrBias(spec.name);
    const DType t = norm_or_bias ? DType::kF32 : dtype;
    const bool is_bias = spec.name.find("bias") != std::string::npos;
    constexpr size_t kChunk = 1 << 20;
    for (size_t done = 0; done < count; done += kChunk) {
      const size_t n = std::min(kChunk, count - done);
      buffer.resize(n * size_t(DTypeBytes(t)));
      for (size_t i = 0; i < n; ++i) {
        const float v = norm_or_bias ? (is_bias ? 0.0f : 1.0f) : amplitude * rng.Uniform();
        if (t == DType::kF32) {
          std::memcpy(buffer.data() + 4 * i, &v, 4);
        } else {
          const uint16_t h = t == DType::kBF16 ? F32ToBf16(v) : F32ToF16(v);
          std::memcpy(buffer.data() + 2 * i, &h, 2);
        }
      }
      if (Status s = writer.Write(buffer.data(), buffer.size()); !s.ok()) {
        return Fail("init-random", s.message());
      }
    }
  }
  if (Status s = writer.Finish(); !s.ok()) return Fail("init-random", s.message());
  if (weights != "dense") {
    auto report = QuantizeCheckpoint(dense_dir, out_dir, weights == "int4-g32" ? QuantScheme::kInt4G32 : QuantScheme::kFp8Block);
    std::filesystem::remove_all(dense_dir, ec);
    if (!report.ok()) return Fail("init-random", report.error());
  }
  std::printf("wrote %s: %zu tensors, %.3fB parameters\n", out_dir.c_str(), specs.size(),
              double(total_params) / 1e9);
  return 0;
}

}  // namespace mlaserve::cli

// Kimi-K2.5's multimodal layout: a KimiK25ForConditionalGeneration config whose text_config is
// a DeepSeek-V3 model, text tensors under `language_model.`, a vision tower beside them. The
// text model must load and compute exactly what the same weights compute in DeepSeek-V3's own
// layout; the vision tower stays unloaded, and the log says so.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/safetensors_writer.h"
#include "support/run_binary.h"

namespace mlaserve {
namespace {

using nlohmann::json;
using testing::RunMlaserve;
using testing::ShellQuote;

json TinyTextConfig() {
  return json::parse(R"({
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "vocab_size": 256,
    "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 32, "kv_lora_rank": 32,
    "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "first_k_dense_replace": 1,
    "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "topk_method": "noaux_tc",
    "scoring_func": "sigmoid", "norm_topk_prob": true, "routed_scaling_factor": 2.5,
    "max_position_embeddings": 512, "tie_word_embeddings": false, "torch_dtype": "bfloat16"})");
}

json KimiK25Wrapper(const json& text) {
  return json{{"architectures", {"KimiK25ForConditionalGeneration"}},
              {"model_type", "kimi_k25"},
              {"text_config", text},
              {"vision_config", {{"model_type", "kimi_k25_vision"}, {"patch_size", 14}, {"hidden_size", 16}}},
              {"tie_word_embeddings", false}};
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

TEST(KimiK25Layout, ConfigUnwrapsTheTextModel) {
  json text = TinyTextConfig();
  text.erase("tie_word_embeddings");
  json wrapper = KimiK25Wrapper(text);
  // A quantization_config given only at the top level applies to the text model.
  wrapper["quantization_config"] = json::parse(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int",
      "symmetric": true, "strategy": "group", "group_size": 32}}}, "ignore": ["lm_head"]})");
  auto c = ParseModelConfig(wrapper.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->model_type, "kimi_k25");
  EXPECT_EQ(c->tensor_prefix, "language_model.");
  EXPECT_TRUE(c->has_vision_tower);
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->n_routed_experts, 8);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->quant.method, WeightQuantMethod::kInt4Pack);
  // The architecture alone identifies the wrapper; without text_config it is a clear error.
  json no_text = wrapper;
  no_text.erase("text_config");
  auto bad = ParseModelConfig(no_text.dump(), "config.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("text_config"), std::string::npos) << bad.error();
  // A plain DeepSeek-V3 config has no prefix.
  auto plain = ParseModelConfig(TinyTextConfig().dump(), "config.json");
  ASSERT_TRUE(plain.ok()) << plain.error();
  EXPECT_EQ(plain->tensor_prefix, "");
}

TEST(KimiK25Layout, TextModelScoresExactlyAsTheSameWeightsInDeepSeekLayout) {
  testing::TempDir dir;
  const std::string plain = dir.path() + "/plain", wrapped = dir.path() + "/k25";
  WriteFile(dir.path() + "/text.json", TinyTextConfig().dump());
  WriteFile(dir.path() + "/k25.json", KimiK25Wrapper(TinyTextConfig()).dump());
  // The same seed gives the same values tensor by tensor; only the names differ.
  auto r = RunMlaserve("init-random --config " + ShellQuote(dir.path() + "/text.json") + " --seed 7 --out " + ShellQuote(plain));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = RunMlaserve("init-random --config " + ShellQuote(dir.path() + "/k25.json") + " --seed 7 --out " + ShellQuote(wrapped));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // A vision tower and projector beside the text model, as the real checkpoint has.
  {
    SafetensorsWriter vision(wrapped + "/model-vision.safetensors");
    vision.Declare("vision_tower.patch_embed.proj.weight", DType::kBF16, {16, 3, 14, 14});
    vision.Declare("mm_projector.proj.0.weight", DType::kBF16, {64, 16});
    ASSERT_TRUE(vision.Begin().ok());
    const std::vector<uint16_t> zeros(16 * 3 * 14 * 14, 0);
    ASSERT_TRUE(vision.Write(zeros.data(), 16 * 3 * 14 * 14 * 2).ok());
    ASSERT_TRUE(vision.Write(zeros.data(), 64 * 16 * 2).ok());
    ASSERT_TRUE(vision.Finish().ok());
  }
  const std::string ids = " --input-ids 1,17,33,5,200,9,41,77";
  auto a = RunMlaserve("score --model-path " + ShellQuote(plain) + ids);
  auto b = RunMlaserve("score --model-path " + ShellQuote(wrapped) + ids);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(b.err.find("kimi_k25: serving its text model (tensors language_model.*)"), std::string::npos) << b.err;
  EXPECT_NE(b.err.find("vision tower"), std::string::npos) << b.err;
  // Kimi-K2.5 ships int4 routed experts: the same holds for int4-g32 weights in both layouts.
  const std::string plain4 = dir.path() + "/plain4", wrapped4 = dir.path() + "/k25-4";
  for (const auto& [config, out] : {std::pair{"/text.json", plain4}, std::pair{"/k25.json", wrapped4}}) {
    r = RunMlaserve("init-random --config " + ShellQuote(dir.path() + config) + " --seed 7 --weights int4-g32 --out " +
                    ShellQuote(out));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  auto a4 = RunMlaserve("score --model-path " + ShellQuote(plain4) + ids);
  auto b4 = RunMlaserve("score --model-path " + ShellQuote(wrapped4) + ids);
  ASSERT_EQ(a4.exit_code, 0) << a4.err;
  ASSERT_EQ(b4.exit_code, 0) << b4.err;
  EXPECT_EQ(a4.out, b4.out);
  EXPECT_NE(a4.out, a.out);  // really quantized
  // The tensors really are under language_model.: the plain names are absent.
  std::filesystem::remove(wrapped + "/model-vision.safetensors");
  std::filesystem::rename(wrapped + "/model.safetensors", plain + "/model.safetensors");
  auto mixed = RunMlaserve("score --model-path " + ShellQuote(plain) + ids);
  EXPECT_NE(mixed.exit_code, 0);
  EXPECT_NE(mixed.err.find("model.embed_tokens.weight"), std::string::npos) << mixed.err;
}

}  // namespace
}  // namespace mlaserve

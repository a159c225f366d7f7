#include "model/config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace mlaserve {
namespace {

nlohmann::json V3Config() {
  return nlohmann::json::parse(R"({
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4,
    "q_lora_rank": 32, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
    "v_head_dim": 16, "first_k_dense_replace": 1, "moe_layer_freq": 1, "n_routed_experts": 8,
    "n_shared_experts": 1, "num_experts_per_tok": 2, "n_group": 4, "topk_group": 2,
    "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": true,
    "routed_scaling_factor": 2.5, "max_position_embeddings": 512, "rope_theta": 10000,
    "rope_scaling": {"type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1},
    "rms_norm_eps": 1e-6, "tie_word_embeddings": false})");
}

Result<ModelConfig> Parse(const nlohmann::json& j) { return ParseModelConfig(j.dump(), "config.json"); }

TEST(ModelConfig, ParsesEveryMathField) {
  auto c = Parse(V3Config());
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->family, ModelFamily::kDeepSeekV3);
  EXPECT_EQ(c->q_lora_rank, 32);
  EXPECT_EQ(c->kv_cache_dim(), 40);
  EXPECT_EQ(c->topk_method, TopkMethod::kNoauxTc);
  EXPECT_EQ(c->scoring_func, ScoringFunc::kSigmoid);
  EXPECT_TRUE(c->yarn.enabled);
  EXPECT_DOUBLE_EQ(c->yarn.factor, 40.0);
  EXPECT_TRUE(c->rope_interleave);
  EXPECT_FALSE(c->IsMoeLayer(0));
  EXPECT_TRUE(c->IsMoeLayer(1));
  // mscale = 0.1 * 1.0 * ln(40) + 1; scale = 24^-0.5 * mscale^2
  const double m = 0.1 * std::log(40.0) + 1.0;
  EXPECT_NEAR(c->SoftmaxScale(), m * m / std::sqrt(24.0), 1e-12);
}

TEST(ModelConfig, NullQLoraMeansPlainQProj) {
  auto j = V3Config();
  j["q_lora_rank"] = nullptr;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->q_lora_rank, 0);
}

TEST(ModelConfig, ErrorsNameTheField) {
  struct Case {
    const char* key;
    nlohmann::json value;
    const char* expected;
  };
  const Case cases[] = {
      {"topk_method", "mystery", "topk_method"},
      {"scoring_func", "relu", "scoring_func"},
      {"kv_lora_rank", -1, "kv_lora_rank"},
      {"hidden_size", "big", "hidden_size"},
      {"num_experts_per_tok", 9, "num_experts_per_tok"},
      {"n_group", 3, "n_group"},
      {"qk_rope_head_dim", 7, "qk_rope_head_dim"},
      {"model_type", "llama", "model_type"},
      {"num_key_value_heads", 1, "num_key_value_heads"},
      {"rope_scaling", nlohmann::json{{"type", "linear"}, {"factor", 2}}, "rope_scaling"},
  };
  for (const Case& k : cases) {
    auto j = V3Config();
    j[k.key] = k.value;
    auto c = Parse(j);
    ASSERT_FALSE(c.ok()) << k.key;
    EXPECT_NE(c.error().find(k.expected), std::string::npos) << c.error();
    EXPECT_EQ(c.error().find('\n'), std::string::npos) << "one line: " << c.error();
  }
  auto j = V3Config();
  j.erase("kv_lora_rank");
  auto missing = Parse(j);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().find("'kv_lora_rank' is missing"), std::string::npos) << missing.error();
  EXPECT_FALSE(ParseModelConfig("{not json", "config.json").ok());
}


// Integers are checked as the whole JSON number before they are narrowed to int: a value past
// 2^32 used to keep its low 32 bits (4294967297 layers loaded a 1-layer model, 2^63 read as 0).
TEST(ModelConfig, IntegersOutsideTheirRangeAreRefusedWhole) {
  const uint64_t two_to_32 = uint64_t(1) << 32;
  struct Case {
    std::string key;
    nlohmann::json value;
    std::string range;
  };
  const Case cases[] = {
      {"num_hidden_layers", two_to_32 + 1, "[1, 1024]"},
      {"num_hidden_layers", 1025, "[1, 1024]"},
      {"vocab_size", two_to_32 + 100, "[1, 16777216]"},
      {"n_routed_experts", two_to_32 + 8, "[0, 4096]"},
      {"kv_lora_rank", two_to_32 + 32, "[1, 65536]"},
      {"num_nextn_predict_layers", two_to_32 + 1, "[0, 64]"},
      {"hidden_size", uint64_t(1) << 63, "[1, 65536]"},
      {"max_position_embeddings", UINT64_MAX, "[1, 2147483647]"},
      {"first_k_dense_replace", -(int64_t(1) << 40), "[0, 2147483647]"},
      {"n_shared_experts", -1, "[0, 4096]"},
      {"num_attention_heads", 4.5, "[1, 1024]"},
      {"q_lora_rank", "32", "[0, 65536]"},
      {"eos_token_id", two_to_32 + 1, "[-1, 2147483647]"},
  };
  for (const Case& k : cases) {
    auto j = V3Config();
    j[k.key] = k.value;
    auto c = Parse(j);
    ASSERT_FALSE(c.ok()) << k.key << " " << k.value.dump() << " was accepted";
    EXPECT_EQ(c.error(), "config.json: field '" + k.key + "' must be an integer in " + k.range + ", got " + k.value.dump());
  }
  // Nested objects name the field by its path.
  auto j = V3Config();
  j["rope_scaling"]["original_max_position_embeddings"] = two_to_32 + 4096;
  auto c = Parse(j);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error(), "config.json: field 'rope_scaling.original_max_position_embeddings' must be an integer in "
                       "[1, 2147483647], got 4294971392");
  // The bounds themselves are accepted.
  j = V3Config();
  j["num_hidden_layers"] = 1024;
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->num_hidden_layers, 1024);
}

// Routed experts over all layers are bound (the loader binds each before reading tensors).
TEST(ModelConfig, TotalRoutedExpertsAreBounded) {
  auto j = V3Config();
  j["num_hidden_layers"] = 1024;
  j["n_routed_experts"] = 512;
  auto c = Parse(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find("field 'n_routed_experts' 512 x num_hidden_layers 1024 routed experts exceed 262144"),
            std::string::npos)
      << c.error();
  j["num_hidden_layers"] = 256;  // Kimi-K2's 384 experts at four times its depth
  j["n_routed_experts"] = 384;
  c = Parse(j);
  EXPECT_TRUE(c.ok()) << c.error();
}

// quantization_config's and rope_scaling's integers and strings: a wrong type is one line, not
// an exception (nlohmann's value() throws on a type mismatch), and integers are checked whole.
TEST(ModelConfig, NestedFieldsOfTheWrongTypeAreOneLine) {
  const uint64_t two_to_32 = uint64_t(1) << 32;
  const nlohmann::json int4 = {
      {"quant_method", "compressed-tensors"},
      {"format", "pack-quantized"},
      {"config_groups",
       {{"group_0",
         {{"weights", {{"num_bits", 4}, {"type", "int"}, {"symmetric", true}, {"strategy", "group"},
                       {"group_size", 32}, {"dynamic", false}}}}}}}};
  auto with_int4 = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json q = int4;
    q["config_groups"]["group_0"]["weights"][key] = value;
    return q;
  };
  struct Case {
    std::string field;  // "rope_scaling" or "quantization_config"
    nlohmann::json value;
    std::string expected;
  };
  const std::string group = "quantization_config.config_groups.group_0.weights.";
  const Case cases[] = {
      {"quantization_config", {{"quant_method", 5}}, "field 'quantization_config.quant_method' must be a string"},
      {"quantization_config", {{"quant_method", "fp8"}, {"fmt", false}, {"weight_block_size", {128, 128}}},
       "field 'quantization_config.fmt' must be a string"},
      {"quantization_config", {{"quant_method", "fp8"}, {"weight_block_size", {two_to_32 + 128, 128}}},
       "quantization_config.weight_block_size must be two integers in [1, 65536], got [4294967424,128]"},
      {"quantization_config", with_int4("num_bits", two_to_32 + 4),
       "field '" + group + "num_bits' must be an integer in [0, 2147483647], got 4294967300"},
      {"quantization_config", with_int4("group_size", two_to_32 + 32),
       "field '" + group + "group_size' must be an integer in [1, 65536], got 4294967328"},
      {"quantization_config", with_int4("symmetric", "yes"), "field '" + group + "symmetric' must be true or false"},
      {"rope_scaling", {{"type", 5}, {"factor", 2}}, "field 'rope_scaling.type' must be a string"},
  };
  for (const Case& k : cases) {
    auto j = V3Config();
    j[k.field] = k.value;
    auto c = Parse(j);
    ASSERT_FALSE(c.ok()) << k.value.dump();
    EXPECT_EQ(c.error(), "config.json: " + k.expected);
  }
  auto j = V3Config();
  j["quantization_config"] = int4;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->quant.group_size, 32);
}

}  // namespace
}  // namespace mlaserve

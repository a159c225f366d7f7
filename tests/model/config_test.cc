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

}  // namespace
}  // namespace mlaserve

// KV scales from the checkpoint (fp8 checkpoints carry self_attn.k_scale per layer).
#include "cli/kv_scales.h"

#include <gtest/gtest.h>

#include "model/safetensors_writer.h"
#include "support/run_binary.h"

namespace mlaserve {
namespace {

ModelConfig TwoLayers() {
  ModelConfig c;
  c.num_hidden_layers = 2;
  c.kv_lora_rank = 64;
  c.qk_rope_head_dim = 16;
  return c;
}

std::unique_ptr<Checkpoint> WriteScales(const std::string& path, const std::vector<std::pair<std::string, float>>& scalars) {
  SafetensorsWriter w(path);
  for (auto& [name, v] : scalars) w.Declare(name, DType::kF32, {});
  EXPECT_TRUE(w.Begin().ok());
  for (auto& [name, v] : scalars) EXPECT_TRUE(w.Write(&v, 4).ok());
  EXPECT_TRUE(w.Finish().ok());
  auto ckpt = Checkpoint::Open(path);
  EXPECT_TRUE(ckpt.ok()) << ckpt.error();
  return std::move(ckpt).value();
}

TEST(KvScales, ReadFromTheCheckpoint) {
  testing::TempDir dir;
  auto all = WriteScales(dir.path() + "/a.safetensors", {{"model.layers.0.self_attn.k_scale", 0.5f},
                                                         {"model.layers.1.self_attn.kv_scale", 2.0f}});
  auto scales = cli::CheckpointKvScales(*all, TwoLayers());
  ASSERT_TRUE(scales.ok()) << scales.error();
  EXPECT_EQ(*scales, (std::vector<float>{0.5f, 2.0f}));

  auto none = WriteScales(dir.path() + "/b.safetensors", {{"model.norm.bias", 1.0f}});
  auto empty = cli::CheckpointKvScales(*none, TwoLayers());
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());

  auto some = WriteScales(dir.path() + "/c.safetensors", {{"model.layers.1.self_attn.k_scale", 2.0f}});
  auto partial = cli::CheckpointKvScales(*some, TwoLayers());
  ASSERT_FALSE(partial.ok());
  EXPECT_NE(partial.error().find("1 of 2 layers"), std::string::npos) << partial.error();

  auto bad = WriteScales(dir.path() + "/d.safetensors", {{"model.layers.0.self_attn.k_scale", -1.0f},
                                                         {"model.layers.1.self_attn.k_scale", 1.0f}});
  auto negative = cli::CheckpointKvScales(*bad, TwoLayers());
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.error().find("k_scale"), std::string::npos) << negative.error();
}

TEST(KvScales, GenerateSaysWhereTheScalesCameFrom) {
  const std::string model = testing::ShellQuote(std::string(MLASERVE_SOURCE_DIR) + "/models/shakespeare-mla");
  auto r = testing::RunMlaserve("generate --model-path " + model + " --prompt x --max-new-tokens 2 --kv-cache-dtype fp8_e4m3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("kv scales: 1.0 (none"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace mlaserve

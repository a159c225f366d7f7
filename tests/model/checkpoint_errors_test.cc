// Bad checkpoints give one clear line naming the tensor or field, never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "model/safetensors_writer.h"
#include "support/run_binary.h"

namespace mlaserve {
namespace {

using testing::RunMlaserve;
using testing::ShellQuote;
using testing::TempDir;

struct Corruption {
  std::string skip;          // leave this tensor out
  std::string reshape;       // give this tensor a wrong shape
  std::string retype;        // store this tensor as I32
};

// Writes the tiny preset (init-random) and then a model.safetensors with zeros and one defect.
void WriteCheckpoint(const std::string& dir, const Corruption& bad) {
  auto r = RunMlaserve("init-random --preset tiny --out " + ShellQuote(dir));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok()) << config.error();
  SafetensorsWriter w(dir + "/model.safetensors");
  size_t total = 0;
  for (TensorSpec spec : ListWeightTensors(*config)) {
    if (spec.name == bad.skip) continue;
    if (spec.name == bad.reshape) spec.shape.back() += 1;
    const DType t = spec.name == bad.retype ? DType::kI32 : DType::kF32;
    size_t n = 4;
    for (int64_t d : spec.shape) n *= size_t(d);
    total += n;
    w.Declare(spec.name, t, spec.shape);
  }
  ASSERT_TRUE(w.Begin().ok());
  std::vector<char> zeros(total, 0);
  ASSERT_TRUE(w.Write(zeros.data(), zeros.size()).ok());
  ASSERT_TRUE(w.Finish().ok());
}

std::string LoadError(const std::string& dir) {
  auto model = Model::Load(dir, ModelOptions{.max_batch_tokens = 8, .max_context = 64});
  return model.ok() ? std::string() : model.error();
}

TEST(CheckpointErrors, GoodTinyCheckpointLoads) {
  TempDir dir;
  WriteCheckpoint(dir.path(), {});
  EXPECT_EQ(LoadError(dir.path()), "");
}

TEST(CheckpointErrors, MissingTensorIsNamed) {
  TempDir dir;
  const std::string name = "model.layers.1.mlp.experts.3.up_proj.weight";
  WriteCheckpoint(dir.path(), {.skip = name});
  EXPECT_NE(LoadError(dir.path()).find("missing tensor '" + name + "'"), std::string::npos);
}

TEST(CheckpointErrors, WrongShapeIsNamed) {
  TempDir dir;
  const std::string name = "model.layers.0.self_attn.kv_b_proj.weight";
  WriteCheckpoint(dir.path(), {.reshape = name});
  const std::string e = LoadError(dir.path());
  EXPECT_NE(e.find(name), std::string::npos) << e;
  EXPECT_NE(e.find("config implies"), std::string::npos) << e;
}

TEST(CheckpointErrors, WrongDtypeIsNamed) {
  TempDir dir;
  const std::string name = "model.norm.weight";
  WriteCheckpoint(dir.path(), {.retype = name});
  const std::string e = LoadError(dir.path());
  EXPECT_NE(e.find(name), std::string::npos) << e;
  EXPECT_NE(e.find("I32"), std::string::npos) << e;
}

TEST(CheckpointErrors, UnsupportedDtypeAndTruncationAndGarbage) {
  TempDir dir;
  WriteCheckpoint(dir.path(), {});
  const std::string file = dir.path() + "/model.safetensors";
  // Truncate: the data no longer covers the last tensor.
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 16);
  std::string e = LoadError(dir.path());
  EXPECT_NE(e.find("outside the file"), std::string::npos) << e;

  {  // A header that declares an fp8 E5M2 tensor (only E4M3 weights load).
    const std::string header = R"({"w":{"dtype":"F8_E5M2","shape":[2],"data_offsets":[0,2]}})";
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    const uint64_t len = header.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out << header << "xx";
  }
  e = LoadError(dir.path());
  EXPECT_NE(e.find("F8_E5M2"), std::string::npos) << e;
  EXPECT_NE(e.find("'w'"), std::string::npos) << e;

  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << "this is not a safetensors file at all";
  }
  e = LoadError(dir.path());
  EXPECT_NE(e.find("not a safetensors file"), std::string::npos) << e;
}

TEST(CheckpointErrors, BinaryPrintsOneLineAndFails) {
  TempDir dir;
  WriteCheckpoint(dir.path(), {.skip = "lm_head.weight"});
  auto r = RunMlaserve("bench --model-path " + ShellQuote(dir.path()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("missing tensor 'lm_head.weight'"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  // A config value the engine does not support.
  nlohmann::json config;
  std::ifstream(dir.path() + "/config.json") >> config;
  config["scoring_func"] = "tanh";
  std::ofstream(dir.path() + "/config.json") << config.dump();
  r = RunMlaserve("bench --model-path " + ShellQuote(dir.path()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("scoring_func"), std::string::npos) << r.err;

  r = RunMlaserve("bench --model-path /nonexistent/model");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent/model"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace mlaserve

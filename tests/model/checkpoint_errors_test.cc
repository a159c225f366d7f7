// Bad checkpoints give one clear line naming the tensor or field, never a crash.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "model/safetensors.h"
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


// A safetensors file: the 8-byte header length, `header` and `data_bytes` zero bytes of data.
std::string SafetensorsBytes(const std::string& header, size_t data_bytes) {
  const uint64_t len = header.size();
  std::string bytes(reinterpret_cast<const char*>(&len), 8);
  return bytes + header + std::string(data_bytes, '\0');
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Rewrites a safetensors file's header by `edit`, keeping its data section as it is.
void EditHeader(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  const std::string bytes = testing::ReadTextFile(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t len = 0;
  std::memcpy(&len, bytes.data(), 8);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, len));
  edit(header);
  const std::string data = bytes.substr(8 + len);
  WriteBytes(path, SafetensorsBytes(header.dump(), 0) + data);
}

// lm_head.weight pointing at embed_tokens' bytes (same shape and dtype) used to load and serve
// through the embedding; two tensors sharing bytes are refused, naming both.
TEST(CheckpointErrors, OverlappingTensorsAreRefused) {
  TempDir dir;
  WriteCheckpoint(dir.path(), {});
  const std::string file = dir.path() + "/model.safetensors";
  EditHeader(file, [](nlohmann::json& header) {
    header["lm_head.weight"]["data_offsets"] = header["model.embed_tokens.weight"]["data_offsets"];
  });
  const std::string e = LoadError(dir.path());
  EXPECT_NE(e.find(file + ": tensor '"), std::string::npos) << e;
  EXPECT_NE(e.find("'lm_head.weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("'model.embed_tokens.weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("overlap"), std::string::npos) << e;

  auto r = RunMlaserve("bench --model-path " + ShellQuote(dir.path()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("overlap tensor"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("lm_head.weight"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// Each defect of a header is one line naming the file and the tensor.
TEST(CheckpointErrors, SafetensorsHeaderDefectsNameFileAndTensor) {
  TempDir dir;
  const std::string file = dir.path() + "/bad.safetensors";
  const std::string good = R"("ok": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";
  struct Case {
    std::string header;
    size_t data_bytes;
    std::string expected;
  };
  const Case cases[] = {
      // __metadata__ is an object of strings (the safetensors format says so).
      {R"({"__metadata__": {"format": 5}, )" + good + "}", 8, "__metadata__ 'format' must be a string, got 5"},
      {R"({"__metadata__": ["pt"], )" + good + "}", 8, "__metadata__ must be an object of strings"},
      // 3074457345618258603 * 6 = 2^64 + 2: the signed product wrapped to 2 elements (4 bytes).
      {R"({"w": {"dtype": "BF16", "shape": [3074457345618258603, 6], "data_offsets": [0, 4]}})", 4,
       "tensor 'w': shape [3074457345618258603,6] of BF16 overflows 64-bit sizes"},
      {R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296, 4], "data_offsets": [0, 0]}})", 0,
       "tensor 'w': shape [4294967296,4294967296,4] of F32 overflows"},
      {R"({"w": {"dtype": "F32", "shape": [9223372036854775808], "data_offsets": [0, 0]}})", 0,
       "tensor 'w': shape [9223372036854775808] of F32 overflows"},
      {R"({"w": {"dtype": "F32", "shape": [-1, 2], "data_offsets": [0, 0]}})", 0,
       "tensor 'w': shape has a negative dimension -1"},
      {R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", 8, "tensor 'w': data_offsets [8, 4) are reversed"},
      {R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8, "tensor 'w': data_offsets [0, 16) lie outside"},
      {R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8, "tensor 'w': 8 bytes do not match shape [3]"},
      // Partly overlapping, in any header order.
      {R"({"b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}, "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
       12, "tensor 'b' bytes [4, 12) overlap tensor 'a' bytes [0, 8)"},
      // A zero-size tensor inside another's range shares no byte; a later one overlapping the first is still found.
      {R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}, "e": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]},
          "c": {"dtype": "F32", "shape": [1], "data_offsets": [12, 16]}})",
       16, "tensor 'c' bytes [12, 16) overlap tensor 'a' bytes [0, 16)"},
  };
  for (const Case& k : cases) {
    WriteBytes(file, SafetensorsBytes(k.header, k.data_bytes));
    auto ckpt = Checkpoint::Open(file);
    ASSERT_FALSE(ckpt.ok()) << k.header << " was accepted";
    EXPECT_EQ(ckpt.error().rfind(file + ": ", 0), 0u) << ckpt.error();
    EXPECT_NE(ckpt.error().find(k.expected), std::string::npos) << ckpt.error();
    EXPECT_EQ(ckpt.error().find('\n'), std::string::npos) << ckpt.error();
  }
  // A header length past the file's end, read before anything is allocated for it.
  std::string bytes = SafetensorsBytes("{" + good + "}", 8);
  const uint64_t too_long = uint64_t(1) << 40;
  std::memcpy(bytes.data(), &too_long, 8);
  WriteBytes(file, bytes);
  auto ckpt = Checkpoint::Open(file);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.error(), file + ": not a safetensors file (header length 1099511627776 exceeds the file)");

  // Adjacent tensors, zero-size ones, and string metadata load.
  WriteBytes(file, SafetensorsBytes(R"({"__metadata__": {"format": "pt"}, "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "z": {"dtype": "F32", "shape": [0, 3], "data_offsets": [8, 8]}, "y": {"dtype": "F32", "shape": [0], "data_offsets": [8, 8]},
      "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})", 12));
  ckpt = Checkpoint::Open(file);
  ASSERT_TRUE(ckpt.ok()) << ckpt.error();
  EXPECT_EQ((*ckpt)->tensors().size(), 4u);
  EXPECT_EQ((*ckpt)->metadata().at("format"), "pt");
}

// The header parser reads bytes and no file (for fuzzing): the same checks as a file.
TEST(CheckpointErrors, SafetensorsHeaderParsesFromBytes) {
  const std::string bytes = SafetensorsBytes(
      R"({"b": {"dtype": "BF16", "shape": [2, 1], "data_offsets": [4, 8]}, "a": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}})",
      8);
  auto header = ParseSafetensorsHeader(bytes, bytes.size(), "mem");
  ASSERT_TRUE(header.ok()) << header.error();
  EXPECT_EQ(header->data_offset, bytes.size() - 8);
  ASSERT_EQ(header->tensors.size(), 2u);
  EXPECT_EQ(header->tensors[0].name, "a");  // in byte order
  EXPECT_EQ(header->tensors[1].shape, (std::vector<int64_t>{2, 1}));
  // Only the header's bytes given, the file's size told apart.
  auto prefix = ParseSafetensorsHeader(std::string_view(bytes).substr(0, bytes.size() - 8), bytes.size(), "mem");
  EXPECT_TRUE(prefix.ok()) << prefix.error();
  auto cut = ParseSafetensorsHeader(std::string_view(bytes).substr(0, 20), bytes.size(), "mem");
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.error().find("cut short"), std::string::npos) << cut.error();
  EXPECT_FALSE(ParseSafetensorsHeader(std::string_view(), 0, "mem").ok());
}

// A config integer past 2^32 (it used to be cut to its low 32 bits: 4294967297 layers started
// a 1-layer model over this 3-layer checkpoint) stops the binary with one line.
TEST(CheckpointErrors, ConfigIntegerPastInt32IsOneLine) {
  TempDir dir;
  WriteCheckpoint(dir.path(), {});
  nlohmann::json config;
  std::ifstream(dir.path() + "/config.json") >> config;
  config["num_hidden_layers"] = (uint64_t(1) << 32) + 1;
  std::ofstream(dir.path() + "/config.json") << config.dump();
  auto r = RunMlaserve("bench --model-path " + ShellQuote(dir.path()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("field 'num_hidden_layers' must be an integer in [1, 1024], got 4294967297"), std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

}  // namespace
}  // namespace mlaserve
